"""The whole run as one Chrome/Perfetto trace on the aligned clock (docs/metrics.md, "Export")."""
