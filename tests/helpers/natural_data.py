"""Natural datasets in their real formats, written by the tests: LEAF's JSON files (FEMNIST's
writers, Shakespeare's roles speaking a few real sentences: the text path tested on words, not on
noise)."""

import json
from pathlib import Path
from typing import Any

import numpy as np

SPEECHES = {
    "THE_TEMPEST_PROSPERO": "Our revels now are ended. These our actors, as I foretold you, were "
    "all spirits and are melted into air, into thin air; and, like the baseless fabric of this "
    "vision, the cloud-capp'd towers, the gorgeous palaces, the solemn temples.",
    "HAMLET_HAMLET": "To be, or not to be, that is the question: whether 'tis nobler in the mind "
    "to suffer the slings and arrows of outrageous fortune, or to take arms against a sea of "
    "troubles and by opposing end them. To die: to sleep; no more.",
    "MACBETH_MACBETH": "Tomorrow, and tomorrow, and tomorrow, creeps in this petty pace from day "
    "to day to the last syllable of recorded time, and all our yesterdays have lighted fools the "
    "way to dusty death. Out, out, brief candle!",
}
WINDOW = 80  # LEAF's Shakespeare examples: 80 characters and the next one


def windows(text: str, starts: range) -> dict[str, list[str]]:
    return {
        "x": [text[s : s + WINDOW] for s in starts],
        "y": [text[s + WINDOW] for s in starts],
    }


Examples = dict[str, dict[str, list[Any]]]  # user -> {"x": [...], "y": [...]}


def write_leaf(folder: Path, users: Examples, files: int = 2, **extra: Any) -> None:
    """`users` as LEAF's preprocessing writes a split: `files` JSON files, users dealt in turn,
    each file {"users", "num_samples", "user_data"} (and `extra` keys, e.g. hierarchies)."""
    folder.mkdir(parents=True, exist_ok=True)
    names = list(users)
    for part in range(files):
        chosen = names[part::files]
        content = {
            "users": chosen,
            **{key: value[part::files] for key, value in extra.items()},
            "num_samples": [len(users[user]["y"]) for user in chosen],
            "user_data": {user: users[user] for user in chosen},
        }
        (folder / f"all_data_{part}_niid_05_keep_0_{folder.name}_9.json").write_text(
            json.dumps(content), encoding="utf-8"
        )


def femnist_users(sizes: dict[str, int], seed: int) -> Examples:
    """Writers' 28×28 images as LEAF writes them (grey levels / 255, flattened) with labels
    0..61."""
    rng = np.random.default_rng(seed)
    return {
        user: {
            "x": (rng.integers(0, 256, (size, 784)) / 255).tolist(),
            "y": rng.integers(0, 62, size).tolist(),
        }
        for user, size in sizes.items()
    }


def write_femnist(root: Path) -> tuple[Examples, Examples]:
    """Four writers, each with its own training and test examples, as LEAF's `-t sample` split
    leaves them."""
    train = femnist_users({"f0003_12": 7, "f0001_40": 5, "f0102_07": 6, "f0002_33": 8}, seed=1)
    test = femnist_users({"f0003_12": 2, "f0001_40": 1, "f0102_07": 3, "f0002_33": 2}, seed=2)
    write_leaf(root / "train", train)
    write_leaf(root / "test", test)
    return train, test


def write_shakespeare(root: Path) -> tuple[Examples, Examples]:
    """Each role's first windows for training, its last ones for testing (LEAF's Shakespeare
    split keeps a role's test windows after its training ones)."""
    train = {role: windows(text, range(0, 24, 3)) for role, text in SPEECHES.items()}
    test = {role: windows(text, range(100, 112, 4)) for role, text in SPEECHES.items()}
    hierarchies = [role.rsplit("_", 1)[0] for role in SPEECHES]
    write_leaf(root / "train", train, hierarchies=hierarchies)
    write_leaf(root / "test", test, hierarchies=hierarchies)
    return train, test
