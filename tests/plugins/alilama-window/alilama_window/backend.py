"""Sliding-window attention: each query sees only the last ``window`` positions, itself included.

Not exact attention (a query never sees keys more than ``window - 1`` positions
back), so the backend declares ``exact=False``. It also declares a high
priority, which ``auto`` must ignore: a router never picks a non-exact backend.
It declares no ``probabilities``, so its attention cannot be drawn; the tests
register a variant that declares ``window_probabilities``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor

from alilama_core.contracts.attention import AttentionBackend
from alilama_core.base.errors import ConfigError


def window_probabilities(
    q: Tensor,
    k: Tensor,
    *,
    positional=None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
    window: int = 64,
) -> Tensor:
    """The attention weights ``(B, H, T, S)`` the window computes (what ``probabilities`` may declare)."""
    D, T, S = q.size(-1), q.size(-2), k.size(-2)
    k_pos = torch.arange(S, device=q.device)
    q_pos = k_pos[S - T :]  # the queries are the last T positions
    scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(D)  # (B, H, T, S)
    if positional is not None:
        scores = scores + positional.bias(q_pos, k_pos).float()[None]  # (1, H, T, S)
    distance = q_pos[:, None] - k_pos[None, :]  # (T, S)
    keep = (distance >= 0) & (distance < window) if causal else distance.abs() < window
    keep = keep[None, None]  # (1, 1, T, S)
    if key_padding_mask is not None:
        own = (distance == 0)[None, None]  # a padded query still sees itself
        keep = keep & (key_padding_mask[:, None, None, :] | own)  # (B, 1, T, S)
    return scores.masked_fill(~keep, float("-inf")).softmax(-1)  # (B, H, T, S)


def window_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional=None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
    window: int = 64,
) -> Tensor:
    weights = window_probabilities(
        q, k, positional=positional, causal=causal, key_padding_mask=key_padding_mask, window=window
    )
    return weights.to(v.dtype) @ v  # (B, H, T, D)


@dataclasses.dataclass(frozen=True)
class WindowBackend(AttentionBackend):
    """Checks ``window`` when the config is validated, not at the first forward pass."""

    def configured(self, options: dict[str, Any] | None) -> AttentionBackend:
        window = (options or {}).get("window", self.defaults["window"])
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(
                f"attention backend 'window': option window must be a positive integer (the positions a "
                f"query sees, itself included), got {window!r}; e.g. model.attention_options.window=64"
            )
        return super().configured(options)


backend = WindowBackend(
    "window",
    window_attention,
    bias="dense",
    defaults={"window": 64},
    priority={"cpu": 1000, "cuda": 1000},
    description="sliding window of `window` positions (model.attention_options); not exact attention",
    exact=False,
)
