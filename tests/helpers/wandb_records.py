"""The records of a W&B run log (`run-<id>.wandb`, what `wandb sync` uploads), read with W&B's own
protobuf schema: the installed wandb has no Python reader of the file, whose framing is LevelDB's
log format (blocks of 32 KiB; each record a 7-byte header: CRC, length, type; a record that does
not fit its block continues in the next) after W&B's 7-byte file header."""

import struct
from collections.abc import Iterator
from pathlib import Path

from wandb.proto import wandb_internal_pb2

FILE_HEADER = b":W&B\xe1\xbe\x00"  # magic, then the format's version
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(content: bytes) -> Iterator[bytes]:
    """Each record's bytes, its fragments joined."""
    assert content.startswith(FILE_HEADER), "not a W&B run log"
    offset, pending = len(FILE_HEADER), b""
    while offset + 7 <= len(content):
        if BLOCK - offset % BLOCK < 7:  # a block's tail too short for a header is padding
            offset += BLOCK - offset % BLOCK
            continue
        length, kind = struct.unpack_from("<HB", content, offset + 4)
        data = content[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind == 0 and length == 0:  # zeroed padding
            continue
        pending = data if kind in (FULL, FIRST) else pending + data
        if kind in (FULL, LAST):
            yield pending


def records(path: Path) -> list[wandb_internal_pb2.Record]:
    parsed = []
    for payload in payloads(path.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        parsed.append(record)
    return parsed


def history_steps(path: Path) -> list[int]:
    """The steps of the run log's history rows, in order."""
    return [r.history.step.num for r in records(path) if r.WhichOneof("record_type") == "history"]


def run_ids(path: Path) -> set[str]:
    """The run ids its run records name."""
    return {r.run.run_id for r in records(path) if r.WhichOneof("record_type") == "run"}
