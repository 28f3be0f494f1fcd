"""Results as data: the compact run records behind the results pages, and the pages made from them.

A results page (`docs/results/<table>/`) shows numbers that were computed, never typed:

- **Records** (`docs/results/<table>/runs/<sweep>/<job>/`): what each job of the table's sweeps
  left that a report needs, and nothing of the machine it ran on: Hydra's overrides and resolved
  config, a Hydra record reduced to the command (`multirun.yaml`, `.hydra/hydra.yaml`),
  `metrics.csv` and `summary.json` (its `environment`, its `resumes`). No checkpoints, models or
  plots, and every absolute path rewritten relative to the directory the command ran in.
  `export` writes them from Hydra sweep directories.
- **Pages** (`docs/results/pages.yaml`): for each table, the record sweeps `fedlight report`
  turns into `report.md`, `report.csv` and `curves.png`, and the documents whose generated
  blocks and inline values are filled from the records, the reports and the reference files of
  other projects (`docs/results/references/`). `pages` regenerates them all; `pages --check`
  regenerates into a copy and fails on any difference in a text file (the curves' PNG bytes
  depend on matplotlib's version and fonts and are not compared).

Inline values: `<!-- v EXPR -->TEXT<!-- /v -->`, where EXPR is arithmetic (+ − × / and
parentheses) over references and numbers, then a FORMAT as the last word (no `|`: a value
may sit in a table's cell). A reference is
`{FILE@KEY=VALUE,...#COLUMN}` for a CSV row (the one row whose columns KEY hold VALUE) or
`{FILE#a.b.c}` for a JSON or YAML value (a dotted path); FILE is relative to the repository. A
FORMAT is `pct1` (× 100, one decimal), `f2` (two decimals), `d` (an integer), with `+` in front
for a sign. A FILE with `*` is a glob of JSON or YAML files (`runs/*/*/summary.json`),
`@key=value` keeping the files whose dotted keys hold those values; `min(...)`, `max(...)`,
`mean(...)` or `count(...)` reads such a reference
(`max({runs/*/*/summary.json@resumes=0#wall_seconds}) / 60`). The statistics of
scripts/verdict_blocks.py are functions too: `ci_low(MEAN, STD, N)`, `ci_high`, `diff_low`,
`diff_high`, `seeds(...)`. The FORMAT `text` gives words, not a number: a reference's value as it
stands (`{verdicts.csv@kind=difference,metric=final_accuracy#verdict} text`), or the one rule's
verdict, `verdict(LOW, HIGH, BAND_LOW, BAND_HIGH) text` or `order(LOW, HIGH) text`.
`<!-- let NAME = FILE -->` in a document lets its references say `{NAME@...}` or `{NAME#...}` for
FILE. Blocks: `<!-- block NAME -->...<!-- /block -->`, NAME one of the page's `blocks` (of a page
that lists the document: the README is several pages' document). A value never starts a
line (Markdown would end the paragraph there: an HTML comment
at a line's start opens an HTML block); a word of its sentence goes before it.

    python -m scripts.results export multirun/2026-12-04/10-00-00 --to docs/results/x/runs/seed0
    python -m scripts.results pages            # or: make results
    python -m scripts.results pages --check    # what tests/project/test_results_pages.py runs
"""

import argparse
import ast
import contextlib
import csv
import io
import json
import operator
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedlight.store.sweeps import job_dirs

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path("docs/results")
REGISTRY = RESULTS / "pages.yaml"
STUDY_FILES = ("optuna.db", "optuna_journal.log", "optimization_results.yaml")
COMMAND = "python -m scripts.results pages"
# Text files a regeneration may write; anything else (curves.png) is regenerated, not compared.
TEXT_SUFFIXES = {".md", ".csv", ".json", ".yaml", ".txt"}

VALUE = re.compile(r"<!-- v (?P<expr>.+?) -->(?P<text>.*?)<!-- /v -->", re.S)
BLOCK = re.compile(
    r"(?P<open><!-- block (?P<name>[\w-]+) -->\n)(?P<body>.*?)(?P<close><!-- /block -->)", re.S
)
REFERENCE = re.compile(r"\{(?P<file>[^@#{}]+)(?:@(?P<row>[^#{}]+))?#(?P<key>[^{}]+)\}")
ALIAS = re.compile(r"<!-- let (?P<name>\w+) = (?P<file>\S+) -->")
FORMAT = re.compile(r"(?P<sign>\+?)(?:pct(?P<pct>\d)|f(?P<f>\d)|(?P<d>d))")
# A value that starts a line (after its indentation, a list item's bullet or a quote's `>`) would
# open an HTML block in CommonMark (GitHub) and Python-Markdown (the site), ending its paragraph.
LINE_START = re.compile(r"^[ \t]*(?:(?:[-*+]|\d+[.)])[ \t]+|>[ \t]*)*<!-- v ", re.M)


class ResultsError(Exception):
    """A record, a reference or a marker that cannot be read; the message names it."""


# ------------------------------------------------------------------------------- records


def relative_to(path: str, base: str) -> str:
    return os.path.relpath(path, base) if os.path.isabs(path) else path


