"""Nightly use (docs/metrics.md, "Compare and trend"; docs/compare.md): two runs compared, noise-aware, and a
series of runs over time."""
