"""No compression: uploads travel as the `wire` group leaves them (the default)."""


def no_compression() -> None:
    """The `compression=none` option: no transform in the upload chain."""
    return None
