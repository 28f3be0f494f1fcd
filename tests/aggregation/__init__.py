"""Tests of fedlight.aggregation: the aggregators against hand computations."""
