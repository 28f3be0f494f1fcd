"""Client models: LightningModules with training_step, configure_optimizers, logits forward."""
