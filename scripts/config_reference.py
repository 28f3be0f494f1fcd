"""Write the configuration reference, docs/reference/config/, from fedlight/conf.

The YAML files' `#` comments are the documentation: a key's comment is the one on its line plus
the indented comment lines below it, an option's is the comment block above its first key. Every
key of an option and every run setting must have one (its meaning): a key without it is refused,
naming its file. One page per config group (every option: its `_target_`, every key with its
default, type and meaning), one for the run settings of conf/config.yaml (typed by
fedlight.core.settings's dataclasses) and one for the experiment presets. An option's summary, the
first sentence of its header comment, is its row in the short table of its group that this writes
into docs/configuration.md, between the markers `<!-- config-group <group> -->` and
`<!-- /config-group -->`. The pages and those tables are committed;
tests/project/test_config_reference.py fails while they differ from what this writes. Run from the
repository root after changing conf/:

    python -m scripts.config_reference
"""

import argparse
import re
import textwrap
import typing
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from fedlight.cli.schema import CONFIG_GROUPS, SETTING_KEYS, stage_kinds_registered
from fedlight.core.settings import RunSettings

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "fedlight" / "conf"
OUT = ROOT / "docs" / "reference" / "config"
COMMAND = "python -m scripts.config_reference"
CONFIGURATION = ROOT / "docs" / "configuration.md"
# A generated short table in docs/configuration.md: the group's name, then what was generated.
GROUP_BLOCK = re.compile(
    r"<!-- config-group (?P<group>[\w/]+)(?P<note>[^>]*)-->\n.*?<!-- /config-group -->", re.DOTALL
)
GROUP_BLOCK_NOTE = f": generated from fedlight/conf by `{COMMAND}`, do not edit "
# A sentence ends at a full stop followed by a capital letter, a quote or a backtick.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"`(])")
GENERATED = (
    f"<!-- Generated from fedlight/conf by scripts/config_reference.py: do not edit; run "
    f"`{COMMAND}` -->"
)
EXPERIMENT = "experiment"
# Folders of conf/ that hold options but are no group of fedlight.cli.schema.CONFIG_GROUPS.
HYDRA_GROUPS = {
    "hydra/launcher": (
        "where a sweep's jobs run: without a choice Hydra's basic launcher runs them one after "
        "another, `joblib` (Hydra's plugin) in parallel on one machine; fedlight's options below"
    ),
    "hydra/sweeper": (
        "what a `-m` command runs: without a choice Hydra's basic sweeper runs every combination "
        "of the listed values; `optuna` searches them in a study (docs/tuning.md)"
    ),
    "hydra/sweeper/sampler": (
        "the Optuna sampler of `hydra/sweeper=optuna` (Optuna's samplers under "
        "hydra-optuna-sweeper's names); its settings as `hydra.sweeper.sampler.<setting>`"
    ),
    "hydra/sweeper/pruner": (
        "the Optuna pruner of `hydra/sweeper=optuna`: stops a trial whose rounds so far trail "
        "the others' (`none` by default); its settings as `hydra.sweeper.pruner.<setting>`"
    ),
}
# The top-level keys of conf/config.yaml that are neither run settings nor config groups.
NOT_SETTINGS = ("defaults", "hydra")
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[\w.@/+$-]+):(?: +(?P<rest>.*))?$")
LIST_ITEM = re.compile(r"^ *- ")
PACKAGE = re.compile(r"^# *@package +(?P<package>\S+)")
INTERPOLATION = re.compile(r"\$\{(?P<path>[\w.]+)\}")
VALUE_TYPES = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}
NO_TYPE = "—"


@dataclass(frozen=True)
class Entry:
    """A key's value as written on its line ("" for a node) and its comment."""

    raw: str
    comment: str


@dataclass(frozen=True)
class YamlFile:
    """One YAML file of conf/: its values, its keys' comments and its header."""

    data: dict[str, Any]
    entries: dict[tuple[str, ...], Entry]
    header: list[str]  # the comment lines above the first key, `# @package` left out
    package: str | None  # what its `# @package` line names, if it has one
    path: Path | None = None  # the file it was read from


