"""`python -m traceview`."""

from traceview.cli.entry import main

if __name__ == "__main__":
    main()
