"""The one curve writer: panels of per-round lines (a mean, optionally a ± std band), saved as
curves.png. A run's own curves (`fedlight.runs.outputs`) and a sweep's report
(`fedlight.reports.write`) both
draw through it. matplotlib is imported when a figure is drawn, at the end of a run, so that a
run's start does not pay for it."""

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fedlight.store.files import replaced

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Line:
    label: str | None
    rounds: list[int] | list[float]  # the x values: rounds, or virtual seconds
    values: list[float]
    band: tuple[list[float], list[float]] | None = None  # (low, high), drawn shaded
    color: str | None = None  # None: the panel's next colour (one colour for several seeds' lines)


@dataclass
class Panel:
    ylabel: str
    lines: list[Line] = field(default_factory=list)
    title: str | None = None
    legend_title: str | None = None
    xlabel: str = "round"  # "round" draws integer ticks
    log_y: bool = False  # a loss spanning orders of magnitude (a diverging run beside the others)
    log_x: bool = False  # rounds spanning orders of magnitude (tens to thousands)
    targets: tuple[float, ...] = ()  # horizontal lines: the accuracy a table reads rounds to
    ylim: tuple[float, float] | None = None


LEGEND_INSIDE = 6  # a panel with more labelled lines has its legend below its axes
LEGEND_ROW = 0.22  # inches per legend entry below the axes
TITLE_WIDTH = 70  # characters per line of a panel's title


def figure(width: float, height: float) -> "Figure":
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def save(fig: "Figure", path: Path, dpi: int) -> None:
    """`fig` as a PNG at `path`, written whole or not at all and never through a link."""
    with replaced(path) as file:
        fig.savefig(file, format="png", dpi=dpi, bbox_inches="tight")  # nothing cut off


def write_curves(
    path: Path, panels: list[Panel], width: float, dpi: int, stacked: bool = False
) -> None:
    """The panels side by side, or `stacked` one above the other (several metrics of the same
    lines, or several tables' rows: one legend of every panel's labels, under the last)."""
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    below = max((labelled(panel) for panel in panels if labelled(panel) > LEGEND_INSIDE), default=0)
    if stacked:  # its one legend under the panels
        below = len({line.label for panel in panels for line in panel.lines if line.label})
        fig = figure(width, 3.5 * len(panels) + LEGEND_ROW * below)
        axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    else:
        fig = figure(width, (4.5 if len(panels) == 1 else 4) + LEGEND_ROW * below)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        if len(panel.lines) > 10:  # matplotlib's default cycle repeats after 10 colours
            ax.set_prop_cycle(color=colormaps["tab20"].colors)
        for line in panel.lines:
            (drawn,) = ax.plot(
                line.rounds, line.values, marker=".", label=line.label, color=line.color
            )
            if line.band is not None:
                low, high = line.band
                ax.fill_between(
                    line.rounds, low, high, color=drawn.get_color(), alpha=0.2, linewidth=0
                )
        if panel.xlabel == "round":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        if panel.title:
            ax.set_title("\n".join(textwrap.wrap(panel.title, TITLE_WIDTH)))
        ax.grid(alpha=0.3)
        if panel.log_y:
            ax.set_yscale("log")
        if panel.log_x:
            ax.set_xscale("log")
        for target in panel.targets:
            ax.axhline(target, color="grey", linewidth=1, linestyle="--")
        if panel.ylim is not None:
            ax.set_ylim(*panel.ylim)
        if labelled(panel) and not stacked:  # many lines: a list under the axes, none hidden
            below_axes = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.12)}
            where = below_axes if labelled(panel) > LEGEND_INSIDE else {}
            ax.legend(title=panel.legend_title, fontsize="small", **where)
    if stacked and below:  # one legend for all, under the figure
        height = fig.get_figheight()
        legend_part = (LEGEND_ROW * (below + 1)) / height
        shown: dict[str, object] = {}  # every panel's labels, once each, in order
        for ax in axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                shown.setdefault(label, handle)
        fig.legend(
            list(shown.values()),
            list(shown),
            title=panels[-1].legend_title,
            fontsize="small",
            loc="lower center",
        )
        fig.tight_layout(rect=(0, legend_part, 1, 1))
    else:
        fig.tight_layout()
    save(fig, path, dpi)


def labelled(panel: Panel) -> int:
    return sum(bool(line.label) for line in panel.lines)
