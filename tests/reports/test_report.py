"""`fedlight report`: tables, report.csv and curves.png from fake sweeps and one real tiny sweep."""

import csv
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from fedlight.reports.cells import format_cell, group_jobs
from fedlight.reports.cli import main
from fedlight.reports.load import load_jobs
from fedlight.reports.model import JobResult, Layout
from fedlight.reports.notes import reproduction_line
from fedlight.reports.paired import Comparison, pairings
from fedlight.reports.write import column_curve, mean_virtual_times
from tests.conftest import REPO, TINY, run_cli

PRESET = ["+experiment=fedavg_vs_scaffold", "data.root=../shared/data"]
COMPARISON_LAYOUT = {
    "title": "FedAvg vs SCAFFOLD",
    "reference": "Paper: FedAvg 72.3%, SCAFFOLD 82.1%",
    "rows": ["algo"],
    "columns": None,
    "metrics": ["final_accuracy", "rounds_to_target", "comm_mb", "accuracy_at_2"],
    "transpose": False,
    "labels": {"fedavg": "FedAvg", "scaffold": "SCAFFOLD"},
}


def summary_of(final: float, **fields: Any) -> dict[str, Any]:
    """A summary.json as a finished run writes it, with `fields` replaced."""
    summary = {
        "final_accuracy": final,
        "best_accuracy": final,
        "rounds_to_target": None,
        "target_accuracy": None,
        "comm_mb": 10.0,
        "wall_seconds": 5.0,
        "client_seconds_per_round": 0.5,
        "rounds": 3,
        "seed": 0,
        "algo": "fedavg",
        "data": "digits",
        "model": "mlp",
        "partition": "iid",
        "selection": "random",
        "lr_schedule": "constant",
        "logger": "csv",
    }
    return summary | fields