def split_comment(rest: str) -> tuple[str, str]:
    """A key line's value and comment: the comment starts at a `#` that begins the rest or follows
    a space, outside quotes."""
    quote = ""
    for position, char in enumerate(rest):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or rest[position - 1] == " "):
            return rest[:position].strip(), rest[position + 1 :].strip()
    return rest.strip(), ""


def read_yaml(path: Path) -> YamlFile:
    """Read `path`'s values with PyYAML and its comments line by line.

    Args:
        path: a YAML file of conf/.

    Returns:
        Its values, each key's raw value and comment (keyed by its path in the file), and the
        header comment above its first key.
    """
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    entries: dict[tuple[str, ...], Entry] = {}
    header: list[str] = []
    package = None
    stack: list[tuple[int, str]] = []
    last: tuple[str, ...] | None = None  # the key that an indented comment line continues
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            last = None
        elif stripped.startswith("#"):
            comment = stripped[1:].strip()
            if last is not None and line.startswith(" "):
                entry = entries[last]
                entries[last] = Entry(entry.raw, f"{entry.comment} {comment}".strip())
            elif not stack and (match := PACKAGE.match(stripped)):
                package = match.group("package")
            elif not stack:
                header.append(stripped[1:].removeprefix(" "))
        elif LIST_ITEM.match(line):
            last = None
        elif match := KEY_LINE.match(line):
            indent = len(match.group("indent"))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, match.group("key")))
            last = tuple(key for _, key in stack)
            entries[last] = Entry(*split_comment(match.group("rest") or ""))
        else:
            last = None
    return YamlFile(data, entries, header, package, path)


def leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every value of a YAML node that is no non-empty mapping, with its key path."""
    if isinstance(node, dict) and (node or not path):
        return [item for key, value in node.items() for item in leaves(value, (*path, str(key)))]
    return [(path, node)]


def type_name(annotation: Any) -> str:
    """A dataclass field's annotation as a reader writes it (`int | None`, `list[str]`)."""
    if annotation is Any:
        return "any"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def setting_annotation(path: tuple[str, ...]) -> Any:
    """The annotation of the run setting at `path` (`("fl", "rounds")`), None where it is none."""
    node: Any = RunSettings
    for key in path:
        if not is_dataclass(node):
            return None
        hints = typing.get_type_hints(node)
        if key not in hints:
            return None
        node = hints[key]
    return node


def value_type(path: tuple[str, ...], value: Any) -> str:
    """A key's type: the run setting's where it is one, the setting an interpolation names, else
    what its YAML value is (NO_TYPE for null and Hydra's `???`)."""
    annotation = setting_annotation(path)
    if annotation is None and isinstance(value, str):
        if match := INTERPOLATION.fullmatch(value):
            annotation = setting_annotation(tuple(match.group("path").split(".")))
    if annotation is not None:
        return type_name(annotation)
    if value is None or value == "???":
        return NO_TYPE
    return VALUE_TYPES.get(type(value), type(value).__name__)


def escape(text: str, in_table: bool = True) -> str:
    """Markdown text that renders as written, on GitHub and on the site: `<` is no tag, `*` no
    emphasis, and in a table a pipe no cell border (escaped inside `code` too, as GFM wants)."""
    pieces = re.split(r"(`[^`]*`)", text)
    for index, piece in enumerate(pieces):
        if index % 2 == 0:
            piece = piece.replace("<", "&lt;").replace("*", "\\*")
        pieces[index] = piece.replace("|", "\\|") if in_table else piece
    return "".join(pieces)


def code(text: str) -> str:
    """`text` as a code span in a table cell."""
    return f"`{text}`".replace("|", "\\|")


def default_text(entry: Entry | None, value: Any) -> str:
    """A key's default as its YAML file writes it (`1.0e-6`, `[SIGTERM, SIGUSR1]`)."""
    if entry is not None and entry.raw:
        return entry.raw
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...")


def paragraphs(lines: list[str]) -> list[str]:
    """Header comment lines as Markdown: lines indented further (commands) as a code block, the
    rest joined into paragraphs."""
    blocks: list[tuple[bool, list[str]]] = []
    for line in lines:
        is_code = line.startswith("  ")
        if not line.strip():
            blocks.append((False, []))
        elif blocks and blocks[-1][0] == is_code:
            blocks[-1][1].append(line)
        else:
            blocks.append((is_code, [line]))
    markdown = []
    for is_code, block in blocks:
        if is_code:
            markdown += ["```bash", *textwrap.dedent("\n".join(block)).split("\n"), "```", ""]
        elif block:
            markdown += [escape(" ".join(line.strip() for line in block), in_table=False), ""]
    return markdown


