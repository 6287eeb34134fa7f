"""Recording a run right: `traceview.profile()` in the training loop and `traceview record -- CMD` around it
write a run folder with one trace per rank, NCCL logs and a `run.json` manifest (docs/run-manifest.md)."""
