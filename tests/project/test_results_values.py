"""Inline values of the results pages (scripts/results.py): aggregates over many jobs' records
(a job's wall time on a page comes from its summary.json), and the markers' placement."""

import json
from pathlib import Path

import pytest

from scripts.results import ResultsError, check_placement, evaluate


def summaries(tmp_path: Path) -> None:
    """Three jobs' summary.json: two on AVX2 (one resumed), one on AVX-512."""
    jobs = [("a/0", "AVX2", 0, 8400.0), ("a/1", "AVX2", 1, 10020.0), ("b/0", "AVX512", 0, 3660.0)]
    for name, cpu, resumes, seconds in jobs:
        job = tmp_path / "runs" / name
        job.mkdir(parents=True)
        summary = {
            "wall_seconds": seconds,
            "resumes": resumes,
            "environment": {"cpu_capability": cpu},
        }
        (job / "summary.json").write_text(json.dumps(summary))


def test_an_aggregate_reads_the_files_a_glob_and_its_filter_keep(tmp_path: Path) -> None:
    summaries(tmp_path)
    runs = {"W": "runs/*/*/summary.json"}
    avx2 = "{W@environment.cpu_capability=AVX2#wall_seconds}"
    assert evaluate(tmp_path, f"max({avx2}) / 60 d", "p.md:1", runs) == "167"
    assert evaluate(tmp_path, f"min({avx2}) / 60 d", "p.md:1", runs) == "140"
    unresumed = "{W@resumes=0#wall_seconds}"
    assert evaluate(tmp_path, f"count({unresumed}) d", "p.md:1", runs) == "2"
    assert evaluate(tmp_path, f"mean({unresumed}) / 60 f1", "p.md:1", runs) == "100.5"


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("{W#wall_seconds} d", "needs min, max, mean or count"),
        ("sum({W#wall_seconds}) d", "min, max, mean or count of one reference"),
        ("max({W@resumes=7#wall_seconds}) d", "no file of runs/\\*/\\*/summary.json matches"),
    ],
)
def test_a_bad_aggregate_is_one_line(tmp_path: Path, expression: str, says: str) -> None:
    summaries(tmp_path)
    with pytest.raises(ResultsError, match=says):
        evaluate(tmp_path, expression, "p.md:1", {"W": "runs/*/*/summary.json"})


def test_a_value_broken_across_lines_is_refused() -> None:
    """A `<!--` wrapped away from its ` v ` leaves a value nothing regenerates."""
    broken = "from <!-- v {R#a} d -->1<!-- /v -->–<!--\n  v {R#b} d -->2<!-- /v --> s\n"
    with pytest.raises(ResultsError, match=r"d\.md:2: a value.s close has no"):
        check_placement("d.md", broken)
    check_placement("d.md", broken.replace("<!--\n  v", "<!-- v"))
