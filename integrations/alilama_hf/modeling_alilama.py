"""Alilama's GPT as a transformers model: ``AlilamaModel``, ``AlilamaForCausalLM``, ``AlilamaForSequenceClassification``.

The same math as ``alilama_core.engine.model``: token embedding (+ the
positions of an embedding scheme) -> N x [x + Attn(LN(x)), x + MLP(LN(x))] ->
LN -> head, tied to the embedding unless ``tie_word_embeddings`` is false; the
MLP's nonlinearity is ``config.activation`` (exact GELU or ReLU²); with
``config.qk_norm`` each head's queries and keys pass an RMSNorm over the head
dim (one gain per dim, shared by the heads) before positions and the cache. Every positional scheme, the
built-in ALiBi, RoPE, learned table and NoPE as much as a plugin's, runs from
its standalone module (``PositionalScheme.export_source()``): as remote code,
the one the export copied beside this file (``config.positional_module``);
in-process, only the installed plugin's own (a model folder's files are never
imported without ``trust_remote_code=True``). This file has no positional
maths of its own.

Attention is ``softmax(Q K^T / sqrt(D) + bias + mask) V`` through transformers'
attention-function interface: ``eager`` (Alilama's own ``attention_math``,
which the export also copies beside this file; returns the attention weights),
``sdpa`` (the default), ``flex_attention``, and ``flash_attention_2`` (ALiBi
through flash-attn's own ``alibi_slopes``). Masks are built in float32 with a
finite "minus infinity", and a query row with no visible key (left padding)
attends to all keys instead of producing NaN, so fp16 with left padding stays
finite.

This file is copied beside exported weights and runs as remote code
(``trust_remote_code=True``) on machines without Alilama, so it imports only
torch, transformers and its siblings ``configuration_alilama`` and
``attention_math`` (and the scheme's module, by name).

Weight names (Alilama -> here): ``tok_emb`` -> ``model.embed_tokens``,
``positional.*`` -> ``model.positional.*``, ``blocks.i.*`` ->
``model.layers.i.*``, ``ln_f`` -> ``model.norm``, ``head`` -> ``lm_head``
(stored only when untied; tied, it is ``model.embed_tokens``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    SequenceClassifierOutputWithPast,
)
from transformers.modeling_utils import PreTrainedModel

try:
    from transformers.generation import GenerationMixin
except ImportError:  # very old transformers
    from transformers.generation.utils import GenerationMixin

try:  # transformers >= 5: init functions that skip weights already loaded from a checkpoint
    from transformers import initialization as init
except ImportError:  # transformers 4.x
    init = None

try:  # the attention-function registry (transformers >= 4.48)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
except ImportError:
    ALL_ATTENTION_FUNCTIONS = {}

try:  # a layer that gradient checkpointing can wrap (transformers >= 4.52)
    from transformers.modeling_layers import GradientCheckpointingLayer
except ImportError:
    GradientCheckpointingLayer = nn.Module

from .configuration_alilama import AlilamaConfig

# True when this file runs as the package ``alilama_hf`` (Alilama installed), False when transformers
# loaded it as remote code from a model folder, which it does only under ``trust_remote_code=True``.
_IN_PROCESS = __name__.startswith("alilama_hf.")

# The eager attention maths is Alilama's own ``alilama_core.engine.attention_math``: in-process the
# installed module (by name: remote code never reaches this), as remote code the verbatim copy that
# the export wrote beside this file.
if _IN_PROCESS:
    import importlib

    eager_attention = importlib.import_module("alilama_core.engine.attention_math").eager_attention
else:
    from .attention_math import eager_attention

# -- positional schemes ----------------------------------------------------------------------
# A scheme is the class of its standalone module: ``kind`` ("bias", "rotary", "embedding",
# "none") and the method of its kind, the interface of Alilama's PositionalScheme.

_SCHEME_CLASSES: dict[str, type] = {}


def register_positional_class(module_name: str, cls: type) -> None:
    """Make a scheme's standalone class known in-process (``_installed_scheme_class`` does this)."""
    _SCHEME_CLASSES[module_name] = cls


