"""Bounds on every input, checked before any work starts: one table, one place.

Each limit has a name, a default, and an environment variable ``ALILAMA_NAME``
that raises (or lowers) it for a machine that can take more::

    ALILAMA_MAX_TASK_LENGTH=16384 alilama train --task copy task.lengths=1-16000

A value over its limit is refused with an error that names the limit, its
value and the variable. Limits that guard against a corrupt file rather than a
large request (a safetensors header that disagrees with its file) cannot be
raised: the file is wrong. ``docs/what-happens-when.md`` lists them all.

The Hugging Face config (``integrations/alilama_hf/configuration_alilama.py``)
runs as remote code without Alilama installed, so it repeats the model
dimension bounds as plain numbers; the tests check that the two agree.
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

from alilama_core.base.errors import ConfigError

DEFAULTS: dict[str, int] = {
    # Config files (YAML and JSON).
    "MAX_CONFIG_BYTES": 1 << 20,
    "MAX_YAML_NODES": 100_000,
    "MAX_NESTING_DEPTH": 100,
    # Model dimensions (``ModelConfig``; a loaded run's config.yaml and an exported config.json too).
    "MAX_VOCAB_SIZE": 1 << 24,
    "MAX_D_MODEL": 1 << 16,
    "MAX_N_LAYERS": 1024,
    "MAX_N_HEADS": 1024,
    "MAX_D_MLP": 1 << 18,
    "MAX_CONTEXT_LENGTH": 1 << 20,
    # Algorithmic tasks: training lengths, validation and test sets.
    "MAX_TASK_LENGTH": 8192,
    "MAX_TASK_CONTEXT": 2048,  # positions of a task's longest training example: attention grows as its square
    "MAX_TASK_EXAMPLES": 65_536,
    "MAX_EVAL_LENGTHS": 64,
    "MAX_EVAL_TOKENS": 1 << 26,
    # Pictures.
    "MAX_VIZ_DISTANCE": 1 << 16,
}
"""Every limit's default value, by name."""

MODEL_FIELDS = {
    "vocab_size": "MAX_VOCAB_SIZE",
    "d_model": "MAX_D_MODEL",
    "n_layers": "MAX_N_LAYERS",
    "n_heads": "MAX_N_HEADS",
    "d_mlp": "MAX_D_MLP",
    "context_length": "MAX_CONTEXT_LENGTH",
}
"""The ``ModelConfig`` field each model dimension limit bounds."""

SAFETENSORS_MAX_HEADER = 100_000_000
"""Largest safetensors JSON header read (the ``safetensors`` library's own bound); not adjustable."""
SAFETENSORS_DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "C64": 8,
}


def limit(name: str) -> int:
    """The value of limit ``name``: ``ALILAMA_NAME`` from the environment when set, else its default."""
    default = DEFAULTS[name]
    raw = os.environ.get(f"ALILAMA_{name}")
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"ALILAMA_{name} must be a positive integer (default {default:,}), got {raw!r}")
    return value


def describe(name: str) -> str:
    """``"the limit MAX_X=N; raise it with ALILAMA_MAX_X=..."``: the end of every limit message."""
    return f"the limit is {name}={limit(name):,}; to raise it, set the environment variable ALILAMA_{name}"


# -- JSON nesting -----------------------------------------------------------------------------

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str, stop: int | None = None) -> int:
    """How deep ``text``'s arrays and objects nest (brackets inside strings do not count).

    A cheap scan at C speed for the text and a Python loop over the brackets only;
    it stops as soon as the depth passes ``stop``.
    """
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    depth = deepest = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop is not None and deepest > stop:
                    break
        else:
            depth -= 1
    return deepest


def nesting_problem(text: str) -> str | None:
    """Why JSON ``text`` nests too deeply to read, or ``None``."""
    most = limit("MAX_NESTING_DEPTH")
    depth = json_depth(text, stop=most)
    if depth > most:
        return f"it nests arrays or objects more than {most} levels deep ({describe('MAX_NESTING_DEPTH')})"
    return None


def loads_json(text: str, error: type[Exception], where: str):
    """``json.loads(text)``, refusing text nested past ``MAX_NESTING_DEPTH`` first; errors are ``error``.

    ``where`` names the file in the messages (e.g. ``"'tok/alilama_tokenizer.json'"``).
    """
    problem = nesting_problem(text)
    if problem:
        raise error(f"{where} cannot be read: {problem}")
    try:
        return json.loads(text)
    except RecursionError:
        raise error(f"{where} cannot be read: it nests too deeply") from None


# -- safetensors ---------------------------------------------------------------------------------


def safetensors_problem(path: str | os.PathLike[str]) -> str | None:
    """What is wrong with the safetensors file at ``path`` before a byte of tensor data is read, or ``None``.

    The file is an 8-byte little-endian header length, a JSON header, then the
    data. The header must fit in the file, and every tensor's declared
    ``dtype`` × ``shape`` must equal its ``data_offsets`` span, which must lie
    inside the file. So a file that claims a tensor larger than itself is
    refused here instead of asking for that memory.
    """
    p = Path(path)
    size = p.stat().st_size
    if size < 8:
        return f"it has {size} bytes, fewer than the 8 of a safetensors header length"
    with open(p, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > size - 8:
            return f"its header declares {n:,} bytes but the file holds only {size - 8:,} after the length"
        if n > SAFETENSORS_MAX_HEADER:
            return f"its header declares {n:,} bytes, more than safetensors reads ({SAFETENSORS_MAX_HEADER:,})"
        raw = f.read(n)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "its header is not UTF-8 JSON"
    problem = nesting_problem(text)
    if problem:
        return f"its header {problem}"
    try:
        header = json.loads(text)
    except ValueError as exc:
        return f"its header is not valid JSON ({exc})"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    data = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            return f"tensor {name!r} has no dtype, shape and data_offsets"
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPE_BYTES:
            return f"tensor {name!r} has an unknown dtype {dtype!r}"
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            return f"tensor {name!r} has an invalid shape {shape!r}"
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        ):
            return f"tensor {name!r} has invalid data_offsets {offsets!r}"
        begin, end = offsets
        count = 1
        for d in shape:
            count *= d
        need = count * SAFETENSORS_DTYPE_BYTES[dtype]
        if not 0 <= begin <= end:
            return f"tensor {name!r} has invalid data_offsets {offsets!r}"
        if end - begin != need:
            return (
                f"tensor {name!r} declares shape {shape} of {dtype} ({need:,} bytes) "
                f"but its data_offsets span {end - begin:,} bytes"
            )
        if end > data:
            return f"tensor {name!r} ends at byte {end:,} of the data but the file holds {data:,} bytes of data"
    return None
