"""Where per-round metrics go: metrics.csv always, W&B when chosen, and the console."""