def _scheme_class(config: AlilamaConfig) -> type:
    """The standalone class of the positional scheme ``config.positional``, built-in or a plugin's.

    Code from a model folder runs only under the user's trust: as remote code
    (``trust_remote_code=True``), the class comes from the file
    ``config.positional_module``.py of the folder or repository, through
    transformers' own dynamic-module machinery. In-process (Alilama installed,
    no remote code), it comes only from the installed plugin that registers
    ``config.positional``; no file of the model's folder is ever imported.
    """
    name, cls_name = config.positional_module, config.positional_class
    if name is None and cls_name is None:  # a config built by hand, or exported before every scheme shipped one
        if _IN_PROCESS:
            return _installed_scheme_class(config)
        raise ValueError(
            f"config.json names no standalone module for positional scheme {config.positional!r} "
            "(positional_module, positional_class): export the run again with this version of Alilama"
        )
    for what, value in (("positional_module", name), ("positional_class", cls_name)):
        if not (isinstance(value, str) and value.isidentifier()):
            raise ValueError(f"config.{what} must be a Python identifier, got {value!r}")
    if name in _SCHEME_CLASSES:
        return _SCHEME_CLASSES[name]
    if _IN_PROCESS:
        return _installed_scheme_class(config)
    import importlib

    package = __name__.rpartition(".")[0]
    try:  # copied beside this file (a local folder, or fetched with it)
        return getattr(importlib.import_module(f"{package}.{name}"), cls_name)
    except ImportError:
        pass
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    source = getattr(config, "_name_or_path", "") or ""
    if not source:
        raise ValueError(
            f"positional scheme {config.positional!r} lives in {name}.py, which must be loaded from the "
            "model's folder or repository: use from_pretrained"
        )
    revision = getattr(config, "_commit_hash", None)
    return get_class_from_dynamic_module(f"{name}.{cls_name}", source, revision=revision)


_TRUST_HINT = (
    "To run the module shipped in the model's folder instead (only if you trust its author), load it with "
    "trust_remote_code=True in a Python that has not imported alilama_hf"
)


def _installed_scheme_class(config: AlilamaConfig) -> type:
    """The standalone class of an installed plugin scheme (the module the export would copy)."""
    import importlib

    schemes = importlib.import_module("alilama_hf.schemes")  # by name: remote code never reaches this
    errors = importlib.import_module("alilama_core.base.errors")
    try:
        name, standalone, _ = schemes.standalone_class(config.positional)
    except errors.AlilamaError as exc:
        raise ValueError(
            f"positional scheme {config.positional!r} is not installed here ({exc}). Install the plugin "
            f"package that provides it. {_TRUST_HINT}"
        ) from None
    named = (config.positional_module, config.positional_class)
    if named != (None, None) and (name, standalone.__name__) != named:
        raise ValueError(
            f"the installed scheme {config.positional!r} exports {name}.{standalone.__name__}, but the model's "
            f"config names {config.positional_module}.{config.positional_class}: the folder was not written by "
            f"this plugin. {_TRUST_HINT}"
        )
    register_positional_class(name, standalone)
    return standalone


def build_positional(config: AlilamaConfig) -> nn.Module:
    return _scheme_class(config)(config)


# -- attention functions -------------------------------------------------------------------
# One signature, transformers' own: fn(module, q, k, v, attention_mask, scaling=, dropout=, ...)
# with q (B, H, T, D), k and v (B, H, S, D); returns ((B, T, H, D), weights or None).


def eager_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[Tensor, Tensor]:
    """``softmax(Q K^T * scaling + mask) V`` in float32 (``attention_math``); ``attention_mask`` is additive ``(B|1, H|1, T, S)``."""
    out, weights = eager_attention(query, key, value, attention_mask, scaling, dropout, module.training)
    return out.transpose(1, 2).contiguous(), weights  # (B, T, H, D)


def flash_alibi_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    slopes: Tensor | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """flash-attn with its ALiBi slopes: bias ``-m_h * (i - j)`` inside the kernel, no dense bias."""
    try:  # optional: transformers checks imports outside try blocks when it loads remote code
        from flash_attn import flash_attn_func
    except ImportError as exc:
        raise ImportError("attn_implementation='flash_attention_2' needs the flash-attn package") from exc
    out = flash_attn_func(
        query.transpose(1, 2),
        key.transpose(1, 2),
        value.transpose(1, 2),  # (B, T|S, H, D)
        dropout_p=dropout if module.training else 0.0,
        softmax_scale=scaling,
        causal=True,
        alibi_slopes=slopes.float(),
    )
    return out, None  # (B, T, H, D)


