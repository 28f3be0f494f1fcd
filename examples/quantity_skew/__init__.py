"""A client split of one's own: quantity skew (docs/howto/add-dataset.md)."""
