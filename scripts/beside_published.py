"""Print fedlight's cells beside a published table, cell by cell, with a verdict per cell.

The published numbers come from a YAML file: `metric` (the summary.json number they are, e.g.
`best_accuracy` for a best-over-rounds table), `within` (points of accuracy that still count as
reproduced), `keys` (the override keys whose values name a cell, in order) and `cells`, each
`<value>/<value>: "88.09 ± 0.29"` (mean, optionally ± std, in percent). A cell of the sweeps is
reproduced when its mean is within `within` points of the published mean, exceeded above that,
missed below; a cell without a published number gets no verdict. Cells are the report's (mean ±
std over the healthy seeds, diverged and collapsed seeds marked); `final_accuracy` is shown
beside the compared metric. Run from the repository root:

    python -m scripts.beside_published docs/results/references/flower_niid_bench.yaml \\
        docs/results/niid_bench/runs/seed0 docs/results/niid_bench/runs/seeds12
"""

import argparse
from dataclasses import dataclass
from pathlib import Path

import yaml

from fedlight.reports.cells import cell, group_jobs, mean_and_std, metric_values
from fedlight.reports.load import load_jobs
from fedlight.reports.model import MISSING, Group
from fedlight.reports.write import markdown_table

FINAL = "final_accuracy"


@dataclass(frozen=True)
class Published:
    metric: str
    within: float
    keys: tuple[str, ...]
    cells: dict[str, str]

    @classmethod
    def read(cls, path: Path, section: str | None = None) -> "Published":
        """The file's comparison, or its `section`'s (a file holding other figures too)."""
        content = yaml.safe_load(path.read_text())
        if section is not None:
            content = content[section]
        return cls(
            metric=content["metric"],
            within=float(content["within"]),
            keys=tuple(content["keys"]),
            cells={str(k): str(v) for k, v in content["cells"].items()},
        )

    def key(self, group: Group) -> str:
        return "/".join(str(group.setting(k)) for k in self.keys)


def published_mean(text: str) -> float:
    """The mean of `88.09 ± 0.29` (or of a bare `88.09`)."""
    return float(text.split("±")[0])


def verdict(difference: float, within: float) -> str:
    if abs(difference) <= within:
        return "reproduced"
    return "exceeded" if difference > 0 else "missed"


def distinct_overrides(groups: list[Group], keys: tuple[str, ...]) -> set[str]:
    """The overrides outside the published keys whose values differ between the cells (e.g.
    `data.normalize`): a row names them, so two cells with the same key stay told apart."""
    names = {name for group in groups for name in group.overrides if name not in keys}
    values = {name: {group.overrides.get(name) for group in groups} for name in names}
    return {name for name in names if len(values[name]) > 1}


def row_name(group: Group, published: Published, distinct: set[str]) -> str:
    extra = [f"{k}={v}" for k, v in sorted(group.overrides.items()) if k in distinct]
    return " ".join([published.key(group), *extra])


def comparison(group: Group, published: Published, distinct: set[str]) -> list[str]:
    """The cell's row: its key, fedlight's numbers, the published one, the difference, a verdict."""
    reference = published.cells.get(published.key(group))
    mean, _ = mean_and_std(metric_values(group, published.metric))
    shown = dict.fromkeys([published.metric, FINAL])  # the final accuracy once when compared
    ours = [*(cell(group, metric) for metric in shown), reference or MISSING]
    name = row_name(group, published, distinct)
    if reference is None or mean is None:
        return [name, *ours, MISSING, MISSING]
    difference = 100 * mean - published_mean(reference)
    return [
        name,
        *ours,
        f"{difference:+.1f}",
        verdict(difference, published.within),
    ]


def beside_table(published_path: Path, sweeps: list[Path], section: str | None = None) -> list[str]:
    """The markdown table of fedlight's cells beside the published ones, one row per cell."""
    published = Published.read(published_path, section)
    groups = group_jobs([job for sweep in sweeps for job in load_jobs(sweep)])
    header = [
        "/".join(published.keys),
        *(f"fedlight: {metric}" for metric in dict.fromkeys([published.metric, FINAL])),
        f"published: {published.metric}",
        "Δ points",
        f"verdict (±{published.within:g} points)",
    ]
    # a file path is no name for a cell: `partition=from_file` already says whose split it is
    distinct = distinct_overrides(groups, published.keys) - {"partition.path"}
    body = [comparison(g, published, distinct) for g in groups]
    return markdown_table(header, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("published", type=Path, help="the YAML file of published numbers")
    parser.add_argument("sweeps", type=Path, nargs="+", help="sweep directories")
    args = parser.parse_args()
    print("\n".join(beside_table(args.published, args.sweeps)))


if __name__ == "__main__":
    main()
