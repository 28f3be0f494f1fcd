"""The errors a user sees: a setting refused in one line that names it and the fix.

Every stage refuses bad settings through `require` (a `ConfigError`), and the entry point turns
any error, Hydra's multi-line ones included, into one line (`one_line`).
"""

import re
import sys
from typing import NoReturn


class ConfigError(ValueError):
    """A setting is invalid; the message names the key and what is allowed, on one line."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


# Lines of Hydra's and OmegaConf's messages that say nothing a user needs.
NOISE_LINES = ("full_key", "object_type", "reference_type", "To append", "Available options")


def error_chain(error: BaseException) -> list[BaseException]:
    chain = [error]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    return chain


def one_line(error: BaseException, separator: str = "; ", limit: int | None = None) -> str:
    """Any error (Hydra's and OmegaConf's multi-line ones included, with their causes) as the one
    line a user needs: the offending key first where the message names one, noise dropped, lines
    joined by `separator`, cut to `limit` characters."""
    text = "\n".join(str(e) for e in error_chain(error))
    key = re.search(r"full_key: (\S+)", text)
    lines = [
        " ".join(line.split())
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith(NOISE_LINES)
    ]
    flat = (f"{key.group(1)}: " if key else "") + separator.join(lines)
    return flat if limit is None or len(flat) <= limit else flat[: limit - 3] + "..."


def fail(message: str, code: int) -> NoReturn:
    """End the command with `message` on one line of stderr and exit status `code`."""
    print(f"fedlight: error: {message}", file=sys.stderr)
    sys.exit(code)