# An absolute path inside a longer text (an override's value): quoted (to its closing quote,
# spaces and all), or after `=`, `:`, `[`, `{` or `,` up to the next of `'",]}` or a space.
# `//` (a URL's `sqlite:///...`) is no path of this machine's to rewrite.
QUOTED_PATH = re.compile(r"(?P<quote>['\"])(?P<path>/(?!/)[^'\"]*)(?P=quote)")
EMBEDDED_PATH = re.compile(r"(?<=[=:\[{,])(?P<path>/(?!/)[^'\",\]}\s]*)")


def sanitized(value: Any, cwd: str, sweep_dir: str, renames: dict[str, str] | None = None) -> Any:
    """`value` with every absolute path rewritten, also one quoted or nested in a longer text (an
    override `partition.path='/x/my split.json'`, `+model.d={p:/x}`): one of `renames` to its
    given name (a file the sweep read from elsewhere, e.g. a split the page's command writes
    first), one under the sweep directory relative to it (as `<sweep>/...` names it in the
    records), any other relative to the command's directory `cwd` (what its user typed there,
    e.g. `../datasets`)."""
    renames = renames or {}
    if isinstance(value, dict):
        return {k: sanitized(v, cwd, sweep_dir, renames) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitized(v, cwd, sweep_dir, renames) for v in value]
    if not isinstance(value, str):
        return value
    if not value.startswith("/"):
        quoted = QUOTED_PATH.sub(
            lambda m: m["quote"] + sanitized(m["path"], cwd, sweep_dir, renames) + m["quote"],
            value,
        )
        return EMBEDDED_PATH.sub(lambda m: sanitized(m["path"], cwd, sweep_dir, renames), quoted)
    if value in renames:
        return renames[value]
    if value == sweep_dir or value.startswith(sweep_dir + "/"):
        return os.path.relpath(value, os.path.dirname(sweep_dir))
    return relative_to(value, cwd)


def hydra_record(
    record: dict[str, Any], cwd: str, sweep_dir: str, renames: dict[str, str]
) -> dict[str, Any]:
    """What a report reads of Hydra's record (the command's overrides and config name, the
    config groups' choices): the machine's directories, search path and launcher left out."""
    hydra = record.get("hydra") or {}
    job = hydra.get("job") or {}
    runtime = hydra.get("runtime") or {}
    kept = {
        "mode": hydra.get("mode"),
        "overrides": sanitized(hydra.get("overrides") or {}, cwd, sweep_dir, renames),
        "job": {"name": job.get("name"), "config_name": job.get("config_name")},
        "runtime": {
            "choices": runtime.get("choices") or {},
            "config_sources": [  # a --config-dir of the command
                sanitized(source, cwd, sweep_dir, renames)
                for source in runtime.get("config_sources") or []
                if source.get("provider") == "command-line"
            ],
        },
    }
    return {"hydra": kept}


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ResultsError(f"{path}: cannot read it ({one_line(error)})") from None
    return content if isinstance(content, dict) else {}


def write_yaml(path: Path, content: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(content, sort_keys=False, allow_unicode=True), encoding="utf-8")


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


# What a job's records are made of (`export` writes each; `pages` needs each).
RECORD_FILES = (
    ".hydra/overrides.yaml",
    ".hydra/config.yaml",
    ".hydra/hydra.yaml",
    "metrics.csv",
    "summary.json",
)


def unlinked_bytes(path: Path, top: Path) -> bytes:
    """The bytes of `path`, a file under `top`, read through no link: records go to a public
    repository, and a link (the file, or a folder between `top` and it) would put whatever it
    names into them."""
    for part in [path, *path.parents]:
        if part == top:
            break
        if part.is_symlink():
            raise ResultsError(
                f"{part} is a symbolic link, and records copy no linked file (it could name "
                "anything of this machine); put the file itself there, or export another sweep"
            )
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as file:
            return file.read()
    except OSError as error:
        raise ResultsError(
            f"{path}: cannot read it ({one_line(error)}); a finished job's records need it: "
            "restore it, or move the job out of the sweep"
        ) from None


def unlinked_tree(path: Path, top: Path, kind: type) -> Any:
    """A YAML or JSON file under `top` (read through no link), which must hold a `kind`."""
    text = unlinked_bytes(path, top).decode("utf-8", errors="replace")
    try:
        content = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise ResultsError(f"{path}: cannot read it ({one_line(error)[:120]})") from None
    if not isinstance(content, kind):
        raise ResultsError(
            f"{path} holds no {kind.__name__} ({type(content).__name__}): it is not the file "
            "a run writes there; restore it, or move the job out of the sweep"
        )
    return content


def job_records(
    job_dir: Path, sweep_dir: Path, cwd: str, renames: dict[str, str]
) -> dict[str, bytes]:
    """A finished job's records (RECORD_FILES, each path relative to the job), absolute paths
    rewritten; every file read before any is written, through no link."""
    sweep = str(sweep_dir)
    hydra = unlinked_tree(job_dir / ".hydra/hydra.yaml", sweep_dir, dict)
    cwd = (hydra.get("hydra") or {}).get("runtime", {}).get("cwd") or cwd
    overrides = unlinked_tree(job_dir / ".hydra/overrides.yaml", sweep_dir, list)
    config = unlinked_tree(job_dir / ".hydra/config.yaml", sweep_dir, dict)
    summary = unlinked_tree(job_dir / "summary.json", sweep_dir, dict)
    return {
        ".hydra/overrides.yaml": yaml_bytes(sanitized(overrides, cwd, sweep, renames)),
        ".hydra/config.yaml": yaml_bytes(sanitized(config, cwd, sweep, renames)),
        ".hydra/hydra.yaml": yaml_bytes(hydra_record(hydra, cwd, sweep, renames)),
        "metrics.csv": unlinked_bytes(job_dir / "metrics.csv", sweep_dir),
        "summary.json": (
            json.dumps(sanitized(summary, cwd, sweep, renames), indent=2) + "\n"
        ).encode(),
    }


