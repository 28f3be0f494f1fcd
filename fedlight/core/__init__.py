"""The core layer: the vocabulary every layer speaks (tensors, random streams, errors, the round's
context and messages, variants, the typed settings of a run), importing nothing of fedlight outside
this folder and doing nothing as it is imported.
"""
