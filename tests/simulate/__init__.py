"""A scenario simulator that writes multi-rank Kineto traces with known answers (tests and `sample_traces/`;
not on the analysis path)."""
