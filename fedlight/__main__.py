"""`python -m fedlight ...`: run one experiment, or a sweep with -m."""

from fedlight.cli import main

if __name__ == "__main__":
    main()
