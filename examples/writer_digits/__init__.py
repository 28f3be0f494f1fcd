"""Digits split by writer: a data source with clients of its own (docs/howto/)."""
