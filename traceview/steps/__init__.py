"""Step windows on the device clock (docs/metrics.md, section 3)."""
