"""TernGrad as an upload codec (docs/howto/add-codec.md)."""
