"""traceview: where the time went in a distributed training job."""

__version__ = "0.1.0"
