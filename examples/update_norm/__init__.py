"""A new upload stage kind: the update norms, measured or clipped (docs/howto/)."""
