"""Tests of fedlight.reports: `fedlight report`'s tables, report.csv and figures."""
