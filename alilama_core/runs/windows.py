"""Windows of a token array: drawing them, and scoring a model on them (torch only when one is drawn)."""

from __future__ import annotations

import numpy as np


def random_windows(tokens: np.ndarray, starts: np.ndarray, context: int):
    """``x``, ``y`` int64 tensors ``(B, T)``: windows at ``starts`` and the same shifted by one."""
    import torch

    rows = np.stack([tokens[s : s + context + 1] for s in starts]).astype(np.int64)  # (B, T+1)
    block = torch.from_numpy(rows)
    return block[:, :-1], block[:, 1:]


def window_nll(
    model, tokens: np.ndarray, starts: np.ndarray, context: int, batch_size: int, byte_lengths: np.ndarray | None = None
) -> tuple[float, int, int]:
    """Summed loss (nats), predicted tokens and their bytes over windows of ``context`` tokens at ``starts``.

    Each window is scored on its own (eval mode); bytes are counted only when
    ``byte_lengths`` is given.
    """
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    nats, count, nbytes = 0.0, 0, 0
    with torch.no_grad():
        for i in range(0, len(starts), batch_size):
            x, y = random_windows(tokens, starts[i : i + batch_size], context)  # (b, T) each
            logits = model(x.to(device))
            nats += F.cross_entropy(logits.flatten(0, 1).float(), y.to(device).flatten(), reduction="sum").item()
            count += y.numel()
            if byte_lengths is not None:
                nbytes += int(byte_lengths[y.numpy()].sum())
    model.train(was_training)
    return nats, count, nbytes