def yaml_bytes(content: Any) -> bytes:
    return yaml.safe_dump(content, sort_keys=False, allow_unicode=True).encode()


def export_source(sweep_dir: Path, dest: Path) -> Path:
    """The sweep directory to export from, resolved; refused in one line where it is none, or
    where `dest` is it or inside it (the records would replace the sweep's own files)."""
    if not sweep_dir.is_dir():
        raise ResultsError(f"{sweep_dir} is no directory; give a sweep's (multirun/<date>/<time>)")
    source, target = sweep_dir.resolve(), dest.resolve()
    if target == source or source in target.parents:
        raise ResultsError(
            f"--to {dest} is the sweep {sweep_dir} or inside it: its records would replace the "
            "sweep's own files; give a directory outside it (docs/results/<table>/runs/<name>)"
        )
    return source


def export(sweep_dir: Path, dest: Path, renames: dict[str, str] | None = None) -> list[str]:
    """The compact records of the sweep's jobs (only finished ones: a record is a result; a
    folder of single runs is read the same way) under `dest`, with the sweep's command, absolute
    paths rewritten (`renames`: some by name); returns the jobs written. Everything is read
    (through no link) and checked before anything is written."""
    renames = renames or {}
    sweep_dir = export_source(sweep_dir, dest)
    # a folder of single runs (`python -m fedlight hydra.run.dir=<folder>/<name>`) has none
    has_record = os.path.lexists(sweep_dir / "multirun.yaml")
    record = unlinked_tree(sweep_dir / "multirun.yaml", sweep_dir, dict) if has_record else {}
    cwd = ((record.get("hydra") or {}).get("runtime") or {}).get("cwd") or str(REPO)
    files: dict[str, bytes] = {}
    finished = [d for d in job_dirs(sweep_dir) if os.path.lexists(d / "summary.json")]
    if not finished:
        raise ResultsError(f"{sweep_dir} has no finished job (no */summary.json) to export")
    for job_dir in finished:
        name = job_dir.relative_to(sweep_dir).as_posix()
        records = job_records(job_dir, sweep_dir, cwd, renames)
        files |= {f"{name}/{file}": content for file, content in records.items()}
    if record:
        files["multirun.yaml"] = yaml_bytes(hydra_record(record, cwd, str(sweep_dir), renames))
    for study_file in STUDY_FILES:  # an Optuna study's trials and result
        if os.path.lexists(sweep_dir / study_file):
            files[study_file] = unlinked_bytes(sweep_dir / study_file, sweep_dir)
    for name, content in files.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).unlink(missing_ok=True)  # a link there is replaced, never written through
        (dest / name).write_bytes(content)
    return [d.relative_to(sweep_dir).as_posix() for d in finished]


def path_renames(pairs: list[str]) -> dict[str, str]:
    """`--path ABSOLUTE=NAME` arguments as a mapping; anything else refused in one line."""
    renames = {}
    for pair in pairs:
        absolute, sep, name = pair.partition("=")
        if not sep or not os.path.isabs(absolute) or not name:
            raise ResultsError(f"--path {pair}: give ABSOLUTE=NAME (/data/split.json=split.json)")
        renames[absolute] = name
    return renames


# --------------------------------------------------------------------------------- pages


@dataclass(frozen=True)
class Page:
    """One table's entry in docs/results/pages.yaml: its reports (each an output folder relative
    to the page's directory, "." for the directory itself, and the record sweeps `fedlight
    report` makes its report.md/report.csv/curves.png from), the documents whose markers it fills
    (relative to the repository) and its blocks. `archived` only describes: why a table has no
    records (its jobs' files were not kept); its report.md/report.csv stay as `fedlight report`
    wrote them, no `reports` entry remakes them, and its documents' values are read from them.
    `report_args`: per report folder, flags `fedlight report` gets besides the records (e.g.
    `--metrics`, `--curves`: what the jobs' recorded layout did not yet name)."""

    directory: Path
    reports: dict[str, tuple[str, ...]] = field(default_factory=dict)
    report_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    documents: tuple[str, ...] = ()
    blocks: dict[str, dict[str, Any]] = field(default_factory=dict)
    archived: str = ""

    @classmethod
    def read(cls, name: str, entry: dict[str, Any]) -> "Page":
        page = cls(
            directory=RESULTS / name,
            reports={out: tuple(sweeps) for out, sweeps in (entry.get("reports") or {}).items()},
            report_args={
                out: tuple(str(a) for a in flags)
                for out, flags in (entry.get("report_args") or {}).items()
            },
            documents=tuple(entry.get("documents") or ()),
            blocks=dict(entry.get("blocks") or {}),
            archived=str(entry.get("archived") or ""),
        )
        inside = [*page.documents, *(f"{page.directory}/{p}" for p in page.reports)]
        inside += [f"{page.directory}/{s}" for s in page.records]
        for path in inside:
            if os.path.isabs(path) or os.path.normpath(path).startswith(".."):
                raise ResultsError(
                    f"{REGISTRY}: {name} names {path}, outside the repository, where pages writes "
                    "and reads nothing; name a path inside it"
                )
        return page

    @property
    def records(self) -> list[str]:
        """Every record sweep of the page, once, in order."""
        return list(dict.fromkeys(s for sweeps in self.reports.values() for s in sweeps))


