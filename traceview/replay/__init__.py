"""Replay of the run's own step skeletons (docs/metrics.md, "Replay")."""
