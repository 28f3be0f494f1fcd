"""The README's commands work as written: every `python -m fedlight` (or `fedlight`) line of its
shell blocks is checked the way fedlight checks a command line before any work (each job of the
sweep composed by Hydra and built, what `--list-jobs` does), its `<date>/<time>` placeholders
filled; a subcommand (`fedlight report`, `resume`, `tuned`) is one the entry point knows."""

import re
import shlex
from pathlib import Path

from fedlight.cli import validate_command_line

from .conftest import REPO, compose_config

SUBCOMMANDS = ("report", "resume", "tuned")


def readme_commands(path: Path) -> list[list[str]]:
    """The arguments after `python -m fedlight` (or `fedlight`) of each command in `path`'s
    bash blocks, comments and line continuations resolved."""
    blocks = re.findall(r"^```bash\n(.*?)^```", path.read_text(), flags=re.M | re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:3] == ["python", "-m", "fedlight"]:
                commands.append(words[3:])
            elif words[:1] == ["fedlight"]:
                commands.append(words[1:])
    return commands


def test_every_readme_command_is_a_command_fedlight_accepts(tmp_path: Path) -> None:
    commands = readme_commands(REPO / "README.md")
    assert len(commands) >= 5
    for arguments in commands:
        filled = [a.replace("<date>/<time>", str(tmp_path / "run")) for a in arguments]
        if filled and filled[0] in SUBCOMMANDS:
            continue
        if any(a.startswith("resume=") for a in filled):  # a killed run's directory: none here
            assert compose_config([a for a in filled if not a.startswith("resume=")])
            continue
        assert validate_command_line(filled), arguments
