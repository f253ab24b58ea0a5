"""FlexAttention with the bias as a ``score_mod`` and the causal mask as a block mask.

No ``T x S`` bias is materialised for slope schemes (ALiBi): the score function
adds ``slope_h * (k - q)`` inside the kernel, and fully masked blocks above the
diagonal are skipped. Other bias schemes are looked up from their dense bias.
"""

from __future__ import annotations

import functools
import os
import warnings

import torch
from torch import Tensor

from alilama_core.errors import PluginUnavailableError
from alilama_core.interfaces import AttentionBackend, PositionalScheme
from alilama_attention.masks import positions

_block_masks: dict[tuple, object] = {}
_compiled: dict[str, object] = {}


def _kernel(device: torch.device):
    """The compiled kernel on CUDA (or anywhere with ``ALILAMA_FLEX_COMPILE=1``), else eager.

    Eager FlexAttention computes the same result without fusing (it materialises
    the scores); on CPU that avoids a compile step for short inference runs.
    """
    from torch.nn.attention import flex_attention as fa

    compile_it = device.type == "cuda" or os.environ.get("ALILAMA_FLEX_COMPILE") == "1"
    if not compile_it:
        return _eager_flex
    if "compiled" not in _compiled:
        _compiled["compiled"] = torch.compile(fa.flex_attention, dynamic=False)
    return _compiled["compiled"]


def _eager_flex(*args, **kwargs):
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(*args, **kwargs)


@functools.cache
def _check() -> str | None:
    """Why the backend cannot run here, or ``None``; depends only on the installation, so cached."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the torch build
        return f"torch {torch.__version__} has no FlexAttention ({exc})"
    return None


def _causal_block_mask(t: int, s: int, device: torch.device):
    from torch.nn.attention.flex_attention import create_block_mask

    key = (t, s, device)
    if key not in _block_masks:
        offset = s - t

        def causal(b, h, q_idx, kv_idx):
            return q_idx + offset >= kv_idx

        if len(_block_masks) >= 8:
            _block_masks.pop(next(iter(_block_masks)))
        _block_masks[key] = create_block_mask(causal, None, None, t, s, device=device)
    return _block_masks[key]


def flex_attention_fn(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    from torch.nn.attention.flex_attention import create_block_mask

    if q.device.type == "cpu" and (q.requires_grad or k.requires_grad or v.requires_grad):
        if not torch.is_grad_enabled():  # inference on tensors that happen to require grad
            q, k, v = q.detach(), k.detach(), v.detach()
        else:
            raise PluginUnavailableError(
                f"attention 'flex' has no backward pass on CPU in torch {torch.__version__}: "
                "use it for inference only (under torch.no_grad()), or train with "
                "model.attention=sdpa or model.attention=eager (or flex on a CUDA device)."
            )
    t, s = q.size(-2), k.size(-2)
    offset = s - t
    score_mod = None
    if positional is not None:
        if positional.has_slopes:
            slopes = positional.slopes().to(q.device)

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + slopes[h] * (kv_idx - q_idx - offset)

        else:
            q_pos, k_pos = positions(t, s, q.device)
            dense = positional.bias(q_pos, k_pos).to(q.dtype)  # (H, T, S)

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + dense[h, q_idx, kv_idx]

    block_mask = None
    if key_padding_mask is not None:
        keep = key_padding_mask

        def padded(b, h, q_idx, kv_idx):
            visible = keep[b, kv_idx] | (kv_idx == q_idx + offset)  # a pad query still sees itself
            return visible & (q_idx + offset >= kv_idx) if causal else visible

        block_mask = create_block_mask(padded, q.size(0), None, t, s, device=q.device)
    elif causal:
        block_mask = _causal_block_mask(t, s, q.device)
    return _kernel(q.device)(q, k, v, score_mod=score_mod, block_mask=block_mask)


backend = AttentionBackend(
    "flex",
    flex_attention_fn,
    bias="dense",
    trains_on=("cuda",),
    check=_check,
    description="torch FlexAttention (score_mod bias, causal block mask); CPU: inference only",
)
