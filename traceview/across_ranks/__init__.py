"""Across ranks (docs/metrics.md, "Across ranks"; JSON key `across_ranks`): matching, clock alignment, skew,
stragglers."""
