"""Results as data (scripts/results.py): every results page is what its committed run records
give, a one-digit edit of a record shows, records name no machine's paths, and no tracked file
does."""

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from scripts import results
from scripts.results import REFERENCE, ResultsError, check, evaluate, export, setting_verdict
from tests.conftest import REPO


def test_every_results_page_is_what_its_records_give() -> None:
    stale = check()
    assert not stale, f"stale results pages: {stale}; run `{results.COMMAND}` and commit them"


def test_a_one_digit_edit_of_a_record_makes_the_check_fail(tmp_path: Path) -> None:
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copyfile(REPO / "README.md", tmp_path / "README.md")  # its results paragraph
    summary = tmp_path / "docs/results/niid_bench/runs/seed0/0/summary.json"
    record = json.loads(summary.read_text())
    record["best_accuracy"] = round(record["best_accuracy"] + 0.001, 4)  # 88.61 → 88.71
    summary.write_text(json.dumps(record, indent=2) + "\n")
    stale = check(tmp_path, only=["niid_bench"])
    assert "docs/results/niid_bench/report.md" in stale
    assert "docs/results/niid_bench/README.md" in stale  # the beside table and the prose values
    assert "README.md" in stale  # the front page's Dirichlet FedAvg value


def make_sweep(tmp_path: Path) -> Path:
    """A finished one-job sweep whose Hydra records name absolute paths, as Hydra writes them."""
    cwd, sweep = tmp_path / "checkout", tmp_path / "elsewhere" / "sweep"
    job = sweep / "0"
    (job / ".hydra").mkdir(parents=True)
    overrides = [f"data.root={tmp_path}/shared/data", "algo=fedavg", "seed=0"]
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    config = {"data": {"root": f"{tmp_path}/shared/data"}, "partition": {"path": f"{sweep}/s.json"}}
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    hydra = {
        "hydra": {
            "mode": "MULTIRUN",
            "runtime": {"cwd": str(cwd), "output_dir": str(job), "choices": {"algo": "fedavg"}},
            "sweep": {"dir": str(sweep)},
            "overrides": {"task": overrides, "hydra": [f"hydra.sweep.dir={sweep}"]},
            "job": {"name": "fedlight", "config_name": "config"},
        }
    }
    (job / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hydra))
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(hydra))
    (job / "metrics.csv").write_text("round,test_accuracy\n1,0.5\n")
    summary = {"final_accuracy": 0.5, "config": config, "resumes": 1, "run_dir": str(job)}
    (job / "summary.json").write_text(json.dumps(summary))
    (job / "checkpoint.pt").write_bytes(b"weights")
    return sweep


def test_export_keeps_the_record_and_no_machine_path(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path)
    dest = tmp_path / "records"
    assert export(sweep, dest, {f"{sweep}/s.json": "s.json"}) == ["0"]
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == [
        "0/.hydra/config.yaml",
        "0/.hydra/hydra.yaml",
        "0/.hydra/overrides.yaml",
        "0/metrics.csv",
        "0/summary.json",
        "multirun.yaml",
    ]
    text = "".join(p.read_text() for p in dest.rglob("*") if p.is_file())
    assert str(tmp_path) not in text
    overrides = yaml.safe_load((dest / "0/.hydra/overrides.yaml").read_text())
    assert overrides[0] == "data.root=../shared/data"  # as typed in the command's directory
    config = yaml.safe_load((dest / "0/.hydra/config.yaml").read_text())
    assert config["partition"]["path"] == "s.json"
    summary = json.loads((dest / "0/summary.json").read_text())
    assert summary["resumes"] == 1 and summary["run_dir"] == "sweep/0"
    assert (dest / "0/metrics.csv").read_text() == "round,test_accuracy\n1,0.5\n"


def test_inline_values_do_arithmetic_on_references_and_format(tmp_path: Path) -> None:
    (tmp_path / "r.csv").write_text("group,algo,best_accuracy_mean\nA,fedavg,0.8861\nB,x,0.5\n")
    (tmp_path / "p.yaml").write_text("cells:\n  a/b: 88.09 ± 0.29\n")
    (tmp_path / "s.json").write_text('{"x": {"y": 3}}')
    assert evaluate(tmp_path, "{r.csv@algo=fedavg#best_accuracy_mean} pct1", "t") == "88.6"
    difference = "100 * {r.csv@group=A#best_accuracy_mean} - {p.yaml#cells.a/b}  +f1"
    assert evaluate(tmp_path, difference, "t") == "+0.5"
    assert evaluate(tmp_path, "{s.json#x.y} / 2 f2", "t") == "1.50"
    assert evaluate(tmp_path, "{s.json#x.y} d", "t") == "3"
    assert evaluate(tmp_path, "{S#x.y} d", "t", {"S": "s.json"}) == "3"
    assert REFERENCE.fullmatch("{docs/a.csv@k=v,l=w#col}")


def test_a_setting_row_has_a_verdict() -> None:
    """The block's own verdict for a row, else same / not stated / differs: a proxy's setting
    never reads as the source's."""
    given = {"dataset": "differs: Fashion-MNIST stands in for CIFAR-10"}
    assert setting_verdict("dataset", "CIFAR-10", "fmnist", given) == given["dataset"]
    assert setting_verdict("rounds", "50", "50", given) == "same"
    assert setting_verdict("model", "not stated", "simple_cnn", given) == "not stated"
    assert setting_verdict("rounds", "100", "30", given) == "differs"


