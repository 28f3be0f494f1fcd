"""Blocks of the peers page (docs/results/peers/): fedlight beside Flower and pfl-research on the
same workloads, from the records `python -m benchmarks.peers run` writes (`kind: peers`: per
workload and framework the steady-state seconds a round, samples per second, the ratio fedlight /
peer, the CPU seconds a round, the cores it kept busy and the ratio of CPU, the time outside the
rounds, peak PSS and RSS of the process tree, its threads and processes,
and each repeat's final accuracy; `kind: peer_settings`: what every framework was given;
`kind: peer_line`: a sentence per workload, fedlight's ratios to each peer, for the README;
`kind: peer_seeds`: the frameworks' final accuracies beside fedlight's over other seeds;
`kind: peer_intervals`: fedlight's speed and CPU ratios to each peer per repeat, their 95%
intervals and what they decide).

    speed:
      kind: peers
      records: [W1-2NN.json, W1-CNN.json]   # relative to the page's folder
"""

import math
from pathlib import Path
from typing import Any

from benchmarks.peers.records import (
    FRAMEWORKS,
    frameworks_in,
    paired,
    pss_ratio,
    read,
    summarize,
)
from fedlight.reports.markdown import markdown_table
from fedlight.reports.stats import Interval, t_interval

HEADER = [
    "workload",
    "framework",
    "version",
    "s / round",
    "samples / s",
    "fedlight / peer, speed",
    "CPU s / round",
    "cores busy",
    "fedlight / peer, CPU",
    "s outside rounds",
    "peak PSS (MB)",
    "fedlight / peer, PSS",
    "peak RSS (MB)",
    "threads",
    "processes",
    "final accuracy (each repeat)",
]


