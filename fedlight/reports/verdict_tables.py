"""The verdicts of a report's published numbers as tables (report.md, a results page's `beside`
block), as data (verdicts.csv), and as the lines `fedlight report` prints for the undecided
ones."""

import csv
from pathlib import Path
from typing import Any

from fedlight.reports.cells import cell, group_jobs, metric_title
from fedlight.reports.computed import is_censored
from fedlight.reports.load import load_jobs
from fedlight.reports.markdown import markdown_table
from fedlight.reports.model import MISSING, Group
from fedlight.reports.per_seed import CI_TEXT
from fedlight.reports.published import (
    CellDecision,
    ClaimDecision,
    Published,
    decide_cells,
    decide_claims,
)
from fedlight.reports.verdicts import PLANNING, Verdict


def bounds(low: float | None, high: float | None, sign: str = "") -> str:
    if low is None or high is None:
        return MISSING
    return f"[{low:{sign}.1f}, {high:{sign}.1f}]"


def gap_text(metric: str, low: float | None, high: float | None) -> str:
    """A claimed gap's interval: points with a sign, or ×[a, b] for a ratio of times."""
    if not is_censored(metric) or low is None or high is None:
        return bounds(low, high, "+")
    return f"×[{low:.2f}, {high:.2f}]"


def seeds_text(verdict: Verdict) -> str:
    """`12 (9 more)` where more seeds would decide it; why not where none can be planned."""
    if verdict.seeds_needed is not None:
        return f"{verdict.seeds_needed} ({verdict.more_seeds} more)"
    return verdict.reason or MISSING


def band_text(published: Published) -> str:
    """The band in words: published ± points, or ×/÷ a factor for a time to a target."""
    if is_censored(published.metric):
        return f"published ×/÷ {published.tolerance:g} (on log rounds)"
    return f"published ± {published.tolerance:g}"


def rule_line(published: Published, method: str) -> str:
    return (
        f"Verdicts on {published.metric} against {published.source}: reproduced when the 95% CI "
        f"({CI_TEXT[method]}) lies inside {band_text(published)}, refuted when it lies entirely "
        "outside, inconclusive otherwise, with the seeds that would decide it "
        f"({PLANNING}; docs/statistics.md)."
    )


def distinct_names(decisions: list[CellDecision]) -> dict[int, str]:
    """Each decision's row name: its published key, with the settings that tell apart cells of
    the same key (e.g. `data.normalize=False`)."""
    names = {}
    for decision in decisions:
        same = [d.group for d in decisions if d.key == decision.key]
        keys = dict.fromkeys(k for g in same for k in g.overrides)
        # a file path is no name for a cell: `partition=from_file` already says whose split it is
        differing = [
            k for k in keys if k != "partition.path" and len({g.setting(k) for g in same}) > 1
        ]
        extra = [f"{k}={decision.group.setting(k)}" for k in differing]
        names[id(decision)] = " ".join([decision.key, *extra])
    return names


def cells_table(published: Published, decisions: list[CellDecision], method: str) -> list[str]:
    """A row per decided cell: n, the cell (mean ± std), the 95% CI, the published value, the
    band, the verdict and the seeds that would decide it."""
    metric = published.metric
    header = ["/".join(published.keys) or "cell", "n", f"fedlight: {metric}", "95% CI"]
    header += ["published", "band", "verdict", "seeds to decide"]
    names = distinct_names(decisions)
    body = [
        [
            names[id(d)],
            str(d.verdict.n),
            cell(d.group, metric),
            bounds(d.verdict.low, d.verdict.high),
            f"{d.published:g}",
            bounds(*d.verdict.band),
            str(d.verdict.outcome),
            MISSING if d.verdict.outcome != "inconclusive" else seeds_text(d.verdict),
        ]
        for d in decisions
    ]
    return markdown_table(header, body, text_columns=1)


