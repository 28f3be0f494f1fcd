"""The core layer: the vocabulary every layer speaks (tensors, random streams, errors, the
round's context, variants, the typed settings and the registry of config groups), importing
nothing of fedlight outside this folder.
"""
