"""fedlight: reproducible federated-learning research on Lightning modules and Hydra configs."""

__version__ = "0.1.0"