def relu2(x: Tensor) -> Tensor:
    """ReLU² (So et al., 2021): ``relu(x) ** 2``."""
    return F.relu(x).square()


ACTIVATION: dict[str, Callable[[Tensor], Tensor]] = {"gelu": F.gelu, "relu2": relu2}
"""``config.activation`` -> the MLP's nonlinearity (``F.gelu`` is the exact, erf GELU)."""
_RMS_NORM = getattr(nn, "RMSNorm", ())  # torch >= 2.4; only ``qk_norm`` models build one


class AlilamaAttention(nn.Module):
    def __init__(self, config: AlilamaConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim
        self.is_causal = True
        self.scaling = 1.0 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        if config.qk_norm:  # one gain per head dim, shared by the heads
            self.q_norm = nn.RMSNorm(self.head_dim, eps=config.norm_eps)
            self.k_norm = nn.RMSNorm(self.head_dim, eps=config.norm_eps)

    def forward(self, x: Tensor, attn: "_AttentionInputs", cache: Cache | None = None) -> tuple[Tensor, Tensor | None]:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, C) each
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        if self.config.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)  # each head's vectors, before positions and the cache
        if attn.rotary is not None:
            q, k = attn.rotary.rotate(q, attn.positions), attn.rotary.rotate(k, attn.positions)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)  # (B, H, S', D)
            k, v = k[:, :, : attn.s], v[:, :, : attn.s]  # a preallocated (static) cache returns its empty slots too
        fn, kwargs = attn.function(q.dtype)
        y, weights = fn(
            self, q, k, v, scaling=self.scaling, dropout=0.0, **kwargs
        )  # no dropout on the weights, as in Alilama
        y = y.reshape(B, T, C)  # (B, T, C)
        return self.dropout(self.proj(y)), weights


class AlilamaMLP(nn.Module):
    def __init__(self, config: AlilamaConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.d_mlp, bias=config.bias)
        self.proj = nn.Linear(config.d_mlp, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.act = ACTIVATION[config.activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.proj(self.act(self.fc(x))))  # (B, T, C)


def _layer_norm(config: AlilamaConfig) -> nn.LayerNorm:
    try:
        return nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.norm_bias)
    except TypeError:  # torch < 2.1 has no bias switch
        return nn.LayerNorm(config.d_model, eps=config.norm_eps)


class AlilamaBlock(GradientCheckpointingLayer):
    """Pre-norm: each sublayer reads a normalised copy and adds to the un-normalised stream."""

    def __init__(self, config: AlilamaConfig, layer_idx: int):
        super().__init__()
        self.ln_attn = _layer_norm(config)
        self.attn = AlilamaAttention(config, layer_idx)
        self.ln_mlp = _layer_norm(config)
        self.mlp = AlilamaMLP(config)

    def forward(
        self, x: Tensor, bias: Tensor | None, attn: "_AttentionInputs", cache: Cache | None = None
    ) -> tuple[Tensor, Tensor | None]:
        # ``bias`` is passed on its own (a positional argument) so that a learnable bias gets its
        # gradient through gradient checkpointing; ``attn`` carries the same tensor.
        y, weights = self.attn(self.ln_attn(x), attn.with_bias(bias), cache)
        x = x + y  # (B, T, C)
        return x + self.mlp(self.ln_mlp(x)), weights  # (B, T, C)


