"""The Markdown tables of README.md and docs/ render whole on GitHub: every row has its header's
cell count, counted the way GFM splits rows (at every unescaped pipe, inside `code` too); and no
cell is a paragraph: what a reader sees of a cell stays within CELL_LIMIT characters, the rest
goes into a note or a list under the table."""

import re
from pathlib import Path

import pytest

from scripts.gfm_tables import on_page_markdown, problems, split_row, tables

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# The most characters a table cell may show (a few lines of a table on the site).
CELL_LIMIT = 300
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
LINK = re.compile(r"(!?)\[([^\]]*)\]\([^)]*\)")


def shown(cell: str) -> str:
    """What a reader sees of a cell's Markdown: HTML comments (the markers of generated values)
    and link targets left out."""
    return LINK.sub(r"\2", HTML_COMMENT.sub("", cell)).strip()


def long_cells(text: str, name: str) -> list[str]:
    """Every cell of `text`'s tables that shows more than CELL_LIMIT characters, as
    `name:line: cell n shows k characters: its start`."""
    found = []
    for table in tables(text):
        for row in [table.header, *table.body]:
            for number, cell in enumerate(row.cells, start=1):
                if len(seen := shown(cell)) > CELL_LIMIT:
                    found.append(
                        f"{name}:{row.line}: cell {number} shows {len(seen)} characters (at most "
                        f"{CELL_LIMIT}): {seen[:60]}…; keep the cell short and move the rest into "
                        "a note or a list under the table"
                    )
    return found


@pytest.mark.parametrize(
    ("row", "cells"),
    [
        ("| a | b |", [" a ", " b "]),
        ("a | b", ["a ", " b"]),
        (
            "| `algo.variant=paper|niid_bench` | x |",
            [" `algo.variant=paper", "niid_bench` ", " x "],
        ),
        ("| `paper\\|niid_bench` | x |", [" `paper\\|niid_bench` ", " x "]),
        ("| a \\\\| b |", [" a \\\\", " b "]),
        ("| a | |", [" a ", " "]),
        ("| ends in a backslash pipe \\|", [" ends in a backslash pipe \\|"]),
    ],
)
def test_rows_split_as_gfm_does(row: str, cells: list[str]) -> None:
    assert split_row(row) == cells


def test_a_pipe_in_code_breaks_its_row_and_fences_are_text() -> None:
    text = "\n".join(
        [
            "| key | meaning |",
            "| --- | --- |",
            "| `a|b` | broken |",
            "| `a\\|b` | whole |",
            "",
            "```",
            "| a | b |",
            "| --- | --- |",
            "| a | b | c |",
            "```",
        ]
    )
    found = problems(text, "page.md")
    assert len(found) == 1
    assert found[0].startswith("page.md:3: 3 cells where the header (line 1) has 2;")
    assert "as \\|" in found[0]


def test_the_site_shows_code_pipes_without_their_backslash() -> None:
    page = "| `a\\|b` | `c` \\| d |\n| --- | --- |\n| `x\\|y` | z |\n\n`p\\|q` outside a table"
    assert on_page_markdown(page) == (
        "| `a|b` | `c` \\| d |\n| --- | --- |\n| `x|y` | z |\n\n`p\\|q` outside a table"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_table_row_has_its_header_cell_count(page: Path) -> None:
    found = problems(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))
    assert not found, "\n".join(found)


def test_a_cell_is_measured_by_what_it_shows() -> None:
    marker = "<!-- v {R@algo=fedavg#final_accuracy_mean} pct1 -->"
    assert shown(f" {marker}70.5<!-- /v --> ± [1.3](results/x.md#a-long-anchor) ") == "70.5 ± 1.3"
    row = "| `a` | " + "x" * (CELL_LIMIT + 1) + " |"
    text = "\n".join(
        ["| key | meaning |", "| --- | --- |", "| `b` | " + "y" * CELL_LIMIT + " |", row]
    )
    found = long_cells(text, "page.md")
    assert len(found) == 1 and found[0].startswith("page.md:4: cell 2 shows 301 characters")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_table_cell_is_a_paragraph(page: Path) -> None:
    found = long_cells(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))
    assert not found, "\n".join(found)
