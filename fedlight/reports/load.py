"""Reading a sweep's job directories into `JobResult`s: Hydra's record of each job (its
`.hydra/` files), its summary.json and its metrics.csv. A file that cannot be read, or is not what
Hydra or fedlight writes, is a ReportError naming it and what to do; a file a killed job left cut
short is an unfinished job or a skipped line, not an error."""

import csv
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedlight.loggers.base import MetricsRow
from fedlight.reports.model import DIVERGED_KEY, ROUND_KEYS, JobResult, Layout, ReportError, reason
from fedlight.store.sweeps import job_dirs, job_order

PASS_INSTEAD = "pass the sweep directory that `fedlight -m ...` wrote, e.g. multirun/<date>/<time>"
OVERRIDE_PREFIXES = ("++", "+", "~")
REMOVE_JOB = "or move the job directory out of the sweep"


def normalize_override(override: str) -> tuple[str, str]:
    """`+key=value`, `++key=value` and `~key` as (key, value): the prefix says how, not what."""
    key, _, value = override.partition("=")
    for prefix in OVERRIDE_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return key, value if "=" in override else "(removed)"


def load_yaml(path: Path, fix: str) -> Any:
    """A YAML file as plain containers, None when it does not exist; one that cannot be read or
    parsed is a ReportError naming it, with `fix` as the advice."""
    if not path.exists():
        return None
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except OSError as error:
        raise ReportError(f"cannot read {path} ({reason(error)}); {fix}") from error
    except (yaml.YAMLError, UnicodeDecodeError, OmegaConfBaseException, ValueError) as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or (
            "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else type(error).__name__
        )
        raise ReportError(f"{path} is not valid YAML ({problem}{where}); {fix}") from error


def load_mapping(path: Path, fix: str) -> dict[str, Any] | None:
    """A YAML file that must hold a mapping (a Hydra config)."""
    content = load_yaml(path, fix)
    if content is not None and not isinstance(content, dict):
        raise ReportError(f"{path} holds a {yaml_kind(content)}, not a mapping; {fix}")
    return content


def yaml_kind(content: Any) -> str:
    return {dict: "mapping", list: "list", str: "string"}.get(type(content), type(content).__name__)


def read_overrides(path: Path) -> list[str]:
    """A job's `.hydra/overrides.yaml`: the list of command-line overrides Hydra recorded."""
    fix = f"restore it as Hydra writes it (one `- key=value` line per override) {REMOVE_JOB}"
    overrides = load_yaml(path, fix)
    if not isinstance(overrides, list):
        kind = "is empty" if overrides in ({}, None) else f"holds a {yaml_kind(overrides)}"
        raise ReportError(f"{path} {kind}, not a list of overrides; {fix}")
    bad = [o for o in overrides if not isinstance(o, str)]
    if bad:
        raise ReportError(f"{path} holds {bad[0]!r}, not a `key=value` override; {fix}")
    return overrides


def read_metrics(path: Path) -> list[MetricsRow]:
    """metrics.csv as numbers, a row per round; a line a killed job left cut short (or garbled)
    is skipped, and so is an empty field (a test metric of a round not evaluated) or a NaN/Inf
    one (the round a run diverged in may log one)."""
    if not path.exists():
        return []
    rows: list[MetricsRow] = []
    try:
        with path.open(newline="", errors="replace") as f:
            for line in csv.DictReader(f):
                if None in line or None in line.values():
                    continue
                try:
                    numbers = {k: float(v) for k, v in line.items() if v}
                except ValueError:
                    continue
                rows.append({k: v for k, v in numbers.items() if math.isfinite(v)})
    except csv.Error:
        pass  # NUL bytes a crash left at the end: the rows before them stand
    except OSError as error:
        fix = "make it readable, or move the job directory out of the sweep"
        raise ReportError(f"cannot read {path} ({reason(error)}); {fix}") from error
    return [r for r in rows if "round" in r]


