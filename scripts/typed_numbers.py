"""Measured numbers typed by hand in the results pages' prose: there should be none.

A results page, a tutorial page and the README's "A result" section state every measured number
(an accuracy, a time, MB, rounds reached, ε, a ratio) as a generated value
(`<!-- v EXPR -->…<!-- /v -->`, scripts/results.py) read from run records, reports, or a
reference file of what a source publishes (docs/results/references/: a quotation of a source's
figure is a value generated from there). This finds the others: in the prose outside generated
values and blocks, code and comments, a number with a measurement's unit (`%`, points, MB,
seconds to hours, `×` or times, `ε =`, rounds reached: `at round 12`, `in 40 rounds`).

Nor a verdict typed by hand: the one rule's words (reproduced, refuted, inconclusive) state a
decision of a 95% CI over seeds, so in prose each is generated (`<!-- v {verdicts.csv@...#verdict}
text -->`, a `verdict(...)` or `order(...)` value, or a block); only its emphasized form
(`*reproduced*`) may be typed, where a page defines the rule's words.

A page names its settings once, in a comment: `<!-- settings: 80%; top-k 10%; ε = 10 -->` (a
target accuracy, a compression ratio, a privacy budget the runs were given, a tolerance), each
as the prose writes it; those are not measurements and may be typed anywhere on the page.

    python -m scripts.typed_numbers            # every typed measured number, file:line: text
"""

import re
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the README's section of results (up to the next heading of its level)
README_SECTION = "## A result"

ONE = r"\d+(?:,\d{3})*(?:\.\d+)?"
NUMBER = rf"(?<![\w.,]){ONE}(?:\s*(?:–|-|to)\s*{ONE})?"
MEASURED = re.compile(
    "|".join(
        (
            # (a confidence level, `95% CI`, is the statistics' setting, not a measurement)
            rf"(?P<percent>{NUMBER}\s?%(?!\s?(?:CI|confidence|interval)\b))",
            rf"(?P<points>{NUMBER}\s(?:points?|pp)\b)",
            rf"(?P<size>{NUMBER}\s?(?:[KMG]i?B|kB)\b(?!/s))",  # (`4 bytes` an entry: a format)
            rf"(?P<time>{NUMBER}\s(?:ms|s|seconds?|min|minutes?|h|hours?)\b(?!/))",
            rf"(?P<ratio>{NUMBER}×|{NUMBER}\stimes\b)",  # `100 × 600` is a product, not a ratio
            rf"(?P<epsilon>ε\s?[=≈<>≤≥]\s?{NUMBER})",
            rf"(?:\b(?i:at|in|by|after|from|within|until)\s)(?P<round>rounds?\s{NUMBER})",
            rf"(?:\b(?i:in|within|after|by)\s)(?P<rounds>{NUMBER}\srounds\b)",
        )
    )
)
# the one rule's words, typed outside a generated value; `*reproduced*` defines the word
VERDICT = re.compile(r"(?<![\w*])(?:not\s+)?(?:reproduced|refuted|inconclusive)(?![\w*])", re.I)
SETTINGS = re.compile(r"<!-- settings: (?P<names>.*?) -->", re.S)
# what is not prose: generated values and blocks, comments, fenced and inline code, link targets
NOT_PROSE = (
    re.compile(r"<!-- v .*?<!-- /v -->", re.S),
    re.compile(r"<!-- block .*?<!-- /block -->", re.S),
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.S | re.M),
    re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S),
    re.compile(r"\]\([^)]*\)"),
    re.compile(r"<https?://[^>]*>"),
)


def key(text: str) -> str:
    """A measured number as compared with a page's settings: without spaces."""
    return re.sub(r"\s+", "", text)


def blanked(text: str) -> str:
    """`text` with everything that is not prose replaced by spaces (lines kept in place)."""
    for pattern in NOT_PROSE:
        text = pattern.sub(lambda match: blank(match[0]), text)
    return text


def typed_numbers(text: str) -> Iterator[tuple[int, str]]:
    """Each measured number typed in `text`'s prose that is not one of its settings: its line
    (1-based) and the number as written."""
    settings = {
        key(name)
        for match in SETTINGS.finditer(text)
        for name in match["names"].split(";")
        if name.strip()
    }
    for number, line in enumerate(blanked(text).splitlines(), 1):
        for match in MEASURED.finditer(line):
            found = next(g for g in match.groups() if g is not None)
            if key(found) not in settings:
                yield number, found.strip()


def typed_verdicts(text: str) -> Iterator[tuple[int, str]]:
    """Each verdict word typed in `text`'s prose: its line (1-based) and the words."""
    for number, line in enumerate(blanked(text).splitlines(), 1):
        for match in VERDICT.finditer(line):
            yield number, f"verdict {match[0]!r}"


def blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def readme_section(text: str) -> str:
    """The README with everything outside its results section blanked (lines kept in place)."""
    start = text.index(README_SECTION)
    end = text.find("\n## ", start + len(README_SECTION))
    end = len(text) if end < 0 else end
    return blank(text[:start]) + text[start:end] + blank(text[end:])


def pages(repo: Path = REPO) -> list[Path]:
    """The pages checked: every tutorial, every results page written by hand (README.md; a
    report.md is written by `fedlight report`), and the README."""
    docs = repo / "docs"
    return [
        *sorted((docs / "tutorials").glob("*.md")),
        *sorted((docs / "results").rglob("README.md")),
        repo / "README.md",
    ]


def findings(repo: Path = REPO) -> list[str]:
    found = []
    for page in pages(repo):
        text = page.read_text(encoding="utf-8")
        if page == repo / "README.md":
            text = readme_section(text)
        name = page.relative_to(repo).as_posix()
        found += [f"{name}:{line}: {number}" for line, number in typed_numbers(text)]
        found += [f"{name}:{line}: {words}" for line, words in typed_verdicts(text)]
    return found


def main() -> int:
    found = findings()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