def read_pages(root: Path) -> list[Page]:
    registry = read_yaml(root / REGISTRY)
    return [Page.read(name, entry or {}) for name, entry in registry.items()]


def number(value: Any, where: str) -> float:
    """A reference's value as a number: a number, or the mean of a published `88.09 ± 0.29`."""
    if isinstance(value, bool) or value is None:
        raise ResultsError(f"{where} is {value!r}, not a number")
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).split("±")[0])
    except ValueError:
        raise ResultsError(f"{where} is {value!r}, not a number") from None


def csv_value(path: Path, row: str, column: str, where: str) -> Any:
    wanted = dict(pair.split("=", 1) for pair in row.split(","))
    with path.open(newline="", encoding="utf-8") as file:
        rows = [r for r in csv.DictReader(file) if all(r.get(k) == v for k, v in wanted.items())]
    if len(rows) != 1:
        raise ResultsError(f"{where}: {len(rows)} rows of {path.name} match {row}, not one")
    if column not in rows[0]:
        raise ResultsError(f"{where}: {path.name} has no column {column}")
    return rows[0][column]


def tree_value(path: Path, key: str, where: str, shown: str = "") -> Any:
    """The value at dotted `key` of a JSON or YAML file (`shown`: its name as a page gives it)."""
    value = read_tree(path, f"{where}: {shown or path.name}")
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ResultsError(f"{where}: {path.name} has no {key}")
        value = value[part]
    return value


def read_tree(path: Path, where: str) -> Any:
    """A JSON or YAML file's content; one that cannot be read is one line naming it."""
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise ResultsError(f"{where}: cannot be read ({one_line(error)[:120]})") from None


def matches(tree: Any, wanted: dict[str, str]) -> bool:
    """Whether a JSON or YAML file's dotted keys hold the wanted values (compared as text)."""
    for dotted, value in wanted.items():
        found = tree
        for part in dotted.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if str(found) != value:
            return False
    return True


def many_values(root: Path, pattern: str, match: re.Match[str], where: str) -> list[float]:
    """A reference to many JSON or YAML files (FILE a glob, e.g. every job's summary.json): the
    value at `#key` of each file whose keys hold `@key=value,...`; an aggregate reads them."""
    wanted = dict(pair.split("=", 1) for pair in (match["row"] or "").split(",") if pair)
    values = [
        number(tree_value(path, match["key"], where, pattern), where)
        for path in sorted(root.glob(pattern))
        if path.is_file() and matches(read_tree(path, f"{where}: {path.name}"), wanted)
    ]
    if not values:
        raise ResultsError(f"{where}: no file of {pattern} matches {match['row'] or 'it'}")
    return values


def reference(
    root: Path, match: re.Match[str], where: str, aliases: dict[str, str] | None = None
) -> float | list[float]:
    name = match["file"].strip()
    if "*" in (aliases or {}).get(name, name):
        return many_values(root, (aliases or {}).get(name, name), match, where)
    return number(raw_reference(root, match, where, aliases), where)


def raw_reference(
    root: Path, match: re.Match[str], where: str, aliases: dict[str, str] | None = None
) -> Any:
    """The value one reference names (a CSV cell, a JSON or YAML value) as it stands."""
    name = match["file"].strip()
    path = root / (aliases or {}).get(name, name)
    if not path.is_file():
        raise ResultsError(f"{where}: {match['file']} does not exist")
    if match["row"] is not None:
        return csv_value(path, match["row"], match["key"], where)
    return tree_value(path, match["key"], where, (aliases or {}).get(name, name))


OPERATORS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


# What reads a reference to many files (a glob): its values' least, greatest, mean, count
AGGREGATES: dict[str, Callable[[list[float]], float]] = {
    "min": min,
    "max": max,
    "mean": lambda values: sum(values) / len(values),
    "count": len,
}


def call(node: ast.Call, values: list[float | list[float]], where: str) -> float | str:
    """An aggregate of a reference to many files, or a statistic of scripts/verdict_blocks.py
    (a verdict's word only where `text` formats it)."""
    from scripts.verdict_blocks import NUMBERS, WORDS, StatisticsError, statistic

    function = node.func.id if isinstance(node.func, ast.Name) else ""
    if function not in NUMBERS and function not in WORDS:
        return aggregate(node, values, where)
    if node.keywords:
        raise ResultsError(f"{where}: {function}() takes its arguments in order, unnamed")
    arguments = [arithmetic(argument, values, where) for argument in node.args]
    try:
        return statistic(function, arguments)
    except StatisticsError as error:
        raise ResultsError(f"{where}: {function}(): {error}") from None


