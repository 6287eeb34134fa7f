"""Event classes (docs/metrics.md, section 2): every device event is compute, communication or memory, by the
kernel-name table."""
