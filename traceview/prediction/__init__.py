"""Predicted against measured gamma (docs/metrics.md, "Predicted gamma"; JSON key `prediction`): the
alpha-beta model, the hardware table, the model's inputs with their sources, and what-ifs."""