def aggregate(node: ast.Call, values: list[float | list[float]], where: str) -> float:
    """`min(REF)`, `max(REF)`, `mean(REF)` or `count(REF)` of a reference to many files."""
    function = node.func.id if isinstance(node.func, ast.Name) else ""
    argument = node.args[0] if len(node.args) == 1 and not node.keywords else None
    if function not in AGGREGATES or not isinstance(argument, ast.Name):
        raise ResultsError(
            f"{where}: {function or 'a call'}() is none of the aggregates (min, max, mean or "
            "count of one reference) or statistics (scripts/verdict_blocks.py)"
        )
    many = values[int(argument.id[1:])]
    if not isinstance(many, list):
        raise ResultsError(f"{where}: {function}() reads a reference to many files (a glob)")
    return float(AGGREGATES[function](many))


def arithmetic(node: ast.AST, values: list[float | list[float]], where: str) -> float:
    """+ − × / over numbers, the references (`_0`, `_1`, …) and aggregates of references to many
    files; nothing else is evaluated."""
    if isinstance(node, ast.Expression):
        return arithmetic(node.body, values, where)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.Call):
        found = call(node, values, where)
        if isinstance(found, str):
            raise ResultsError(f"{where}: a verdict is words: give it the format text")
        return found
    if isinstance(node, ast.Name) and node.id.startswith("_"):
        value = values[int(node.id[1:])]
        if isinstance(value, list):
            raise ResultsError(f"{where}: a reference to many files needs min, max, mean or count")
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -arithmetic(node.operand, values, where)
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = (arithmetic(n, values, where) for n in (node.left, node.right))
        return OPERATORS[type(node.op)](left, right)
    raise ResultsError(f"{where}: only + - * / over references and numbers are allowed")


def formatted(value: float, spec: str, where: str) -> str:
    match = FORMAT.fullmatch(spec.strip())
    if match is None:
        raise ResultsError(
            f"{where}: format {spec!r} is none of pct1, f2, d (with + for a sign), text"
        )
    sign = "+" if match["sign"] else ""
    if match["pct"] is not None:
        return f"{100 * value:{sign}.{match['pct']}f}"
    if match["f"] is not None:
        return f"{value:{sign}.{match['f']}f}"
    return f"{round(value):{sign}d}"


def evaluate(root: Path, expression: str, where: str, aliases: dict[str, str] | None = None) -> str:
    """The text of one inline value: its references read (`aliases`: a document's short names
    for files), its arithmetic done, formatted."""
    parts = expression.rsplit(None, 1)
    if len(parts) != 2 or "}" in parts[1]:
        raise ResultsError(f"{where}: {expression!r} ends in no FORMAT (pct1, f2, d, text)")
    body, spec = parts
    if spec == "text":
        return words(root, body.strip(), where, aliases)
    values: list[float | list[float]] = []

    def name(match: re.Match[str]) -> str:
        values.append(reference(root, match, where, aliases))
        return f"_{len(values) - 1}"

    try:
        tree = ast.parse(REFERENCE.sub(name, body).strip(), mode="eval")
    except SyntaxError:
        raise ResultsError(f"{where}: {body.strip()!r} is not arithmetic") from None
    return formatted(arithmetic(tree, values, where), spec, where)


def words(root: Path, body: str, where: str, aliases: dict[str, str] | None = None) -> str:
    """A value of the format `text`: one reference's value as it stands (a verdict of
    verdicts.csv), or a verdict function's word over arithmetic arguments."""
    whole = REFERENCE.fullmatch(body)
    if whole is not None:
        value = raw_reference(root, whole, where, aliases)
        if value in ("", None):
            raise ResultsError(f"{where}: {body} is empty")
        return str(value)
    values: list[float | list[float]] = []

    def name(match: re.Match[str]) -> str:
        values.append(reference(root, match, where, aliases))
        return f"_{len(values) - 1}"

    try:
        tree = ast.parse(REFERENCE.sub(name, body).strip(), mode="eval").body
    except SyntaxError:
        raise ResultsError(f"{where}: {body!r} is not a reference or a verdict") from None
    found = call(tree, values, where) if isinstance(tree, ast.Call) else None
    if not isinstance(found, str):
        raise ResultsError(f"{where}: text is one reference, or verdict(...) or order(...)")
    return found


def check_placement(document: str, text: str) -> None:
    """Fails on a value that starts a line: Markdown would end its paragraph there (an HTML
    comment at a line's start opens an HTML block), splitting the sentence on the page."""
    for match in LINE_START.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        raise ResultsError(
            f"{document}:{line}: a value starts the line, which ends its paragraph in Markdown; "
            "put a word of the sentence before it on that line"
        )
    closes = [m.start() for m in re.finditer("<!-- /v -->", text)]
    opened = {m.end() - len("<!-- /v -->") for m in VALUE.finditer(text)}
    for close in (c for c in closes if c not in opened):  # e.g. `<!--` wrapped from its ` v `
        line = text.count("\n", 0, close) + 1
        raise ResultsError(f"{document}:{line}: a value's close has no `<!-- v EXPR -->` before it")


def fill_values(root: Path, document: str, text: str) -> str:
    check_placement(document, text)
    aliases = {m["name"]: m["file"] for m in ALIAS.finditer(text)}

    def replace(match: re.Match[str]) -> str:
        line = text.count("\n", 0, match.start()) + 1
        value = evaluate(root, match["expr"], f"{document}:{line}", aliases)
        return f"<!-- v {match['expr']} -->{value}<!-- /v -->"

    return VALUE.sub(replace, text)


