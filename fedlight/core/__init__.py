"""The core layer: the vocabulary every layer speaks (tensors, random streams, errors, the
round's context and messages, variants, the typed settings and the registry of config groups),
importing nothing of fedlight outside this folder.
"""
