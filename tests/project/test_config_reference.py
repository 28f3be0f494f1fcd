"""docs/reference/config/ says what fedlight/conf holds: an option or key added to conf/ and not
documented, or a documented one removed, fails until the pages are written again."""

from pathlib import Path

import pytest

from scripts import config_reference
from scripts.config_reference import (
    COMMAND,
    CONFIGURATION,
    OUT,
    configuration_page,
    key_table,
    option_summary,
    read_yaml,
    write,
)


def test_committed_pages_are_what_the_script_writes(tmp_path: Path) -> None:
    write(tmp_path, configuration=None)
    written = {path.name: path.read_text(encoding="utf-8") for path in tmp_path.glob("*.md")}
    committed = {path.name: path.read_text(encoding="utf-8") for path in OUT.glob("*.md")}
    stale = sorted(
        name
        for name in written.keys() | committed.keys()
        if written.get(name) != committed.get(name)
    )
    assert not stale, (
        f"docs/reference/config/ differs from fedlight/conf in {', '.join(stale)}; run `{COMMAND}` "
        "from the repository root and commit the pages"
    )


def test_the_configuration_page_s_short_tables_are_what_the_script_writes() -> None:
    committed = CONFIGURATION.read_text(encoding="utf-8")
    assert configuration_page(committed) == committed, (
        f"docs/configuration.md's short tables differ from fedlight/conf; run `{COMMAND}` from the "
        "repository root and commit docs/configuration.md"
    )
    assert "| [`fedavg`](reference/config/algo.md#fedavg) (default) | FedAvg (McMahan" in committed


def test_an_option_s_one_line_is_its_header_s_first_sentence(tmp_path: Path) -> None:
    path = tmp_path / "option.yaml"
    path.write_text(
        "# @package _global_\n"
        "# Krum (Blanchard et al., NeurIPS 2017): the update closest\n"
        "# to its others. Needs n ≥ 2f + 3.\n"
        "f: 1  # attackers\n",
        encoding="utf-8",
    )
    assert option_summary(read_yaml(path)) == (
        "Krum (Blanchard et al., NeurIPS 2017): the update closest to its others."
    )
    path.write_text("# A launcher, e.g.\n#   python -m fedlight -m\nkey: 1  # a key\n", "utf-8")
    assert option_summary(read_yaml(path)) == "A launcher, e.g."
    path.write_text("_target_: mypkg.Thing\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="has no header comment: start it with one sentence"):
        option_summary(read_yaml(path))
    text = "# Configuration\n\n<!-- config-group algo -->\n<!-- /config-group -->\n"
    with pytest.raises(SystemExit, match="has no short table of config group "):
        configuration_page(text)


def test_every_option_and_key_is_on_its_page() -> None:
    pages = config_reference.pages()
    algo = pages["algo.md"]
    assert "## scaffold" in algo and "`fedlight.algorithms.scaffold.Scaffold`" in algo
    assert (
        "| `algo.variant` | `fedlight` | str | fedlight \\| paper \\| niid_bench \\| flower" in algo
    )
    assert "| `upload.topk.ratio` | `0.1` | float | share of entries sent" in pages["upload.md"]
    # A @package _global_ option's keys at their global paths, typed by the run settings.
    assert "| `eval.batch_size` | `100` | int | images per evaluation batch" in pages["data.md"]
    assert "| `algo.momentum` | `${optim.momentum}` | float |" in algo
    settings = pages["settings.md"]
    assert (
        "| `fl.threads_per_worker` | `null` | int \\| None | torch threads per worker" in settings
    )
    assert "| `preemption.signals` | `[SIGTERM, SIGUSR1, SIGUSR2]` | list[str] |" in settings
    assert "### tune/fedavg" in pages["experiment.md"]


def test_comments_continue_on_indented_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "option.yaml"
    path.write_text(
        "# @package _global_\n"
        "# What the option does,\n"
        "# in two lines.\n"
        "node:                # the node\n"
        "  key: 1             # the key, a | b,\n"
        "                     # said on two lines\n"
        "  other: 'a # b'\n"
        "\n"
        "# a comment of no key\n"
        "last: [x, y]  # a list\n",
        encoding="utf-8",
    )
    parsed = read_yaml(path)
    assert parsed.package == "_global_"
    assert parsed.header == ["What the option does,", "in two lines."]
    assert parsed.entries[("node",)].comment == "the node"
    assert parsed.entries[("node", "key")].comment == "the key, a | b, said on two lines"
    assert parsed.entries[("node", "other")] == config_reference.Entry("'a # b'", "")
    assert parsed.entries[("last",)] == config_reference.Entry("[x, y]", "a list")


def test_a_key_without_a_meaning_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "option.yaml"
    path.write_text(
        "# An option: its header is no key's meaning.\n"
        "_target_: mypkg.Thing\n"
        "documented: 1     # what it is\n"
        "node:             # a node\n"
        "  bare: 0.5\n"
        "  continued: 2    # said\n"
        "                  # on two lines\n"
        "last: [x, y]\n",
        encoding="utf-8",
    )
    with pytest.raises(SystemExit) as refusal:
        key_table(read_yaml(path), ("algo",), skip=("defaults",))
    message = str(refusal.value)
    assert message.startswith(f"{path}: node.bare (algo.node.bare), last (algo.last) have no ")
    assert "add an inline comment on each one's line (`bare: <value>  # " in message
    assert COMMAND in message
    assert "documented" not in message and "continued" not in message

    path.write_text("_target_: mypkg.Thing\nkey: 1  # what it is\n", encoding="utf-8")
    assert "| `algo.key` | `1` | int | what it is |" in key_table(read_yaml(path), ("algo",), ())


def test_a_file_of_the_repository_is_named_from_its_root() -> None:
    yaml_file = read_yaml(config_reference.CONF / "algo" / "fedavg.yaml")
    yaml_file.data["stray"] = 1  # a key PyYAML reads and no line documents
    with pytest.raises(
        SystemExit, match=r"^fedlight/conf/algo/fedavg\.yaml: stray \(algo\.stray\) "
    ):
        key_table(yaml_file, ("algo",), skip=("defaults",))
