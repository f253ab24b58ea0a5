"""The Alilama GPT: a decoder-only transformer assembled from plugins.

Token embedding -> N x [x + Attn(LN(x)), x + MLP(LN(x))] -> LN -> head tied to
the embedding. Position information comes from a ``PositionalScheme`` plugin
(ALiBi, RoPE, learned, none), the attention math from an ``AttentionBackend``
plugin (eager, sdpa, flex, flash). With the ``essay`` preset this is the ~2M
parameter ALiBi model of "The Transformer as a Differentiable Computer".

References:
- Vaswani et al., "Attention Is All You Need", 2017 (arXiv:1706.03762)
- Radford et al., "Language Models are Unsupervised Multitask Learners" (GPT-2), 2019: pre-norm blocks
- Press et al., "Train Short, Test Long" (ALiBi), 2022 (arXiv:2108.12409)
- Glorot & Bengio, "Understanding the difficulty of training deep feedforward networks", 2010 (Xavier init)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from alilama_core.config import ModelConfig
from alilama_core.errors import ConfigError
from alilama_core.interfaces import AttentionBackend, PositionalScheme, attention_backend
from alilama_core.registry import get_attention, get_positional


class KVCache:
    """Keys and values of every layer for the tokens seen so far: ``(B, H, S, D)`` each.

    Pass one to ``GPT.forward`` to run a model incrementally: the first call
    fills it with the prompt, each later call appends its new tokens::

        cache = KVCache()
        logits = model(prompt, cache=cache)            # (B, T, V)
        logits = model(next_token[:, None], cache=cache)  # (B, 1, V)
    """

    def __init__(self) -> None:
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []

    def __len__(self) -> int:
        """Number of cached positions."""
        return self.keys[0].size(2) if self.keys else 0

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append this step's ``k``, ``v`` for ``layer``; return all keys and values so far."""
        if layer == len(self.keys):
            self.keys.append(k)
            self.values.append(v)
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=2)
        return self.keys[layer], self.values[layer]

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` positions (e.g. to undo a step)."""
        self.keys = [k[:, :, :length] for k in self.keys]
        self.values = [v[:, :, :length] for v in self.values]


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, positional: PositionalScheme, backend: AttentionBackend):
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.attend = backend.fn
        # The scheme is shared by all layers; keep it out of this module's parameters.
        self._positional = [positional]

    def forward(
        self,
        x: Tensor,
        positions: Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        B, T, C = x.shape
        positional = self._positional[0]
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, C) each
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, D)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, D)
        if positional.kind == "rotary":
            q, k = positional.rotate(q, positions), positional.rotate(k, positions)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, H, S, D)
        y = self.attend(
            q,
            k,
            v,
            positional=positional if positional.kind == "bias" else None,
            causal=True,
            key_padding_mask=key_padding_mask,
        )  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.dropout(self.proj(y))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.d_mlp, bias=config.bias)
        self.proj = nn.Linear(config.d_mlp, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))  # (B, T, C)


class Block(nn.Module):
    """Pre-norm: each sublayer reads a normalised copy and adds to the un-normalised stream."""

    def __init__(self, config: ModelConfig, positional: PositionalScheme, backend: AttentionBackend):
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.attn = CausalSelfAttention(config, positional, backend)
        self.ln_mlp = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, positions, cache=None, layer=0, key_padding_mask=None) -> Tensor:
        x = x + self.attn(self.ln_attn(x), positions, cache, layer, key_padding_mask)  # (B, T, C)
        x = x + self.mlp(self.ln_mlp(x))  # (B, T, C)
        return x


class GPT(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.backend = attention_backend(get_attention(config.attention))
        self.positional: PositionalScheme = get_positional(config.positional)(config)
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            Block(config, self.positional, self.backend) for _ in range(config.n_layers)
        )
        self.ln_f = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform matrices (or normal(0, init_std)), zero biases, unit norms."""
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
        for i, block in enumerate(self.blocks):
            x = block(x, positions, cache, i, key_padding_mask)  # (B, T, C)
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