def fill_blocks(
    root: Path, page: Page, document: str, text: str, others: frozenset[str] = frozenset()
) -> str:
    """`text` with the page's blocks filled; `others`: the blocks of the other pages that list
    the document, left for them to fill."""

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name in others and name not in page.blocks:
            return match[0]
        if name not in page.blocks:
            raise ResultsError(f"{document}: block {name} is not one of {page.directory}'s")
        lines = block_lines(root, page, page.blocks[name], f"{document}: block {name}")
        # a blank line before the close: a table runs on into the next line that is not blank
        return match["open"] + "".join(f"{line}\n" for line in lines) + "\n" + match["close"]

    return BLOCK.sub(replace, text)


def record_dirs(root: Path, page: Page, sweeps: list[str] | None = None) -> list[Path]:
    return [
        root / page.directory / sweep for sweep in page.records if sweeps is None or sweep in sweeps
    ]


def block_lines(root: Path, page: Page, spec: dict[str, Any], where: str) -> list[str]:
    """A block's generated lines: `beside` (the records' cells and claimed differences decided
    against a reference file's by the one rule, fedlight.reports.verdict_tables), `paired` (per
    seed differences, their CI and the claims' verdicts), `more_seeds` (the seeds that would
    decide the undecided ones), `setting` (the reference's setting beside the records') or
    `claims` (a reference file's figures), `rounds`, `rates` or `findings` (rounds to a target
    per cell at the rate its grid chose, the grid, claimed ratios of rounds: rounds_blocks), `cost`
    (cost_blocks), `protocols` or `variants` (one cell's rounds another way: variant_blocks),
    `pilot` (how often a pilot of a few rounds picks the end's winner: pilot_blocks),
    `aggregator_scaling` or `aggregator_setting` (aggregation time against n: aggregator_blocks),
    `peers`, `peer_settings`, `peer_line`, `peer_seeds` or `peer_intervals` (benchmarks.peers'
    records, no reference: peer_blocks). An unknown kind's error lists the kinds from `kinds`
    below, the one registry."""
    from fedlight.reports.verdict_tables import beside_table
    from scripts.aggregator_blocks import AGGREGATOR_BLOCKS
    from scripts.cost_blocks import COST_BLOCKS
    from scripts.peer_blocks import PEER_BLOCKS
    from scripts.pilot_blocks import PILOT_BLOCKS
    from scripts.rounds_blocks import ROUNDS_BLOCKS
    from scripts.variant_blocks import VARIANT_BLOCKS
    from scripts.verdict_blocks import more_seeds_lines, paired_lines

    sweeps = record_dirs(root, page, spec.get("records"))
    folder = root / page.directory
    # each kind: whether it needs its reference file, and its lines from the reference (or None)
    kinds: dict[str, tuple[bool, Callable[[Any], list[str]]]] = {
        "beside": (True, lambda ref: beside_table(ref, sweeps, spec.get("section"))),
        "paired": (False, lambda ref: paired_lines(sweeps, spec, ref)),
        "more_seeds": (True, lambda ref: more_seeds_lines(sweeps, spec, ref)),
        "setting": (False, lambda ref: setting_table(root, page, spec)),
        "claims": (True, lambda ref: claims_lines(read_yaml(ref))),
    }
    for table in (ROUNDS_BLOCKS, COST_BLOCKS, VARIANT_BLOCKS, PILOT_BLOCKS, AGGREGATOR_BLOCKS):
        kinds |= {k: (True, lambda ref, f=f: f(folder, spec, ref)) for k, f in table.items()}
    # records of their own (benchmarks.peers), no reference
    kinds |= {k: (False, lambda ref, f=f: f(folder, spec)) for k, f in PEER_BLOCKS.items()}
    kind = spec.get("kind")
    if kind not in kinds:
        raise ResultsError(f"{where}: kind {kind!r} is none of {', '.join(kinds)}")
    needs_reference, lines = kinds[kind]
    reference = root / spec["reference"] if spec.get("reference") else None
    if needs_reference and reference is None:
        raise ResultsError(f"{where}: kind {kind} needs its reference (reference: FILE.yaml)")
    return lines(reference)


def citation(source: dict[str, Any]) -> str:
    """Where a reference's figures are published: its title (and English gloss), date, address."""
    title = str(source.get("title") or source.get("name", "source"))
    parts = [f"**{title}**"]
    if source.get("title_en"):
        parts.append(f"({source['title_en']})")
    facts = [str(source[key]) for key in ("published", "date") if source.get(key)]
    if source.get("url"):
        facts.append(f"<{source['url']}>")
    return " ".join(parts) + (f"; {'; '.join(facts)}." if facts else ".")


