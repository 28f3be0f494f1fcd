"""The documentation names no machine's paths: the README, the site's pages and the results
(report.md, report.csv) use paths relative to the repository (`data.root=../shared/data`), as a
user's clone has them."""

import re

from tests.conftest import REPO

MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|tmp|home|root|Users|scratch)/")


def test_no_page_names_a_machine_path() -> None:
    pages = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "docs").rglob("*.csv")]
    found = [
        f"{page.relative_to(REPO)}:{number}: {line.strip()[:80]}"
        for page in pages
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert not found, "machine paths (write them relative to the repository):\n" + "\n".join(found)
