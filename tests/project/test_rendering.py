"""The pages render as written: a generated value (`<!-- v … -->`) stays inside its paragraph on
the documentation site (MkDocs, Python-Markdown) and on GitHub (cmark-gfm, GitHub's own
CommonMark), and every results page is listed in tutorials/index.md and the site's nav."""

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import cmarkgfm
import pytest
import yaml
from cmarkgfm.cmark import Options

from scripts.results import ResultsError, check_placement, read_pages
from tests.conftest import REPO

# Elements whose text a value may sit in; a value anywhere else (directly in the page's article,
# a list or a quote) is one that Markdown took out of its paragraph as an HTML block.
INLINE_PARENTS = {
    *("p", "li", "td", "th", "dd", "dt", "summary", "caption"),
    *("h1", "h2", "h3", "h4", "h5", "h6"),
    *("a", "em", "strong", "code", "span", "sup", "sub", "b", "i"),
}
VOID = {"br", "img", "hr", "input", "meta", "link", "col", "area", "base", "wbr", "source"}


class ValueParents(HTMLParser):
    """Collects each generated value's innermost open element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.outside: list[str] = []  # "line N: <parent>: the value's expression"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.open:
            while self.open.pop() != tag:
                pass

    def handle_comment(self, data: str) -> None:
        if data.startswith(" v ") and (not self.open or self.open[-1] not in INLINE_PARENTS):
            parent = self.open[-1] if self.open else "(top)"
            self.outside.append(f"line {self.getpos()[0]}: <{parent}>: {data.strip()[:70]}")


def values_outside_paragraphs(html: str) -> list[str]:
    parser = ValueParents()
    parser.feed(html)
    return parser.outside


def documents() -> list[str]:
    return sorted({d for page in read_pages(REPO) for d in page.documents})


def test_the_check_sees_a_split_paragraph() -> None:
    """A value at a line's start is the split the tests below look for, in both renderers."""
    text = "FedAvg ends at\n<!-- v {R#x} pct1 -->60.9<!-- /v -->% after\n100 rounds.\n"
    github = cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)
    assert values_outside_paragraphs(github)
    with pytest.raises(ResultsError, match=r"doc\.md:2: a value starts the line"):
        check_placement("doc.md", text)
    joined = text.replace("at\n<!--", "at <!--")
    github = cmarkgfm.github_flavored_markdown_to_html(joined, options=Options.CMARK_OPT_UNSAFE)
    assert not values_outside_paragraphs(github)
    assert github.count("<p>") == 1


@pytest.mark.parametrize("document", documents())
def test_no_paragraph_is_split_by_a_value_on_github(document: str) -> None:
    """cmark-gfm is the C library GitHub renders Markdown with (its sanitizer then drops the
    comments, but the paragraphs are cmark-gfm's)."""
    text = (REPO / document).read_text(encoding="utf-8")
    html = cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)
    assert not values_outside_paragraphs(html), document


def test_no_paragraph_is_split_by_a_value_on_the_site(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)]
    build = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    split = [
        f"{page.relative_to(tmp_path)}: {where}"
        for page in sorted(tmp_path.rglob("*.html"))
        for where in values_outside_paragraphs(page.read_text(encoding="utf-8"))
    ]
    assert not split, "values outside their paragraph:\n" + "\n".join(split)


def nav_pages(entry: object) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, dict):
        return [p for value in entry.values() for p in nav_pages(value)]
    if isinstance(entry, list):
        return [p for item in entry for p in nav_pages(item)]
    return []


def main_page(table: Path) -> Path:
    """A results table's page: its README.md, else its report.md."""
    return table / "README.md" if (table / "README.md").is_file() else table / "report.md"


def test_every_results_page_is_listed_in_the_tutorials_index_and_the_nav() -> None:
    nav = set(nav_pages(yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]))
    results = REPO / "docs" / "results"
    pages = sorted(p.relative_to(REPO / "docs").as_posix() for p in results.rglob("*.md"))
    assert sorted(set(pages) - nav) == [], "results pages missing from mkdocs.yml's nav"
    index = (REPO / "docs" / "tutorials" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(\.\./results/([^)#]+)", index))
    tables = [results / page.directory.name for page in read_pages(REPO)]
    missing = [
        main_page(t).relative_to(results).as_posix()
        for t in tables
        if main_page(t).is_file() and main_page(t).relative_to(results).as_posix() not in linked
    ]
    assert not missing, f"tutorials/index.md links no page of these results: {missing}"
    # a table without a page of its own (its records fill other documents: `memory`) is read
    # where its documents are, and those are in the nav
    elsewhere = [
        document.removeprefix("docs/")
        for page in read_pages(REPO)
        if not main_page(REPO / page.directory).is_file()
        for document in page.documents
    ]
    assert sorted(set(elsewhere) - nav) == [], "documents of results missing from the nav"
