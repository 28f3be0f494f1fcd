"""Attacking clients (`attack=`): which clients are malicious and what they send, so that robust
aggregation (`aggregator=`) can be measured against something."""
