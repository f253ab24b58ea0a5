"""The Alilama GPT: a decoder-only transformer assembled from plugins.

Token embedding -> N x [x + Attn(LN(x)), x + MLP(LN(x))] -> LN -> head tied to
the embedding (``tie_embeddings``). The MLP's nonlinearity (``activation``: GELU or
ReLU²) and a per-head query/key RMSNorm (``qk_norm``) are model settings too. Position information comes from a ``PositionalScheme`` plugin
(ALiBi, RoPE, learned, none), the attention math from an ``AttentionBackend``
plugin (eager, sdpa, flex, flash). With the ``essay`` preset this is the ~2M
parameter ALiBi model of "The Transformer as a Differentiable Computer".

References:
- Vaswani et al., "Attention Is All You Need", 2017 (arXiv:1706.03762)
- Radford et al., "Language Models are Unsupervised Multitask Learners" (GPT-2), 2019: pre-norm blocks
- Press et al., "Train Short, Test Long" (ALiBi), 2022 (arXiv:2108.12409)
- Glorot & Bengio, "Understanding the difficulty of training deep feedforward networks", 2010 (Xavier init)
- So et al., "Primer: Searching for Efficient Transformers for Language Modeling", 2021 (arXiv:2109.08668): ReLU²
- Henry et al., "Query-Key Normalization for Transformers", 2020 (arXiv:2010.04245): QK-norm
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from alilama_core.contracts.attention import (
    AttentionBackend,
    AttentionBias,
    AttentionCase,
    AttentionFn,
    BiasCache,
    attention_backend,
    shape_class,
)
from alilama_core.contracts.config import ModelConfig
from alilama_core.base.errors import ConfigError
from alilama_core.contracts.positional import PositionalScheme
from alilama_core.engine.cache import KVCache
from alilama_core.engine.registry import get_attention, get_positional
from alilama_core.engine.validate import check_model


class _Attention:
    """What every layer of one forward pass shares: the attention function and the bias."""

    __slots__ = ("fn", "bias", "shared")

    def __init__(self, fn: AttentionFn, bias: AttentionBias | None, shared: bool) -> None:
        self.fn, self.bias, self.shared = fn, bias, shared


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, positional: PositionalScheme, backend: AttentionBackend):
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        if config.qk_norm:  # one gain per head dim, shared by the heads (as OLMo 2 and Qwen 3 do)
            self.q_norm = nn.RMSNorm(config.head_dim, eps=config.norm_eps)
            self.k_norm = nn.RMSNorm(config.head_dim, eps=config.norm_eps)
        # The scheme and backend are shared by all layers; keep them out of this module's parameters.
        self._shared = [positional, backend]

    def forward(
        self,
        x: Tensor,
        positions: Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        key_padding_mask: Tensor | None = None,
        attention: _Attention | None = None,
    ) -> Tensor:
        positional, backend = self._shared
        q, k, v = self.project(x, positions)  # (B, H, T, D) each
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, H, S, D)
        if attention is None:  # called on its own: resolve for this call
            attention = _resolve(backend, positional, q, q.size(-1), k.size(2), key_padding_mask, {})
        scheme = positional if positional.kind == "bias" else None
        if attention.shared:
            y = attention.fn(
                q, k, v, positional=scheme, causal=True, key_padding_mask=key_padding_mask, bias=attention.bias
            )  # (B, H, T, D)
        else:
            y = attention.fn(q, k, v, positional=scheme, causal=True, key_padding_mask=key_padding_mask)
        return self.output(y)

    def project(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values ``(B, H, T, D)`` of ``x`` ``(B, T, C)``, normed and rotated where the model says."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, C) each
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, D)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, D)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)  # each head's vectors, before positions and the cache
        positional = self._shared[0]
        if positional.kind == "rotary":
            q, k = positional.rotate(q, positions), positional.rotate(k, positions)
        return q, k, v

    def output(self, y: Tensor) -> Tensor:
        """The heads' outputs ``(B, H, T, D)`` merged and projected back to ``(B, T, C)``."""
        B, H, T, D = y.shape
        y = y.transpose(1, 2).reshape(B, T, H * D)  # (B, T, C)
        return self.dropout(self.proj(y))


def _resolve(
    backend: AttentionBackend,
    positional: PositionalScheme,
    x: Tensor,
    head_dim: int,
    s: int,
    key_padding_mask: Tensor | None,
    routes: dict,
    cache: BiasCache | None = None,
) -> _Attention:
    """The function every layer runs for a call on ``x`` ``(B, T, ...)`` over ``s`` keys.

    A router (``auto``) is resolved once per shape class and remembered in ``routes``;
    ``cache`` keeps biases and masks between passes (the model's ``bias_cache``).
    """
    t = x.size(-2)
    if backend.resolve is not None:
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
        grad = torch.is_grad_enabled()
        trainable = grad and positional.kind == "bias" and any(p.requires_grad for p in positional.parameters())
        key = (device, dtype, shape_class(t, s), key_padding_mask is not None, grad and x.requires_grad, trainable)
        chosen = routes.get(key)  # a plain tuple: the per-call cost of a resolved router is one lookup
        if chosen is None:
            case = AttentionCase(device, dtype, head_dim, key[2], positional.kind, positional.has_slopes, *key[3:])
            chosen = routes[key] = backend.resolve(case)
    else:
        chosen = backend
    # Built lazily: what a backend asks of it (slopes, bias, masks) is computed once for all layers.
    bias = AttentionBias(positional, t, s, x.device, key_padding_mask, cache=cache) if chosen.shared_bias else None
    return _Attention(chosen.fn, bias, chosen.shared_bias)


