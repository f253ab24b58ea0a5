"""``AlilamaConfig``: an Alilama ``ModelConfig`` as a transformers config (``model_type = "alilama"``).

This file is copied beside exported weights and runs as remote code on
machines without Alilama, so it imports only transformers. The field names
are Alilama's own; the standard transformers names (``hidden_size``,
``num_hidden_layers``, ``max_position_embeddings``, ...) are aliases through
``attribute_map``::

    >>> cfg = AlilamaConfig(d_model=64, n_layers=2, n_heads=4, positional="rope")
    >>> cfg.hidden_size, cfg.num_hidden_layers, cfg.max_position_embeddings, cfg.tie_word_embeddings
    (64, 2, 128, True)
"""

from __future__ import annotations

try:  # transformers >= 5
    from transformers import PreTrainedConfig
except ImportError:  # transformers 4.x
    from transformers import PretrainedConfig as PreTrainedConfig

POSITIONAL_SCHEMES = ("alibi", "rope", "learned", "nope")
ACTIVATIONS = ("gelu", "relu2")
"""The MLP's nonlinearities (Alilama's ``alilama_core.contracts.config.ACTIVATIONS``, repeated: this file runs without it)."""
DIMENSION_LIMITS = {
    "vocab_size": 1 << 24,
    "d_model": 1 << 16,
    "n_layers": 1024,
    "n_heads": 1024,
    "d_mlp": 1 << 18,
    "context_length": 1 << 20,
}
"""Largest value of each dimension (Alilama's own ``alilama_core.base.limits``, repeated: this file runs without it)."""


def _check_dimensions(untied_head: bool = False, **dims: int) -> None:
    """Refuse dimensions that are not positive integers within ``DIMENSION_LIMITS``, and models whose
    float32 weights alone exceed this machine's memory, before any layer is built."""
    import os

    for name, value in dims.items():
        most = DIMENSION_LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise ValueError(
                f"{name} must be an integer from 1 to {most:,} for an Alilama model, got {value!r}: "
                "this config.json is corrupt or was edited; restore the exported one"
            )
    d, f = dims["d_model"], dims["d_mlp"]
    parameters = (
        dims["vocab_size"] * d * (2 if untied_head else 1)
        + dims["n_layers"] * (4 * d * d + 2 * d * f + 9 * d + f)
        + dims["context_length"] * d
    )
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    if memory and 4 * parameters > memory:
        raise ValueError(
            f"this config describes about {parameters:,} parameters, whose float32 weights need "
            f"{4 * parameters / 2**30:,.1f} GiB; this machine has {memory / 2**30:,.1f} GiB of memory"
        )


class AlilamaConfig(PreTrainedConfig):
    """The fields of ``alilama_core.contracts.config.ModelConfig``, plus the token ids generation needs.

    ``positional`` names the positional scheme; its standalone module (the
    scheme's ``export_source()``, built-in or a plugin's) ships beside this
    file: ``positional_module`` names that file (without ``.py``) and
    ``positional_class`` the class in it; ``positional_options`` holds the
    scheme's own settings. A config without them (built by hand) may name a
    built-in scheme, ``alibi``, ``rope``, ``learned`` or ``nope``: in-process
    its class comes from the installed plugin. ``attention`` records the training backend; here
    attention follows ``attn_implementation`` (``"sdpa"`` by default).

    ``activation`` is the MLP's nonlinearity (``"gelu"``, exact, or ``"relu2"``,
    ``relu(x)**2``); ``qk_norm`` normalises each head's queries and keys with an
    RMSNorm over the head dim (``norm_eps``) before positions and the cache;
    ``tie_word_embeddings`` (Alilama's ``tie_embeddings``) ties the output head to
    the token embedding, else ``lm_head`` is a weight of its own. A config written
    before these settings existed has none of them: GELU, no QK-norm, a tied head.

    ``context_length`` (alias ``max_position_embeddings``) is the training
    context. For learned positions it is a hard limit (the table's size); for
    ALiBi, RoPE and NoPE it is only the length the model was trained on:
    they run past it (``generate`` then warns once).
    """

    model_type = "alilama"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_hidden_layers": "n_layers",
        "num_attention_heads": "n_heads",
        "intermediate_size": "d_mlp",
        "layer_norm_eps": "norm_eps",
        "max_position_embeddings": "context_length",
    }

    def __init__(
        self,
        vocab_size: int = 4096,
        d_model: int = 128,
        n_layers: int = 8,
        n_heads: int = 8,
        d_mlp: int = 512,
        context_length: int = 128,
        positional: str = "alibi",
        attention: str = "auto",
        dropout: float = 0.0,
        bias: bool = True,
        norm_bias: bool = True,
        norm_eps: float = 1e-5,
        rope_theta: float = 10000.0,
        init_std: float | None = None,
        activation: str = "gelu",
        qk_norm: bool = False,
        positional_module: str | None = None,
        positional_class: str | None = None,
        positional_options: dict | None = None,
        bos_token_id: int | None = None,
        eos_token_id: int | None = None,
        pad_token_id: int | None = None,
        use_cache: bool = True,
        tie_word_embeddings: bool = True,
        **kwargs,
    ):
        if positional not in POSITIONAL_SCHEMES and not (positional_module and positional_class):
            raise ValueError(
                f"positional must be one of {', '.join(POSITIONAL_SCHEMES)}, got {positional!r}: a plugin "
                "scheme needs positional_module and positional_class (its standalone module, written by "
                "`alilama export hf`)"
            )
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
        _check_dimensions(
            untied_head=not tie_word_embeddings,
            vocab_size=vocab_size,
            d_model=d_model,
            n_layers=n_layers,
            n_heads=n_heads,
            d_mlp=d_mlp,
            context_length=context_length,
        )
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if positional == "rope" and (d_model // n_heads) % 2:
            raise ValueError(f"rope needs an even head dimension, got d_model/n_heads = {d_model // n_heads}")
        super().__init__(**kwargs)
        # Set after the base init, which (in transformers 4) would reset the token ids and tying.
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.d_mlp = d_mlp
        self.context_length = context_length
        self.positional = positional
        self.attention = attention
        self.dropout = dropout
        self.bias = bias
        self.norm_bias = norm_bias
        self.norm_eps = norm_eps
        self.rope_theta = rope_theta
        self.init_std = init_std
        self.activation = activation
        self.qk_norm = bool(qk_norm)
        self.positional_module = positional_module
        self.positional_class = positional_class
        self.positional_options = dict(positional_options or {})
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.use_cache = use_cache
        # Tying must be explicit: transformers 5 silently skips it when the config does not say so.
        self.tie_word_embeddings = tie_word_embeddings

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


__all__ = ["AlilamaConfig"]
