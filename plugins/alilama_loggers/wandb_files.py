"""Reading the files of W&B's offline runs: what a run's ``offline-run-*/run-<id>.wandb`` logs hold.

An offline run writes W&B's transaction log, the file ``wandb sync`` uploads:
a 7-byte header (``:W&B``, the magic ``0xBEE1``, version 0), then LevelDB-log
records in 32 KiB blocks (a 7-byte record header: checksum, length, type
full/first/middle/last; a block's tail shorter than a header is padding),
each record a ``wandb.proto.wandb_internal_pb2.Record``. A record torn by a
kill ends the scan. Every resume of a run id adds one more folder.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
FILE_HEADER = 7  # b":W&B", magic 0xBEE1 (little endian), version 0
RECORD_HEADER = 7  # crc32 (4), length (2), type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(path: str | Path) -> Iterator[bytes]:
    """The records' bytes of one ``.wandb`` file, in order (a torn tail is left out)."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B transaction log")
    pos, parts = FILE_HEADER, []
    while pos + RECORD_HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < RECORD_HEADER:  # the rest of this block is padding
            pos += room
            continue
        _, length, kind = struct.unpack_from("<IHB", data, pos)
        start, pos = pos + RECORD_HEADER, pos + RECORD_HEADER + length
        if kind not in (FULL, FIRST, MIDDLE, LAST) or pos > len(data):
            return  # torn by a kill, or zeroed padding at the end
        parts.append(data[start:pos])
        if kind in (FULL, LAST):
            yield b"".join(parts)
            parts = []


def run_files(root: str | Path, run_id: str) -> list[Path]:
    """Every offline transaction log of ``run_id`` under ``root`` (its ``wandb/`` folder), oldest first.

    A folder is ``offline-run-<time>-<id>``, with ``-1``, ``-2``, ... added when a resume starts within
    the same second (``latest-run`` only links to the newest)."""
    found = Path(root).glob(f"**/offline-run-*/run-{run_id}.wandb")
    return sorted((p for p in found if not p.parent.is_symlink()), key=lambda p: _order(p.parent.name, run_id))


def _order(folder: str, run_id: str) -> tuple[str, int]:
    """``(time, n)`` of ``offline-run-<time>-<id>[-n]``: the order the folders were written in."""
    stamp, _, tail = folder.removeprefix("offline-run-").partition(f"-{run_id}")
    return stamp, int(tail[1:]) if tail[1:].isdigit() else 0


def records(path: str | Path) -> Iterator[Any]:
    """The ``wandb_internal_pb2.Record`` messages of one ``.wandb`` file (history, config, summary, ...)."""
    from wandb.proto import wandb_internal_pb2

    for payload in payloads(path):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except Exception:  # a record cut short: the scan ends there
            return
        yield record


def _items(items) -> dict[str, Any]:
    return {"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in items}


def history(path: str | Path) -> list[dict[str, Any]]:
    """The history rows of one ``.wandb`` file: ``{"_step": n, key: value, ...}`` per logged step."""
    rows = []
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            row = _items(record.history.item)
            if record.history.HasField("step"):
                row.setdefault("_step", record.history.step.num)
            rows.append(row)
    return rows


def summary(path: str | Path) -> dict[str, Any]:
    """The run summary one ``.wandb`` file sets (its summary updates, in order)."""
    return _updates(path, "summary")


def config(path: str | Path) -> dict[str, Any]:
    """The run config one ``.wandb`` file sets (with the run record's own)."""
    return _updates(path, "config")


def _updates(path: str | Path, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for record in records(path):
        which = record.WhichOneof("record_type")
        if which == kind:
            out.update(_items(getattr(record, kind).update))
        elif kind == "config" and which == "run" and record.run.HasField("config"):
            out.update(_items(record.run.config.update))
    return out


def logged_steps(root: str | Path, run_id: str) -> list[int]:
    """The steps ``run_id`` holds in its offline files under ``root`` (over every resume, in order)."""
    return [int(row["_step"]) for path in run_files(root, run_id) for row in history(path) if "_step" in row]
