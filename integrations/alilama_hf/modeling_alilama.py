"""Alilama's GPT as a transformers model: ``AlilamaModel`` and ``AlilamaForCausalLM``.

The same math as ``alilama_core.model`` for every built-in positional scheme:
token embedding (+ a learned position table) -> N x [x + Attn(LN(x)),
x + MLP(LN(x))] -> LN -> head tied to the embedding; exact GELU; ALiBi, RoPE
(GPT-NeoX half rotation), learned absolute positions, or none. Attention is
``softmax(Q K^T / sqrt(D) + bias + causal mask) V``, spelt out (``eager``) or
through ``torch.nn.functional.scaled_dot_product_attention`` (``sdpa``, the
default).

This file is copied beside exported weights and runs as remote code
(``trust_remote_code=True``) on machines without Alilama, so it imports only
torch, transformers and its sibling ``configuration_alilama``.

Weight names (Alilama -> here): ``tok_emb`` -> ``model.embed_tokens``,
``positional.table`` -> ``model.embed_positions``, ``blocks.i.ln_attn`` ->
``model.layers.i.ln_attn``, ``blocks.i.attn.{qkv,proj}`` ->
``model.layers.i.attn.{qkv,proj}``, ``blocks.i.ln_mlp`` -> ``model.layers.i.ln_mlp``,
``blocks.i.mlp.{fc,proj}`` -> ``model.layers.i.mlp.{fc,proj}``, ``ln_f`` ->
``model.norm``; ``lm_head`` is tied to ``model.embed_tokens``.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import PreTrainedModel

try:
    from transformers.generation import GenerationMixin
except ImportError:  # very old transformers
    from transformers.generation.utils import GenerationMixin

try:  # transformers >= 5: init functions that skip weights already loaded from a checkpoint
    from transformers import initialization as init
except ImportError:  # transformers 4.x
    init = None

from .configuration_alilama import AlilamaConfig


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's per-head slopes ``2^(-8h/n)``; for ``n`` not a power of two, BLOOM/MPT's interleaving.

    >>> alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    p = 2 ** math.floor(math.log2(n_heads))
    return torch.tensor(geometric(p) + geometric(2 * p)[0::2][: n_heads - p], dtype=torch.float32)


def rope_inv_freq(head_dim: int, theta: float) -> Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))  # (D/2,)


class AlilamaPositionTable(nn.Embedding):
    """Learned absolute positions, as in GPT-2 (initialised normal(0, 0.02) like Alilama's)."""


class AlilamaALiBi(nn.Module):
    """Holds the slopes (a non-persistent buffer, refilled by ``_init_weights``)."""

    def __init__(self, config: AlilamaConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.register_buffer("slopes", alibi_slopes(config.n_heads), persistent=False)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
        return -self.slopes.float()[:, None, None] * distance  # (H, T, S)


class AlilamaRotaryEmbedding(nn.Module):
    """RoPE angles for given positions; ``inv_freq`` is a non-persistent buffer."""

    def __init__(self, config: AlilamaConfig):
        super().__init__()
        self.head_dim = config.head_dim
        self.theta = config.rope_theta
        self.register_buffer("inv_freq", rope_inv_freq(self.head_dim, self.theta), persistent=False)

    def forward(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        angles = positions.float()[..., None] * self.inv_freq.float()  # (B, T, D/2)
        angles = angles[:, None]  # (B, 1, T, D/2): the same rotation for every head
        return angles.cos(), angles.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """GPT-NeoX rotation: the first half of the head dimension pairs with the second."""
    x1, x2 = x.float().chunk(2, dim=-1)  # (B, H, T, D/2) each
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)  # (B, H, T, D)


def eager_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """``softmax(Q K^T / sqrt(D) + mask) V``; ``mask`` is additive, ``(B|1, H|1, T, S)``.

    Without a mask the queries are the last ``T`` of the ``S`` keys, causally.
    """
    t, s = q.size(-2), k.size(-2)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, T, S)
    if mask is None and t > 1:
        k_pos = torch.arange(s, device=q.device)
        future = k_pos[None, :] > k_pos[s - t :, None]  # (T, S)
        mask = torch.zeros(t, s, dtype=scores.dtype, device=q.device).masked_fill(future, float("-inf"))
    if mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)  # (B, H, T, S)
    return weights @ v  # (B, H, T, D)


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """The same through PyTorch's fused kernels."""
    t, s = q.size(-2), k.size(-2)
    if mask is None and 1 < t < s:  # a chunk after a cache: SDPA's is_causal aligns to the top-left, not here
        k_pos = torch.arange(s, device=q.device)
        mask = k_pos[None, :] <= k_pos[s - t :, None]  # (T, S) True where visible
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)  # (B, H, T, D)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, D)