def records_of(directory: Path, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The block's records, in the order it names them."""
    return [read(directory / name) for name in spec.get("records") or ()]


def peers_lines(directory: Path, spec: dict[str, Any]) -> list[str]:
    """Every workload × framework with its figures and the ratios fedlight / peer (speed and CPU:
    the geometric means of the paired repeats, as the intervals block; memory: of the peaks)."""
    body = []
    for record in records_of(directory, spec):
        summaries = [summarize(record, f) for f in frameworks_in(record)]
        ours = summaries[0]
        for summary in summaries:
            other = summary is not ours
            found = ratio_intervals(record, ours.framework, summary.framework) if other else {}
            speed, cpu = (f"{found[r][1].mean:.2f}×" if other else "" for r in RATIOS)
            body.append(
                [
                    record["workload"],
                    summary.framework,
                    summary.version,
                    f"{summary.seconds_per_round:.2f}",
                    f"{summary.samples_per_second:,.0f}",
                    speed,
                    f"{summary.cpu_seconds_per_round:.2f}",
                    f"{summary.cpu_seconds_per_round / summary.seconds_per_round:.2f}",
                    cpu,
                    f"{summary.outside_seconds:.1f}",
                    f"{summary.peak_pss_mb:,.0f}",
                    f"{pss_ratio(ours, summary):.2f}×" if other else "",
                    f"{summary.peak_rss_mb:,.0f}",
                    str(summary.peak_threads),
                    str(summary.processes),
                    each_run(summary.accuracies),
                ]
            )
    return markdown_table(HEADER, body, text_columns=3)


def settings_lines(directory: Path, spec: dict[str, Any]) -> list[str]:
    """Each workload's settings (what every framework is handed), one column per workload."""
    records = records_of(directory, spec)
    names = list(records[0]["settings"]) if records else []
    body = [[name, *(str(r["settings"][name]) for r in records)] for name in names]
    body += [
        ["torch threads (every framework)", *(str(r["threads"]) for r in records)],
        ["device (every framework)", *(r.get("device", "cpu") for r in records)],  # W1: cpu
        ["repeats", *(str(len(r["runs"]) // len(frameworks_in(r))) for r in records)],
        ["torch, Python", *(f"{r['torch']}, {r['python']}" for r in records)],
    ]
    return markdown_table(["setting", *(r["workload"] for r in records)], body)


PEER_NAMES = {"flower": "Flower", "pfl": "pfl-research"}


def accuracy_words(summaries: list[Any]) -> str:
    """What the repeats' final accuracies say: one value in every run, or their range."""
    accuracies = [a for s in summaries for a in s.accuracies]
    if len(set(accuracies)) == 1:
        return f"the same final accuracy in every run ({accuracies[0]:.2%})"
    return f"final accuracies from {min(accuracies):.2%} to {max(accuracies):.2%}"


def line_lines(directory: Path, spec: dict[str, Any]) -> list[str]:
    """One list item per record for a summary (the README): fedlight's speed and CPU ratios to
    each peer on the workload (geometric means over the repeats paired by cycle, with their 95%
    intervals, as the page's intervals block), and whether the accuracies agree."""
    lines = []
    for record in records_of(directory, spec):
        ours, *peers = [f for f in frameworks_in(record) if FRAMEWORKS[f].in_line]
        parts = []
        for peer in peers:
            speed, cpu = (
                ratio_words(found) for _, found in ratio_intervals(record, ours, peer).values()
            )
            name = PEER_NAMES.get(peer, peer)
            parts.append(f"{speed} {name}'s samples per second ({cpu} in CPU time)")
        summaries = [summarize(record, f) for f in (ours, *peers)]
        lines.append(
            f"- {record['workload']}: fedlight trained at {' and '.join(parts)}, "
            f"with {accuracy_words(summaries)}."
        )
    return lines


def each_run(accuracies: list[float]) -> str:
    """Each repeat's final accuracy; once, with the count, where every repeat ended the same."""
    if len(accuracies) > 1 and len(set(accuracies)) == 1:
        return f"{accuracies[0]:.2%} (each of {len(accuracies)} runs)"
    return ", ".join(f"{a:.2%}" for a in accuracies)


def spread(accuracies: list[float]) -> str:
    """Highest less lowest accuracy, in points."""
    return f"{100 * (max(accuracies) - min(accuracies)):.2f}"


def seeds_lines(directory: Path, spec: dict[str, Any]) -> list[str]:
    """Per record with a seeds record beside it (<workload>-seeds.json, `python -m
    benchmarks.peers seeds`): every framework's final accuracies at the record's seed beside
    fedlight's at other seeds (its own draws for each), and the spread of each: how far apart the
    frameworks end against how far apart seeds put one framework."""
    body = []
    for name in spec.get("records") or ():
        seeds_path = directory / name.replace(".json", "-seeds.json")
        if not seeds_path.exists():
            continue
        record, seeded = read(directory / name), read(seeds_path)
        at_seed = [summarize(record, f) for f in frameworks_in(record)]
        ours = [(0, at_seed[0].accuracies[0])] + [
            (r["seed"], r["accuracy"]) for r in seeded["runs"]
        ]
        body.append(
            [
                record["workload"],
                ", ".join(f"{s.framework} {each_run(s.accuracies)}" for s in at_seed),
                ", ".join(f"seed {seed}: {a:.2%}" for seed, a in ours),
                spread([a for s in at_seed for a in s.accuracies]),
                spread([a for _, a in ours]),
            ]
        )
    header = [
        "workload",
        "seed 0, every framework (each run)",
        "fedlight, each seed",
        "frameworks' spread (points)",
        "seeds' spread (points)",
    ]
    return markdown_table(header, body, text_columns=3)


def ratio_interval(ratios_per_repeat: list[float]) -> Interval:
    """The geometric mean of the paired ratios and its 95% t interval (on their logs)."""
    return t_interval([math.log(r) for r in ratios_per_repeat]).mapped(math.exp)


# the ratios fedlight / other the page gives, by the record's per-round seconds they divide
RATIOS = {"speed": "round_seconds", "CPU": "round_cpu_seconds"}


def ratio_intervals(record: dict, ours: str, other: str) -> dict[str, tuple[list[float], Interval]]:
    """Each ratio of RATIOS: its paired per-repeat values and their interval."""
    found = {}
    for ratio, key in RATIOS.items():
        each = paired(record, ours, other, key)
        found[ratio] = (each, ratio_interval(each))
    return found


# what an interval of a fedlight / other ratio (above 1: fedlight ahead) decides
AHEAD, BEHIND, NO_DIFFERENCE, ONE_REPEAT = "fedlight ahead", "behind", "no difference shown", "one"


def ratio_verdict(found: Interval) -> str:
    """AHEAD above 1, BEHIND below, NO_DIFFERENCE where the interval holds 1, ONE_REPEAT without
    an interval."""
    if found.low is None or found.high is None:
        return ONE_REPEAT
    if found.low > 1:
        return AHEAD
    return BEHIND if found.high < 1 else NO_DIFFERENCE


def verdict_words(verdict: str, other: str) -> str:
    """A verdict as the table says it, naming the framework fedlight is compared with."""
    return {BEHIND: f"{other} ahead", ONE_REPEAT: "one repeat: no interval"}.get(verdict, verdict)


def ratio_words(found: Interval) -> str:
    """A ratio's geometric mean over the repeats with its 95% interval, where it has one."""
    band = "" if found.low is None else f" [{found.low:.2f}, {found.high:.2f}]"
    return f"{found.mean:.2f}×{band}"


def intervals_lines(directory: Path, spec: dict[str, Any]) -> list[str]:
    """Per workload and framework fedlight is compared with, its speed and CPU ratios in each
    repeat (paired by cycle), their geometric means with 95% intervals and what those decide;
    then a count of the verdicts over the peers (fedlight-before is not one)."""
    body: list[list[str]] = []
    verdicts: dict[str, list[str]] = {ratio: [] for ratio in RATIOS}
    for record in records_of(directory, spec):
        ours, *others = frameworks_in(record)
        for other in others:
            row = [record["workload"], f"{ours} / {other}"]
            for ratio, (each, found) in ratio_intervals(record, ours, other).items():
                verdict = ratio_verdict(found)
                row += [", ".join(f"{r:.2f}" for r in each), ratio_words(found)]
                row.append(verdict_words(verdict, other))
                if FRAMEWORKS[other].engine is None:  # a peer
                    verdicts[ratio].append(verdict)
            body.append(row)
    header = ["workload", "ratio", "speed, each repeat", "speed [95% CI]", "speed: verdict"]
    header += ["CPU, each repeat", "CPU [95% CI]", "CPU: verdict"]
    return [*markdown_table(header, body, text_columns=3), "", verdict_count(verdicts)]


def verdict_count(verdicts: dict[str, list[str]]) -> str:
    """One sentence: how many comparisons with a peer each verdict got, by speed and by CPU."""
    parts = []
    for ratio, found in verdicts.items():
        counts = [
            f"{words} in {found.count(verdict)}"
            for verdict, words in (
                (AHEAD, "fedlight ahead"),
                (BEHIND, "the peer ahead"),
                (NO_DIFFERENCE, "no difference shown"),
            )
        ]
        alone = found.count(ONE_REPEAT)
        tail = f" (and {alone} with one repeat)" if alone else ""
        parts.append(f"by {ratio}, {', '.join(counts)}{tail}")
    total = len(verdicts["speed"])
    return f"Of the {total} comparisons of fedlight with a peer: {'; '.join(parts)}."


PEER_BLOCKS = {
    "peers": peers_lines,
    "peer_settings": settings_lines,
    "peer_line": line_lines,
    "peer_seeds": seeds_lines,
    "peer_intervals": intervals_lines,
}
