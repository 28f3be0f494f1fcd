"""How the server combines a round's client updates (`aggregator=`): the weighted mean now; robust
aggregators (median, trimmed mean, Krum) plug in as further options of the same interface."""
