"""Loss and bits per byte of a trained model on raw text, at several context lengths.

As in the ALiBi paper, the text is cut into non-overlapping windows of ``L``
tokens; each window is scored on its own, so every prediction sees at most
``L - 1`` tokens of context. Bits per byte divide the summed loss (in bits) by
the UTF-8 bytes of the predicted tokens (special tokens count zero bytes), so
models with different tokenizers compare fairly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from alilama_core.base.errors import ConfigError
from alilama_core.runs.checkpoint import load_run
from alilama_core.runs.windows import window_nll


@dataclass
class EvalRow:
    file: str
    context_length: int
    loss: float | None
    bpb: float | None
    tokens: int
    windows: int
    attention: str
    note: str = ""


def token_byte_lengths(tokenizer) -> np.ndarray:
    """UTF-8 byte length of every id; special tokens count zero."""
    specials = set(tokenizer.special_tokens.values())
    return np.array(
        [0 if i in specials else len(tokenizer.decode_bytes([i])) for i in range(tokenizer.vocab_size)],
        dtype=np.int64,
    )


def encode_file(tokenizer, path: str | Path) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"eval file {str(p)!r} does not exist")
    return np.asarray(tokenizer.encode_file(p), dtype=np.int64)


def evaluate_tokens(
    model, tokens: np.ndarray, byte_lengths: np.ndarray, context: int, batch_size: int = 8
) -> tuple[float, float, int, int]:
    """(loss, bpb, predicted tokens, windows) over non-overlapping windows of ``context`` tokens."""
    n_windows = (len(tokens) - 1) // context
    if n_windows < 1:
        raise ConfigError(f"the text has {len(tokens)} tokens: too short for one window of {context + 1}")
    starts = np.arange(n_windows) * context
    nats, count, nbytes = window_nll(model, tokens, starts, context, batch_size, byte_lengths)
    return nats / count, nats / math.log(2) / max(1, nbytes), count, n_windows


def evaluate_run(
    run: str | Path,
    files: list[str],
    context_lengths: list[int] | None = None,
    attention: str | None = "auto",
    max_tokens: int | None = 262_144,
    batch_size: int = 8,
    checkpoint: str | None = None,
    verify: bool = True,
    force_attention: bool = False,
    device: str = "cpu",
    on_loaded: Callable[..., None] | None = None,
    on_step: Callable[[int, int, str, int], None] | None = None,
) -> list[EvalRow]:
    """Evaluate a run folder on ``files`` at each context length (default: 1x, 2x, 4x, 8x trained).

    ``attention``: the backend to score with; ``"auto"`` picks the fastest exact one,
    except for a run trained with a non-exact backend (a sliding window), which is
    scored with its own; another backend for it is refused unless ``force_attention``
    (see ``load_run``). ``verify``: check the run's files against the hashes it recorded.
    ``device``: where the model runs (``"cpu"``, ``"cuda"``).
    ``on_loaded(loaded, lengths)`` is called once the run is loaded, before any scoring;
    ``on_step(done, total, file, length)`` before each (file, context length) is scored
    (``done`` of ``total`` finished so far), for progress reports.
    """

    if context_lengths is not None and (not context_lengths or min(context_lengths) < 1):
        raise ConfigError(f"context lengths must be positive integers, got {context_lengths}")
    loaded = load_run(
        run,
        checkpoint=checkpoint,
        map_location=device,
        attention=attention or None,
        verify=verify,
        force_attention=force_attention,
    )
    model, tokenizer, cfg = loaded.model, loaded.tokenizer, loaded.config
    trained = cfg.model.context_length
    lengths = context_lengths or [trained * m for m in (1, 2, 4, 8)]
    lengths_bytes = token_byte_lengths(tokenizer)
    limit = model.positional.max_positions
    if on_loaded is not None:
        on_loaded(loaded, lengths)
    rows = []
    total = len(files) * len(lengths)
    for file in files:
        tokens = encode_file(tokenizer, file)
        if max_tokens:
            tokens = tokens[: max_tokens + 1]
        for length in lengths:
            if on_step is not None:
                on_step(len(rows), total, str(file), length)
            name = model.config.attention
            if limit is not None and length > limit:
                rows.append(
                    EvalRow(
                        str(file), length, None, None, 0, 0, name, f"{cfg.model.positional} covers {limit} positions"
                    )
                )
                continue
            loss, bpb, count, windows = evaluate_tokens(model, tokens, lengths_bytes, length, batch_size)
            rows.append(EvalRow(str(file), length, loss, bpb, count, windows, name))
    return rows
