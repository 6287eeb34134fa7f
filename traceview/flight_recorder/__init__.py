"""Hang forensics: PyTorch Flight Recorder dumps of one job read together (docs/metrics.md, "Hang forensics";
the `hang` command, the report's section, the JSON `flight_recorder` key)."""
