"""How training samples are split across clients; each option is a callable dataclass.

A partition maps (labels, num_clients, rng) to one sorted index array per client. They are
deterministic given the generator, which the run derives from `seed`.
"""
