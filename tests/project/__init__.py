"""Tests of the repository as a whole: docs, README, examples, wheel, layers, results."""
