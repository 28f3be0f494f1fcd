"""Run records (scripts/results.py) are meant for a public repository: `export` writes them only
outside the sweep, copies nothing through a link, rewrites every absolute path and refuses a
damaged job in one line before writing anything; `pages` (and `pages --check`) refuses a record
that is missing, damaged or edited, a report that fails and a page naming a path outside the
repository, in one line."""

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from scripts import results
from tests.conftest import REPO
from tests.project.test_results_pages import make_sweep


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], pattern: str) -> None:
    """`python -m scripts.results argv`: exit code 2 and one line `results: error: ...`."""
    assert results.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("results: error: ") and pattern in err, err


def contents(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in directory.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("inside", ["", "records"])
def test_export_into_the_sweep_is_refused_and_changes_nothing(
    tmp_path: Path, inside: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = make_sweep(tmp_path)
    before = contents(sweep)
    refused(["export", str(sweep), "--to", str(sweep / inside)], capsys, "is the sweep")
    assert contents(sweep) == before


@pytest.mark.parametrize("linked", ["0/metrics.csv", "0/.hydra/config.yaml", "0/summary.json"])
def test_export_copies_nothing_through_a_link(
    tmp_path: Path, linked: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = make_sweep(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text('{"token": "SECRET-TOKEN-123"}\n')
    (sweep / linked).unlink()
    (sweep / linked).symlink_to(secret)
    dest = tmp_path / "records"
    refused(
        ["export", str(sweep), "--to", str(dest)], capsys, f"{sweep / linked} is a symbolic link"
    )
    assert not dest.exists()


DAMAGES: dict[str, Callable[[Path], list[str]]] = {
    "no such sweep": lambda sweep: ["export", str(sweep.parent / "nope")],
    "--path without a name": lambda sweep: ["export", str(sweep), "--path", "foo"],
    "a job without its overrides": lambda sweep: [
        (sweep / "0/.hydra/overrides.yaml").unlink(),
        "export",
        str(sweep),
    ][1:],
    "a job's summary not JSON": lambda sweep: [
        (sweep / "0/summary.json").write_text("{bad"),
        "export",
        str(sweep),
    ][1:],
    "a job's config not a mapping": lambda sweep: [
        (sweep / "0/.hydra/config.yaml").write_text("just text\n"),
        "export",
        str(sweep),
    ][1:],
}
SAID = {
    "no such sweep": "is no directory",
    "--path without a name": "--path foo: give ABSOLUTE=NAME",
    "a job without its overrides": "0/.hydra/overrides.yaml: cannot read it",
    "a job's summary not JSON": "0/summary.json: cannot read it",
    "a job's config not a mapping": "0/.hydra/config.yaml holds no dict",
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_export_is_one_line_and_writes_nothing(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = make_sweep(tmp_path)
    (sweep / "1").mkdir()
    shutil.copytree(sweep / "0", sweep / "1", dirs_exist_ok=True)  # a good job beside it
    dest = tmp_path / "records"
    refused([*DAMAGES[damage](sweep), "--to", str(dest)], capsys, SAID[damage])
    assert not dest.exists()


def test_export_rewrites_quoted_and_nested_absolute_paths(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path)
    job = sweep / "0"
    overrides = [f"partition.path='{tmp_path}/w/my split.json'", f"+model.d={{p:{tmp_path}/w/x}}"]
    (job / ".hydra/overrides.yaml").write_text(yaml.safe_dump(overrides))
    hydra = yaml.safe_load((job / ".hydra/hydra.yaml").read_text())
    hydra["hydra"]["overrides"]["task"] = overrides
    hydra["hydra"]["overrides"]["hydra"].append("hydra.sweeper.storage=sqlite:///optuna.db")
    (job / ".hydra/hydra.yaml").write_text(yaml.safe_dump(hydra))
    dest = tmp_path / "records"
    results.export(sweep, dest)
    text = "".join(p.read_text() for p in dest.rglob("*") if p.is_file())
    assert str(tmp_path) not in text
    assert yaml.safe_load((dest / "0/.hydra/overrides.yaml").read_text()) == [
        "partition.path='../w/my split.json'",  # relative to the command's directory
        "+model.d={p:../w/x}",
    ]
    assert "sqlite:///optuna.db" in (dest / "0/.hydra/hydra.yaml").read_text()


@pytest.fixture(scope="module")
def docs_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository's docs/ and README.md, whose pages are as their records give."""
    root = tmp_path_factory.mktemp("pages")
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copyfile(REPO / "README.md", root / "README.md")
    return root


HEADLINE = Path("docs/results/headline/runs/scaffold_cifar10")


def edit_last_accuracy(path: Path) -> None:
    lines = path.read_text().splitlines()
    cells = lines[-1].split(",")
    cells[1] = "0.999"  # test_accuracy
    path.write_text("\n".join([*lines[:-1], ",".join(cells)]) + "\n")


RECORD_FAULTS: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "metrics.csv edited": ("metrics.csv", edit_last_accuracy, "is not summary.json's final"),
    "metrics.csv deleted": ("metrics.csv", Path.unlink, "metrics.csv is missing"),
    "config.yaml deleted": (".hydra/config.yaml", Path.unlink, "config.yaml is missing"),
    "summary.json cut": (
        "summary.json",
        lambda p: p.write_text(p.read_text()[:200]),
        "summary.json: cannot be read",
    ),
}


@pytest.mark.parametrize("fault", list(RECORD_FAULTS))
def test_pages_check_refuses_a_missing_damaged_or_edited_record(
    docs_copy: Path, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name, damage, said = RECORD_FAULTS[fault]
    path = docs_copy / HEADLINE / name
    kept = path.read_bytes()
    damage(path)
    try:
        with pytest.raises(results.ResultsError, match=re.escape(said)):
            results.check(docs_copy, only=["headline"])
    finally:
        path.write_bytes(kept)


def with_registry(root: Path, change: Callable[[dict], None]) -> Path:
    """`root`'s pages.yaml changed by `change`; returns the file, to restore."""
    registry = root / results.REGISTRY
    pages = yaml.safe_load(registry.read_text())
    change(pages)
    registry.write_text(yaml.safe_dump(pages))
    return registry


REGISTRY_FAULTS: dict[str, tuple[Callable[[dict], None], str]] = {
    "a report's sweep missing": (
        lambda pages: pages["headline"]["reports"]["."].append("runs/nosuch"),
        "runs/nosuch does not exist",
    ),
    "a document missing": (
        lambda pages: pages["headline"]["documents"].append("docs/nosuch.md"),
        "docs/nosuch.md (a document of docs/results/headline) is missing",
    ),
    "a document outside the repository": (
        lambda pages: pages["headline"]["documents"].append("../outside_doc.md"),
        "names ../outside_doc.md, outside the repository",
    ),
}


@pytest.mark.parametrize("fault", list(REGISTRY_FAULTS))
def test_pages_check_refuses_a_page_it_cannot_make_in_one_line(
    docs_copy: Path, fault: str, tmp_path: Path
) -> None:
    change, said = REGISTRY_FAULTS[fault]
    kept = (docs_copy / results.REGISTRY).read_bytes()
    registry = with_registry(docs_copy, change)
    try:
        with pytest.raises(results.ResultsError, match=re.escape(said)):
            results.check(docs_copy, only=["headline"])
    finally:
        registry.write_bytes(kept)
    assert not (docs_copy.parent / "outside_doc.md").exists()


def test_a_report_a_block_reads_is_one_line_when_its_records_are_gone(docs_copy: Path) -> None:
    """niid_bench's beside table reads its records through fedlight report's loader."""
    records = docs_copy / "docs/results/niid_bench/runs/flower_exact"
    shutil.move(records, docs_copy / "moved")
    try:
        with pytest.raises(results.ResultsError, match="flower_exact does not exist"):
            results.check(docs_copy, only=["niid_bench"])
    finally:
        shutil.move(docs_copy / "moved", records)
    assert json.loads((records / "0/summary.json").read_text())  # restored
