"""The version of traceview, in one place (the package, the JSON documents, `traceview --version`)."""

__version__ = "0.1.0"
