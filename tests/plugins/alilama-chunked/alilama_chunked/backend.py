"""Exact attention over blocks of ``chunk`` queries: the score matrix never exceeds ``(B, H, chunk, S)``."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from alilama_core.contracts.attention import AttentionBackend


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional=None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
    chunk: int = 64,
) -> Tensor:
    B, H, T, D = q.shape
    S = k.size(2)
    k_pos = torch.arange(S, device=q.device)
    out = []
    for start in range(0, T, chunk):
        q_pos = k_pos[S - T + start : S - T + min(T, start + chunk)]  # (t,)
        scores = (
            q[:, :, start : start + len(q_pos)].float() @ k.float().transpose(-2, -1) / math.sqrt(D)
        )  # (B, H, t, S)
        if positional is not None:
            scores = scores + positional.bias(q_pos, k_pos).float()[None]  # (1, H, t, S)
        hide = torch.zeros(len(q_pos), S, dtype=torch.bool, device=q.device)
        if causal:
            hide = k_pos[None, :] > q_pos[:, None]  # (t, S)
        hide = hide[None, None]  # (1, 1, t, S)
        if key_padding_mask is not None:
            own = k_pos[None, :] == q_pos[:, None]  # a padded query still sees itself
            hide = hide | (~key_padding_mask[:, None, None, :] & ~own[None, None])  # (B, 1, t, S)
        scores = scores.masked_fill(hide, float("-inf"))
        out.append(scores.softmax(-1).to(v.dtype) @ v)  # (B, H, t, D)
    return torch.cat(out, dim=2)  # (B, H, T, D)


backend = AttentionBackend(
    "chunked",
    chunked_attention,
    bias="dense",
    defaults={"chunk": 64},
    description="queries in chunks of `chunk` (model.attention_options)",
)
