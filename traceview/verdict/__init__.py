"""The headline and the advice (docs/metrics.md, sections 5 and 6; JSON keys `verdict`, `recommendations`):
rules over the facts the analyses measured, and the `--fail-on` gates."""
