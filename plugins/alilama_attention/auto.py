"""``auto``: picks a backend per call from the device, the scheme and availability.

- CPU, ALiBi-shaped bias: ``tiled`` (no ``T x S`` bias, the masked half skipped).
- CUDA, ALiBi-shaped bias: ``flash`` when flash-attn is installed (and no padding
  mask), else ``flex`` (compiled FlexAttention with the slopes as ``score_mod``).
- Everything else (RoPE, learned, no positions, dense biases): ``sdpa``.

``choose`` is what ``alilama model info`` shows.
"""

from __future__ import annotations

from torch import Tensor

from alilama_core.interfaces import AttentionBackend, PositionalScheme


def choose(device_type: str, positional: PositionalScheme | type[PositionalScheme] | None, padded: bool = False) -> str:
    """Name of the backend ``auto`` runs for this device and scheme."""
    from alilama_attention import flash, flex, tiled

    slopes = positional is not None and positional.kind == "bias" and positional.has_slopes
    if not slopes:
        return "sdpa"
    if device_type == "cuda":
        if not padded and flash._check() is None:
            return "flash"
        if flex._check() is None:
            return "flex"
        return "sdpa"
    if device_type == "cpu" and not padded and tiled._check() is None:
        return "tiled"
    return "sdpa"


def auto_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    from alilama_core.registry import get_attention

    name = choose(q.device.type, positional, padded=key_padding_mask is not None)
    fn = get_attention(name).fn
    return fn(q, k, v, positional=positional, causal=causal, key_padding_mask=key_padding_mask)


backend = AttentionBackend(
    "auto",
    auto_attention,
    bias="dense",
    description="chooses tiled (CPU) / flash or flex (CUDA) for ALiBi, sdpa otherwise",
)
