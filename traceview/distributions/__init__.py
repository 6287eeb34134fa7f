"""Samples of a run for `traceview compare` and `trend` (docs/metrics.md, "Compare and trend"; JSON key
`distributions`): per-step figures, per-call durations and kernel-class sketches."""
