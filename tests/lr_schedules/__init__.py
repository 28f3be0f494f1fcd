"""Tests of fedlight.lr_schedules: each schedule's rates, refusals and resume."""
