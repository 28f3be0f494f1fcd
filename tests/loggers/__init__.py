"""Tests of fedlight.loggers: progress, W&B, TensorBoard, MLflow, the exported model."""