def test_a_setting_row_lists_numbers_in_increasing_order(tmp_path: Path) -> None:
    """The values a key took over the records: numbers sorted as numbers (20 before 50, 1e-05
    before 0.001), whatever order the jobs ran in, then the other values in the jobs' order (job
    2 before job 10, whatever order the file system lists them in)."""
    jobs = {
        0: (1, 0.001, "mlp"),
        2: (50, 1e-05, "cnn"),
        10: (None, 0.1, "lstm"),
        3: (20, 0.1, "cnn"),
    }
    for job, (clients, lr, model) in jobs.items():
        (tmp_path / "page/runs/a" / str(job) / ".hydra").mkdir(parents=True)
        config = {"fl": {"clients_per_round": clients}, "optim": {"lr": lr}}
        (tmp_path / f"page/runs/a/{job}/.hydra/config.yaml").write_text(yaml.safe_dump(config))
        (tmp_path / f"page/runs/a/{job}/summary.json").write_text(json.dumps({"model": model}))
    page = results.Page(Path("page"), reports={".": ("runs/a",)})
    assert results.config_values(tmp_path, page, "fl.clients_per_round") == [
        "1",
        "20",
        "50",
        "None",
    ]
    assert results.config_values(tmp_path, page, "optim.lr") == ["1e-05", "0.001", "0.1"]
    assert results.config_values(tmp_path, page, "model") == ["mlp", "cnn", "lstm"]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("{r.csv@algo=none#m} pct1", r"^doc.md:3: 0 rows of r.csv match algo=none, not one$"),
        ("{r.csv@algo=a#nope} pct1", r"^doc.md:3: r.csv has no column nope$"),
        ("{gone.csv@a=b#c} pct1", r"^doc.md:3: gone.csv does not exist$"),
        ("{r.csv@algo=a#m} ** 2  pct1", r"^doc.md:3: only \+ - \* / over references"),
        ("{r.csv@algo=a#m} pct", r"^doc.md:3: format 'pct' is none of pct1, f2, d"),
        ("{r.csv@algo=a#m}", r"^doc.md:3: .* ends in no FORMAT \(pct1, f2, d, text\)$"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_place(
    tmp_path: Path, expression: str, message: str
) -> None:
    (tmp_path / "r.csv").write_text("algo,m\na,0.5\n")
    with pytest.raises(ResultsError, match=message):
        evaluate(tmp_path, expression, "doc.md:3")


def test_a_blocks_kind_is_one_the_block_modules_register_and_has_its_reference() -> None:
    """An unknown kind's error lists the registry itself, every module's kinds (a list typed
    beside it had fallen behind peer_blocks); a kind read against a reference file without one is
    refused in one line naming the fix."""
    from scripts.aggregator_blocks import AGGREGATOR_BLOCKS
    from scripts.peer_blocks import PEER_BLOCKS
    from scripts.pilot_blocks import PILOT_BLOCKS

    page = results.Page(Path("page"))
    with pytest.raises(ResultsError) as unknown:
        results.block_lines(Path("."), page, {"kind": "nope"}, "doc.md: block b")
    message = str(unknown.value)
    assert message.startswith("doc.md: block b: kind 'nope' is none of beside, paired, ")
    for kind in [*PEER_BLOCKS, *AGGREGATOR_BLOCKS, *PILOT_BLOCKS, "claims"]:
        assert f" {kind}," in f"{message},"
    refused = r"^doc.md: block b: kind beside needs its reference \(reference: FILE.yaml\)$"
    with pytest.raises(ResultsError, match=refused):
        results.block_lines(Path("."), page, {"kind": "beside"}, "doc.md: block b")


def machine_paths() -> set[str]:
    """What would name this machine: the checkout's absolute path, the folder holding it, the
    home folder; not the system's temporary folder, which every machine has (a clone directly
    under /tmp holds /tmp, and a docstring may say `git worktree add /tmp/before`)."""
    common = {"//", "/", *(f"{Path(t).resolve()}/" for t in (tempfile.gettempdir(), "/tmp"))}
    return {str(REPO), f"{REPO.parent}/", f"{Path.home()}/"} - common


def test_no_tracked_file_names_this_machines_paths() -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    found = []
    for name in listed.stdout.decode().split("\0"):
        path = REPO / name
        if not name or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="ignore")
        found += [f"{name}: {p}" for p in machine_paths() if p in text]
    assert not found, "absolute paths of this machine in tracked files:\n" + "\n".join(found)


def test_a_folder_of_single_runs_is_exported_like_a_sweep(tmp_path: Path) -> None:
    """The headline command is one run, not a sweep: its folder has no multirun.yaml."""
    sweep = make_sweep(tmp_path)
    (sweep / "multirun.yaml").unlink()
    dest = tmp_path / "records"
    assert export(sweep, dest) == ["0"]
    assert not (dest / "multirun.yaml").exists()
    assert (dest / "0/summary.json").is_file() and (dest / "0/.hydra/config.yaml").is_file()
    assert str(tmp_path) not in "".join(p.read_text() for p in dest.rglob("*") if p.is_file())
