"""A report's headings describe the run that was made: `fedlight report --title` names its
tables, and no preset's title states a setting (a dataset, a count, a split, a target) that a run
of it with other overrides would not have had."""

import re
from pathlib import Path

import pytest
import yaml

from fedlight.cli.schema import CONF_DIR
from fedlight.reports.cli import main
from tests.reports.test_report import COMPARISON_LAYOUT, summary_of, write_job

# What a title may not name: a dataset, a setting's value, a split (and, below, any count)
SETTING = re.compile(r"MNIST|CIFAR|digits|=|%|Dirichlet|\bshards?\b|class(es)? per client")
# Numbers a title may hold: a source's year, table or section
SOURCE_NUMBER = re.compile(r"\b(19|20)\d\d\b|Table \d+|§\d+(\.\d+)*")


def preset_titles() -> list[tuple[str, str]]:
    presets = sorted((Path(CONF_DIR) / "experiment").rglob("*.yaml"))
    titles = []
    for path in presets:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        title = (config.get("report") or {}).get("title")
        if title:
            titles.append((path.relative_to(CONF_DIR).as_posix(), str(title)))
    return titles


@pytest.mark.parametrize(("preset", "title"), preset_titles())
def test_a_preset_title_states_no_setting(preset: str, title: str) -> None:
    """The setting of a run is in its report's commands; a title holding one (the review's
    "10 clients, 2 shards each" over a run of 2 classes per client) would be wrong for a run of
    the preset with other overrides."""
    assert not SETTING.search(title), f"{preset}: {title!r} names a setting"
    assert not re.search(r"\d", SOURCE_NUMBER.sub("", title)), f"{preset}: {title!r} has a number"


def test_the_title_given_names_the_tables_over_the_presets(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for job, (algo, seed, final) in enumerate([("fedavg", 0, 0.6), ("scaffold", 0, 0.7)]):
        overrides = [f"algo={algo}", f"seed={seed}"]
        summary = summary_of(final, algo=algo, seed=seed)
        write_job(sweep, str(job), overrides, COMPARISON_LAYOUT, summary, [final])
    assert main([str(sweep)]) == 0
    assert f"### {COMPARISON_LAYOUT['title']}" in (sweep / "report.md").read_text()
    title = "SCAFFOLD vs FedAvg, Fashion-MNIST, 2 classes per client, 3 seeds"
    assert main([str(sweep), "--title", title]) == 0
    report = (sweep / "report.md").read_text()
    assert f"### {title}" in report
    assert f"### {COMPARISON_LAYOUT['title']}" not in report
