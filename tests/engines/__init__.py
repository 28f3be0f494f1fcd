"""Tests of fedlight.engines: client engines and users' LightningModules."""
