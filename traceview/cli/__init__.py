"""The `traceview` command line: one module per command (`traceview.cli.main` registers them and maps errors
to exit codes). The console entry point is `traceview.cli.entry.main`: `traceview --version` is answered
before anything else is imported, Ctrl-C from the first moment, and every other command line goes to
`traceview.cli.main.main`."""
