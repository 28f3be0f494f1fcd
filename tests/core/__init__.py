"""Tests of fedlight.core: the allocator, the memory layout, moved module paths."""
