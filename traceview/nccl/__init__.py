"""NCCL_DEBUG logs (docs/metrics.md, "NCCL log"; JSON key `nccl`): the model of a log, and logs joined to a
run."""
