"""A run imports what it uses, when it uses it: no W&B, TensorBoard or MLflow without their
logger, no scikit-learn without `data=digits`, and fedlight's figures (matplotlib) only once the
rounds are over.

Lightning itself imports matplotlib, torchvision and rich in this environment, so the check on
plotting is on fedlight's own modules: none that a run has loaded by its first round may import a
plotting, W&B or scikit-learn module at module level."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.data.test_data import write_mnist_tree

# Imported lazily by fedlight: only the modules below may name them at module level.
LAZY_ROOTS = {"matplotlib", "wandb", "sklearn", "tensorboard", "mlflow"}
USES_THEM = {"fedlight.reports.curves", "fedlight.data.digits"}
LOGGING = ("tensorboard", "mlflow", "torch.utils.tensorboard")  # loaded with their loggers only

# Runs the real CLI in this process and records, at the first round and at the exit, which
# modules are loaded.
DRIVER = """
import json, sys
from fedlight.drivers.synchronous import FederatedLoop

seen = {}
run_round = FederatedLoop.run_round


def spy(self, *args, **kwargs):
    seen.setdefault("first_round", sorted(sys.modules))
    return run_round(self, *args, **kwargs)


FederatedLoop.run_round = spy
sys.argv = ["fedlight", *sys.argv[1:]]
from fedlight.cli.main import main

try:
    main()
except SystemExit as exit:
    seen["code"] = exit.code
seen["exit"] = sorted(sys.modules)
print("MODULES " + json.dumps(seen))
"""


def loaded_modules(tmp_path: Path, *overrides: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, *overrides, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        env={**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("MODULES ")]
    assert lines, result.stdout + result.stderr
    return json.loads(lines[-1].removeprefix("MODULES "))


def module_level_imports(path: Path) -> set[str]:
    """Top-level package names a module imports when it is loaded (not inside functions, not
    under `if TYPE_CHECKING:`)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                names.update(alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names.add(child.module.split(".")[0])
            visit(child)

    visit(ast.parse(path.read_text()))
    return names


def fedlight_file(module: str) -> Path:
    parts = module.split(".")
    package = REPO.joinpath(*parts, "__init__.py")
    return package if package.exists() else REPO.joinpath(*parts[:-1], f"{parts[-1]}.py")


def test_a_csv_fmnist_run_imports_no_wandb_sklearn_or_plotting_before_its_end(tmp_path):
    write_mnist_tree(tmp_path / "data", "FashionMNIST")
    seen = loaded_modules(
        tmp_path,
        "data=fmnist",
        f"data.root={tmp_path / 'data'}",
        "model=mlp",
        "fl.num_clients=4",
        "fl.clients_per_round=2",
        "fl.rounds=1",
        "logger=csv",
        "fl.workers=1",  # the hook sees this process's rounds (auto may fork workers)
    )
    assert seen.get("code") in (None, 0)
    for module in ("wandb", "fedlight.loggers.wandb", "sklearn", "fedlight.data.digits", *LOGGING):
        assert module not in seen["exit"], module
    at_first_round = [m for m in seen["first_round"] if m.split(".")[0] == "fedlight"]
    assert "fedlight.drivers.synchronous" in at_first_round
    assert "fedlight.reports.curves" in at_first_round
    offenders = {
        module: sorted(module_level_imports(fedlight_file(module)) & LAZY_ROOTS)
        for module in at_first_round
        if module not in USES_THEM
    }
    assert {m: names for m, names in offenders.items() if names} == {}
    # fedlight.reports.curves is loaded (the run's outputs use its dataclasses), draws at the end
    assert module_level_imports(fedlight_file("fedlight.reports.curves")) & LAZY_ROOTS == set()
    assert (tmp_path / "run" / "curves.png").exists()


def test_the_import_check_sees_a_module_level_import(tmp_path):
    module = tmp_path / "module.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "import os, wandb.sdk\n"
        "if TYPE_CHECKING:\n"
        "    import sklearn\n"
        "try:\n"
        "    from matplotlib.figure import Figure\n"
        "except ImportError:\n"
        "    pass\n"
        "def draw():\n"
        "    import rich\n"
    )
    assert module_level_imports(module) == {"typing", "os", "wandb", "matplotlib"}


# What fedlight's CLI may import besides what Lightning (every client's base class) already has,
# and the standard library: its own package, Hydra's (with OmegaConf, ANTLR and attrs) and Opacus
# (the privacy stages' accountant).
CLI_OWN_PACKAGES = {"fedlight", "hydra", "omegaconf", "antlr4", "attr", "opacus"}
CLI_IMPORTS = """
import sys
import torch, pytorch_lightning
before = {name.split(".")[0] for name in sys.modules}
import fedlight.cli.main
added = {name.split(".")[0] for name in sys.modules} - before - set(sys.stdlib_module_names)
print("ADDED " + " ".join(sorted(added)))
"""


def test_the_cli_imports_no_package_of_its_own_beyond_hydra_and_opacus():
    """Every run holds what its CLI imports before any data: the peak of the CIFAR-10 headline
    run is mostly torch's and Lightning's imports, fedlight's own a few MB
    (docs/speed-and-memory.md), and a package imported on the CLI's path besides these would be
    held by every run (import it where its option is used, as the loggers and figures are)."""
    result = subprocess.run(
        [sys.executable, "-c", CLI_IMPORTS],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    [line] = [line for line in result.stdout.splitlines() if line.startswith("ADDED ")]
    assert set(line.split()[1:]) <= CLI_OWN_PACKAGES, result.stderr
    assert "fedlight" in line.split()
