"""Differential privacy: clipping on the clients, noise on the server, ε from an accountant."""
