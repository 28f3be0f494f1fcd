"""How the server combines a round's client updates (`aggregator=`): the weighted mean, and the
robust rules (median, trimmed mean, Krum, Multi-Krum, Bulyan, geometric median, norm clipping)
that bound what a minority of attacking clients can do (`fedlight.stages.attacks`)."""
