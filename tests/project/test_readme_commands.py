"""The README's commands work as written: every `python -m fedlight` (or `fedlight`) line of its
shell blocks is checked the way fedlight checks a command line before any work (each job of the
sweep composed by Hydra and built, what `--list-jobs` does), its `<date>/<time>` placeholders
filled; a subcommand (`fedlight report`, `resume`, `tuned`) is one the entry point knows. The
site's pages get the same check (slow: 64 commands, about two minutes)."""

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO, compose_config
from tests.helpers.commands import validate_command_line

SUBCOMMANDS = ("report", "resume", "tuned")
PROSE = re.compile(r"<[^>]* [^>]*>")  # a placeholder in words: `<the sweep's overrides>`


def readme_commands(path: Path) -> list[list[str]]:
    """The arguments after `python -m fedlight` (or `fedlight`) of each command in `path`'s
    bash blocks, comments and line continuations resolved."""
    blocks = re.findall(r"^```bash\n(.*?)^```", path.read_text(), flags=re.M | re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            if not line.startswith(("python -m fedlight ", "fedlight ")) or PROSE.search(line):
                continue  # a console transcript's line, a shell statement, words to fill in
            words = shlex.split(line, comments=True)
            if words[:3] == ["python", "-m", "fedlight"]:
                commands.append(words[3:])
            elif words[:1] == ["fedlight"]:
                commands.append(words[1:])
    return commands


def check_commands(commands: list[list[str]], tmp_path: Path) -> None:
    """Each command passes fedlight's own check before any work (a resume's directory aside)."""
    for arguments in commands:
        filled = [a.replace("<date>/<time>", str(tmp_path / "run")) for a in arguments]
        if filled and filled[0] in SUBCOMMANDS:
            continue
        if any(a.startswith("resume=") for a in filled):  # a killed run's directory: none here
            assert compose_config([a for a in filled if not a.startswith("resume=")])
            continue
        assert validate_command_line(filled), arguments


def test_every_readme_command_is_a_command_fedlight_accepts(tmp_path: Path) -> None:
    commands = readme_commands(REPO / "README.md")
    assert len(commands) >= 5
    check_commands(commands, tmp_path)


# What a page's command needs that a test machine lacks: a GPU, a package of the reader's own, a
# stage kind registered in fedlight (docs/howto/add-stage.md, tested in test_examples.py), a
# placeholder to fill, files the page says how to write (LEAF's, a dataset saved to disk:
# docs/natural-datasets.md, tested in tests/data/test_huggingface.py); and Hydra's flags that run
# no job.
NEEDS_ELSEWHERE = (
    "device=cuda",
    "mypkg.",
    "update_norm=",
    "<",
    "--version",
    "data.root=leaf/",
    "data.path=data/",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    sorted(
        str(page.relative_to(REPO))
        for page in (REPO / "docs").rglob("*.md")
        if "results" not in page.parts and readme_commands(page)
    ),
)
def test_every_command_of_the_sites_pages_is_accepted(page: str, tmp_path: Path) -> None:
    commands = [
        arguments
        for arguments in readme_commands(REPO / page)
        if not any(
            need in argument.replace("<date>/<time>", "")
            for argument in arguments
            for need in NEEDS_ELSEWHERE
        )
    ]
    check_commands(commands, tmp_path)
