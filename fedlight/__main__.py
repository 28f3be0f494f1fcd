"""`python -m fedlight ...`: run one experiment, or a sweep with -m; `report` summarizes sweeps."""

from fedlight.cli.entry import main

if __name__ == "__main__":
    main()