def defaults_of(yaml_file: YamlFile, group: str) -> tuple[list[str], list[str]]:
    """What an option's defaults list selects (`model=cifar_cnn`) and which options of its own
    group it includes."""
    selects, includes = [], []
    for item in yaml_file.data.get("defaults", []):
        if isinstance(item, str):
            if item != "_self_":
                includes.append(item.split("@")[0])
            continue
        for key, option in item.items():
            target = key.removeprefix("override ").strip().lstrip("/").split("@")[0]
            if target == group:
                includes.append(str(option))
                continue
            chosen = f"[{','.join(option)}]" if isinstance(option, list) else option
            selects.append(f"{target}={chosen}")
    return selects, includes


def listing(label: str, items: list[str]) -> list[str]:
    """A sentence listing `items` as code, nothing when there are none."""
    return [f"{label} {', '.join(code(item) for item in items)}.", ""] if items else []


def display_path(path: Path | None) -> str:
    """A YAML file as a message names it: relative to the repository where it lies in it."""
    if path is None:
        return "a YAML file"
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def undocumented(yaml_file: YamlFile, keys: list[tuple[str, ...]], prefix: tuple[str, ...]) -> str:
    """The refusal of a file's `keys` without a comment: which file, which keys, what to do."""
    named = ", ".join(
        f"{'.'.join(key)}" + (f" ({'.'.join((*prefix, *key))})" if prefix else "") for key in keys
    )
    example = f"`{keys[0][-1]}: <value>  # what it is: its unit, range, source`"
    verb, whose = ("has", "its") if len(keys) == 1 else ("have", "each one's")
    return (
        f"{display_path(yaml_file.path)}: {named} {verb} no meaning for the configuration "
        f"reference; add an inline comment on {whose} line ({example}), then run `{COMMAND}`"
    )


def key_table(yaml_file: YamlFile, prefix: tuple[str, ...], skip: tuple[str, ...]) -> list[str]:
    """The table of a file's keys: full path, default, type, meaning; Hydra's `_x_` keys and the
    top-level keys in `skip` left out. A key without a comment (no meaning) is refused."""
    rows: list[str] = []
    missing: list[tuple[str, ...]] = []
    for path, value in leaves(yaml_file.data):
        if path[0] in skip or re.fullmatch(r"_\w+_", path[-1]):
            continue
        entry = yaml_file.entries.get(path)
        if entry is None or not entry.comment:
            missing.append(path)
            continue
        full = (*prefix, *path)
        meaning = escape(entry.comment)
        cells = [code(".".join(full)), code(default_text(entry, value))]
        rows.append(f"| {cells[0]} | {cells[1]} | {escape(value_type(full, value))} | {meaning} |")
    if missing:
        raise SystemExit(undocumented(yaml_file, missing, prefix))
    if not rows:
        return ["No keys of its own.", ""]
    return ["| key | default | type | meaning |", "| --- | --- | --- | --- |", *rows, ""]


def package_of(yaml_file: YamlFile, group: str) -> tuple[str, ...]:
    """Where a group option's keys go: its `# @package`, else the group's own node."""
    package = yaml_file.package or group.replace("/", ".")
    return () if package == "_global_" else tuple(package.split("."))


def chosen_defaults(config: YamlFile) -> dict[str, str]:
    """Each group's default option from conf/config.yaml's defaults list (`[]`: none)."""
    chosen = {}
    for item in config.data["defaults"]:
        if isinstance(item, dict):
            for group, option in item.items():
                chosen[group] = f"[{','.join(option)}]" if isinstance(option, list) else option
    return chosen