@dataclasses.dataclass
class _AttentionInputs:
    """What every layer's attention needs for one forward: built once by ``AlilamaModel``.

    ``visible`` ``(B|1, 1, T, S)`` bool (``None``: plainly causal), ``bias``
    ``(1, H, T, S)`` float32 (``None``: no bias scheme), ``padding`` ``(B, S)``
    (``None``: no padding), ``rotary`` the scheme that rotates q and k.
    """

    implementation: str
    s: int
    t: int
    visible: Tensor | None
    bias: Tensor | None
    padding: Tensor | None
    rotary: nn.Module | None
    positions: Tensor | None
    slopes: Tensor | None
    masks: dict = dataclasses.field(default_factory=dict)  # additive masks by dtype, shared by the layers

    def with_bias(self, bias: Tensor | None) -> "_AttentionInputs":
        return self if bias is self.bias else dataclasses.replace(self, bias=bias, masks={})

    def _visible(self, device) -> Tensor:
        if self.visible is not None:
            return self.visible
        q = torch.arange(self.s - self.t, self.s, device=device)
        return (torch.arange(self.s, device=device)[None, :] <= q[:, None])[None, None]  # (1, 1, T, S)

    def additive(self, dtype: torch.dtype, device) -> Tensor:
        """``bias`` where visible, the dtype's most negative finite value elsewhere: ``(B|1, H|1, T, S)``."""
        if dtype not in self.masks:
            bias = self.bias if self.bias is not None else torch.zeros((), device=device)
            neg = torch.tensor(torch.finfo(dtype).min, dtype=torch.float32, device=device)
            self.masks[dtype] = torch.where(self._visible(device), bias.float(), neg).clamp(min=neg).to(dtype)
        return self.masks[dtype]

    def function(self, dtype: torch.dtype) -> tuple[Callable, dict]:
        impl = self.implementation
        plain = self.visible is None and self.bias is None  # causal only: kernels apply it themselves
        if impl == "eager":
            mask = None if plain and self.t == 1 else self.additive(torch.float32, self._device())
            return eager_attention_forward, {"attention_mask": mask}
        if impl == "sdpa":
            fn = ALL_ATTENTION_FUNCTIONS.get("sdpa") or _sdpa
            if plain and self.t == self.s:
                return fn, {"attention_mask": None, "is_causal": True}
            return fn, {"attention_mask": self.additive(dtype, self._device()), "is_causal": False}
        if impl.startswith("flash_attention"):
            if self.slopes is not None:
                if self.visible is not None:  # padding: flash_attn_func takes no mask
                    return ALL_ATTENTION_FUNCTIONS.get("sdpa") or _sdpa, {
                        "attention_mask": self.additive(dtype, self._device()),
                        "is_causal": False,
                    }
                return flash_alibi_attention_forward, {"attention_mask": None, "slopes": self.slopes}
            if self.bias is not None:
                raise ValueError(
                    "flash-attn takes a bias only as ALiBi slopes; this positional scheme gives a dense "
                    "bias: use attn_implementation='sdpa' or 'eager'"
                )
            return ALL_ATTENTION_FUNCTIONS[impl], {"attention_mask": self.padding, "is_causal": True}
        if impl == "flex_attention":
            device = self._device()
            mask = torch.where(self._visible(device), 0.0, torch.finfo(dtype).min).to(dtype)  # (B|1, 1, T, S)
            kwargs = {"attention_mask": mask}
            if self.bias is not None:
                b = mask.size(0)
                kwargs["position_bias"] = self.bias.to(dtype).expand(b, -1, -1, -1)  # (B, H, T, S)
            return ALL_ATTENTION_FUNCTIONS["flex_attention"], kwargs
        if impl in ALL_ATTENTION_FUNCTIONS:  # a function registered by the user: the combined mask
            return ALL_ATTENTION_FUNCTIONS[impl], {"attention_mask": self.additive(dtype, self._device())}
        raise ValueError(f"unknown attn_implementation {impl!r}")

    def _device(self):
        for t in (self.visible, self.bias, self.positions, self.padding):
            if t is not None:
                return t.device
        return None


