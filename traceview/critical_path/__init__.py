"""The step's critical path (docs/metrics.md, "Critical path"): what held every microsecond of each step."""
