"""benchmarks/aggregators.py's record and the results block that fits how the aggregation time
grows with n (issue 67 item 4): slopes of exact power laws, the claimed growth's own slope, the
block's rows from a record, and a tiny run writing the record the block reads."""

import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks import aggregators
from scripts.aggregator_blocks import (
    claimed_slope,
    half_gap,
    log_log_slope,
    scaling_lines,
    setting_lines,
)

SIZES = [200, 300, 400, 500]


@pytest.mark.parametrize("k", [1.0, 1.5, 2.0])
def test_the_slope_of_a_power_law_is_its_exponent(k: float) -> None:
    assert log_log_slope(SIZES, [3e-4 * n**k for n in SIZES]) == pytest.approx(k, abs=1e-12)


def test_the_claimed_growths_slopes_over_the_sizes() -> None:
    """O(n) and O(n²) are powers; n log n over 200-500 has slope 1 + 1/ln n at a middle n."""
    assert claimed_slope("O(n)", SIZES, "x") == pytest.approx(1.0, abs=1e-12)
    assert claimed_slope("O(n²)", SIZES, "x") == pytest.approx(2.0, abs=1e-12)
    n_log_n = claimed_slope("O(n log n)", SIZES, "x")
    assert 1 + 1 / math.log(500) < n_log_n < 1 + 1 / math.log(200)
    with pytest.raises(ValueError, match="O\\(2\\^n\\)"):
        claimed_slope("O(2^n)", SIZES, "x")


def block_rows(directory: Path, record: dict, claims: dict[str, str]) -> list[list[str]]:
    """The scaling block's rows (cells stripped) for `record` against `claims`."""
    (directory / "scaling.json").write_text(json.dumps(record))
    reference = directory / "reference.yaml"
    reference.write_text(yaml.safe_dump({"robust": {"complexity": claims}}, allow_unicode=True))
    lines = scaling_lines(directory, {"records": ["scaling.json"]}, reference)
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_the_block_sets_each_fitted_slope_beside_the_claim(tmp_path: Path) -> None:
    """A record of exact power laws in CPU seconds (one repeat slower by a constant factor, which
    moves no slope; the wall seconds, which the load moves, are not read where CPU seconds are):
    each row's fitted slope is its exponent, and the claim is the reference's. The band: each
    claimed slope ± half the gap between O(n)'s 1 and O(n²)'s 2."""
    seconds = {
        "mean": {str(n): [1e-3 * n, 2e-3 * n] for n in SIZES},
        "krum": {str(n): [1e-5 * n**2, 1e-5 * n**2] for n in SIZES},
        "bulyan": {str(n): [1e-4 * n**1.5, 3e-4 * n**1.5] for n in SIZES},
    }
    record = {
        "model": "mlp",
        "parameters": 199210,
        "device": "CPU (1 threads)",
        "torch": "2.x",
        "repeats": 2,
        "sizes": SIZES,
        "command": "python benchmarks/aggregators.py --sizes 200 300 400 500",
        "settings": {"mean": "defaults", "krum": "f = n // 5", "bulyan": "f = (n − 3) // 4"},
        "cpu_seconds": seconds,
        "seconds": {name: {n: [1.0, 1.0] for n in by_size} for name, by_size in seconds.items()},
    }
    rows = block_rows(tmp_path, record, {"mean": "O(n)", "krum": "O(n²)"})
    assert [row[:5] for row in rows] == [
        ["mean", "defaults", "O(n)", "1.00", "1.00"],
        ["krum", "f = n // 5", "O(n²)", "2.00", "2.00"],
        ["bulyan", "f = (n − 3) // 4", "—", "—", "1.50"],
    ]
    assert [row[5:] for row in rows] == [
        ["[1.00, 1.00]", "[0.50, 1.50]", "reproduced", "1.0×"],
        ["[2.00, 2.00]", "[1.50, 2.50]", "reproduced", f"{0.01 * 500:.1f}×"],
        ["[1.50, 1.50]", "—", "—", f"{0.1 * 500**0.5:.1f}×"],
    ]
    (setting,) = setting_lines(tmp_path, {"records": ["scaling.json"]}, tmp_path / "reference.yaml")
    assert "n = 200, 300, 400, 500 updates of `mlp`'s 199,210 parameters" in setting
    assert "CPU seconds, the best of 2 repeats" in setting


def test_each_claim_is_decided_by_the_repeats_interval_against_the_nearest_gap(
    tmp_path: Path,
) -> None:
    """Three claimed growths: the band is half the gap between O(n)'s slope and O(n log n)'s
    (the nearest two). A mean whose repeats grow like n^0.9, n^1 and n^1.1 has the t interval
    1 ± t(0.975, 2)·0.1/√3, wider than that band around 1: inconclusive. A Krum growing exactly
    like n^1.5 in every repeat lies outside O(n²)'s band: refuted."""
    claims = {"mean": "O(n)", "median": "O(n log n)", "krum": "O(n²)"}
    within = half_gap(claims, SIZES, "x")
    assert within == pytest.approx(claimed_slope("O(n log n)", SIZES, "x") / 2 - 0.5)
    seconds = {
        "mean": {str(n): [n**0.9, n**1.0, n**1.1] for n in SIZES},
        "krum": {str(n): [n**1.5] * 3 for n in SIZES},
    }
    record = {
        "sizes": SIZES,
        "settings": {"mean": "defaults", "krum": "f = n // 5"},
        "cpu_seconds": seconds,
        "seconds": seconds,
    }
    rows = block_rows(tmp_path, record, claims)
    half = 4.302652729749464 * 0.1 / 3**0.5  # t(0.975, 2) · s / √n
    assert rows[0][5:8] == [
        f"[{1 - half:.2f}, {1 + half:.2f}]",
        f"[{1 - within:.2f}, {1 + within:.2f}]",
        "inconclusive",
    ]
    assert rows[1][5:8] == ["[1.50, 1.50]", f"[{2 - within:.2f}, {2 + within:.2f}]", "refuted"]
    with pytest.raises(ValueError, match="two different growths"):
        half_gap({"mean": "O(n)"}, SIZES, "x")


def test_a_short_run_writes_the_record_the_block_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sizes, two repeats, the logistic model's 7,850 parameters: every aggregator asked for
    has every repeat's seconds at every n, and the block reads the record."""
    path = tmp_path / "scaling.json"
    argv = ["aggregators.py", "--device", "cpu", "--threads", "1", "--model", "logistic"]
    argv += ["--sizes", "8", "12", "--repeats", "2", "--aggregators", "mean", "median", "krum"]
    monkeypatch.setattr(sys, "argv", [*argv, "--record", str(path)])
    aggregators.main()
    record = json.loads(path.read_text())
    assert (record["model"], record["parameters"], record["sizes"]) == ("logistic", 7850, [8, 12])
    assert record["settings"] == {"mean": "defaults", "median": "defaults", "krum": "f = n // 5"}
    for clock in ("seconds", "cpu_seconds"):
        for by_size in record[clock].values():
            assert sorted(by_size) == ["12", "8"]
            assert all(len(times) == 2 and min(times) > 0 for times in by_size.values())
    reference = tmp_path / "reference.yaml"
    reference.write_text("robust:\n  complexity: {mean: O(n), median: O(n log n), krum: O(n²)}\n")
    lines = scaling_lines(tmp_path, {"records": ["scaling.json"]}, reference)
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["mean", "median", "krum"]
