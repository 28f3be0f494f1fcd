"""`python -m benchmarks.peers setup`: each peer in its own virtual environment at a pinned version,
under the untracked outputs/peers/venvs/ (nothing is added to fedlight's dependencies).

Every framework must run on the same PyTorch build, or the comparison measures two builds: a
peer's environment sees fedlight's torch (and what torch itself requires) through a folder of links
named in a `.pth` file, and pip counts that torch as installed, so a peer's own requirements are
installed beside it at the versions the pins allow.
"""

import importlib.metadata
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "outputs" / "peers"
OVERLAY = WORK / "torch-overlay"


@dataclass(frozen=True)
class Peer:
    """A framework compared with fedlight: its pinned requirement and the script that drives it."""

    name: str
    requirement: str  # what pip installs, pinned
    driver: str  # module of benchmarks.peers run inside the peer's environment
    unavailable: str = ""  # why it is not installed here, said on the page ("" where it is)


PEERS = (
    Peer("flower", "flwr[simulation]==1.42.0", "flower_driver"),
    Peer("pfl", "pfl[pytorch]==0.6.0", "pfl_driver"),
    Peer(
        "blazefl",
        "blazefl==3.0.0",
        "",
        "every release on PyPI requires Python >= 3.12; fedlight runs on 3.11",
    ),
)


def venv_dir(peer: Peer) -> Path:
    """Where `peer`'s virtual environment lives."""
    return WORK / "venvs" / peer.name


def venv_python(peer: Peer) -> Path:
    """The interpreter of `peer`'s environment."""
    return venv_dir(peer) / "bin" / "python"


def closure(name: str) -> set[str]:
    """`name` and every distribution it requires on this platform (extras too), as installed."""
    found: set[str] = set()
    seen: set[tuple[str, str]] = set()
    queue = [(name, "")]
    while queue:
        current, extra = queue.pop()
        current = re.sub(r"[-_.]+", "-", current).lower()
        if (current, extra) in seen:
            continue
        seen.add((current, extra))
        try:
            requires = importlib.metadata.requires(current) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        found.add(current)
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                queue += [(requirement.name, e) for e in ("", *requirement.extras)]
    return found


def link_torch() -> Path:
    """OVERLAY: links to the files of torch and its requirements as installed for fedlight."""
    OVERLAY.mkdir(parents=True, exist_ok=True)
    for name in sorted(closure("torch")):
        dist = importlib.metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            target = OVERLAY / top
            skipped = top in ("bin", "__pycache__") or ".." in top
            if source.exists() and not target.exists() and not skipped:
                target.symlink_to(source)
    return OVERLAY


def setup_peer(peer: Peer) -> None:
    """Create `peer`'s environment (once) and install its pinned requirement into it."""
    if peer.unavailable:
        print(f"{peer.name}: not installed ({peer.unavailable})", flush=True)
        return
    if not venv_python(peer).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv_dir(peer))], check=True)
    site = next((venv_dir(peer) / "lib").glob("python3*/site-packages"))
    (site / "fedlight_torch.pth").write_text(f"{link_torch()}\n")
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run(
        [str(venv_python(peer)), "-m", "pip", "install", "-q", peer.requirement],
        check=True,
        env=env,
    )
    print(f"{peer.name}: {peer.requirement} in {venv_dir(peer).relative_to(REPO)}", flush=True)


def setup(names: list[str]) -> int:
    """`setup`: every named peer's environment."""
    for peer in PEERS:
        if not names or peer.name in names:
            setup_peer(peer)
    return 0
