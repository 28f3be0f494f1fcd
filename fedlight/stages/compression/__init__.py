"""Compressors (`upload=[topk]`, `download=[int8]`): wire transforms whose payloads are the exact
bytes sent."""
