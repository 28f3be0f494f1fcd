"""Blocks of the peers page (docs/results/peers/): fedlight beside Flower and pfl-research on the
same workloads, from the records `python -m benchmarks.peers run` writes (`kind: peers`: per
workload and framework the steady-state seconds a round, samples per second, the ratio fedlight /
peer, the CPU seconds a round, the cores it kept busy and the ratio of CPU, the time outside the
rounds, peak PSS and RSS of the process tree, its threads and processes,
and each repeat's final accuracy; `kind: peer_settings`: what every framework was given;
`kind: peer_line`: a sentence per workload, fedlight's ratios to each peer, for the README;
`kind: peer_seeds`: the frameworks' final accuracies beside fedlight's over other seeds).

    speed:
      kind: peers
      records: [W1-2NN.json, W1-CNN.json]   # relative to the page's folder
"""

from pathlib import Path
from typing import Any

from benchmarks.peers.records import FRAMEWORKS, frameworks_in, ratios, read, summarize
from fedlight.reports.markdown import markdown_table

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
    """Every workload × framework with its figures and the ratios fedlight / peer."""
    body = []
    for record in records_of(directory, spec):
        summaries = [summarize(record, f) for f in frameworks_in(record)]
        ours = summaries[0]
        for summary in summaries:
            ratio = ratios(ours, summary) if summary is not ours else None
            body.append(
                [
                    record["workload"],
                    summary.framework,
                    summary.version,
                    f"{summary.seconds_per_round:.2f}",
                    f"{summary.samples_per_second:,.0f}",
                    "" if ratio is None else f"{ratio['speed']:.2f}×",
                    f"{summary.cpu_seconds_per_round:.2f}",
                    f"{summary.cpu_seconds_per_round / summary.seconds_per_round:.2f}",
                    "" if ratio is None else f"{ratio['cpu']:.2f}×",
                    f"{summary.outside_seconds:.1f}",
                    f"{summary.peak_pss_mb:,.0f}",
                    "" if ratio is None else f"{ratio['peak_pss']:.2f}×",
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
    each peer on the workload, and whether the accuracies agree."""
    lines = []
    for record in records_of(directory, spec):
        summaries = [summarize(record, f) for f in frameworks_in(record) if FRAMEWORKS[f].in_line]
        ours, peers = summaries[0], summaries[1:]
        parts = []
        for peer in peers:
            ratio, name = ratios(ours, peer), PEER_NAMES.get(peer.framework, peer.framework)
            parts.append(
                f"{ratio['speed']:.2f}× {name}'s samples per second "
                f"({ratio['cpu']:.2f}× in CPU time)"
            )
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


PEER_BLOCKS = {
    "peers": peers_lines,
    "peer_settings": settings_lines,
    "peer_line": line_lines,
    "peer_seeds": seeds_lines,
}
