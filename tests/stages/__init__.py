"""Tests of fedlight.stages and fedlight.round: each stage family, the round's pipeline."""
