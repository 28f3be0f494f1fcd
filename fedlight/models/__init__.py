"""Client models: LightningModules with `training_step`, `configure_optimizers` and a logits `forward`."""
