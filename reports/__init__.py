"""Renderers: HTML, terminal and JSON output built from analysis results (they never compute)."""
