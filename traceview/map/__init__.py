"""The map of the pipeline (docs/metrics.md, "Pipeline"): one rank's trace in, a compact `RankSummary` out, in
workers or on Ray."""