def group_page(group: str, description: str, default: str | None) -> str:
    """The page of one config group: each option with its target and keys."""
    options = sorted((CONF / group).glob("*.yaml"))
    intro = escape(description[0].upper() + description[1:], in_table=False)
    lines = [GENERATED, "", f"# {group}", "", f"{intro}.", ""]
    if default is None:
        lines += [f"Choose an option with `{group}=<option>`.", ""]
    elif default.startswith("["):
        lines += [
            f"Choose a list of options with `{group}=[<option>,<option>]`, applied in list order; "
            f"the default is `{default}`.",
            "",
        ]
    else:
        lines += [f"Choose an option with `{group}=<option>`; the default is `{default}`.", ""]
    for path in options:
        yaml_file = read_yaml(path)
        targets = [value for key, value in leaves(yaml_file.data) if key[-1] == "_target_"]
        selects, includes = defaults_of(yaml_file, group)
        lines += [f"## {path.stem}", "", *paragraphs(yaml_file.header)]
        lines += listing("Target:", targets)
        lines += listing("Includes", includes)
        lines += listing("Also selects", selects)
        lines += key_table(yaml_file, package_of(yaml_file, group), skip=("defaults",))
    return "\n".join(lines)


def settings_page(config: YamlFile) -> str:
    """The run settings: conf/config.yaml's plain keys, typed by
    fedlight.core.settings.RunSettings."""
    lines = [
        GENERATED,
        "",
        "# Run settings",
        "",
        "The plain values of a run, in `fedlight/conf/config.yaml`; "
        "`fedlight.core.settings.RunSettings` types and checks them. Set one with `<key>=<value>` "
        "(`fl.rounds=100`).",
        "",
    ]
    settings = [*SETTING_KEYS, "data"]
    scalars = [
        key for key in config.data if key in settings and not isinstance(config.data[key], dict)
    ]
    lines += ["## Top level", ""]
    lines += key_table(_only(config, scalars), (), skip=())
    for key in config.data:
        if key in settings and isinstance(config.data[key], dict):
            comment = config.entries[(key,)].comment
            intro = [escape(comment[:1].upper() + comment[1:], in_table=False), ""]
            lines += [f"## {key}", "", *(intro if comment else [])]
            lines += key_table(_only(config, [key]), (), skip=())
    return "\n".join(lines)


def _only(config: YamlFile, keys: list[str]) -> YamlFile:
    """`config` with only the top-level `keys`."""
    data = {key: config.data[key] for key in keys}
    return YamlFile(data, config.entries, [], None, config.path)


def summary(yaml_file: YamlFile, with_sets: bool) -> list[str]:
    """What a preset selects, sets (where `with_sets`) and sweeps, as sentences listing code."""
    selects, _ = defaults_of(yaml_file, EXPERIMENT)
    sets = [
        f"{'.'.join(path)}={default_text(yaml_file.entries.get(path), value)}"
        for path, value in leaves(yaml_file.data)
        if path[0] not in ("defaults", "hydra", "report")
    ]
    params = yaml_file.data.get("hydra", {}).get("sweeper", {}).get("params", {})
    sweeps = [f"{key}={value}" for key, value in params.items()]
    return [
        *listing("Selects", selects)[:1],
        *(listing("Sets", sets)[:1] if with_sets else []),
        *listing("Sweeps", sweeps)[:1],
    ]


def preset_section(path: Path, heading: str, command: str) -> list[str]:
    """A preset under its own heading (`## niid_bench`, `### tune/fedavg`): how to run it, its
    header comment, what it selects and sweeps."""
    yaml_file = read_yaml(path)
    title = str(path.relative_to(CONF / EXPERIMENT).with_suffix(""))
    lines = [f"{heading} {title}", "", f"`{command}`", "", *paragraphs(yaml_file.header)]
    for sentence in summary(yaml_file, with_sets=False):
        lines += [sentence, ""]
    return lines


