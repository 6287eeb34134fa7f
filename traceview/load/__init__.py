"""From what the user typed (files, folders, globs, `run.json`) to a `Run` of one job (docs/metrics.md,
section 1)."""
