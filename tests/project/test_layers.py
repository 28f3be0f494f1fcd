"""The house in layers: every module of `fedlight/` and `hydra_plugins/` lies in one layer of the
table in docs/architecture.md (the one list of the layers, top first), imports no layer above its
own and takes part in no import circle. Module-level, `TYPE_CHECKING` and function-local imports
all count; a package's `__init__.py` may name the modules under it (the public lazy name map)."""

import ast
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from scripts.gfm_tables import tables

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fedlight", "hydra_plugins")
ARCHITECTURE = Path("docs") / "architecture.md"
HEADING = "## Layers"


@dataclass(frozen=True)
class Layer:
    """One row of the table (with its continuation rows): its name and the paths it holds."""

    name: str
    paths: tuple[str, ...]  # `fedlight/cli/main.py`, or a folder: `fedlight/engines/`


def layer_table(root: Path) -> list[Layer]:
    """The layers of `root`'s docs/architecture.md, top first: the table under `## Layers`; a
    row with an empty first cell continues the layer above it."""
    text = (root / ARCHITECTURE).read_text()
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    table = next(iter(tables(section)))
    layers: list[tuple[str, list[str]]] = []
    for row in table.body:
        name, paths = row.cells[0].strip().strip("`"), row.cells[1]
        listed = [p.strip().strip("`") for p in paths.split(",") if p.strip()]
        if name:
            layers.append((name, listed))
        else:
            layers[-1][1].extend(listed)
    return [Layer(name, tuple(paths)) for name, paths in layers]


def modules(root: Path) -> dict[str, Path]:
    """Every module of the packages under `root`, by dotted name (a package by its folder's)."""
    found = {}
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            parts = file.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return found


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """module -> {imported module of the packages: the line of its first import}, every import
    statement counted wherever it stands (module level, `if TYPE_CHECKING:`, a function)."""
    found = modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {m: {} for m in found}
    for module, file in found.items():
        package = module if file.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(file.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{node.module}" if node.module else anchor
                names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for name in names:
                target = resolve(name) if name.split(".")[0] in PACKAGES else None
                if target is None or target == module:
                    continue
                if not (file.name == "__init__.py" and target.startswith(module + ".")):
                    graph[module].setdefault(target, node.lineno)
    return graph


def layer_of(module: str, file: Path, root: Path, layers: list[Layer]) -> int | None:
    """The position of `module`'s layer (0: the top): its file's row, else its nearest folder's."""
    path = file.relative_to(root).as_posix()
    best: tuple[int, int] | None = None
    for position, layer in enumerate(layers):
        for listed in layer.paths:
            if path == listed or (listed.endswith("/") and path.startswith(listed)):
                if best is None or len(listed) > best[1]:
                    best = (position, len(listed))
    return None if best is None else best[0]


def unplaced(root: Path) -> list[str]:
    """Modules no row of the table holds, and rows that name nothing of the tree."""
    layers, found = layer_table(root), modules(root)
    missing = [m for m, f in found.items() if layer_of(m, f, root, layers) is None]
    files = {f.relative_to(root).as_posix() for f in found.values()}
    stale = [
        f"{layer.name}: {p} names no module"
        for layer in layers
        for p in layer.paths
        if p not in files and not any(f.startswith(p) for f in files if p.endswith("/"))
    ]
    return [f"{m}: in no layer of {ARCHITECTURE}" for m in missing] + stale


def upward_imports(root: Path) -> list[str]:
    """Each import of a layer above the importing module's own, as `file:line: ...`."""
    layers, found = layer_table(root), modules(root)
    rank = {m: layer_of(m, f, root, layers) for m, f in found.items()}
    wrong = []
    for module, imported in import_graph(root).items():
        for target, line in imported.items():
            low, high = rank[module], rank[target]
            if low is not None and high is not None and high < low:
                wrong.append(
                    f"{found[module].relative_to(root)}:{line}: {module} ({layers[low].name}) "
                    f"imports {target} ({layers[high].name}, a layer above)"
                )
    return wrong


def import_circles(root: Path) -> list[list[str]]:
    """Every set of modules that import each other in a loop (Tarjan's strongly connected
    components of more than one module)."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            circle = []
            while (member := stack.pop()) != module:
                circle.append(member)
            if circle:
                circles.append(sorted([module, *circle]))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for module in graph:
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return circles


def test_every_module_lies_in_one_layer_of_the_architecture_page() -> None:
    layers = layer_table(ROOT)
    assert layers[0].name == "hydra_plugins" and layers[-1].name == "core"
    assert len({layer.name for layer in layers}) == len(layers)
    assert unplaced(ROOT) == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports(ROOT) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert import_circles(ROOT) == []


def planted_copy(tmp_path: Path) -> Path:
    """The packages' sources and the architecture page, copied under `tmp_path`."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("conf"))
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / ARCHITECTURE, tmp_path / ARCHITECTURE)
    return tmp_path


def named(root: Path, leaf: str) -> tuple[str, Path]:
    """The module of the packages under `root` whose last name is `leaf`, and its file."""
    return next((m, f) for m, f in modules(root).items() if m.rpartition(".")[2] == leaf)


def test_a_planted_upward_import_fails_the_checks(tmp_path: Path) -> None:
    """In a copy: errors.py (core) importing the CLI inside a function is one upward import and
    a circle (the CLI imports errors.py); a driver under TYPE_CHECKING in rng.py, one more."""
    root = planted_copy(tmp_path)
    assert upward_imports(root) == [] and import_circles(root) == []
    (cli, _), (driver, _) = named(root, "main"), named(root, "synchronous")
    errors, errors_file = named(root, "errors")
    planted = f"\n\ndef later() -> None:\n    import {cli}\n"
    errors_file.write_text(errors_file.read_text() + planted)
    line = len(errors_file.read_text().splitlines())
    where = errors_file.relative_to(root)
    assert upward_imports(root) == [
        f"{where}:{line}: {errors} (core) imports {cli} (cli, a layer above)"
    ]
    assert any({cli, errors} <= set(circle) for circle in import_circles(root))
    errors_file.write_text(errors_file.read_text().removesuffix(planted))
    rng, rng_file = named(root, "rng")
    rng_file.write_text(
        f"from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import {driver}\n"
        + rng_file.read_text()
    )
    assert upward_imports(root) == [
        f"{rng_file.relative_to(root)}:4: {rng} (core) imports {driver} (drivers, a layer above)"
    ]


def test_a_module_the_table_leaves_out_fails_the_check(tmp_path: Path) -> None:
    root = planted_copy(tmp_path)
    (root / "fedlight" / "stray.py").write_text('"""A module of no layer."""\n')
    assert unplaced(root) == [f"fedlight.stray: in no layer of {ARCHITECTURE}"]