def experiment_page() -> str:
    """The presets of conf/experiment/, each with its header comment and what it selects and
    sweeps; a preset's cells (the group experiment/<preset>) in a table, other groups' presets
    each under a heading of its own."""
    folder = CONF / EXPERIMENT
    lines = [
        GENERATED,
        "",
        "# Experiment presets",
        "",
        "A preset sets up a whole experiment: `python -m fedlight -m +experiment=<preset>` runs "
        "its sweep, `fedlight report <sweep dir>` tables it. The cells of a preset are the "
        "options of the group `experiment/<preset>` it sweeps over.",
        "",
    ]
    presets = sorted(folder.glob("*.yaml"))
    for path in presets:
        lines += preset_section(path, "##", f"python -m fedlight -m +experiment={path.stem}")
        if (folder / path.stem).is_dir():
            lines += [f"Its cells: [experiment/{path.stem}](#experiment{path.stem}).", ""]
    for sub in sorted(path for path in folder.iterdir() if path.is_dir()):
        options = sorted(sub.glob("*.yaml"))
        group = f"+experiment/{sub.name}"
        if sub.name not in {path.stem for path in presets}:
            lines += [f"## experiment/{sub.name}", "", f"Chosen with `{group}=<option>`.", ""]
            for path in options:
                lines += preset_section(path, "###", f"{group}={path.stem}")
            continue
        lines += [f"## experiment/{sub.name}", "", f"The cells of [{sub.name}](#{sub.name}),"]
        lines += [f"chosen with `{group}=<cell>`.", "", "| cell | what it does |", "| --- | --- |"]
        more = []  # what a cell's header says after its first sentence, under the table
        for path in options:
            yaml_file = read_yaml(path)
            first, *rest = SENTENCE_END.split(
                " ".join(line.strip() for line in yaml_file.header), 1
            )
            said = " ".join([escape(first), *summary(yaml_file, with_sets=True)]).strip()
            lines.append(f"| `{path.stem}` | {said or 'Nothing beyond the preset.'} |")
            more += [f"- `{path.stem}`: {escape(rest[0], in_table=False)}"] if rest else []
        lines += ["", *([*more, ""] if more else [])]
    return "\n".join(lines)


def groups() -> dict[str, str]:
    """Every folder of conf/ with options, and what it chooses; a folder fedlight.cli.schema does
    not register (or a registered group without a folder) is refused."""
    found = {
        str(path.parent.relative_to(CONF))
        for path in CONF.rglob("*.yaml")
        if path.parent != CONF and path.relative_to(CONF).parts[0] != EXPERIMENT
    }
    stage_kinds_registered()
    known = {**CONFIG_GROUPS, **HYDRA_GROUPS}
    if unknown := found - set(known):
        raise SystemExit(
            f"fedlight/conf/{sorted(unknown)[0]}/ is no config group: register it in "
            "fedlight.cli.schema.CONFIG_GROUPS (or HYDRA_GROUPS of scripts/config_reference.py)"
        )
    if missing := set(known) - found:
        raise SystemExit(f"config group {sorted(missing)[0]} has no folder fedlight/conf/<group>/")
    return known


def page_name(group: str) -> str:
    """The page file of a group (`hydra/launcher` → hydra-launcher.md)."""
    return f"{group.replace('/', '-')}.md"


def index_page(known: dict[str, str], chosen: dict[str, str]) -> str:
    """The reference's front page: every group with its default and options, then the others."""
    lines = [
        GENERATED,
        "",
        "# Configuration reference",
        "",
        "Everything a run can be told, generated from the YAML files of `fedlight/conf` and their "
        "comments. A config group chooses a component (`algo=scaffold`), its keys tune it "
        "(`algo.variant=paper`); the run settings are plain values (`fl.rounds=100`); a preset "
        "sets up a whole experiment (`+experiment=niid_bench`).",
        "",
        "| group | default | options | chooses |",
        "| --- | --- | --- | --- |",
    ]
    for group, description in known.items():
        options = ", ".join(
            f"[`{path.stem}`]({page_name(group)}#{path.stem})"
            for path in sorted((CONF / group).glob("*.yaml"))
        )
        default = code(chosen[group]) if group in chosen else NO_TYPE
        link = f"[`{group}`]({page_name(group)})"
        lines.append(f"| {link} | {default} | {options} | {escape(description)} |")
    lines += [
        "",
        "- [Run settings](settings.md): `seed`, `device`, `fl`, `local`, `optim`, `eval`, "
        "`data`, `checkpoint`, `console`, `preemption` and the rest of `conf/config.yaml`.",
        "- [Experiment presets](experiment.md): `+experiment=<preset>` and their cells.",
        "",
    ]
    return "\n".join(lines)