def _sdpa(module, query, key, value, attention_mask, scaling, dropout=0.0, is_causal=False, **kwargs):
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, is_causal=is_causal, scale=scaling
    )  # (B, H, T, D)
    return out.transpose(1, 2).contiguous(), None


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
    supports_gradient_checkpointing = True
    _no_split_modules = ["AlilamaBlock"]
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_flash_attn = True  # ALiBi through flash-attn's slopes; a dense plugin bias refuses it at run time
    _supports_flash_attn_2 = True
    _supports_attention_backend = True
    _supports_cache_class = True
    _supports_static_cache = True  # the tests run generate with cache_implementation="static"
    _can_compile_fullgraph = False  # data-dependent checks (padding, the learned table's end) break the graph
    _LEGACY_KEYS = {r"embed_positions\.weight$": "positional.table.weight"}
    """Weight names of exports written before the built-in schemes shipped their own modules: the learned
    table was ``model.embed_positions.weight``; it is the scheme's own ``model.positional.table.weight``."""

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers' ``from_pretrained``, reading older exports' weight names too (``_LEGACY_KEYS``)."""
        kwargs.setdefault("key_mapping", cls._LEGACY_KEYS)
        return super().from_pretrained(*args, **kwargs)

    def _init_weights(self, module: nn.Module) -> None:
        """Alilama's init (Xavier-uniform matrices or normal(0, init_std), zero biases, unit norms).

        The positional scheme (its standalone class) starts as a fresh instance
        after its own ``reset_parameters()``: that refills the non-persistent
        buffers (ALiBi slopes, RoPE frequencies, a plugin's computed tables),
        which ``from_pretrained`` creates empty and nothing in the checkpoint
        restores, and initialises the parameters the checkpoint does not hold.
        """
        fn = init if init is not None else nn.init
        std = self.config.init_std

        def matrix(w: Tensor) -> None:
            if std is None:
                fn.xavier_uniform_(w)
            else:
                fn.normal_(w, mean=0.0, std=std)

        scheme = getattr(getattr(self, "model", self), "positional", None)
        part = next((name for name, m in scheme.named_modules() if m is module), None) if scheme else None
        if part is not None:  # the scheme, or a module of it: as the scheme initialises itself
            _init_scheme(scheme, part, self.config)
        elif isinstance(module, nn.Linear):
            matrix(module.weight)
            if module.bias is not None:
                fn.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            matrix(module.weight)
        elif isinstance(module, nn.LayerNorm):
            fn.ones_(module.weight)
            if module.bias is not None:
                fn.zeros_(module.bias)
        elif isinstance(module, _RMS_NORM):
            fn.ones_(module.weight)


def _copy(buffer: Tensor, value: Tensor) -> None:
    with torch.no_grad():
        buffer.copy_(value.to(device=buffer.device, dtype=buffer.dtype))


def _init_scheme(scheme: nn.Module, part: str, config: AlilamaConfig) -> None:
    """The module ``part`` of ``scheme`` (``""``: the scheme itself) as a fresh instance after ``reset_parameters()``.

    Its non-persistent buffers are refilled; its parameters are set unless
    loaded from the checkpoint (transformers >= 5 marks those, and ``init.copy_``
    skips them; transformers 4 initialises only what the checkpoint lacks).
    """
    module = scheme.get_submodule(part) if part else scheme
    if not any(True for _ in module.parameters(recurse=False)) and not _non_persistent(module):
        return
    with torch.device("cpu"):
        fresh = type(scheme)(config)
        if callable(getattr(fresh, "reset_parameters", None)):
            fresh.reset_parameters()
    fresh = fresh.get_submodule(part) if part else fresh
    for name in _non_persistent(module):
        if isinstance(getattr(module, name, None), Tensor) and isinstance(getattr(fresh, name, None), Tensor):
            _copy(getattr(module, name), getattr(fresh, name))
    for name, parameter in module.named_parameters(recurse=False):
        value = getattr(fresh, name, None)
        if isinstance(value, Tensor) and value.shape == parameter.shape:
            value = value.detach().to(device=parameter.device, dtype=parameter.dtype)
            if init is not None:
                init.copy_(parameter, value)
            else:
                _copy(parameter, value)


def _non_persistent(module: nn.Module) -> set[str]:
    """The names of ``module``'s own non-persistent buffers (not in checkpoints)."""
    return set(getattr(module, "_non_persistent_buffers_set", ()))


class AlilamaModel(AlilamaPreTrainedModel):
    """The decoder stack up to the final norm: hidden states ``(B, T, C)``."""

    def __init__(self, config: AlilamaConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        scheme = build_positional(config)
        self.positional = scheme
        self.scheme = [scheme]  # one reference that every kind shares, outside the module tree
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(AlilamaBlock(config, i) for i in range(config.n_layers))
        self.norm = _layer_norm(config)
        self.gradient_checkpointing = False
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
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ):
        """``cache`` (transformers >= 5.x ``generate``) and ``past_key_values`` (older) are the same thing.

        ``output_attentions=True`` returns each layer's ``(B, H, T, S)`` weights;
        they exist on the ``eager`` path only, so that call runs eager whatever
        ``attn_implementation`` says (same math, same result).
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        output_attentions = bool(output_attentions if output_attentions is not None else self.config.output_attentions)
        output_hidden_states = bool(
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        cache = cache if cache is not None else past_key_values
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if self.gradient_checkpointing and self.training:
            use_cache = False
        if use_cache and cache is None and not self.training:
            cache = _dynamic_cache(self.config)
        if not use_cache:
            cache = None
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, C)
        B, T, _ = x.shape
        past = cache.get_seq_length() if cache is not None else 0
        S = past + T
        if position_ids is None:
            position_ids = self._positions(attention_mask, past, T, x.device)  # (B|1, T)
        scheme = self.scheme[0]
        kind = getattr(scheme, "kind", "none")
        limit = getattr(scheme, "max_positions", None)
        if limit is not None and int(position_ids.max()) >= limit:
            raise ValueError(
                f"this model's positional scheme {self.config.positional!r} covers {limit} positions, but position "
                f"{int(position_ids.max())} was requested ({past} cached + {T} new). Crop the input or generate "
                "fewer tokens; ALiBi and RoPE models can run past their training context."
            )
        if kind == "embedding":
            x = x + scheme.embed(position_ids)  # (B, T, C)
        visible, padding = self._visible(attention_mask, past, T, S, x.device)
        bias = slopes = None
        if kind == "bias":
            k_pos = torch.arange(S, device=x.device)
            bias = scheme.bias(k_pos[past:], k_pos).float()[None]  # (1, H, T, S), once for all layers
            if callable(getattr(scheme, "slopes", None)):
                slopes = scheme.slopes()  # (H,) or None: the bias is not ALiBi-shaped
        implementation = "eager" if output_attentions else self.config._attn_implementation or "sdpa"
        rotary_positions = position_ids.expand(B, -1) if position_ids.size(0) == 1 and B > 1 else position_ids
        attn = _AttentionInputs(
            implementation=implementation,
            s=S,
            t=T,
            visible=visible,
            bias=bias,
            padding=padding,
            rotary=scheme if kind == "rotary" else None,
            positions=rotary_positions if position_ids.size(0) > 1 else position_ids[0],
            slopes=slopes,
        )
        x = self.dropout(x)
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for layer in self.layers:
            x, weights = layer(x, bias, attn, cache=cache)  # (B, T, C)
            if hidden_states is not None:
                hidden_states.append(x)
            if attentions is not None:
                attentions.append(weights)
        x = self.norm(x)  # (B, T, C)
        if hidden_states is not None:
            hidden_states[-1] = x
        out = _output(
            BaseModelOutputWithPast,
            last_hidden_state=x,
            cache=cache if use_cache else None,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )
        return out if return_dict is not False else out.to_tuple()

    @staticmethod
    def _positions(attention_mask: Tensor | None, past: int, t: int, device) -> Tensor:
        """Per-row positions that skip left padding, as Alilama's sampler counts them."""
        if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.all()):
            return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)[:, -t:]  # (B, T)
        return torch.arange(past, past + t, device=device)[None]  # (1, T)

    @staticmethod
    def _visible(
        attention_mask: Tensor | None, past: int, t: int, s: int, device
    ) -> tuple[Tensor | None, Tensor | None]:
        """``(B|1, 1, T, S)`` True where a query may see a key (``None``: causal only), and the ``(B, S)`` padding.

        A query row that would see no key at all (a left-padding position) sees
        every key instead: its output is never used, and this keeps softmax finite.
        """
        if attention_mask is not None and attention_mask.dim() == 4:  # prepared by the caller: causal included
            m = attention_mask[..., -t:, :s]  # a static cache's mask also covers its empty slots
            visible = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
            return visible | ~visible.any(dim=-1, keepdim=True), None
        padding = None
        if attention_mask is not None and not bool(attention_mask[:, -s:].all()):
            padding = attention_mask[:, -s:].bool()  # (B, S)
        if padding is None:
            return None, None
        k_pos = torch.arange(s, device=device)
        causal = k_pos[None, :] <= k_pos[s - t :, None]  # (T, S)
        visible = causal[None, None] & padding[:, None, None, :]  # (B, 1, T, S)
        return visible | ~visible.any(dim=-1, keepdim=True), padding


