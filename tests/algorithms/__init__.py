"""Tests of fedlight.algorithms (with server_opt and variants): each algorithm's round."""