def read_summary(path: Path) -> dict[str, Any] | None:
    """summary.json, or None while the job has not finished (no file yet, or one cut short by a
    kill, said in one warning line naming the file and where its JSON breaks). Valid JSON that
    is not a summary is a ReportError naming the file."""
    fix = f"rerun the job, delete the file to list the job as incomplete, {REMOVE_JOB}"
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as error:
        print(
            f"fedlight report: warning: {path} is cut short or not JSON ({error.msg} at line "
            f"{error.lineno} column {error.colno}); its job is listed as incomplete: rerun it, "
            "or resume it from its checkpoint.pt",
            file=sys.stderr,
        )
        return None
    except (OSError, UnicodeDecodeError) as error:
        cause = reason(error) if isinstance(error, OSError) else "not UTF-8 text"
        raise ReportError(f"cannot read {path} ({cause}); {fix}") from error
    if not isinstance(summary, dict):
        kind = {list: "list", str: "string"}.get(type(summary), type(summary).__name__)
        raise ReportError(f"{path} holds a JSON {kind}, not a summary object; {fix}")
    for key in ROUND_KEYS:
        at = summary.get(key)
        if at is not None and (not isinstance(at, int) or isinstance(at, bool)):
            raise ReportError(f"{path}: {key} is {at!r}, not a round number; {fix}")
    diverged_at = summary.get(DIVERGED_KEY)
    non_finite = [f"{key}={value}" for key, value in summary.items() if not is_finite_json(value)]
    if non_finite and diverged_at is None:
        # A diverged run may hold NaN: it is left out of every statistic anyway.
        raise ReportError(
            f"{path} holds non-finite {', '.join(non_finite)} without {DIVERGED_KEY} (a run "
            f"that diverged before fedlight stopped such runs); {fix}"
        )
    return summary


def is_finite_json(value: Any) -> bool:
    """False for NaN/Inf anywhere in a JSON value (Python's json reads them)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def portable(override: str, cwd: str | None) -> str:
    """`key=/abs/path` (or a path alone) relative to the directory the command ran in (`cwd`,
    Hydra's hydra.runtime.cwd), which is what its user typed there (`data.root=../datasets`):
    a report names no machine's absolute paths."""
    key, sep, value = override.partition("=") if "=" in override else ("", "", override)
    if not cwd or not value.startswith("/") or not Path(cwd).is_absolute():
        return override
    return f"{key}{sep}{os.path.relpath(value, cwd)}"


def recorded_cwd(record: dict[str, Any] | None) -> str | None:
    """hydra.runtime.cwd of a Hydra record (multirun.yaml, .hydra/hydra.yaml)."""
    cwd = ((record or {}).get("hydra") or {}).get("runtime", {}).get("cwd")
    return cwd if isinstance(cwd, str) else None


def load_job(sweep_dir: Path, job_dir: Path) -> JobResult:
    fix = f"restore Hydra's record of the job's config {REMOVE_JOB}"
    cwd = recorded_cwd(load_mapping(job_dir / ".hydra" / "hydra.yaml", fix))
    recorded = read_overrides(job_dir / ".hydra" / "overrides.yaml")
    raw_overrides = [portable(o, cwd) for o in recorded]
    config = load_mapping(job_dir / ".hydra" / "config.yaml", fix) or {}
    return JobResult(
        name=job_dir.relative_to(sweep_dir).as_posix(),
        directory=job_dir,
        overrides=dict(normalize_override(o) for o in raw_overrides),
        raw_overrides=raw_overrides,
        summary=read_summary(job_dir / "summary.json"),
        rows=read_metrics(job_dir / "metrics.csv"),
        layout=Layout.from_config(config.get("report")),
        target_accuracy=(config.get("eval") or {}).get("target_accuracy"),
    )


def load_jobs(sweep_dir: Path) -> list[JobResult]:
    if not sweep_dir.exists():
        raise ReportError(f"{sweep_dir} does not exist; {PASS_INSTEAD}")
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir} is not a directory; {PASS_INSTEAD}")
    found = [d for d in job_dirs(sweep_dir) if (d / ".hydra" / "overrides.yaml").is_file()]
    if not found:
        raise ReportError(f"{sweep_dir} has no jobs (no */.hydra/overrides.yaml); {PASS_INSTEAD}")
    jobs = [load_job(sweep_dir, d) for d in found]
    return sorted(jobs, key=lambda job: job_order(job.name))
