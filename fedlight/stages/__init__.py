"""The stages layer: the one signature of an upload stage (`base.py`), what a selector may ask
the clients (`pool.py`), and the six stage families, each a config group: `selection/`,
`attacks/`, `privacy/`, `secure_aggregation/`, `wire/` and `compression/` (the `upload` and
`download` chains). It may import the algorithms and every layer below them; the pipelines that
run the stages (`fedlight.round`) sit above it, and no stage calls into them.
"""