class AlilamaAttention(nn.Module):
    def __init__(self, config: AlilamaConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        rotary: tuple[Tensor, Tensor] | None = None,
        cache: Cache | None = None,
    ) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, C) each
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, D)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, D)
        if rotary is not None:
            q, k = rotate(q, *rotary), rotate(k, *rotary)
        if cache is not None:
            s = cache.get_seq_length(self.layer_idx) + T
            k, v = cache.update(k, v, self.layer_idx)  # (B, H, S, D)
            k, v = k[:, :, :s], v[:, :, :s]  # a preallocated (static) cache returns its empty slots too
        attend = eager_attention if self.config._attn_implementation == "eager" else sdpa_attention
        y = attend(q, k, v, mask)  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.dropout(self.proj(y))


class AlilamaMLP(nn.Module):
    def __init__(self, config: AlilamaConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.d_mlp, bias=config.bias)
        self.proj = nn.Linear(config.d_mlp, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))  # (B, T, C)


class AlilamaBlock(nn.Module):
    """Pre-norm: each sublayer reads a normalised copy and adds to the un-normalised stream."""

    def __init__(self, config: AlilamaConfig, layer_idx: int):
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.attn = AlilamaAttention(config, layer_idx)
        self.ln_mlp = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.mlp = AlilamaMLP(config)

    def forward(self, x: Tensor, mask: Tensor | None, rotary=None, cache: Cache | None = None) -> Tensor:
        x = x + self.attn(self.ln_attn(x), mask, rotary, cache)  # (B, T, C)
        return x + self.mlp(self.ln_mlp(x))  # (B, T, C)


def _output(cls, **values):
    """Build a transformers output whatever its cache field is called (``cache`` in 5.x, else ``past_key_values``)."""
    names = {f.name for f in dataclasses.fields(cls)}
    cache = values.pop("cache")
    values["cache" if "cache" in names else "past_key_values"] = cache
    return cls(**{k: v for k, v in values.items() if k in names})


def _cache_of(output) -> Cache | None:
    names = {f.name for f in dataclasses.fields(output)}
    return output.cache if "cache" in names else output.past_key_values


class AlilamaPreTrainedModel(PreTrainedModel):
    config_class = AlilamaConfig
    config: AlilamaConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["AlilamaBlock"]
    _supports_sdpa = True
    _supports_cache_class = True
    _supports_static_cache = False

    def _init_weights(self, module: nn.Module) -> None:
        """Alilama's init (Xavier-uniform matrices or normal(0, init_std), zero biases, unit norms).

        It also refills the non-persistent buffers (ALiBi slopes, RoPE
        frequencies): ``from_pretrained`` creates them empty, and nothing in the
        checkpoint restores them.
        """
        fn = init if init is not None else nn.init
        std = self.config.init_std

        def matrix(w: Tensor) -> None:
            if std is None:
                fn.xavier_uniform_(w)
            else:
                fn.normal_(w, mean=0.0, std=std)

        if isinstance(module, AlilamaALiBi):
            _copy(module.slopes, alibi_slopes(module.n_heads))
        elif isinstance(module, AlilamaRotaryEmbedding):
            _copy(module.inv_freq, rope_inv_freq(module.head_dim, module.theta))
        elif isinstance(module, nn.Linear):
            matrix(module.weight)
            if module.bias is not None:
                fn.zeros_(module.bias)
        elif isinstance(module, AlilamaPositionTable):
            fn.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.Embedding):
            matrix(module.weight)
        elif isinstance(module, nn.LayerNorm):
            fn.ones_(module.weight)
            if module.bias is not None:
                fn.zeros_(module.bias)


def _copy(buffer: Tensor, value: Tensor) -> None:
    with torch.no_grad():
        buffer.copy_(value.to(device=buffer.device, dtype=buffer.dtype))