def _dynamic_cache(config: AlilamaConfig) -> Cache:
    try:
        return DynamicCache(config=config)
    except TypeError:  # transformers without the config argument
        return DynamicCache()


class AlilamaForCausalLM(AlilamaPreTrainedModel, GenerationMixin):
    """``AlilamaModel`` with the output head, tied to the token embedding unless ``tie_word_embeddings`` is false."""

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
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | Tensor = 0,
        past_key_values: Cache | None = None,
        num_items_in_batch: int | Tensor | None = None,
        **kwargs,
    ):
        """Logits ``(B, T, V)``; with ``labels`` the next-token cross-entropy (``-100`` ignored).

        ``num_items_in_batch`` (passed by ``Trainer`` under gradient
        accumulation) makes the loss a sum divided by that count, as
        transformers' own causal LMs do.
        """
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache if cache is not None else past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
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
            loss = _causal_lm_loss(logits, labels, num_items_in_batch)
        result = _output(
            CausalLMOutputWithPast,
            loss=loss,
            logits=logits,
            cache=_cache_of(out),
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )
        return result if return_dict is not False else result.to_tuple()


def _causal_lm_loss(logits: Tensor, labels: Tensor, num_items_in_batch: int | Tensor | None) -> Tensor:
    """Next-token cross-entropy in float32; a mean, or a sum over ``num_items_in_batch`` when given."""
    logits = logits[:, :-1].reshape(-1, logits.size(-1)).float()  # (B*(T-1), V)
    targets = labels[:, 1:].reshape(-1).to(logits.device)  # (B*(T-1),)
    if num_items_in_batch is None:
        return F.cross_entropy(logits, targets, ignore_index=-100)
    loss = F.cross_entropy(logits, targets, ignore_index=-100, reduction="sum")
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