def claims_table(claims: list[ClaimDecision]) -> list[str]:
    """A row per claimed difference and pairing: the paired per-seed values, their 95% CI, the
    claimed gap's band, the verdict and the seeds that would decide it."""
    header = ["comparison", "metric", "n pairs", "95% CI", "claimed", "band", "verdict"]
    header.append("seeds to decide")
    body = [
        [
            c.paired.pairing.label,
            c.claim.metric,
            str(c.verdict.n),
            gap_text(c.claim.metric, c.verdict.low, c.verdict.high),
            (f"×{c.claim.claimed:g}" if is_censored(c.claim.metric) else f"{c.claim.claimed:+g}"),
            gap_text(c.claim.metric, *c.verdict.band),
            str(c.verdict.outcome),
            MISSING if c.verdict.outcome != "inconclusive" else seeds_text(c.verdict),
        ]
        for c in claims
    ]
    return markdown_table(header, body, text_columns=2)


def verdicts_markdown(
    published: Published, cells: list[CellDecision], claims: list[ClaimDecision], method: str
) -> list[str]:
    lines = [f"### Verdicts: {metric_title(published.metric, [d.group for d in cells])}", ""]
    lines += [rule_line(published, method), ""]
    if cells:
        lines += [*cells_table(published, cells, method), ""]
    if claims:
        lines += ["Claimed differences, on the paired per-seed differences:", ""]
        lines += [*claims_table(claims), ""]
    return lines


def verdict_row(verdict: Verdict) -> dict[str, Any]:
    low, high = verdict.band
    row = {"metric": verdict.metric, "n": verdict.n, "ci_low": verdict.low, "ci_high": verdict.high}
    row |= {"band_low": low, "band_high": high, "verdict": str(verdict.outcome)}
    row |= {"seeds_needed": verdict.seeds_needed, "more_seeds": verdict.more_seeds}
    row["reason"] = verdict.reason
    return {k: "" if v is None else v for k, v in row.items()}


def write_verdicts_csv(
    output_dir: Path, cells: list[CellDecision], claims: list[ClaimDecision]
) -> None:
    """verdicts.csv: a row per decided cell (`kind` cell, `key` its published key, its
    overrides) and per claimed difference and pairing (`kind` difference, `key` KEY=A,B, `a`
    and `b` its cells' values, the pairing's settings): the metric, n, the 95% CI, published,
    the band, the verdict, the seeds that would decide it (`seeds_needed`, `more_seeds`) and
    why none can be planned (`reason`)."""
    rows = [{"kind": "cell", "key": d.key, **d.group.overrides} for d in cells]
    for c in claims:
        comparison = c.claim.comparison
        row = {"kind": "difference", "key": comparison.text, "a": comparison.a, "b": comparison.b}
        rows.append(row | c.paired.pairing.context)
    published = [d.published for d in cells] + [c.claim.claimed for c in claims]
    rows = [row | {"published": value} for row, value in zip(rows, published, strict=True)]
    verdicts = [d.verdict for d in cells] + [c.verdict for c in claims]
    full = [row | verdict_row(v) for row, v in zip(rows, verdicts, strict=True)]
    fields = list(dict.fromkeys(k for row in full for k in row))
    with (output_dir / "verdicts.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(full)


def undecided_lines(cells: list[CellDecision], claims: list[ClaimDecision]) -> list[str]:
    """`inconclusive: <cell> on <metric>: 12 seeds would decide it (9 more; ...)` per undecided
    verdict, or why no number of seeds can be planned."""
    named = [(d.key, d.verdict) for d in cells]
    named += [(c.paired.pairing.label, c.verdict) for c in claims]
    lines = []
    for name, verdict in named:
        if verdict.outcome != "inconclusive":
            continue
        if verdict.seeds_needed is None:
            lines.append(f"inconclusive: {name} on {verdict.metric}: {verdict.reason}")
        else:
            lines.append(
                f"inconclusive: {name} on {verdict.metric}: {verdict.seeds_needed} seeds would "
                f"decide it ({verdict.more_seeds} more; {PLANNING})"
            )
    return lines


def beside_table(published_path: Path, sweeps: list[Path], section: str | None = None) -> list[str]:
    """A results page's `beside` block by the rule: the sweeps' cells decided against the
    published file (its `section`)."""
    published = Published.read(f"{published_path}#{section}" if section else str(published_path))
    groups: list[Group] = group_jobs([job for sweep in sweeps for job in load_jobs(sweep)])
    cells = decide_cells(published, groups, "t")
    claims = decide_claims(published, groups, "t")
    lines = [rule_line(published, "t"), "", *cells_table(published, cells, "t")]
    return [*lines, "", *claims_table(claims)] if claims else lines
