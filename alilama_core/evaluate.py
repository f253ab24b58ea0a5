"""Loss and bits per byte of a trained model on raw text, at several context lengths.

As in the ALiBi paper, the text is cut into non-overlapping windows of ``L``
tokens; each window is scored on its own, so every prediction sees at most
``L - 1`` tokens of context. Bits per byte divide the summed loss (in bits) by
the UTF-8 bytes of the predicted tokens (special tokens count zero bytes), so
models with different tokenizers compare fairly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from alilama_core.errors import ConfigError


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


@torch.no_grad()
def window_nll(
    model, tokens: np.ndarray, starts: np.ndarray, context: int, batch_size: int, byte_lengths: np.ndarray | None = None
) -> tuple[float, int, int]:
    """Summed loss (nats), predicted tokens and their bytes over windows of ``context`` tokens at ``starts``.

    Each window is scored on its own (eval mode); bytes are counted only when
    ``byte_lengths`` is given.
    """
    from alilama_core.data import random_windows

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    nats, count, nbytes = 0.0, 0, 0
    for i in range(0, len(starts), batch_size):
        x, y = random_windows(tokens, starts[i : i + batch_size], context)  # (b, T) each
        logits = model(x.to(device))
        nats += F.cross_entropy(logits.flatten(0, 1).float(), y.to(device).flatten(), reduction="sum").item()
        count += y.numel()
        if byte_lengths is not None:
            nbytes += int(byte_lengths[y.numpy()].sum())
    model.train(was_training)
    return nats, count, nbytes


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
) -> list[EvalRow]:
    """Evaluate a run folder on ``files`` at each context length (default: 1x, 2x, 4x, 8x trained).

    ``attention``: the backend to score with; ``"auto"`` picks the fastest exact one,
    except for a run trained with a non-exact backend (a sliding window), which is
    scored with its own; another backend for it is refused unless ``force_attention``
    (see ``load_run``). ``verify``: check the run's files against the hashes it recorded.
    """
    from alilama_core.checkpoint import load_run

    if context_lengths is not None and (not context_lengths or min(context_lengths) < 1):
        raise ConfigError(f"context lengths must be positive integers, got {context_lengths}")
    loaded = load_run(
        run, checkpoint=checkpoint, attention=attention or None, verify=verify, force_attention=force_attention
    )
    model, tokenizer, cfg = loaded.model, loaded.tokenizer, loaded.config
    trained = cfg.model.context_length
    lengths = context_lengths or [trained * m for m in (1, 2, 4, 8)]
    lengths_bytes = token_byte_lengths(tokenizer)
    limit = model.positional.max_positions
    rows = []
    for file in files:
        tokens = encode_file(tokenizer, file)
        if max_tokens:
            tokens = tokens[: max_tokens + 1]
        for length in lengths:
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
