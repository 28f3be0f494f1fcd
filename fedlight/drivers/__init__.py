"""The drivers layer: what schedules a run's rounds. `base.py` (what both drivers share: the
loop over rounds, evaluation when due, logging, divergence, checkpoints), `rows.py` (a round's row
of metrics and the divergence checks), `synchronous.py` (the synchronous driver),
`asynchronous.py`, `history.py` (the rows so far and `RoundStats`), `evaluation.py` (the run's
evaluations), `workers.py` (the share/gather protocol of several workers) and `preemption.py`. It
may import the round layer and every layer below it, never a run's or the CLI's modules.
"""