def relu2(x: Tensor) -> Tensor:
    """ReLU squared (Primer): ``max(x, 0)²``."""
    return F.relu(x).square()


ACTIVATION: dict[str, Callable[[Tensor], Tensor]] = {"gelu": F.gelu, "relu2": relu2}
"""``model.activation`` by name: exact (erf) GELU, or ReLU²."""


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.d_mlp, bias=config.bias)
        self.proj = nn.Linear(config.d_mlp, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.act = ACTIVATION[config.activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.proj(self.act(self.fc(x))))  # (B, T, C)


class Block(nn.Module):
    """Pre-norm: each sublayer reads a normalised copy and adds to the un-normalised stream."""

    def __init__(self, config: ModelConfig, positional: PositionalScheme, backend: AttentionBackend):
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.norm_bias)
        self.attn = CausalSelfAttention(config, positional, backend)
        self.ln_mlp = nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.norm_bias)
        self.mlp = MLP(config)

    def forward(self, x, positions, cache=None, layer=0, key_padding_mask=None, attention=None) -> Tensor:
        x = x + self.attn(self.ln_attn(x), positions, cache, layer, key_padding_mask, attention)  # (B, T, C)
        x = x + self.mlp(self.ln_mlp(x))  # (B, T, C)
        return x


class GPT(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        check_model(config)
        self.config = config
        self.backend = attention_backend(get_attention(config.attention)).configured(config.attention_options)
        self.positional: PositionalScheme = get_positional(config.positional)(config)
        if (reason := self.positional.check_slopes()) is not None:
            raise ConfigError(
                f"positional scheme {config.positional!r} declares has_slopes, but {reason}; "
                "fix slopes() or set has_slopes = False"
            )
        self._routes: dict[tuple, AttentionBackend] = {}  # a router's choice per shape class
        self.bias_cache = BiasCache()  # biases and masks kept between passes, for the scheme's current values
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, self.positional, self.backend) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.norm_bias)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.head.weight = self.tok_emb.weight  # weight tying
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform matrices (or normal(0, init_std)), zero biases, unit norms and gains."""
        for name, p in self.named_parameters():
            if name.startswith("positional."):
                continue
            if p.dim() >= 2:
                if self.config.init_std is None:
                    nn.init.xavier_uniform_(p)
                else:
                    nn.init.normal_(p, std=self.config.init_std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                nn.init.ones_(p)
        self.positional.reset_parameters()
        self.bias_cache.clear()

    def forward(
        self,
        idx: Tensor,
        cache: KVCache | None = None,
        key_padding_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        logits_to_keep: int = 0,
    ) -> Tensor:
        """Token ids ``(B, T)`` to logits ``(B, T, V)`` (the last ``logits_to_keep`` positions if > 0).

        With ``cache``, ``idx`` holds only the new tokens; their positions follow
        the cached ones. ``key_padding_mask`` ``(B, S)``, ``True`` for real tokens,
        covers the cached and the new positions. ``position_ids`` ``(B, T)``
        gives each row its own positions (left-padded batches); by default they
        are ``offset .. offset+T-1``. Bias schemes are relative and ignore them.
        """
        B, T = idx.shape
        offset = len(cache) if cache is not None else 0
        positions = torch.arange(offset, offset + T, device=idx.device)  # (T,)
        if position_ids is not None:
            positions = position_ids  # (B, T)
        limit = self.positional.max_positions
        if limit is not None and (last := self._last_position(offset, T, position_ids)) > limit:
            raise ConfigError(
                f"positional scheme {self.config.positional!r} covers {limit} positions, but "
                f"{last} were requested ({offset} cached + {T} new). Crop the input or the "
                f"cache to {limit} tokens, or use a scheme that extrapolates (alibi, rope)."
            )
        x = self.tok_emb(idx)  # (B, T, C)
        if self.positional.kind == "embedding":
            x = x + self.positional.embed(positions)  # (B, T, C)
        x = self.dropout(x)
        head_dim = self.config.d_model // self.config.n_heads
        attention = _resolve(
            self.backend, self.positional, x, head_dim, offset + T, key_padding_mask, self._routes, self.bias_cache
        )
        for i, block in enumerate(self.blocks):
            x = block(x, positions, cache, i, key_padding_mask, attention)  # (B, T, C)
        if logits_to_keep:
            x = x[:, -logits_to_keep:]  # sampling needs only the last positions
        return self.head(self.ln_f(x))  # (B, T, V)

    @staticmethod
    def _last_position(offset: int, t: int, position_ids: Tensor | None) -> int:
        return offset + t if position_ids is None else int(position_ids.max()) + 1

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())  # tied weights are counted once
        return n - self.tok_emb.weight.numel() if exclude_embeddings else n


def build_model(config: ModelConfig) -> GPT:
    """Assemble the model from ``config``'s plugins (validated first)."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"build_model expects a ModelConfig, got {type(config).__name__}")
    return GPT(config)
