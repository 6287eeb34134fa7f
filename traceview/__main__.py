"""`python -m traceview`."""

from traceview.cli.main import main

if __name__ == "__main__":
    main()
