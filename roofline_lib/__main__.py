"""`python -m roofline_lib …`: the same command line as the `roofline` console command."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
