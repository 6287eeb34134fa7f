"""Bubbles (docs/metrics.md, "Bubbles"; JSON key `bubbles`): idle gaps by cause, and the pipeline bubble."""
