"""Where the compute time went (docs/metrics.md, "Kernels and operators"): kernel classes per rank and step,
top kernels and operators, launch statistics, the host side of a step, achieved FLOP/s, the slow rank's
kernels."""