class AlilamaForSequenceClassification(AlilamaPreTrainedModel):
    """``AlilamaModel`` with a linear ``score`` head on the last non-padding token, as GPT-2's.

    Rows end at their last token that is not ``config.pad_token_id`` (left or
    right padding both work); without a pad id every row must be unpadded.
    """

    def __init__(self, config: AlilamaConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = AlilamaModel(config)
        self.score = nn.Linear(config.d_model, config.num_labels, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache if cache is not None else past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.score(out.last_hidden_state)  # (B, T, L)
        B = logits.size(0)
        if input_ids is not None and self.config.pad_token_id is not None:
            real = (input_ids != self.config.pad_token_id).long()  # (B, T)
            last = (torch.arange(real.size(1), device=real.device) * real).argmax(dim=-1)  # (B,)
        elif input_ids is not None and B > 1 and self.config.pad_token_id is None:
            raise ValueError("batches of more than one row need config.pad_token_id to find each row's end")
        else:
            last = torch.full((B,), logits.size(1) - 1, device=logits.device)
        pooled = logits[torch.arange(B, device=logits.device), last]  # (B, L)
        loss = None
        if labels is not None:
            loss = self._loss(pooled, labels.to(pooled.device))
        result = _output(
            SequenceClassifierOutputWithPast,
            loss=loss,
            logits=pooled,
            cache=_cache_of(out),
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )
        return result if return_dict is not False else result.to_tuple()

    def _loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        problem = self.config.problem_type
        if problem is None:
            if self.num_labels == 1:
                problem = "regression"
            elif labels.dtype in (torch.long, torch.int):
                problem = "single_label_classification"
            else:
                problem = "multi_label_classification"
            self.config.problem_type = problem
        if problem == "regression":
            return F.mse_loss(logits.squeeze(-1).float(), labels.squeeze(-1).float())
        if problem == "single_label_classification":
            return F.cross_entropy(logits.view(-1, self.num_labels).float(), labels.view(-1))
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


__all__ = [
    "AlilamaPreTrainedModel",
    "AlilamaModel",
    "AlilamaForCausalLM",
    "AlilamaForSequenceClassification",
    "register_positional_class",
]
