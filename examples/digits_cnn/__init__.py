"""A LightningModule of one's own as the client model (docs/howto/own-model.md)."""