class AlilamaModel(AlilamaPreTrainedModel):
    """The decoder stack up to the final norm: hidden states ``(B, T, C)``."""

    def __init__(self, config: AlilamaConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        if config.positional == "learned":
            self.embed_positions = AlilamaPositionTable(config.context_length, config.d_model)
        elif config.positional == "alibi":
            self.alibi = AlilamaALiBi(config)
        elif config.positional == "rope":
            self.rotary_emb = AlilamaRotaryEmbedding(config)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(AlilamaBlock(config, i) for i in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ):
        """``cache`` (transformers >= 5.x ``generate``) and ``past_key_values`` (older) are the same thing."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        cache = cache if cache is not None else past_key_values
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if use_cache and cache is None and not self.training:
            cache = _dynamic_cache(self.config)
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, C)
        B, T, _ = x.shape
        past = cache.get_seq_length() if cache is not None else 0
        S = past + T
        if position_ids is None:
            position_ids = self._positions(attention_mask, past, T, x.device)  # (B|1, T)
        rotary = None
        if self.config.positional == "learned":
            if int(position_ids.max()) >= self.config.context_length:
                raise ValueError(
                    f"this model's learned position table covers {self.config.context_length} positions, but "
                    f"position {int(position_ids.max())} was requested ({past} cached + {T} new). Crop the input "
                    f"or generate fewer tokens; ALiBi and RoPE models can run past their training context."
                )
            x = x + self.embed_positions(position_ids)  # (B, T, C)
        elif self.config.positional == "rope":
            rotary = self.rotary_emb(position_ids.expand(B, -1) if position_ids.size(0) == 1 else position_ids)
        mask = self._mask(attention_mask, past, T, S, x)
        x = self.dropout(x)
        hidden_states = [x] if output_hidden_states else None
        for layer in self.layers:
            x = layer(x, mask, rotary, cache)  # (B, T, C)
            if hidden_states is not None:
                hidden_states.append(x)
        x = self.norm(x)  # (B, T, C)
        if hidden_states is not None:
            hidden_states[-1] = x
        out = _output(
            BaseModelOutputWithPast,
            last_hidden_state=x,
            cache=cache if use_cache else None,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
        )
        return out if return_dict is not False else out.to_tuple()

    @staticmethod
    def _positions(attention_mask: Tensor | None, past: int, t: int, device) -> Tensor:
        """Per-row positions that skip left padding, as Alilama's sampler counts them."""
        if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.all()):
            return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)[:, -t:]  # (B, T)
        return torch.arange(past, past + t, device=device)[None]  # (1, T)

    def _mask(self, attention_mask: Tensor | None, past: int, t: int, s: int, x: Tensor) -> Tensor | None:
        """Additive ``(B|1, H|1, T, S)`` mask: ALiBi bias, causal ``-inf``, padded keys at the dtype's minimum."""
        dtype, device = x.dtype, x.device
        padding = None
        if attention_mask is not None and attention_mask.dim() == 4:  # prepared by the caller: causal included
            attention_mask = attention_mask[..., -t:, :s]  # a static cache's mask also covers its empty slots
            if attention_mask.dtype == torch.bool:
                zero = torch.zeros((), dtype=dtype, device=device)
                attention_mask = torch.where(attention_mask, zero, torch.finfo(dtype).min)
            mask = attention_mask.to(dtype)
            if self.config.positional == "alibi":
                k_pos = torch.arange(s, device=device)
                mask = mask + self.alibi.bias(k_pos[past:], k_pos).to(dtype)[None]
            return mask
        if attention_mask is not None and not bool(attention_mask.all()):
            keep = attention_mask[:, -s:].bool()  # (B, S)
            zero = torch.zeros((), dtype=dtype, device=device)
            padding = torch.where(keep, zero, torch.finfo(dtype).min)[:, None, None, :]  # (B, 1, 1, S)
        if self.config.positional != "alibi" and padding is None:
            return None  # causal only: the attention function applies it
        k_pos = torch.arange(s, device=device)
        q_pos = k_pos[past:]  # (T,)
        if self.config.positional == "alibi":
            mask = self.alibi.bias(q_pos, k_pos).to(dtype)[None]  # (1, H, T, S)
        else:
            mask = torch.zeros(1, 1, t, s, dtype=dtype, device=device)
        mask = mask.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))  # causal
        return mask if padding is None else mask + padding


def _dynamic_cache(config: AlilamaConfig) -> Cache:
    try:
        return DynamicCache(config=config)
    except TypeError:  # transformers without the config argument
        return DynamicCache()


class AlilamaForCausalLM(AlilamaPreTrainedModel, GenerationMixin):
    """``AlilamaModel`` with the output head tied to the token embedding."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: AlilamaConfig):
        super().__init__(config)
        self.model = AlilamaModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | Tensor = 0,
        past_key_values: Cache | None = None,
        **kwargs,
    ):
        """Logits ``(B, T, V)``; with ``labels`` the next-token cross-entropy (``-100`` ignored)."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache if cache is not None else past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden = out.last_hidden_state  # (B, T, C)
        if isinstance(logits_to_keep, int):
            hidden = hidden[:, -logits_to_keep:] if logits_to_keep else hidden
        else:
            hidden = hidden[:, logits_to_keep]
        logits = self.lm_head(hidden)  # (B, T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.size(-1)).float(),
                labels[:, 1:].reshape(-1).to(logits.device),
                ignore_index=-100,
            )
        result = _output(
            CausalLMOutputWithPast,
            loss=loss,
            logits=logits,
            cache=_cache_of(out),
            hidden_states=out.hidden_states,
        )
        return result if return_dict is not False else result.to_tuple()


__all__ = ["AlilamaPreTrainedModel", "AlilamaModel", "AlilamaForCausalLM"]
