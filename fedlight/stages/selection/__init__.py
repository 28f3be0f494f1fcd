"""Which clients take part in a round."""
