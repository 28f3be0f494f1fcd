"""Helpers of the tests: code only tests call, kept out of fedlight."""
