"""Differential privacy (`privacy=`), stages of the round (see `base.py`), ε from Opacus's
accountant (`accountant.py`).

- `none`: no mechanism.
- `dp_fedavg`: user-level DP-FedAvg (McMahan et al. 2018), a fixed clip norm.
- `adaptive_clip`: DP-FedAvg whose clip norm tracks a quantile of the update norms (Andrew et al.
  2021).
- `dp_sgd`: example-level DP-SGD inside each client's local training (Abadi et al. 2016), through
  Opacus.
- `weight_noise`: the FedAvg tutorial's §4.2 Gaussian noise on the uploaded weights, without
  clipping or accountant: NO guarantee, no ε (beside the others at the tutorial's nominal ε).
"""
