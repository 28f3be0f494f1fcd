"""The accountant: ε is Opacus's for the same (q, z, T, δ), composed step by step; it grows with
steps and sampling rate and shrinks with noise; target-ε calibration inverts it."""

import math

import pytest
from opacus.accountants import RDPAccountant

from fedlight.privacy.accountant import (
    CALIBRATION_TOLERANCE,
    ORDERS,
    calibrate_noise,
    epsilon,
)


@pytest.mark.parametrize(("q", "z", "steps", "delta"), [(0.1, 1.0, 10, 1e-2), (0.01, 0.8, 6, 1e-3)])
def test_epsilon_is_the_librarys_for_steps_composed_one_by_one(
    q: float, z: float, steps: int, delta: float
) -> None:
    accountant = RDPAccountant()
    for _ in range(steps):
        accountant.step(noise_multiplier=z, sample_rate=q)
    assert epsilon(q, z, steps, delta) == pytest.approx(
        accountant.get_epsilon(delta, alphas=list(ORDERS)), rel=1e-12
    )


def test_epsilon_grows_with_steps_and_sampling_and_falls_with_noise() -> None:
    base = epsilon(0.1, 1.2, 100, 1e-2)
    assert epsilon(0.1, 1.2, 200, 1e-2) > base
    assert epsilon(0.2, 1.2, 100, 1e-2) > base
    assert epsilon(0.1, 2.4, 100, 1e-2) < base
    assert epsilon(0.1, 1.2, 100, 1e-4) > base
    assert epsilon(0.1, 1.2, 0, 1e-2) == 0.0
    assert math.isinf(epsilon(0.1, 0.0, 5, 1e-2))


@pytest.mark.parametrize(
    ("q", "steps", "target", "delta"), [(0.1, 100, 1.0, 1e-2), (0.01, 1000, 4.0, 1e-3)]
)
def test_calibration_finds_the_noise_that_spends_the_target(
    q: float, steps: int, target: float, delta: float
) -> None:
    z = calibrate_noise(q, steps, target, delta)
    reached = epsilon(q, z, steps, delta)
    assert target - CALIBRATION_TOLERANCE <= reached <= target
    assert epsilon(q, 0.98 * z, steps, delta) > target  # no much smaller z would do