def claimed(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{key} {claimed(v)}" for key, v in value.items())
    return str(value)


# A reference section's keys that locate its quotation rather than state a figure
LOCATION_KEYS = {
    *("line", "column", "quote", "setting", "cells", "title_line", "section"),
    *("within", "factor"),  # a comparison's tolerance, not a figure of the source
}


def located(body: dict[str, Any]) -> str:
    """Where a reference section's figures stand: the source's section, else its line."""
    return f"§{body['section']}" if body.get("section") else f"line {body.get('line')}"


def section_figures(name: str, body: dict[str, Any]) -> list[list[str]]:
    """A reference section's rows: one per cell, then its other figures (numbers) in one."""
    where = located(body)
    rows = [[name or "—", str(c), claimed(v), where] for c, v in (body.get("cells") or {}).items()]
    figures = {
        key: value
        for key, value in body.items()
        if name
        and key not in LOCATION_KEYS
        and not key.endswith(("_column", "_quote"))
        and isinstance(value, int | float)
    }
    return rows + ([[name, "—", claimed(figures), where]] if figures else [])


def claims_lines(reference: dict[str, Any]) -> list[str]:
    """A reference file on the references page: its citation, then one row per claimed figure
    (the file's `cells` and `claims`, and each section's, with its section in the source)."""
    from fedlight.reports.write import markdown_table

    source = reference.get("source") or {}
    top = {**reference, "line": source.get("line"), "section": source.get("section")}
    rows = section_figures("", top)
    for name, body in reference.items():
        # a section holding `keys` is a comparison's copy of the file's figures (`beside`'s)
        if isinstance(body, dict) and ("cells" in body or "section" in body) and "keys" not in body:
            rows += section_figures(name, body)
    for key, value in (reference.get("claims") or {}).items():
        rows.append(["claims", str(key), claimed(value), located(top)])
    header = ["table", "cell", "what it states", "where in the source"]
    return [citation(source), "", *markdown_table(header, rows, 4)]


# What a setting table compares: the label, then the config key whose values the records give.
SETTING_ROWS = (
    ("dataset", "data"),
    ("clients (N)", "fl.num_clients"),
    ("clients per round", "fl.clients_per_round"),
    ("rounds", "fl.rounds"),
    ("local epochs (E)", "local.epochs"),
    ("batch size (B)", "local.batch_size"),
    ("model", "model"),
    ("split", "partition"),
    ("seeds", "seed"),
)


def config_values(root: Path, page: Page, key: str, sweeps: list[str] | None = None) -> list[str]:
    """The distinct values a config key took over the page's records (or those of them named in
    `sweeps`): numbers in increasing order, then the other values in the order of the records and
    their jobs (a config group's choice from summary.json, other keys from the resolved config)."""
    from fedlight.reports.model import dotted_value

    values: dict[str, None] = {}
    for sweep in record_dirs(root, page, sweeps):
        for job in job_dirs(sweep):
            summary = read_tree(job / "summary.json", f"{page.directory}: setting table")
            if "." not in key and key in summary:
                value = summary[key]
            else:
                value = dotted_value(read_yaml(job / ".hydra" / "config.yaml"), key)
            values[str(value)] = None
    return sorted(values, key=numbers_first)


def numbers_first(value: str) -> tuple[int, float]:
    """A sort key: numbers by value, before every other value (a stable sort keeps their order)."""
    try:
        number = float(value)
    except ValueError:
        return (1, 0.0)
    return (0, number) if number == number else (1, 0.0)  # NaN is not ordered: with the others


def setting_verdict(label: str, theirs: str, ours: str, verdicts: dict[str, str]) -> str:
    """A row's verdict: the block's own for the row (`verdicts`), else `same` where both say the
    same, `not stated` where the source does not say, `differs` otherwise."""
    if label in verdicts:
        return str(verdicts[label])
    if theirs == ours:
        return "same"
    return "not stated" if theirs.startswith("not stated") else "differs"


def setting_table(root: Path, page: Page, spec: dict[str, Any]) -> list[str]:
    """The source's setting beside the records', with a verdict per row (a proxy can never read
    as the source's setting): the block's `verdicts` say, per row label, what differs and why."""
    from fedlight.reports.write import markdown_table

    reference = read_yaml(root / spec["reference"])
    theirs = reference.get("setting") or {}
    verdicts = spec.get("verdicts") or {}
    rows = []
    # a block's `rows` add rows (label: config key) or give one no key (null: it varies by cell)
    for label, key in {**dict(SETTING_ROWS), **(spec.get("rows") or {})}.items():
        if key is None:
            ours = "per cell (the tables below)"
        else:
            found = config_values(root, page, key, spec.get("records"))
            ours = ", ".join(found) if page.records else "—"
        source_value = str(theirs.get(label, "not stated"))
        rows.append(
            [label, source_value, ours, setting_verdict(label, source_value, ours, verdicts)]
        )
    source = reference.get("source") or {}
    header = ["", str(source.get("name", "source")), "fedlight", "verdict"]
    return markdown_table(header, rows, text_columns=4)


def regenerate(root: Path, only: list[str] | None = None) -> list[Path]:
    """Every page under `root` (or the tables `only` names) made again from its records, each
    record checked first (`check_record`); returns the files written."""
    from fedlight.reports.model import ReportError

    written: list[Path] = []
    pages = read_pages(root)
    for page in pages:
        if only is not None and page.directory.name not in only:
            continue
        for sweep in record_dirs(root, page):
            check_sweep_records(root, sweep)
        try:
            written += make_reports(root, page)
            for document in page.documents:
                others = frozenset(
                    name for p in pages if document in p.documents for name in p.blocks
                )
                written.append(fill_document(root, page, document, others))
        except ReportError as error:  # a record a block reads (fedlight.reports)
            raise ResultsError(f"{page.directory}: {error}") from None
    return written


def make_reports(root: Path, page: Page) -> list[Path]:
    """The page's report.md and report.csv files, each `fedlight report` of its record sweeps;
    one it refuses is one line with its reason."""
    from fedlight.reports.cli import main as report_main

    written = []
    for out, sweeps in page.reports.items():
        directory = root / page.directory / out
        argv = [str(root / page.directory / sweep) for sweep in sweeps]
        flags = rooted_flags(root, page.report_args.get(out, ()))
        said = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
            code = report_main([*argv, *flags, "-o", str(directory)])
        if code != 0:
            reason = (said.getvalue().strip().splitlines() or ["no reason given"])[-1]
            reason = reason.replace(f"{root}{os.sep}", "")  # --check's copy: the repository's
            raise ResultsError(f"{page.directory / out}: the report failed: {reason}")
        written += [directory / "report.md", directory / "report.csv"]
    return written


def rooted_flags(root: Path, flags: tuple[str, ...]) -> list[str]:
    """A report's flags with `--published FILE[#SECTION]` (relative to the repository) read
    under `root` (a check's copy reads its own)."""
    shown = list(flags)
    for index, flag in enumerate(shown[:-1]):
        if flag == "--published":
            shown[index + 1] = str(root / shown[index + 1])
    return shown


def fill_document(
    root: Path, page: Page, document: str, others: frozenset[str] = frozenset()
) -> Path:
    """`document` with its blocks and inline values filled from the records (`others`: blocks
    another page that lists it fills)."""
    path = root / document
    if not path.is_file():
        raise ResultsError(f"{REGISTRY}: {document} (a document of {page.directory}) is missing")
    text = path.read_text(encoding="utf-8")
    filled = fill_values(root, document, fill_blocks(root, page, document, text, others))
    if filled != text:
        path.write_text(filled, encoding="utf-8")
    return path


def check_sweep_records(root: Path, sweep: Path) -> None:
    """Every job of a record sweep whole and consistent (`check_record`)."""
    if not sweep.is_dir():
        raise ResultsError(
            f"{sweep.relative_to(root)} does not exist; export its sweep again, or drop it from "
            f"{REGISTRY}"
        )
    for job in job_dirs(sweep):
        check_record(job, job.relative_to(root))


def check_record(job: Path, shown: Path) -> None:
    """A job's records are whole (each of RECORD_FILES, readable) and agree with each other
    (metrics.csv's last test accuracy is summary.json's `final_accuracy`): a page may read any
    of them, and a report's curves (not compared) read metrics.csv. `shown`: the job's name in
    the one line that refuses it."""
    for name in RECORD_FILES:
        if not (job / name).is_file():
            raise ResultsError(f"{shown / name} is missing: export the job's sweep again")
        if name != "metrics.csv":
            read_tree(job / name, str(shown / name))
    summary = read_tree(job / "summary.json", str(shown / "summary.json"))
    with (job / "metrics.csv").open(newline="", encoding="utf-8") as file:
        tested = [r["test_accuracy"] for r in csv.DictReader(file) if r.get("test_accuracy")]
    final = summary.get("final_accuracy") if isinstance(summary, dict) else None
    if tested and isinstance(final, float) and float(tested[-1]) != final:
        raise ResultsError(
            f"{shown}/metrics.csv's last test_accuracy {tested[-1]} is not summary.json's "
            f"final_accuracy {final}: a record was edited; export the job's sweep again"
        )


def text_files(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            yield path.relative_to(directory)


def check(repo: Path = REPO, only: list[str] | None = None) -> list[str]:
    """The text files of docs/ that a regeneration from the records would change."""
    # documents outside docs/ (the front page's results paragraph) are copied and compared too
    outside = sorted(
        {d for page in read_pages(repo) for d in page.documents if not d.startswith("docs/")}
    )
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        shutil.copytree(repo / "docs", copy / "docs")
        for name in outside:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(repo / name, copy / name)
        regenerate(copy, only)
        return [
            str(Path("docs") / name)
            for name in text_files(repo / "docs")
            if (copy / "docs" / name).read_bytes() != (repo / "docs" / name).read_bytes()
        ] + [name for name in outside if (copy / name).read_bytes() != (repo / name).read_bytes()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    exporting = commands.add_parser("export", help="compact records of a sweep's finished jobs")
    exporting.add_argument("sweep_dir", type=Path)
    exporting.add_argument("--to", type=Path, required=True, help="the records' directory")
    exporting.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="ABSOLUTE=NAME",
        help="write this absolute path as NAME (e.g. a split file the page's command makes)",
    )
    pages = commands.add_parser("pages", help="regenerate every results page from its records")
    pages.add_argument("--check", action="store_true", help="fail where a page would change")
    pages.add_argument(
        "--only", action="append", metavar="PAGE", help="only this page (its folder's name)"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "export":
            jobs = export(args.sweep_dir, args.to, path_renames(args.path))
            print(f"{len(jobs)} finished jobs' records in {args.to}")
        elif args.check:
            stale = check(only=args.only)
            if stale:
                print(f"stale (run `{COMMAND}`): {', '.join(stale)}", file=sys.stderr)
                return 1
        else:
            regenerate(REPO, args.only)
    except ResultsError as error:
        print(f"results: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