def pages() -> dict[str, str]:
    """Every page of the reference, by file name."""
    config = read_yaml(CONF / "config.yaml")
    known = groups()
    if unknown := [k for k in config.data if k not in (*SETTING_KEYS, *known, *NOT_SETTINGS)]:
        raise SystemExit(
            f"conf/config.yaml's key {unknown[0]} is no run setting of fedlight.cli.schema "
            "(SETTING_KEYS) nor a config group"
        )
    chosen = chosen_defaults(config)
    written = {"index.md": index_page(known, chosen), "settings.md": settings_page(config)}
    for group, description in known.items():
        written[page_name(group)] = group_page(group, description, chosen.get(group))
    written["experiment.md"] = experiment_page()
    return {name: text.rstrip("\n") + "\n" for name, text in written.items()}


def option_summary(yaml_file: YamlFile) -> str:
    """An option's one line: the first sentence of its header comment's first paragraph. An
    option without a header comment is refused, naming its file."""
    first: list[str] = []
    for line in yaml_file.header:
        if not line.strip() or line.startswith("  "):
            break
        first.append(line.strip())
    if not first:
        raise SystemExit(
            f"{display_path(yaml_file.path)} has no header comment: start it with one sentence "
            f"saying what the option is (its row in docs/configuration.md), then run `{COMMAND}`"
        )
    return SENTENCE_END.split(" ".join(first), maxsplit=1)[0]


def group_table(group: str, description: str, default: str | None) -> list[str]:
    """A group's short table for docs/configuration.md: what it chooses, then each option (the
    default marked) with its one line, each linking to its section of the reference."""
    page = f"reference/config/{page_name(group)}"
    paths = sorted((CONF / group).glob("*.yaml"))
    usage = f"`{group}=<option>`"
    if (default or "").startswith("["):
        usage = f"`{group}=[<option>,...]`"
    intro = escape(description[0].upper() + description[1:], in_table=False)
    lines = [f"{intro}. Choose with {usage}; every key of each option: [{group}]({page}).", ""]
    lines += ["| option | in one line |", "| --- | --- |"]
    for path in paths:
        marked = " (default)" if path.stem == default else ""
        summary = escape(option_summary(read_yaml(path)))
        lines.append(f"| [`{path.stem}`]({page}#{path.stem}){marked} | {summary} |")
    return lines


def configuration_page(text: str) -> str:
    """docs/configuration.md with each `<!-- config-group <group> -->` block filled with that
    group's short table; a group without a block (or a block of no group) is refused."""
    config = read_yaml(CONF / "config.yaml")
    known = groups()
    chosen = chosen_defaults(config)
    found = [match.group("group") for match in GROUP_BLOCK.finditer(text)]
    if unknown := [group for group in found if group not in known]:
        raise SystemExit(f"{display_path(CONFIGURATION)}: config-group {unknown[0]} is no group")
    if missing := [group for group in known if group not in found]:
        raise SystemExit(
            f"{display_path(CONFIGURATION)} has no short table of config group {missing[0]}: add "
            f"`<!-- config-group {missing[0]} -->` and `<!-- /config-group -->` lines where it "
            f"goes, then run `{COMMAND}`"
        )

    def filled(match: re.Match[str]) -> str:
        group = match.group("group")
        table = group_table(group, known[group], chosen.get(group))
        return "\n".join(
            [
                f"<!-- config-group {group}{GROUP_BLOCK_NOTE}-->",
                "",
                *table,
                "",
                "<!-- /config-group -->",
            ]
        )

    return GROUP_BLOCK.sub(filled, text)


def write(out: Path, configuration: Path | None = CONFIGURATION) -> None:
    """Write every page into `out`, removing pages of groups that no longer exist, and the short
    tables into `configuration` (None: not)."""
    out.mkdir(parents=True, exist_ok=True)
    written = pages()
    for stale in out.glob("*.md"):
        if stale.name not in written:
            stale.unlink()
    for name, text in written.items():
        (out / name).write_text(text, encoding="utf-8")
    if configuration is not None:
        text = configuration.read_text(encoding="utf-8")
        configuration.write_text(configuration_page(text), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the pages")
    write(parser.parse_args().out)


if __name__ == "__main__":
    main()
