"""FlexAttention with the bias as a ``score_mod`` and the causal mask as a block mask.

No ``T x S`` bias is materialised for slope schemes (ALiBi): the score function
adds ``slope_h * (k - q)`` inside the kernel, and fully masked blocks above the
diagonal are skipped. Other bias schemes are read from the pass's dense bias.

Compiled once per kind of call: full sequences (``T == S``) with static shapes,
KV-cache calls (``T < S``) with dynamic shapes, so decoding does not recompile
at every step. The cache offset is a tensor, never a Python constant in the
score function. Inductor's kernels need a head size of at least 16 (a power of
two): smaller heads are zero-padded, which changes no score (q is scaled so
the kernel's ``1/sqrt(D')`` is ``1/sqrt(D)``) and the padded output columns are dropped.
"""

from __future__ import annotations

import functools
import os
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from alilama_attention.masks import attention_bias
from alilama_core.contracts.attention import AttentionBackend, AttentionBias, AttentionCase
from alilama_core.base.errors import PluginUnavailableError
from alilama_core.contracts.positional import PositionalScheme

_block_masks: dict[tuple, object] = {}
_compiled: dict[str, object] = {}


def _compiles(device: torch.device) -> bool:
    return device.type == "cuda" or os.environ.get("ALILAMA_FLEX_COMPILE") == "1"


def _kernel(device: torch.device, dynamic: bool):
    """The compiled kernel on CUDA (or anywhere with ``ALILAMA_FLEX_COMPILE=1``), else eager.

    Eager FlexAttention computes the same result without fusing (it materialises
    the scores); on CPU that avoids a compile step for short inference runs.
    """
    from torch.nn.attention import flex_attention as fa

    if not _compiles(device):
        return _eager_flex
    key = "dynamic" if dynamic else "static"
    if key not in _compiled:
        _compiled[key] = torch.compile(fa.flex_attention, dynamic=dynamic)
    return _compiled[key]


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
    """The causal block mask for ``t`` queries ending at key ``s - 1``, built once per shape."""
    from torch.nn.attention.flex_attention import create_block_mask

    key = (t, s, device)
    if key not in _block_masks:
        offset = torch.tensor(s - t, device=device)

        def causal(b, h, q_idx, kv_idx):
            return q_idx + offset >= kv_idx

        if len(_block_masks) >= 16:
            _block_masks.pop(next(iter(_block_masks)))
        _block_masks[key] = create_block_mask(causal, None, None, t, s, device=device)
    return _block_masks[key]


def padded_head_dim(d: int) -> int:
    """The head size the compiled kernel runs: a power of two, at least 16."""
    return max(16, 1 << (d - 1).bit_length())


def flex_attention_fn(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
    bias: AttentionBias | None = None,
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
    context = attention_bias(bias, positional, q, k, key_padding_mask, causal)
    t, s, d = q.size(-2), k.size(-2), q.size(-1)
    offset = torch.tensor(s - t, device=q.device)  # a tensor: no recompile as the cache grows
    score_mod = None
    if context.scheme is not None:
        slopes = context.slopes
        if slopes is not None:

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + slopes[h] * (kv_idx - q_idx - offset)

        else:
            dense = context.dense()  # (H, T, S) float32, once per pass

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + dense[h, q_idx, kv_idx]

    block_mask = None
    if key_padding_mask is not None:
        keep = key_padding_mask

        def padded(b, h, q_idx, kv_idx):
            visible = keep[b, kv_idx] | (kv_idx == q_idx + offset)  # a padded query still sees itself
            return visible & (q_idx + offset >= kv_idx) if causal else visible

        block_mask = create_block_mask(padded, q.size(0), None, t, s, device=q.device)
    elif causal and t > 1:  # one query at the end sees every key
        block_mask = _causal_block_mask(t, s, q.device)
    kernel = _kernel(q.device, dynamic=t < s)
    if _compiles(q.device) and padded_head_dim(d) != d:
        wide = padded_head_dim(d)
        q = q * (wide / d) ** 0.5  # the kernel's default 1/sqrt(D') scale then equals 1/sqrt(D)
        q, k, v = (F.pad(x, (0, wide - d)) for x in (q, k, v))  # (B, H, *, D') zeros change no score
        return kernel(q, k, v, score_mod=score_mod, block_mask=block_mask)[..., :d]  # (B, H, T, D)
    return kernel(q, k, v, score_mod=score_mod, block_mask=block_mask)  # (B, H, T, D)


def _accepts(case: AttentionCase) -> str | None:
    if case.bias_trainable:
        return "gradients to a bias captured in score_mod are not relied on"
    return None


def _memory(heads: int, t: int) -> str:
    return f"{heads * 4} bytes of slopes for slope schemes (the bias is applied in the kernel)"


backend = AttentionBackend(
    "flex",
    flex_attention_fn,
    bias="dense",
    trains_on=("cuda",),
    check=_check,
    description="torch FlexAttention (score_mod bias, causal block mask); CPU: inference only",
    devices=("cpu", "cuda"),
    accepts=_accepts,
    priority={"cuda:long": 80},  # on an H200, sdpa was faster for short inputs and decode steps
    shared_bias=True,
    memory=_memory,
)
