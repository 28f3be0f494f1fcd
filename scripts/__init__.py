"""Maintenance scripts of the repository (documentation); not part of the fedlight package."""
