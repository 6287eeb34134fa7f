"""The reduce of the pipeline (docs/metrics.md, "Pipeline"): every rank's summary in, the run's `RunAnalysis`
out."""
