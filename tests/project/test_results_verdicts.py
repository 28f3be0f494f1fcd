"""The results pages' verdicts are generated (scripts/results.py, scripts/verdict_blocks.py): a
verdict word read from verdicts.csv or computed by the one rule from an interval, intervals from a
report's mean, std and n, the `paired` and `more_seeds` blocks on constructed records, and the
check that finds a verdict typed by hand (scripts/typed_numbers.py)."""

import json
from pathlib import Path

import pytest
import yaml

from scripts.results import Page, ResultsError, block_lines, evaluate, fill_blocks
from scripts.typed_numbers import typed_verdicts

VERDICTS = (
    "kind,key,metric,n,ci_low,ci_high,verdict,more_seeds\n"
    "cell,dirichlet/fedavg,best_accuracy,3,86.5,89.0,reproduced,\n"
    "difference,algo=scaffold,final_accuracy,3,-1.0,9.0,inconclusive,7\n"
)


def test_a_verdict_word_is_read_from_verdicts_csv(tmp_path: Path) -> None:
    (tmp_path / "v.csv").write_text(VERDICTS)
    cell = "{v.csv@kind=cell,key=dirichlet/fedavg#verdict} text"
    assert evaluate(tmp_path, cell, "p.md:1") == "reproduced"
    assert evaluate(tmp_path, "{v.csv@kind=difference#more_seeds} d", "p.md:1") == "7"
    with pytest.raises(ResultsError, match=r"p\.md:1: .* is empty"):
        evaluate(tmp_path, "{v.csv@kind=cell#more_seeds} text", "p.md:1")


@pytest.mark.parametrize(
    ("expression", "word"),
    [
        ("verdict(71, 73, 70.3, 74.3) text", "reproduced"),  # the CI inside the band
        ("verdict(55.5, 58.3, 72.3 - 2, 72.3 + 2) text", "refuted"),  # entirely outside
        ("verdict(-1.3, 12.2, 4.6, 8.6) text", "inconclusive"),  # across an edge
        ("order(2.8, 4.7) text", "reproduced"),  # A − B above 0: the ordering holds
        ("order(-4.7, -2.8) text", "refuted"),
        ("order(0 - 12.2, 1.3) text", "inconclusive"),
    ],
)
def test_the_rule_decides_an_interval_in_a_value(
    tmp_path: Path, expression: str, word: str
) -> None:
    assert evaluate(tmp_path, expression, "p.md:1") == word


def test_intervals_from_a_reports_mean_std_and_n(tmp_path: Path) -> None:
    """The t interval of 50, 70, 90 (mean 70, std 20): 70 ± 4.303 · 20 / √3."""
    assert evaluate(tmp_path, "ci_low(70, 20, 3) f2", "p") == "20.32"
    assert evaluate(tmp_path, "ci_high(70, 20, 3) f2", "p") == "119.68"
    assert evaluate(tmp_path, "t_low(50, 70, 90) f2", "p") == "20.32"
    # Welch: equal cells' difference 0 ± t(df = 4) · √(2 · 20² / 3)
    assert evaluate(tmp_path, "diff_high(70, 20, 3, 70, 20, 3) f2", "p") == "45.34"
    assert evaluate(tmp_path, "seeds(5.4, 2.7, 6.6, 2) d", "p") == "47"
    with pytest.raises(ResultsError, match="p: ci_low\\(\\): n = 1: one seed has no interval"):
        evaluate(tmp_path, "ci_low(70, 0, 1) f2", "p")
    with pytest.raises(ResultsError, match="p: a verdict is words: give it the format text"):
        evaluate(tmp_path, "verdict(1, 2, 0, 3) d", "p")


def job(directory: Path, overrides: list[str], summary: dict) -> None:
    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (directory / "summary.json").write_text(json.dumps(summary))