def write_metrics(job_dir: Path, accuracies: list[float], client_seconds: bool = True) -> None:
    columns = ["round", "test_accuracy", "test_loss", "train_loss", "lr", "bytes_up"]
    columns += ["bytes_down", "wall_seconds", "test_accuracy_std"]
    columns += ["client_seconds"] if client_seconds else []
    with (job_dir / "metrics.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for round_index, accuracy in enumerate(accuracies, start=1):
            row = [round_index, accuracy, 1.0, 1.0, 0.05, 1000, 1000, round_index, 0.0, 0.1]
            writer.writerow(row[: len(columns)])


def write_job(
    sweep: Path,
    name: str,
    overrides: list[str],
    layout: dict[str, Any] | None,
    summary: dict[str, Any] | None,
    accuracies: list[float],
) -> None:
    """A job directory in Hydra's format; no summary.json (`summary=None`) means unfinished."""
    job_dir = sweep / name
    (job_dir / ".hydra").mkdir(parents=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(overrides))
    target = (summary or {}).get("target_accuracy")
    config = {"seed": 0, "fl": {"rounds": 3}, "eval": {"target_accuracy": target}, "report": layout}
    (job_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(config))
    if summary is not None:
        (job_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    write_metrics(job_dir, accuracies)


def write_multirun(sweep: Path, task: list[str]) -> None:
    config = {"hydra": {"overrides": {"hydra": ["hydra.mode=MULTIRUN"], "task": task}}}
    (sweep / "multirun.yaml").write_text(OmegaConf.to_yaml(config))


def read_report_csv(sweep: Path) -> dict[str, dict[str, str]]:
    with (sweep / "report.csv").open(newline="") as f:
        return {row["group"]: row for row in csv.DictReader(f)}


def table_row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


@pytest.fixture
def comparison_sweep(tmp_path: Path) -> Path:
    """FedAvg and SCAFFOLD over 3 seeds with known numbers, plus a SCAFFOLD seed killed in round 3.

    Job numbers 7..13 put SCAFFOLD (10..12) first in alphabetical order, FedAvg first in number
    order, which is the order a Hydra sweep ran them.
    """
    sweep = tmp_path / "multirun" / "2024-05-01" / "12-00-00"
    sweep.mkdir(parents=True)
    write_multirun(sweep, [*PRESET, "algo=fedavg,scaffold", "seed=0,1,2,3"])
    runs = [
        ("7", "fedavg", 0, 0.66, None),
        ("8", "fedavg", 1, 0.72, 30),
        ("9", "fedavg", 2, 0.78, 40),
        ("10", "scaffold", 0, 0.80, 20),
        ("11", "scaffold", 1, 0.81, 22),
        ("12", "scaffold", 2, 0.85, 24),
    ]
    for name, algo, seed, final, rounds_to_target in runs:
        summary = summary_of(
            final,
            algo=algo,
            seed=seed,
            rounds_to_target=rounds_to_target,
            target_accuracy=0.7,
            comm_mb=10.0 if algo == "fedavg" else 20.0,
        )
        overrides = [*PRESET, f"algo={algo}", f"seed={seed}"]
        write_job(
            sweep, name, overrides, COMPARISON_LAYOUT, summary, [final - 0.2, final - 0.1, final]
        )
    overrides = [*PRESET, "algo=scaffold", "seed=3"]
    write_job(sweep, "13", overrides, COMPARISON_LAYOUT, None, [0.6, 0.7])
    with (sweep / "13" / "metrics.csv").open("a") as f:
        f.write("3,0.7")  # killed while writing round 3
    return sweep


def test_report_tables_mean_and_sample_std_over_seeds(
    comparison_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(comparison_sweep)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        str(comparison_sweep / "report.md"),
        "6 jobs in 2 groups, 1 incomplete",
    ]
    report = (comparison_sweep / "report.md").read_text()
    command = (
        "python -m fedlight -m +experiment=fedavg_vs_scaffold data.root=../shared/data "
        "algo=fedavg,scaffold seed=0,1,2,3"
    )
    assert report.startswith(f"# Report: {comparison_sweep.name}\n\n```bash\n{command}\n```\n")
    lines = report.splitlines()
    assert "### FedAvg vs SCAFFOLD" in lines
    assert "mean ± std over seeds; n = 3 seeds per cell" in lines
    header = table_row(
        "algo",
        "Final accuracy (%)",
        "Rounds to 70%",
        "Communication (MB)",
        "Accuracy at round 2 (%)",
    )
    # seed 0 never reached 70% (censored at its last round): no mean, the Kaplan–Meier median
    fedavg = table_row(
        "FedAvg", "72.0 ± 6.0", "median 35.0 (2/3 reached)", "10.0 ± 0.0", "62.0 ± 6.0"
    )
    scaffold = table_row("SCAFFOLD", "82.0 ± 2.6", "22.0 ± 2.0", "20.0 ± 0.0", "72.0 ± 2.6")
    assert lines.index(header) + 2 == lines.index(fedavg) == lines.index(scaffold) - 1
    assert "Reference: Paper: FedAvg 72.3%, SCAFFOLD 82.1%" in lines
    assert "### Incomplete jobs" in lines
    assert table_row("13", "algo=scaffold seed=3", "stopped", "2") in lines
    assert lines[-1] == "![curves](curves.png)"


def test_report_csv_holds_raw_means_and_stds_per_group(comparison_sweep: Path) -> None:
    main([str(comparison_sweep)])
    rows = read_report_csv(comparison_sweep)
    assert list(rows) == ["FedAvg", "SCAFFOLD"]
    fedavg = rows["FedAvg"]
    assert {k: fedavg[k] for k in ("experiment", "data.root", "algo", "n")} == {
        "experiment": "fedavg_vs_scaffold",
        "data.root": "../shared/data",
        "algo": "fedavg",
        "n": "3",
    }
    assert "seed" not in fedavg
    assert float(fedavg["final_accuracy_mean"]) == pytest.approx(0.72)
    assert float(fedavg["final_accuracy_std"]) == pytest.approx(0.06)
    assert float(fedavg["rounds_to_target_mean"]) == 35.0
    assert float(fedavg["rounds_to_target_std"]) == pytest.approx(statistics.stdev([30, 40]))
    assert float(fedavg["accuracy_at_2_mean"]) == pytest.approx(0.62)
    assert float(rows["SCAFFOLD"]["comm_mb_mean"]) == 20.0
    assert float(rows["SCAFFOLD"]["final_accuracy_std"]) == pytest.approx(
        statistics.stdev([0.80, 0.81, 0.85])
    )


def test_report_draws_curves_png(comparison_sweep: Path) -> None:
    main([str(comparison_sweep)])
    assert (comparison_sweep / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pivot_layout_makes_one_table_per_metric_with_columns_by_value(tmp_path: Path) -> None:
    layout = {
        "title": "Local epochs",
        "rows": ["algo"],
        "columns": ["local.epochs"],
        "metrics": ["final_accuracy", "best_accuracy"],
        "labels": {"fedavg": "FedAvg", 5: "E=5"},
    }
    finals = {("fedavg", 1): (0.70, 0.72), ("fedavg", 5): (0.60, 0.62)}
    finals |= {("fedprox", 1): (0.75, 0.75), ("fedprox", 5): (0.65, 0.69)}
    job = 0
    for (algo, epochs), seed_finals in finals.items():
        for seed, final in enumerate(seed_finals):
            overrides = [f"algo={algo}", f"local.epochs={epochs}", f"seed={seed}"]
            summary = summary_of(final, best_accuracy=final + 0.1, algo=algo, seed=seed)
            write_job(tmp_path, str(job), overrides, layout, summary, [final])
            job += 1
    assert main([str(tmp_path)]) == 0
    lines = (tmp_path / "report.md").read_text().splitlines()
    said = f"Commands: `{tmp_path.name}` is a folder of single runs, each job's command in its"
    assert any(line.startswith(said) for line in lines)
    assert not any(str(tmp_path) in line for line in lines)  # no machine's path
    final_table = lines.index("### Local epochs: Final accuracy (%)")
    best_table = lines.index("### Local epochs: Best accuracy (%)")
    assert lines[final_table + 2] == "mean ± std over seeds; n = 2 seeds per cell"
    assert lines[final_table + 4 : final_table + 9] == [
        table_row("algo", "local.epochs=1", "E=5"),
        table_row("---", "---:", "---:"),
        table_row("FedAvg", "71.0 ± 1.4", "61.0 ± 1.4"),
        table_row("fedprox", "75.0 ± 0.0", "67.0 ± 2.8"),
        "",
    ]
    assert table_row("FedAvg", "81.0 ± 1.4", "71.0 ± 1.4") in lines[best_table:]
    assert list(read_report_csv(tmp_path)) == [
        "FedAvg, local.epochs=1",
        "FedAvg, E=5",
        "algo=fedprox, local.epochs=1",
        "algo=fedprox, E=5",
    ]


def test_transposed_layout_puts_metrics_in_rows_and_groups_in_columns(tmp_path: Path) -> None:
    layout = {
        "title": "One seed each",
        "rows": ["algo"],
        "metrics": ["final_accuracy", "comm_mb"],
        "transpose": True,
        "labels": {"fedavg": "FedAvg"},
    }
    for job, (algo, final) in enumerate([("fedavg", 0.70), ("fedprox", 0.75)]):
        summary = summary_of(final, algo=algo, comm_mb=1.5)
        write_job(tmp_path, str(job), [f"algo={algo}", "seed=0"], layout, summary, [final])
    assert main([str(tmp_path)]) == 0
    lines = (tmp_path / "report.md").read_text().splitlines()
    assert "mean ± std over seeds; n = 1 seed per cell" in lines
    header = lines.index(table_row("Metric", "FedAvg", "algo=fedprox"))
    assert lines[header + 2 : header + 4] == [
        table_row("Final accuracy (%)", "70.0", "75.0"),
        table_row("Communication (MB)", "1.5", "1.5"),
    ]


def test_default_layout_rows_are_the_varied_overrides(tmp_path: Path) -> None:
    """Without a `report` section: a row per value of what the sweep varied, every metric.

    These summaries come from an older fedlight: no client_seconds_per_round, no target_accuracy.
    """
    sweep = tmp_path / "lr_sweep"
    for job, (lr, seed, final) in enumerate([("0.1", 0, 0.5), ("0.1", 1, 0.6), ("0.01", 0, 0.4)]):
        summary = summary_of(final, seed=seed)
        del summary["client_seconds_per_round"], summary["target_accuracy"]
        overrides = ["algo=fedavg", f"optim.lr={lr}", f"seed={seed}"]
        write_job(sweep, str(job), overrides, None, summary, [final])
        write_metrics(sweep / str(job), [final], client_seconds=False)
    assert main([str(sweep)]) == 0
    lines = (sweep / "report.md").read_text().splitlines()
    assert "### Sweep lr_sweep" in lines
    assert "mean ± std over seeds; n = 2 seeds per cell (except optim.lr=0.01: n = 1)" in lines
    header = table_row(
        "optim.lr",
        "Final accuracy (%)",
        "Best accuracy (%)",
        "Rounds to target",
        "Communication (MB)",
        "Client compute (s/round)",
        "Wall time (s)",
    )
    first = lines.index(header)
    assert lines[first + 2 : first + 4] == [
        table_row("0.1", "55.0 ± 7.1", "55.0 ± 7.1", "—", "10.0 ± 0.0", "—", "5.0 ± 0.0"),
        table_row("0.01", "40.0", "40.0", "—", "10.0", "—", "5.0"),
    ]
    rows = read_report_csv(sweep)
    assert list(rows) == ["optim.lr=0.1", "optim.lr=0.01"]
    assert rows["optim.lr=0.01"]["final_accuracy_std"] == ""
    assert rows["optim.lr=0.1"]["client_seconds_per_round_mean"] == ""


def test_default_layout_of_a_sweep_that_varies_only_the_seed_has_one_row(tmp_path: Path) -> None:
    for seed in (0, 1):
        write_job(tmp_path, str(seed), [f"seed={seed}"], None, summary_of(0.5, seed=seed), [0.5])
    assert main([str(tmp_path)]) == 0
    lines = (tmp_path / "report.md").read_text().splitlines()
    assert any(line.startswith("| all | 50.0 ± 0.0 |") for line in lines)
    assert list(read_report_csv(tmp_path)) == ["all"]


def test_a_number_every_job_took_from_the_validation_set_says_so_in_its_title(
    tmp_path: Path,
) -> None:
    layout = {"rows": ["seed"], "metrics": ["final_accuracy", "best_accuracy"]}
    splits = {"final_accuracy": "test", "best_accuracy": "validation"}
    for seed in (0, 1):
        summary = summary_of(0.5, seed=seed, splits=splits)
        write_job(tmp_path, str(seed), [f"seed={seed}"], layout, summary, [0.5])
    assert main([str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "Final accuracy (%)" in text and "Best accuracy, validation (%)" in text


def test_several_sweeps_filtered_into_one_report(comparison_sweep: Path, tmp_path: Path) -> None:
    """A baseline run in its own sweep joins the comparison; --where keeps one partition."""
    extra = tmp_path / "central_sweep"
    extra.mkdir()
    write_multirun(extra, [*PRESET, "algo=central", "partition=iid,shards"])
    for job, partition in enumerate(["iid", "shards"]):
        summary = summary_of(0.9, algo="central", partition=partition, target_accuracy=0.7)
        overrides = [*PRESET, "algo=central", f"partition={partition}", "seed=0"]
        write_job(extra, str(job), overrides, COMPARISON_LAYOUT, summary, [0.9])
    out = tmp_path / "combined"
    args = [str(extra), str(comparison_sweep), "-o", str(out), "--where", "partition=iid"]
    args += ["--metrics", "final_accuracy,comm_mb"]
    assert main(args) == 0
    lines = (out / "report.md").read_text().splitlines()
    assert lines.count("```bash") == 2
    assert f"python -m fedlight -m {' '.join(PRESET)} algo=central partition=iid,shards" in lines
    header = table_row("algo", "Final accuracy (%)", "Communication (MB)")
    first = lines.index(header)
    assert lines[first + 2 : first + 5] == [
        table_row("central", "90.0", "10.0"),
        table_row("FedAvg", "72.0 ± 6.0", "10.0 ± 0.0"),
        table_row("SCAFFOLD", "82.0 ± 2.6", "20.0 ± 0.0"),  # partition=iid from summary.json
    ]
    assert "algo=central partition=shards" not in (out / "report.csv").read_text()
    assert (out / "curves.png").exists() and (out / "report.csv").exists()


def test_a_row_label_names_only_the_extra_settings_its_jobs_were_given(
    comparison_sweep: Path, tmp_path: Path
) -> None:
    """A sweep with one more override joins the comparison: its row says the override, the
    others' rows say nothing of a setting they were not given (no `data.normalize=—`)."""
    extra = tmp_path / "pixels_sweep"
    extra.mkdir()
    write_multirun(extra, [*PRESET, "algo=fedavg", "data.normalize=false"])
    summary = summary_of(0.8, algo="fedavg", partition="iid", target_accuracy=0.7)
    overrides = [*PRESET, "algo=fedavg", "data.normalize=false", "seed=0"]
    write_job(extra, "0", overrides, COMPARISON_LAYOUT, summary, [0.8])
    out = tmp_path / "combined"
    args = [str(extra), str(comparison_sweep), "-o", str(out), "--where", "partition=iid"]
    assert main([*args, "--metrics", "final_accuracy"]) == 0
    lines = (out / "report.md").read_text().splitlines()
    first = lines.index(table_row("algo, data.normalize", "Final accuracy (%)"))
    assert lines[first + 2 : first + 5] == [
        table_row("FedAvg (data.normalize=false)", "80.0"),
        table_row("FedAvg", "72.0 ± 6.0"),
        table_row("SCAFFOLD", "82.0 ± 2.6"),
    ]


def test_a_resumed_job_replaces_the_killed_one(comparison_sweep: Path, tmp_path: Path) -> None:
    """Job 13 was killed; `resume=<job 13>` finished it in a run directory of its own."""
    killed = comparison_sweep / "13"
    overrides = [*PRESET, "algo=scaffold", "seed=3", f"resume={killed.resolve()}"]
    summary = summary_of(0.82, algo="scaffold", seed=3, rounds_to_target=26, target_accuracy=0.7)
    write_job(tmp_path, "resumed", overrides, COMPARISON_LAYOUT, summary, [0.6, 0.7, 0.82])
    out = tmp_path / "combined"
    assert main([str(comparison_sweep), str(tmp_path / "resumed"), "-o", str(out)]) == 0
    lines = (out / "report.md").read_text().splitlines()
    assert "### Incomplete jobs" not in lines
    assert any(line.startswith("Commands: `resumed` is a folder") for line in lines)
    scaffold = next(line for line in lines if line.startswith("| SCAFFOLD |"))
    assert scaffold.startswith(f"| SCAFFOLD | {statistics.fmean([80, 81, 85, 82]):.1f} ± ")


def test_the_report_says_how_often_each_job_was_resumed(
    comparison_sweep: Path, tmp_path: Path
) -> None:
    """summary.json `resumes` per finished job: named with its count, the others counted."""
    assert main([str(comparison_sweep), "-o", str(tmp_path / "none")]) == 0
    assert "Resumed: none of the 6 finished jobs." in (tmp_path / "none" / "report.md").read_text()
    for name, resumes in (("8", 2), ("11", 1)):
        path = comparison_sweep / name / "summary.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"resumes": resumes}))
    assert main([str(comparison_sweep), "-o", str(tmp_path / "some")]) == 0
    text = (tmp_path / "some" / "report.md").read_text()
    assert "Resumed from their checkpoints: 8 2 times, 11 1 time; the other 4 never." in text


def test_several_sweeps_need_an_output_and_where_must_match(
    comparison_sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(comparison_sweep), str(comparison_sweep)]) == 2
    assert "need --output DIR" in capsys.readouterr().err
    assert main([str(comparison_sweep), "--where", "algo=fedprox"]) == 2
    assert "no job matches --where algo=fedprox" in capsys.readouterr().err
    assert main([str(comparison_sweep), "--where", "algo"]) == 2
    assert "--where algo is not KEY=VALUE" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["missing", "file", "empty"])
def test_a_path_without_jobs_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = tmp_path / kind
    if kind == "file":
        path.write_text("not a sweep")
    if kind == "empty":
        path.mkdir()
    assert main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(f"fedlight report: error: {path} ")
    assert "pass the sweep directory" in line


def seed_sweep(sweep: Path) -> Path:
    """Two finished seeds of one setting: the smallest sweep a fault can be planted in."""
    for seed, final in enumerate([0.5, 0.6]):
        summary = summary_of(final, seed=seed)
        write_job(sweep, str(seed), [f"seed={seed}"], None, summary, [0.4, final])
    return sweep


def one_line_error(capsys: pytest.CaptureFixture[str], *fragments: str) -> str:
    """The single `fedlight report: error:` line on stderr, nothing on stdout."""
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    [line] = captured.err.splitlines()
    assert line.startswith("fedlight report: error: ")
    for fragment in fragments:
        assert fragment in line
    return line


@pytest.mark.parametrize(
    "content",
    ["[0.5, 0.6]", '"done"', '{"final_accuracy": NaN}', '{"comm_mb": Infinity, "seed": 1}'],
    ids=["list", "string", "nan", "infinity"],
)
def test_a_summary_that_is_no_summary_object_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    """Valid JSON for Python, but a list, a string, or NaN/Inf in a run that did not diverge."""
    sweep = seed_sweep(tmp_path / "sweep")
    (sweep / "1" / "summary.json").write_text(content)
    assert main([str(sweep)]) == 2
    one_line_error(capsys, f"{sweep / '1' / 'summary.json'} ", "rerun the job")
    assert not (sweep / "report.md").exists()


def test_a_collapse_round_that_is_no_round_number_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = seed_sweep(tmp_path / "sweep")
    path = sweep / "1" / "summary.json"
    path.write_text('{"final_accuracy": 0.6, "collapsed_at_round": "5"}')
    assert main([str(sweep)]) == 2
    one_line_error(capsys, f"{path}: collapsed_at_round is '5', not a round number", "rerun")


@pytest.mark.parametrize(
    "content",
    ["- seed=1\n- algo: [", "seed: 1\n", "- seed: 1\n", "", "\xff\xfe- seed=1"],
    ids=["invalid-yaml", "mapping", "list-of-mappings", "empty", "not-utf8"],
)
def test_a_corrupt_overrides_yaml_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    sweep = seed_sweep(tmp_path / "sweep")
    path = sweep / "1" / ".hydra" / "overrides.yaml"
    path.write_bytes(content.encode("latin-1"))
    assert main([str(sweep)]) == 2
    one_line_error(capsys, f"{path} ", "restore it as Hydra writes it")


@pytest.mark.parametrize("kind", ["file", "below-a-file", "proc", "read-only-parent"])
def test_an_unwritable_output_directory_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    sweep = seed_sweep(tmp_path / "sweep")
    in_the_way = tmp_path / "report.md"
    in_the_way.write_text("a file")
    read_only = tmp_path / "read-only"
    output = {
        "file": in_the_way,
        "below-a-file": in_the_way / "report",
        "proc": Path("/proc/fedlight-report"),
        "read-only-parent": read_only / "report",
    }[kind]
    if kind == "read-only-parent":
        read_only.mkdir(mode=0o555)
        if os.geteuid() == 0:  # chmod cannot stop root: the refusal is simulated

            def refuse(path: Path, *args: Any, **kwargs: Any) -> None:
                raise PermissionError(13, "Permission denied", str(path))

            monkeypatch.setattr(Path, "mkdir", refuse)
    assert main([str(sweep), "-o", str(output)]) == 2
    one_line_error(capsys, f"-o {output} ", "pass -o with a directory you can write to")
    assert not (sweep / "report.md").exists()


def test_a_read_only_sweep_without_output_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where chmod cannot stop root, the file system's refusal is simulated."""
    sweep = seed_sweep(tmp_path / "sweep")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("fedlight.reports.cli.tempfile.NamedTemporaryFile", refuse)
    assert main([str(sweep)]) == 2
    one_line_error(capsys, f"the sweep directory {sweep} (Permission denied)", "pass -o DIR")


@pytest.mark.parametrize(
    ("metrics", "named"),
    [
        ("final_accuracy,final_acc", "--metrics final_acc: no job of the sweep has this metric"),
        ("accuracy_at_9", "--metrics accuracy_at_9: no job evaluated round 9"),
    ],
)
def test_an_unknown_metrics_name_is_refused_with_the_metrics_the_jobs_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], metrics: str, named: str
) -> None:
    sweep = seed_sweep(tmp_path / "sweep")
    assert main([str(sweep), "--metrics", metrics]) == 2
    line = one_line_error(capsys, named)
    assert line.endswith(
        "the sweep's jobs have final_accuracy, best_accuracy, rounds_to_target, comm_mb, "
        "client_seconds_per_round, wall_seconds, rounds, accuracy_at_<R> and loss_at_<R> "
        "(R = 1, 2), rounds_to_<percent>, rounds_to_<percent>_interpolated, "
        "rounds_to_target_interpolated, last<k>_accuracy, accuracy_auc"
    )


@pytest.fixture(scope="module")
def diverged_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FedAvg over 3 seeds, seed 2 diverged in round 3 (NaN in its metrics.csv and summary);
    FedProx whose 2 seeds both diverged; Local from a fedlight older than `diverged_at_round`.
    Reported once: the tests below read its files."""
    sweep = tmp_path_factory.mktemp("diverged") / "sweep"
    runs = [
        ("fedavg", 0, 0.60, None),
        ("fedavg", 1, 0.70, None),
        ("fedavg", 2, 0.10, 3),
        ("fedprox", 0, 0.10, 2),
        ("fedprox", 1, 0.10, 3),
        ("local", 0, 0.50, "absent"),
        ("local", 1, 0.70, "absent"),
    ]
    for job, (algo, seed, final, diverged_at) in enumerate(runs):
        summary = summary_of(final, algo=algo, seed=seed)
        if diverged_at != "absent":
            summary["diverged_at_round"] = diverged_at
        if diverged_at == 3:
            summary["divergence"] = "test_loss nan"
            summary["test_loss"] = float("nan")  # json writes NaN: accepted for a diverged run
        write_job(sweep, str(job), [f"algo={algo}", f"seed={seed}"], None, summary, [0.4, 0.5])
        with (sweep / str(job) / "metrics.csv").open("a") as f:
            accuracy = "nan" if diverged_at == 3 else str(final)
            f.write(f"3,{accuracy},inf,nan,0.05,1000,1000,3,0.0,0.1\n")
    assert main([str(sweep)]) == 0
    return sweep


def diverged_report(sweep: Path) -> tuple[list[str], dict[str, dict[str, str]]]:
    return (sweep / "report.md").read_text().splitlines(), read_report_csv(sweep)


def test_a_diverged_seed_is_left_out_of_mean_and_std_and_marked(diverged_sweep: Path) -> None:
    lines, rows = diverged_report(diverged_sweep)
    healthy = f"{statistics.fmean([60, 70]):.1f} ± {statistics.stdev([60, 70]):.1f}"
    assert healthy == "65.0 ± 7.1"
    marked = f"{healthy} † 1 of 3 diverged"
    assert table_row("fedavg", marked, marked, "— † 1 of 3 diverged") in "\n".join(lines)
    footnote = lines.index("† Diverged (loss or weights became NaN/Inf), left out of mean ± std:")
    assert lines[footnote + 2 : footnote + 5] == [
        "- 2 (algo=fedavg, seed 2): diverged at round 3 (test_loss nan)",
        "- 3 (algo=fedprox, seed 0): diverged at round 2",
        "- 4 (algo=fedprox, seed 1): diverged at round 3 (test_loss nan)",
    ]
    fedavg = rows["algo=fedavg"]
    assert (fedavg["n"], fedavg["diverged"]) == ("2", "1")
    assert float(fedavg["final_accuracy_mean"]) == pytest.approx(0.65)
    assert float(fedavg["final_accuracy_std"]) == pytest.approx(statistics.stdev([0.6, 0.7]))


def test_a_group_whose_seeds_all_diverged_shows_only_the_marker(diverged_sweep: Path) -> None:
    lines, rows = diverged_report(diverged_sweep)
    [fedprox] = [line for line in lines if line.startswith("| fedprox |")]
    assert fedprox == table_row("fedprox", *["† 2 of 2 diverged"] * 6)
    fedprox_csv = rows["algo=fedprox"]
    assert (fedprox_csv["n"], fedprox_csv["diverged"]) == ("0", "2")
    assert fedprox_csv["final_accuracy_mean"] == fedprox_csv["final_accuracy_std"] == ""


def test_a_summary_older_than_diverged_at_round_counts_as_healthy(diverged_sweep: Path) -> None:
    lines, rows = diverged_report(diverged_sweep)
    assert table_row("local", "60.0 ± 14.1", "60.0 ± 14.1", "—", "10.0 ± 0.0") in "\n".join(lines)
    assert (rows["algo=local"]["n"], rows["algo=local"]["diverged"]) == ("2", "0")


def test_curves_skip_diverged_seeds_and_non_finite_points(
    diverged_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """FedAvg's curve is its healthy seeds'; FedProx's stops before its first seed diverged."""
    fedavg, fedprox, local = group_jobs(load_jobs(diverged_sweep))
    assert column_curve(fedavg) == ([1, 2, 3], [[40, 40], [50, 50], [60, 70]])
    assert column_curve(fedprox) == ([1], [[40, 40]])
    assert column_curve(local)[1][-1] == [50, 70]
    assert (diverged_sweep / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_report_of_a_real_sweep_through_the_cli(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    overrides = [*TINY, "fl.rounds=2", "algo=fedavg,local", "seed=0,1"]
    run_cli("-m", *overrides, f"hydra.sweep.dir={sweep}", cwd=REPO)

    result = run_cli("report", str(sweep), cwd=REPO)
    assert result.stdout.splitlines() == [
        str(sweep / "report.md"),
        "4 jobs in 2 groups, 0 incomplete",
    ]
    report = (sweep / "report.md").read_text()
    assert f"python -m fedlight -m {' '.join(overrides)}\n" in report
    assert "mean ± std over seeds; n = 2 seeds per cell" in report
    summaries = [json.loads((sweep / str(j) / "summary.json").read_text()) for j in range(4)]
    rows = read_report_csv(sweep)
    assert list(rows) == ["algo=fedavg", "algo=local"]
    for algo, row in rows.items():
        runs = [s for s in summaries if f"algo={s['algo']}" == algo]
        assert row["n"] == "2"
        for metric in ("final_accuracy", "best_accuracy", "comm_mb", "wall_seconds"):
            mean = statistics.fmean(s[metric] for s in runs)
            assert float(row[f"{metric}_mean"]) == pytest.approx(mean, rel=1e-12)

    module_run = subprocess.run(
        [sys.executable, "-m", "fedlight.reports.cli", str(sweep)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert module_run.stdout.splitlines()[0] == str(sweep / "report.md")
    assert (sweep / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_report_of_a_sweep_evaluated_every_other_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """eval.every=2 of 3 rounds: metrics.csv has every round, the test cells of round 1 empty;
    the tables, accuracy_at_<R> and the curves take the evaluated rounds (2, 3) alone, and an
    unfinished job's last round is the last in its metrics.csv, evaluated or not."""
    sweep = tmp_path / "sweep"
    run_cli(
        "-m", *TINY, "fl.rounds=3", "eval.every=2", "seed=0,1", f"hydra.sweep.dir={sweep}", cwd=REPO
    )
    csvs = [list(csv.DictReader((sweep / j / "metrics.csv").open())) for j in ("0", "1")]
    assert [[(r["round"], bool(r["test_accuracy"])) for r in rows] for rows in csvs] == 2 * [
        [("1", False), ("2", True), ("3", True)]
    ]
    unfinished = sweep / "2"  # a third seed killed after round 1
    (unfinished / ".hydra").mkdir(parents=True)
    for name in ("overrides.yaml", "config.yaml"):
        text = (sweep / "1" / ".hydra" / name).read_text()
        (unfinished / ".hydra" / name).write_text(text.replace("seed=1", "seed=2"))
    lines = (sweep / "1" / "metrics.csv").read_text().splitlines(keepends=True)
    (unfinished / "metrics.csv").write_text("".join(lines[:2]))

    metrics = "final_accuracy,best_accuracy,accuracy_at_2"
    assert main([str(sweep), "--metrics", metrics]) == 0
    (row,) = read_report_csv(sweep).values()
    summaries = [json.loads((sweep / j / "summary.json").read_text()) for j in ("0", "1")]
    for metric in ("final_accuracy", "best_accuracy"):
        assert float(row[f"{metric}_mean"]) == statistics.fmean(s[metric] for s in summaries)
    at_2 = [float(rows[1]["test_accuracy"]) for rows in csvs]
    assert float(row["accuracy_at_2_mean"]) == statistics.fmean(at_2)
    assert table_row("2", "seed=2", "stopped", "1") in (sweep / "report.md").read_text()
    (group,) = group_jobs([job for job in load_jobs(sweep) if job.finished])
    assert column_curve(group)[0] == [2, 3]

    capsys.readouterr()
    assert main([str(sweep), "--metrics", "accuracy_at_1"]) == 2
    one_line_error(capsys, "--metrics accuracy_at_1: no job evaluated round 1", "(R = 2, 3)")


def test_local_accuracies_are_shown_in_percent_and_mb_per_round_as_is() -> None:
    assert format_cell([0.9, 0.8], 2, "local_accuracy_p10") == "85.0 ± 7.1"
    assert format_cell([0.5, 0.5], 2, "comm_mb_per_round") == "0.5 ± 0.0"


def clocked_sweep(sweep: Path, layout: str, columns: str = "virtual_time") -> Path:
    """Two seeds of one setting evaluated at rounds 1 and 2, at virtual times (1, 3) and (2, 5)
    (`columns` names the last column of metrics.csv)."""
    for job, times in (("0", [1.0, 3.0]), ("1", [2.0, 5.0])):
        directory = sweep / job
        (directory / ".hydra").mkdir(parents=True)
        (directory / ".hydra" / "overrides.yaml").write_text(f"- seed={job}\n")
        (directory / ".hydra" / "config.yaml").write_text(layout)
        rows = [f"round,test_accuracy,test_loss,{columns}"]
        rows += [f"{r},0.5,1.0,{t}" for r, t in zip((1, 2), times, strict=True)]
        (directory / "metrics.csv").write_text("\n".join(rows) + "\n")
        (directory / "summary.json").write_text(json.dumps({"final_accuracy": 0.5, "seed": 0}))
    return sweep


def test_curves_on_the_virtual_clock_use_the_seeds_mean_time_at_each_evaluation(
    tmp_path: Path,
) -> None:
    """A layout with `x: virtual_time` draws each group against the mean over its seeds of the
    virtual time at each evaluated round."""
    sweep = clocked_sweep(tmp_path / "sweep", "report:\n  x: virtual_time\n")
    (group,) = group_jobs(load_jobs(sweep))
    rounds, _ = column_curve(group)
    assert mean_virtual_times(group, rounds) == [1.5, 4.0]


def test_the_command_line_chooses_virtual_time_and_refuses_it_without_a_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clocked = clocked_sweep(tmp_path / "clocked", "{}\n")
    assert main([str(clocked), "--x", "virtual_time"]) == 0
    assert (clocked / "curves.png").read_bytes()[:4] == b"\x89PNG"
    plain = clocked_sweep(tmp_path / "plain", "{}\n", columns="train_loss")
    assert main([str(plain), "--x", "virtual_time"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("fedlight report: error: ") and "has no virtual_time column" in error
    assert main([str(plain)]) == 0


@pytest.fixture(scope="module")
def collapsed_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SCAFFOLD over 3 seeds: seed 1 collapsed in round 5, seed 2 collapsed and then diverged;
    FedAvg over 2 seeds from a fedlight older than `collapsed_at_round`. Reported once."""
    sweep = tmp_path_factory.mktemp("collapsed") / "sweep"
    runs = [
        ("fedavg", 0, 0.70, {}),
        ("fedavg", 1, 0.72, {}),
        ("scaffold", 0, 0.80, {"collapsed_at_round": None}),
        ("scaffold", 1, 0.10, {"collapsed_at_round": 5}),
        ("scaffold", 2, 0.10, {"collapsed_at_round": 2, "diverged_at_round": 6}),
    ]
    for job, (algo, seed, final, fields) in enumerate(runs):
        summary = summary_of(final, algo=algo, seed=seed, **fields)
        write_job(sweep, str(job), [f"algo={algo}", f"seed={seed}"], None, summary, [0.4, final])
    return sweep


def test_a_collapsed_seed_stays_in_mean_and_std_and_is_marked(
    collapsed_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A collapsed seed is a result: in its cell's statistics, marked `‡`, named in a footnote;
    a seed that also diverged counts as diverged only; a summary older than the key is healthy."""
    assert main([str(collapsed_sweep)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "5 jobs in 2 groups, 0 incomplete, 1 diverged, 1 collapsed"
    )
    lines, rows = diverged_report(collapsed_sweep)
    both = f"{statistics.fmean([80, 10]):.1f} ± {statistics.stdev([80, 10]):.1f}"
    assert both == "45.0 ± 49.5"
    marked = f"{both} † 1 of 3 diverged ‡ 1 of 3 collapsed"
    assert table_row("scaffold", marked, marked, "— † 1 of 3 diverged ‡ 1 of 3 collapsed") in (
        "\n".join(lines)
    )
    assert table_row("fedavg", "71.0 ± 1.4", "71.0 ± 1.4", "—") in "\n".join(lines)
    title = (
        "‡ Collapsed (test accuracy fell to chance with finite losses and stayed there to the "
        "end), kept in mean ± std:"
    )
    footnote = lines.index(title)
    assert lines[footnote + 2 : footnote + 4] == [
        "- 3 (algo=scaffold, seed 1): collapsed at round 5 (final accuracy 10.0%)",
        "",
    ]
    scaffold, fedavg = rows["algo=scaffold"], rows["algo=fedavg"]
    assert (scaffold["n"], scaffold["diverged"], scaffold["collapsed"]) == ("2", "1", "1")
    assert float(scaffold["final_accuracy_mean"]) == pytest.approx(0.45)
    assert (fedavg["n"], fedavg["diverged"], fedavg["collapsed"]) == ("2", "0", "0")


def test_a_seed_that_never_left_chance_stays_in_and_is_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A seed at chance in every evaluation (a tuned learning rate that wrecked its first round)
    is no collapse, yet no result to average unmarked: `§`, a footnote, a CSV count."""
    sweep = tmp_path / "sweep"
    for job, (seed, final, never) in enumerate(
        [(0, 0.78, False), (1, 0.77, False), (2, 0.1, True)]
    ):
        summary = summary_of(final, algo="fedavg", seed=seed, never_left_chance=never)
        write_job(sweep, str(job), ["algo=fedavg", f"seed={seed}"], None, summary, [0.1, final])
    assert main([str(sweep)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "3 jobs in 1 group, 0 incomplete, 1 never left chance"
    )
    lines, rows = diverged_report(sweep)
    report = "\n".join(lines)
    assert "55.0 ± 39.0 § 1 of 3 never left chance" in report
    assert "- 2 (all, seed 2): never left chance (final accuracy 10.0%)" in lines
    assert rows["all"]["never_left_chance"] == "1"


def environment_of(**changed: Any) -> dict[str, Any]:
    """summary.json's `environment` of a CPU run, with `changed` values."""
    environment = {
        "torch_threads": 2,
        "workers": 1,
        "engine": "sequential",
        "device": "cpu",
        "gpu": None,
        "torch": "2.5.1",
        "fedlight": "0.1.0",
    }
    return environment | changed


def environment_sweep(sweep: Path, environments: list[dict[str, Any] | None]) -> Path:
    """One setting over as many seeds as `environments` (None: a summary without the record)."""
    for seed, environment in enumerate(environments):
        fields = {} if environment is None else {"environment": environment}
        summary = summary_of(0.5, seed=seed, **fields)
        write_job(sweep, str(seed), [f"seed={seed}"], None, summary, [0.4, 0.5])
    return sweep


def test_the_report_gives_the_environment_in_one_line(tmp_path: Path) -> None:
    """Values null everywhere (a GPU's name on a CPU) are left out; jobs that agree: no warning."""
    sweep = environment_sweep(tmp_path / "sweep", [environment_of(), environment_of()])
    assert main([str(sweep)]) == 0
    lines = (sweep / "report.md").read_text().splitlines()
    line = (
        "Environment (what decides float rounding): torch_threads=2, workers=1, "
        "engine=sequential, device=cpu, torch=2.5.1, fedlight=0.1.0."
    )
    assert lines.index(line) < lines.index("### Sweep sweep")
    assert not any(line.startswith("Warning") for line in lines)


def test_jobs_of_a_table_that_differ_in_their_environment_are_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Threads differ between seeds, one seed resumed under other threads, one summary predates
    the record: the line says the key varies, a warning under the table names values and jobs."""
    environments = [
        environment_of(),
        environment_of(torch_threads=1),
        environment_of(torch_threads=[1, 2]),
        None,
        environment_of(),
        environment_of(),
        environment_of(),
    ]
    sweep = environment_sweep(tmp_path / "sweep", environments)
    assert main([str(sweep)]) == 0
    assert capsys.readouterr().err == (
        "fedlight report: warning: the jobs of table 'Sweep sweep' differ in what decides float "
        "rounding (see report.md)\n"
    )
    lines = (sweep / "report.md").read_text().splitlines()
    assert (
        "Environment (what decides float rounding): torch_threads varies (see the tables' "
        "warnings), workers=1, engine=sequential, device=cpu, torch=2.5.1, fedlight=0.1.0; "
        "unknown for 1 job (summary.json written before fedlight recorded it)."
    ) in lines
    warning = (
        "Warning, this table: jobs ran under different torch_threads (2: jobs 0, 4, 5 and 1 "
        "more; 1: job 1; 1, then 2: job 2); job 3 recorded none (summary.json written before "
        "fedlight recorded it). Float rounding may differ between its jobs; each reproduces bit "
        "for bit only under its own values (docs/reproducibility.md)."
    )
    table = table_row("all", *["50.0 ± 0.0"] * 2, "—", "10.0 ± 0.0", "0.5 ± 0.0", "5.0 ± 0.0")
    assert lines.index(warning) == lines.index(table) + 2


@pytest.mark.parametrize("seeds_agree", [True, False])
def test_cells_that_train_with_their_own_engine_are_no_warning_unless_their_seeds_differ(
    tmp_path: Path, seeds_agree: bool
) -> None:
    """DP-SGD's cells train with its engine, the others' with the sequential one: the line says
    the engine varies, but only a cell whose seeds ran on different engines is warned of."""
    sweep = tmp_path / "sweep"
    engines = {"none": ["sequential"] * 2, "dp_sgd": ["dp_sgd", "dp_sgd" if seeds_agree else "x"]}
    for cell, (privacy, cell_engines) in enumerate(engines.items()):
        for seed, engine in enumerate(cell_engines):
            summary = summary_of(0.5, seed=seed, environment=environment_of(engine=engine))
            overrides = [f"privacy={privacy}", f"seed={seed}"]
            write_job(sweep, str(2 * cell + seed), overrides, None, summary, [0.4, 0.5])
    assert main([str(sweep)]) == 0
    lines = (sweep / "report.md").read_text().splitlines()
    assert any("engine varies (with the cells' settings)" in line for line in lines)
    warned = [line for line in lines if line.startswith("Warning, this table")]
    assert warned == ([] if seeds_agree else [warned[0]])
    if not seeds_agree:
        assert "different engine (sequential: jobs 0, 1; dp_sgd: job 2; x: job 3)" in warned[0]


def test_summaries_older_than_the_environment_report_it_unknown(tmp_path: Path) -> None:
    sweep = environment_sweep(tmp_path / "sweep", [None, None])
    assert main([str(sweep)]) == 0
    lines = (sweep / "report.md").read_text().splitlines()
    assert "Environment: unknown (summary.json written before fedlight recorded it)." in lines
    assert not any(line.startswith("Warning") for line in lines)


def test_a_collapse_and_the_environment_through_the_cli(tmp_path: Path) -> None:
    """A real sweep of one job: a cyclic rate climbing to 200 in round 2 kills the MLP's ReLUs;
    its accuracy falls from about 40% to chance (about 10%) with finite losses. The run records
    the round and its environment; the report marks the cell and gives the environment in one
    line."""
    sweep = tmp_path / "sweep"
    schedule = ["lr_schedule=cyclic", "lr_schedule.min_lr=0.1", "lr_schedule.max_lr=200"]
    run_cli(
        "-m",
        *TINY,
        *schedule,
        "fl.threads_per_worker=1",
        "fl.workers=1",
        f"hydra.sweep.dir={sweep}",
        cwd=REPO,
    )
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert summary["collapsed_at_round"] == 2 and summary["diverged_at_round"] is None
    with (sweep / "0" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert float(rows[0]["test_accuracy"]) > 0.3
    assert all(float(r["test_accuracy"]) < 0.15 for r in rows[1:])
    assert all(math.isfinite(float(r["test_loss"])) for r in rows)
    environment = summary["environment"]
    assert (environment["torch_threads"], environment["workers"]) == (1, 1)
    assert (environment["engine"], environment["device"]) == ("sequential", "cpu")

    result = run_cli("report", str(sweep), cwd=REPO)
    assert result.stdout.splitlines()[1] == "1 job in 1 group, 0 incomplete, 1 collapsed"
    report = (sweep / "report.md").read_text()
    assert "| all | 10.0 ‡ 1 of 1 collapsed | 40." in report
    assert "- 0 (all, seed 0): collapsed at round 2 (final accuracy 10.0%)" in report
    assert (
        "torch_threads=1, workers=1, engine=sequential, memory_format=contiguous, device=cpu, "
        in report
    )
    assert "Digit for digit: add `fl.memory_format=contiguous fl.threads_per_worker=1` to" in report
    assert "Warning" not in report


def finished_job(environment: dict[str, Any] | None) -> JobResult:
    summary = {} if environment is None else {"environment": environment}
    return JobResult("0", Path("0"), {}, [], summary, [], Layout())


def test_the_digit_for_digit_line_names_the_layout_and_threads_the_jobs_ran_with() -> None:
    """Summaries from before the layout was recorded ran contiguous; unknown threads are said."""
    older = reproduction_line([finished_job(None), finished_job({})])
    assert older.startswith("Digit for digit: add `fl.memory_format=contiguous` to the commands")
    assert "their torch threads are unknown" in older
    channels_last = {"memory_format": "channels_last", "torch_threads": 1}
    line = reproduction_line([finished_job(channels_last), finished_job(channels_last)])
    assert "add `fl.memory_format=channels_last fl.threads_per_worker=1` to the commands" in line
    mixed = reproduction_line([finished_job(channels_last), finished_job({"torch_threads": 2})])
    assert "their layouts vary" in mixed and "their torch threads vary" in mixed
    assert "same cpu_capability and the same torch" in line  # what else decides the digits
    assert "another CPU or torch gives the same results within seed noise, not the same" in line


def test_a_report_names_no_machine_paths(tmp_path: Path) -> None:
    """An absolute path given on the command line is shown as typed from where the command ran
    (Hydra's hydra.runtime.cwd); a sweep outside the report's directory by its name."""
    from fedlight.reports.cli import shown_path
    from fedlight.reports.load import portable

    assert portable("data.root=/srv/lab/shared/data", "/srv/lab/main") == "data.root=../shared/data"
    assert portable("data.root=../data", "/srv/lab/main") == "data.root=../data"
    assert portable("algo=fedavg", "/srv/lab/main") == "algo=fedavg"
    assert portable("data.root=/data", None) == "data.root=/data"
    sweep = tmp_path / "runs" / "sweep"
    assert shown_path(sweep, tmp_path / "docs") == "sweep"
    assert shown_path(sweep, sweep) == "sweep"
    assert shown_path(sweep, tmp_path) == "runs/sweep"


def test_the_reports_command_keeps_the_config_dir(tmp_path: Path) -> None:
    """A sweep of one's own configs (`--config-dir`) is reported with the command that reruns it,
    the folder relative to where it ran."""
    import yaml

    from fedlight.reports.write import sweep_command

    record = {
        "hydra": {
            "mode": "MULTIRUN",
            "overrides": {"task": ["algo=my_fedprox", "seed=0,1"]},
            "job": {"config_name": "config"},
            "runtime": {
                "cwd": "/srv/lab/main",
                "config_sources": [
                    {"provider": "command-line", "schema": "file", "path": "/srv/lab/main/configs"}
                ],
            },
        }
    }
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump(record))
    assert sweep_command(tmp_path) == (
        "python -m fedlight -m --config-dir configs algo=my_fedprox seed=0,1"
    )


def test_the_test_accuracy_at_the_validation_best_round_is_a_percentage() -> None:
    from fedlight.reports.cells import is_accuracy

    assert is_accuracy("test_accuracy_at_best") and is_accuracy("val_accuracy")
    assert not is_accuracy("best_round")


def test_a_sweep_inside_a_sweep_is_its_own(tmp_path: Path) -> None:
    """A study's `tested` sweep lies in the study's directory; its jobs are not the study's."""
    from fedlight.store.sweeps import job_dirs

    for job in ("0", "1", "tested/0"):
        (tmp_path / job / ".hydra").mkdir(parents=True)
    (tmp_path / "tested" / "multirun.yaml").write_text("hydra: {}\n")
    assert sorted(d.relative_to(tmp_path).as_posix() for d in job_dirs(tmp_path)) == ["0", "1"]
    assert [d.name for d in job_dirs(tmp_path / "tested")] == ["0"]


def test_rounds_to_a_percentage_and_the_loss_at_a_round_come_from_metrics_csv(
    tmp_path: Path,
) -> None:
    """rounds_to_<N>: the first evaluated round whose test accuracy reaches N percent (where some
    seed does not, how many did and what the others ran to); loss_at_<R>: the test loss at
    round R; the layout's `curves` draw one panel per metrics.csv column."""
    sweep = tmp_path / "sweep"
    layout = {
        "rows": ["algo"],
        "metrics": ["rounds_to_50", "rounds_to_72.3", "loss_at_2"],
        "curves": ["test_accuracy", "test_loss"],
    }
    for seed, accuracies in enumerate(([0.4, 0.5, 0.8], [0.3, 0.6, 0.7])):
        write_job(
            sweep, str(seed), ["algo=fedavg", f"seed={seed}"], layout, summary_of(0.8), accuracies
        )
    write_multirun(sweep, ["algo=fedavg", "seed=0,1"])
    assert main([str(sweep)]) == 0
    row = read_report_csv(sweep)["algo=fedavg"]
    assert float(row["rounds_to_50_mean"]) == 2.0 and float(row["rounds_to_50_std"]) == 0.0
    assert float(row["rounds_to_72.3_mean"]) == 3.0 and row["rounds_to_72.3_std"] == ""
    assert float(row["loss_at_2_mean"]) == 1.0
    report = (sweep / "report.md").read_text()
    assert "| algo | Rounds to 50% | Rounds to 72.3% | Test loss at round 2 |" in report
    assert "| fedavg | 2.0 ± 0.0 | 1/2 reached (censored at 3) | 1.000 ± 0.000 |" in report
    assert Layout.from_config(layout).curves == ("test_accuracy", "test_loss")
    assert Layout.from_config({}).curves == ("test_accuracy",)
    assert (sweep / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert main([str(sweep), "--metrics", "loss_at_3", "--curves", "test_loss"]) == 0
    assert "| fedavg | 1.000 ± 0.000 |" in (sweep / "report.md").read_text()


def test_overrides_that_only_say_how_a_run_is_shown_or_resumed_make_no_other_cell(
    tmp_path: Path,
) -> None:
    """Seeds of one setting, one shown with another console and resumed, are one cell; another
    algorithm is another."""
    jobs = [
        ["algo=fedavg", "seed=0"],
        ["algo=fedavg", "seed=1", "console.progress=lines", "resume=auto"],
        ["algo=scaffold", "seed=0", "console.progress=lines"],
    ]
    for name, overrides in enumerate(jobs):
        write_job(tmp_path, str(name), overrides, None, summary_of(0.5), [0.5])
    fedavg, scaffold = group_jobs(load_jobs(tmp_path))
    assert (fedavg.overrides, len(fedavg.jobs)) == ({"algo": "fedavg"}, 2)
    assert (scaffold.overrides, len(scaffold.jobs)) == ({"algo": "scaffold"}, 1)


def test_a_cell_that_kept_a_default_pairs_with_one_that_overrode_it(tmp_path: Path) -> None:
    """`--compare data.statistics=half,dataset` where only the half runs set it: the others'
    value is their resolved config's (summary.json's `config`)."""
    for seed in (0, 1):
        for name, kept, overrides in (
            ("d", "dataset", []),
            ("h", "half", ["data.statistics=half"]),
        ):
            config = {"data": {"statistics": kept, "normalize": True}}
            summary = summary_of(0.5 + 0.1 * (name == "h") + 0.01 * seed, seed=seed, config=config)
            write_job(tmp_path, f"{name}{seed}", [*overrides, f"seed={seed}"], None, summary, [0.5])
    groups = group_jobs(load_jobs(tmp_path))
    assert [g.setting("data.statistics") for g in groups] == ["dataset", "half"]
    assert groups[0].setting("data.normalize") == "true"
    assert groups[0].setting("data.absent") is None
    (pair,) = pairings(groups, [Comparison.parse("data.statistics=half,dataset")])
    assert (pair.a.setting("data.statistics"), pair.b.setting("data.statistics")) == (
        "half",
        "dataset",
    )
