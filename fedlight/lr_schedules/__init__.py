"""The clients' learning rate as a function of the round."""
