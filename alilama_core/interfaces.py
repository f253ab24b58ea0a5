"""The four plugin interfaces: ``Tokenizer``, ``PositionalScheme``, ``AttentionBackend``, ``Trainer``.

The core knows no implementation; plugins register these through the hooks in
``alilama_core.hookspecs``. Shapes follow one convention everywhere:
``B`` batch, ``H`` heads, ``T`` query length, ``S`` key length (``S >= T``; with a
KV cache the queries are the last ``T`` of the ``S`` positions), ``D`` head dim.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import torch
from torch import Tensor, nn

from alilama_core.tokenizer import Tokenizer

if TYPE_CHECKING:
    from alilama_core.config import ModelConfig

__all__ = ["Tokenizer", "PositionalScheme", "AttentionFn", "AttentionBackend", "Trainer"]

PositionalKind = Literal["bias", "rotary", "embedding", "none"]


class PositionalScheme(nn.Module):
    """How a model knows where a token is. A scheme declares one ``kind``:

    - ``"bias"``: an additive attention bias ``bias(q_pos, k_pos) -> (H, T, S)``
      (ALiBi). A bias that is ``-slope_h * (q - k)`` also returns its per-head
      ``slopes()`` so kernels that take slopes (flash-attn, FlexAttention) never
      build the dense bias.
    - ``"rotary"``: ``rotate(x, positions)`` turns q and k (RoPE).
    - ``"embedding"``: ``embed(positions) -> (T, C)`` is added to the token embeddings.
    - ``"none"``: nothing (NoPE; the causal mask alone carries order).

    Positions are absolute token indices, so a query block that follows a KV
    cache of length ``n`` has positions ``n .. n+T-1``. Worked example, a bias
    scheme that penalises distance with one fixed slope for every head::

        class Linear(PositionalScheme):
            kind = "bias"
            def bias(self, q_pos, k_pos):                      # (T,), (S,)
                dist = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
                return (-0.1 * dist).expand(self.n_heads, -1, -1)  # (H, T, S)
    """

    kind: ClassVar[PositionalKind] = "none"
    bias_is_static: ClassVar[bool] = True
    """A bias without trainable parameters: backends may cache it per shape."""
    has_slopes: ClassVar[bool] = False
    """``slopes()`` describes the bias exactly (ALiBi-shaped)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.head_dim = config.d_model // config.n_heads
        self.d_model = config.d_model
        self.context_length = config.context_length

    @property
    def max_positions(self) -> int | None:
        """Largest number of positions the scheme supports (``None``: unbounded)."""
        return None

    def embed(self, positions: Tensor) -> Tensor:
        """``(T,)`` or ``(B, T)`` positions to ``(T, C)`` or ``(B, T, C)`` embeddings."""
        raise NotImplementedError(f"{type(self).__name__} is not an embedding scheme")

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate ``x`` of shape ``(B, H, T, D)`` for ``(T,)`` or per-row ``(B, T)`` positions."""
        raise NotImplementedError(f"{type(self).__name__} is not a rotary scheme")

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Additive attention bias of shape ``(H, T, S)`` for ``(T,)`` and ``(S,)`` positions."""
        raise NotImplementedError(f"{type(self).__name__} is not a bias scheme")

    def slopes(self) -> Tensor | None:
        """``(H,)`` float32 slopes when the bias is ``-slope_h * (q - k)``, else ``None``."""
        return None

    def reset_parameters(self) -> None:
        """(Re)initialise parameters and computed buffers (called by the model's init)."""


class AttentionFn(Protocol):
    """One signature for every attention backend.

    ``q``: ``(B, H, T, D)``; ``k``, ``v``: ``(B, H, S, D)`` with the queries being
    the last ``T`` positions of the ``S`` keys. ``positional`` is the model's
    bias scheme, or ``None`` when the scheme adds no bias. ``key_padding_mask``
    ``(B, S)`` is ``True`` for real tokens. Returns ``(B, H, T, D)``::

        out = attention(q, k, v, positional=alibi, causal=True)
    """

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        positional: PositionalScheme | None = None,
        causal: bool = True,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor: ...


BiasSupport = Literal["dense", "slopes", "none"]


@dataclass(frozen=True)
class AttentionBackend:
    """An attention function and what it can do, as registered by a plugin.

    ``bias``: ``"dense"`` takes any bias scheme, ``"slopes"`` only schemes that
    return ``slopes()``, ``"none"`` no bias at all. ``available()`` returns
    ``None`` when the backend can run here, else the reason it cannot.
    ``trains_on`` lists device types where backward works. Example::

        def my_attention(q, k, v, *, positional=None, causal=True, key_padding_mask=None):
            ...
        register("mine", AttentionBackend("mine", my_attention, bias="dense"))
    """

    name: str
    fn: AttentionFn
    bias: BiasSupport = "dense"
    trains_on: tuple[str, ...] = ("cpu", "cuda", "mps")
    check: Callable[[], str | None] | None = None
    description: str = ""

    def available(self) -> str | None:
        return self.check() if self.check is not None else None

    def supports(self, scheme: type[PositionalScheme] | PositionalScheme) -> bool:
        if scheme.kind != "bias":
            return True
        if self.bias == "dense":
            return True
        if self.bias == "slopes":
            return scheme.has_slopes
        return False


def attention_backend(obj: Any) -> AttentionBackend:
    """Accept a registered ``AttentionBackend`` or a bare function (taken as dense-capable)."""
    if isinstance(obj, AttentionBackend):
        return obj
    if callable(obj):
        return AttentionBackend(getattr(obj, "__name__", "custom"), obj)
    raise TypeError(f"expected an AttentionBackend or a function, got {type(obj).__name__}")


class Trainer(abc.ABC):
    """Runs a training config to a checkpoint folder::

        trainer = registry.get_trainer("default")(config)
        result = trainer.fit(data_dir="data/", out_dir="runs/essay")
    """

    name: ClassVar[str] = ""

    def __init__(self, config: Any) -> None:
        self.config = config

    @abc.abstractmethod
    def fit(self, data_dir: str, out_dir: str, resume: bool = False) -> dict[str, Any]:
        """Train; write checkpoints under ``out_dir``; return final metrics."""


def causal_mask(t: int, s: int, device: torch.device | str | None = None) -> Tensor:
    """``(T, S)`` boolean mask, ``True`` where query ``i`` (position ``s - t + i``) may see key ``j``."""
    q = torch.arange(s - t, s, device=device)
    k = torch.arange(s, device=device)
    return k[None, :] <= q[:, None]
