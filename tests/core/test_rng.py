"""fedlight.core.rng: seeding the global generators per client as torch.manual_seed would."""

import torch

from fedlight.core import rng


def test_seeding_draws_what_torch_manual_seed_draws_on_the_cpu():
    rng.seed_torch(123)
    ours = torch.randn(5), torch.nn.functional.dropout(torch.ones(8), 0.5)
    torch.manual_seed(123)
    torchs = torch.randn(5), torch.nn.functional.dropout(torch.ones(8), 0.5)
    assert all(torch.equal(a, b) for a, b in zip(ours, torchs, strict=True))


def test_a_started_accelerator_is_seeded_by_torchs_own_call(monkeypatch):
    seeded = []
    monkeypatch.setattr(rng, "accelerator_started", lambda: True)
    monkeypatch.setattr(torch, "manual_seed", seeded.append)
    rng.seed_torch(7)
    assert seeded == [7]
