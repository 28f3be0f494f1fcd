"""The Markdown tables of README.md and docs/ render whole on GitHub: every row has its header's
cell count, counted the way GFM splits rows (at every unescaped pipe, inside `code` too)."""

from pathlib import Path

import pytest

from scripts.gfm_tables import on_page_markdown, problems, split_row

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


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
