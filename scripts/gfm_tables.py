"""Markdown tables read the way GitHub reads them, for the docs' test and the docs site.

GitHub (GFM) splits a table row at every `|` that no backslash escapes, inside backtick code spans
too, and silently drops the cells beyond the header's count: a pipe in a cell must be written `\\|`.
Python-Markdown, which builds the site, does not split inside code spans and keeps that backslash
there, so `on_page_markdown` (a mkdocs hook, see mkdocs.yml) removes it: both then show `a|b`.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
DELIMITER_CELL = re.compile(r"^\s*:?-+:?\s*$")
# Lines that start another block and so end a table's body (besides an empty line).
BLOCK_START = re.compile(r"^\s*(#{1,6}\s|>|`{3,}|~{3,})")
FIX = (
    "escape each | inside a cell as \\| (GitHub splits a row at every unescaped pipe, inside "
    "`code` too), or give the row as many cells as the header"
)


@dataclass(frozen=True)
class Row:
    """One line of a table: its 1-based line number and its cells as GitHub splits them."""

    line: int
    cells: list[str]


@dataclass(frozen=True)
class Table:
    header: Row
    delimiter: Row
    body: list[Row]


def split_row(line: str) -> list[str]:
    """The cells of a table row as GFM splits it: at every pipe not escaped by a backslash (a
    backslash escapes the character after it, a backslash too), with the outer pipes optional.

    Args:
        line: the row as written.

    Returns:
        The cells' text, escapes kept as written.
    """
    text = line.strip()
    cells: list[str] = []
    start = 0
    position = 0
    trailing_pipe = False
    while position < len(text):
        char = text[position]
        if char == "\\":
            position += 2
            trailing_pipe = False
            continue
        if char == "|":
            cells.append(text[start:position])
            start = position + 1
            trailing_pipe = True
        else:
            trailing_pipe = False
        position += 1
    if not trailing_pipe:
        cells.append(text[start:])
    if text.startswith("|"):
        cells = cells[1:]
    return cells


def is_delimiter(line: str) -> bool:
    """Whether `line` is a table's delimiter row (`| --- | :-: |`); without a pipe it is not."""
    return "|" in line and all(DELIMITER_CELL.match(cell) for cell in split_row(line))


def fenced_lines(lines: list[str]) -> set[int]:
    """The 0-based indices of lines inside (or opening or closing) fenced code blocks, where a
    pipe is text."""
    inside: set[int] = set()
    opening = ""
    for index, line in enumerate(lines):
        fence = FENCE.match(line)
        if opening:
            inside.add(index)
            mark = fence.group(1) if fence else ""
            if mark[:1] == opening[0] and len(mark) >= len(opening) and line.strip() == mark:
                opening = ""
        elif fence:
            opening = fence.group(1)
            inside.add(index)
    return inside


def tables(text: str) -> Iterator[Table]:
    """The tables of a Markdown text outside fenced code: a row with a pipe, then a delimiter row,
    then body rows up to an empty line or another block.

    Args:
        text: the Markdown source.

    Returns:
        Each table, its rows with 1-based line numbers.
    """
    lines = text.split("\n")
    fenced = fenced_lines(lines)
    index = 0
    while index + 1 < len(lines):
        line, following = lines[index], lines[index + 1]
        if index in fenced or "|" not in line or not is_delimiter(following):
            index += 1
            continue
        body = []
        end = index + 2
        while end < len(lines) and lines[end].strip() and not BLOCK_START.match(lines[end]):
            body.append(Row(end + 1, split_row(lines[end])))
            end += 1
        yield Table(Row(index + 1, split_row(line)), Row(index + 2, split_row(following)), body)
        index = end


def problems(text: str, name: str) -> list[str]:
    """Every row whose cell count differs from its header's, as `name:line: what and the fix`.

    Args:
        text: the Markdown source.
        name: how the file is named in the messages.

    Returns:
        One line per broken row (a header whose delimiter row differs: GitHub shows no table).
    """
    found = []
    for table in tables(text):
        expected = len(table.header.cells)
        for row in [table.delimiter, *table.body]:
            if len(row.cells) != expected:
                found.append(
                    f"{name}:{row.line}: {len(row.cells)} cells where the header (line "
                    f"{table.header.line}) has {expected}; {FIX}"
                )
    return found


def unescape_code_pipes(line: str) -> str:
    """`line` with `\\|` turned into `|` inside its backtick code spans, where GitHub reads the
    escape but Python-Markdown would print the backslash."""
    pieces = []
    position = 0
    while position < len(line):
        if line[position] == "\\":
            pieces.append(line[position : position + 2])
            position += 2
            continue
        if line[position] != "`":
            pieces.append(line[position])
            position += 1
            continue
        ticks = re.match(r"`+", line[position:]).group(0)
        closing = re.compile(rf"(?<!`){ticks}(?!`)").search(line, position + len(ticks))
        if closing is None:
            pieces.append(ticks)
            position += len(ticks)
            continue
        code = line[position + len(ticks) : closing.start()]
        pieces.append(ticks + code.replace("\\|", "|") + ticks)
        position = closing.end()
    return "".join(pieces)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs hook: each table row's code spans with their pipes unescaped, so that the site shows
    what GitHub shows.

    Args:
        markdown: the page's Markdown source.

    Returns:
        The source with those rows rewritten; every other line as it was.
    """
    lines = markdown.split("\n")
    for table in tables(markdown):
        for row in [table.header, *table.body]:
            lines[row.line - 1] = unescape_code_pipes(lines[row.line - 1])
    return "\n".join(lines)
