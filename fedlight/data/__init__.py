"""Datasets decoded once into tensors; a client's data is an index set into them."""
