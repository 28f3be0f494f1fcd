"""Secure aggregation (`secure_aggregation=`), an upload stage between privacy and the wire:

- `none`: uploads reach the server as they are.
- `pairwise`: Bonawitz et al. 2017's pairwise additive masks, simulated: the server sees each
  upload masked and only the sum unmasked.
"""
