"""Tests of fedlight.store: client-state stores and a resume's checks of their files."""
