"""The time budget of a step, per rank (docs/metrics.md, section 4; JSON key `time_budget`)."""
