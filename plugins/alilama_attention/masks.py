"""Masks shared by the backends: the dense additive mask and its per-scheme cache."""

from __future__ import annotations

import torch
from torch import Tensor

from alilama_core.interfaces import PositionalScheme, causal_mask

_CACHE_SIZE = 8
_no_scheme_cache: dict[tuple, Tensor] = {}


def positions(t: int, s: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Query positions ``s-t .. s-1`` and key positions ``0 .. s-1``."""
    k_pos = torch.arange(s, device=device)
    return k_pos[s - t :], k_pos


def dense_mask(
    positional: PositionalScheme | None,
    t: int,
    s: int,
    causal: bool,
    device: torch.device,
    dtype: torch.dtype,
) -> Tensor | None:
    """Additive float mask ``(1, H or 1, T, S)``: the bias plus ``-inf`` above the causal diagonal.

    Static biases are cached on the scheme per ``(T, S, causal, device, dtype)``.
    """
    if positional is None and not causal:
        return None
    static = positional is None or positional.bias_is_static
    key = (t, s, causal, device, dtype)
    cache = _no_scheme_cache if positional is None else positional.__dict__.setdefault("_mask_cache", {})
    if static and key in cache:
        return cache[key]
    if positional is None:
        mask = torch.zeros(1, 1, t, s, device=device, dtype=dtype)
    else:
        q_pos, k_pos = positions(t, s, device)
        mask = positional.bias(q_pos, k_pos).to(dtype)[None]  # (1, H, T, S)
    if causal:
        mask = mask.masked_fill(~causal_mask(t, s, device), float("-inf"))
    if static:
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = mask
    return mask


def padding_mask(key_padding_mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``(B, S)`` keep-mask to an additive ``(B, 1, 1, S)`` mask.

    Padded keys get the dtype's minimum rather than ``-inf``, so a query row
    that sees only padding (a left-padded prompt's pad positions) stays finite.
    """
    zero = torch.zeros((), dtype=dtype, device=key_padding_mask.device)
    low = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=key_padding_mask.device)
    return torch.where(key_padding_mask, zero, low)[:, None, None, :]
