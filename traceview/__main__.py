"""`python -m traceview`."""

from traceview.cli import main

if __name__ == "__main__":
    main()
