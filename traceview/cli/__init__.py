"""The `traceview` command: one application, one module per group of commands; errors become exit codes here only."""