def paired_records(tmp_path: Path) -> Path:
    """FedAvg at 50, 70, 90% and SCAFFOLD at 51, 72, 93% on seeds 0, 1, 2 (docs/statistics.md's
    example), and the published claim SCAFFOLD − FedAvg = +6.6 points."""
    sweep = tmp_path / "runs" / "a"
    finals = {"fedavg": [0.50, 0.70, 0.90], "scaffold": [0.51, 0.72, 0.93]}
    for index, (algo, seed) in enumerate((a, s) for a in finals for s in range(3)):
        summary = {"final_accuracy": finals[algo][seed]}
        job(sweep / str(index), [f"algo={algo}", f"seed={seed}"], summary)
    claim = {"compare": "algo=scaffold,fedavg", "claimed": 6.6}
    published = {"metric": "final_accuracy", "differences": [claim]}
    (tmp_path / "published.yaml").write_text(yaml.safe_dump(published))
    return sweep


def test_a_paired_block_shows_each_seed_the_interval_and_the_claims_verdict(
    tmp_path: Path,
) -> None:
    sweep = paired_records(tmp_path)
    spec = {"kind": "paired", "compare": "algo=scaffold,fedavg", "metrics": ["final_accuracy"]}
    page = Page(directory=Path("."), reports={".": ("runs/a",)})
    plain = block_lines(tmp_path, page, spec, "b")
    assert plain[0].startswith("| scaffold − fedavg | seed 0 | seed 1 | seed 2 | n |")
    assert (
        plain[2]
        == "| Final accuracy (points) | +1.0 | +2.0 | +3.0 | 3 | +2.0 ± 1.0 | [-0.5, +4.5] |"
    )
    decided = block_lines(tmp_path, page, spec | {"reference": "published.yaml"}, "b")
    assert decided[2].endswith("| +6.6 | [+4.6, +8.6] | refuted | — |")
    assert sweep.is_dir()


def test_a_more_seeds_block_lists_the_undecided_and_the_sweeps_that_decide_them(
    tmp_path: Path,
) -> None:
    paired_records(tmp_path)
    claim = {"compare": "algo=scaffold,fedavg", "claimed": 4.0, "within": 1.0}
    (tmp_path / "published.yaml").write_text(
        yaml.safe_dump({"metric": "final_accuracy", "differences": [claim]})
    )
    page = Page(directory=Path("."), reports={".": ("runs/a",)})
    spec = {"kind": "more_seeds", "reference": "published.yaml", "sweep": "multirun/x"}
    lines = block_lines(tmp_path, page, spec, "b")
    assert lines[:2] == [
        "```text",
        "inconclusive: scaffold − fedavg on final_accuracy: 7 seeds would decide it (4 more; "
        "t-based, at the observed mean and std)",
    ]
    commands = [line for line in lines if line.startswith("python -m fedlight")]
    assert len(commands) == 2 and all("'seed=range(3,7)'" in c for c in commands)
    assert "hydra.sweep.dir=multirun/x-more/algo-scaffold" in commands[0]
    without = block_lines(tmp_path, page, {k: v for k, v in spec.items() if k != "sweep"}, "b")
    assert without == lines[:3]


def test_a_block_of_another_page_that_lists_the_document_is_left_to_it(tmp_path: Path) -> None:
    page = Page(directory=Path("docs/results/x"), blocks={})
    text = "<!-- block claims -->\nold\n<!-- /block -->\n"
    assert fill_blocks(tmp_path, page, "README.md", text, frozenset({"claims"})) == text
    with pytest.raises(ResultsError, match="block claims is not one of docs/results/x's"):
        fill_blocks(tmp_path, page, "README.md", text)


def test_a_verdict_typed_in_prose_is_found_and_a_generated_or_defined_one_is_not() -> None:
    typed = "The claim is not reproduced at seed 0,\nand FedAvg's cell is refuted.\n"
    assert list(typed_verdicts(typed)) == [
        (1, "verdict 'not reproduced'"),
        (2, "verdict 'refuted'"),
    ]
    generated = (
        "The claim is <!-- v {V@kind=cell#verdict} text -->inconclusive<!-- /v -->; *reproduced*\n"
        "when the CI lies inside the band.\n<!-- block beside -->\n| refuted |\n<!-- /block -->\n"
    )
    assert list(typed_verdicts(generated)) == []
