"""Federated algorithms: one module each, all implementing `fedlight.algorithms.base.Algorithm`."""
