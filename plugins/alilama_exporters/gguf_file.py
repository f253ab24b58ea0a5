"""A run as one GGUF file for llama.cpp and the tools built on it (ollama, LM Studio, llamafile).

``alilama export gguf RUN OUT.gguf [--dtype f32|f16|q8_0] [--modelfile]``, written
with the ``gguf`` package that llama.cpp publishes. Each positional scheme declares
the llama.cpp architecture that computes it (``PositionalScheme.export_targets["gguf"]``);
the built-ins declare:

==========  ===========  ==========================================================
Alilama     llama.cpp    how
==========  ===========  ==========================================================
ALiBi       ``mpt``      ``mpt.attention.max_alibi_bias = 8``: llama.cpp's slopes
                         (``2^(-8h/n)``, odd-then-even heads past a power of two)
                         are Alilama's, checked on the model's own slopes
NoPE        ``mpt``      ``max_alibi_bias = 0``: no positional term
learned     ``gpt2``     ``position_embd`` is the learned table
RoPE        ``gptneox``  NeoX (half) rotation on all of each head's dims, theta kept,
                         sequential residual
==========  ===========  ==========================================================

All three take every Alilama weight under one layout: LayerNorm with weight and
bias (a model without norm or linear biases gets zeros), the attention's ``[q | k |
v]`` fused projection and the MLP's up and down projections as ``(out, in)``
matrices, the output head tied to the token embedding (``gptneox`` needs its own
``output`` tensor: a copy) or, untied (``tie_embeddings=False``), the ``output``
tensor, which ``mpt`` and ``gpt2`` load when present. So one table maps Alilama's
weight names onto llama.cpp's tensor kinds (``gguf.MODEL_TENSOR``), and
``gguf.TENSOR_NAMES`` names them.

What none of the three computes, hence refused by name (``gguf_reason``): ReLU²
(``activation = relu2``: their MLPs are ``LLM_FFN_GELU``, fixed) and a per-head
query/key RMSNorm (``qk_norm``: gpt2 and gptneox have none; mpt's optional Q/K
norm is a LayerNorm over all heads at once). ``export hf`` keeps such models.

What llama.cpp computes differently, measured in ``tests/hf/test_gguf.py``: its
GELU is the tanh approximation, looked up in a table of float16 inputs, where
Alilama's is exact (``erf``); logits then differ by about 1e-3 at f32, not 1e-6.

The tokenizer is the run's ``tokenizer.json`` (``Tokenizer.save_hf``, the
documented contract) as llama.cpp's BPE vocabulary (``tokenizer.ggml.model =
gpt2``: byte-level token strings and ranked merges), with the pre-tokenizer whose
split equals the one ``tokenizer.json`` describes (``tokenizer.ggml.pre``,
``PRE_TOKENIZERS``): the GPT-4 pattern (Alilama's default) is llama.cpp's
``dbrx`` (the same split, no BOS), GPT-2's (``ByteLevel`` with its own regex, as
GPT-2-style tokenizers write it) is ``gpt-2``. A tokenizer that splits otherwise
is refused, naming its pattern.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from alilama_core.base.errors import AlilamaError, UnsupportedError
from alilama_core.contracts.exporter import Exporter, ExportOption, Reading, Staging
from alilama_core.runs.exports import declared_target, declared_targets

DTYPES = ("f32", "f16", "q8_0")
ALIBI_MAX_BIAS = 8.0
"""The ``max_alibi_bias`` whose llama.cpp slopes are Alilama's ALiBi slopes."""
TARGET = "gguf"
"""The key a positional scheme declares its llama.cpp architecture under (``PositionalScheme.export_targets``)."""
KNOWN = {"mpt": ("bias", "none"), "gpt2": ("embedding",), "gptneox": ("rotary",)}
"""The llama.cpp architectures this module writes, and the scheme kinds each takes."""


GPT4_SPLIT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)
"""The GPT-4 (cl100k) split, as Alilama's BPE writes it into tokenizer.json."""
GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
"""GPT-2's split: the regex of the tokenizers library's ``ByteLevel`` pre-tokenizer (``use_regex``)."""
PRE_TOKENIZERS = {GPT4_SPLIT: "dbrx", GPT2_SPLIT: "gpt-2"}
r"""Split patterns llama.cpp knows -> its pre-tokenizer (``tokenizer.ggml.pre``) that splits text the same way.

llama.cpp's ``dbrx`` is the GPT-4 pattern written without possessive quantifiers and with
``\s*[\r\n]+`` (which match the same chunks), and adds no BOS (``llama-bpe``, with the same
split, would also skip merges for whole words in the vocabulary); its ``gpt-2`` is GPT-2's."""


def split_pattern(tokenizer_json: dict) -> str:
    """The regex a ``tokenizer.json`` splits text with before its byte-level BPE.

    Two shapes are byte-level BPE as llama.cpp runs it: ``Sequence[Split(Regex P, Isolated), ByteLevel(no
    regex)]`` (Alilama's BPE: P) and ``ByteLevel`` with its own regex (GPT-2's); anything else is refused.
    """
    pre = tokenizer_json.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [step.get("type") for step in steps]
    if any(step.get("type") == "ByteLevel" and step.get("add_prefix_space") for step in steps):
        kinds = []  # a space added before the text: no llama.cpp pre-tokenizer does that
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return GPT2_SPLIT
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        split = steps[0]
        regex = (split.get("pattern") or {}).get("Regex")
        if regex is not None and split.get("behavior") == "Isolated" and not split.get("invert"):
            return regex
    raise UnsupportedError(
        f"the tokenizer's tokenizer.json pre-tokenizer ({json.dumps(pre)[:300]}) is not a byte-level split "
        "that llama.cpp runs: GGUF export takes a Split by one regex then ByteLevel, or ByteLevel with GPT-2's regex"
    )


def pre_tokenizer(pattern: str) -> str:
    """llama.cpp's pre-tokenizer (``tokenizer.ggml.pre``) that splits text as ``pattern`` does (``PRE_TOKENIZERS``)."""
    if pattern not in PRE_TOKENIZERS:
        raise UnsupportedError(
            f"the tokenizer splits text with the pattern {pattern!r}, and llama.cpp has no pre-tokenizer known to "
            "split it the same way; GGUF export knows the GPT-4 pattern (Alilama's default; llama.cpp's 'dbrx') "
            "and GPT-2's ('gpt-2'). Train the tokenizer with one of them, or export hf instead"
        )
    return PRE_TOKENIZERS[pattern]


TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNUSED = 1, 3, 5  # llama.cpp's token types (gguf.TokenType)
TOLERANCE = {"f32": 5e-3, "f16": 1e-2, "q8_0": 1e-1}
"""Largest logit difference ``--check-with`` accepts from llama.cpp, per ``--dtype``: llama.cpp's GELU
(tanh, through a float16 table) alone moves logits by up to ~1e-3 (``tests/hf/test_gguf.py`` measures it)."""
PROBE_FILE = Path(__file__).resolve().parent / "probe_gguf.py"


def _tensor_kinds():
    from gguf import MODEL_TENSOR as T

    return {
        "tok_emb": T.TOKEN_EMBD,
        "positional.table": T.POS_EMBD,
        "ln_f": T.OUTPUT_NORM,
        "ln_attn": T.ATTN_NORM,
        "attn.qkv": T.ATTN_QKV,
        "attn.proj": T.ATTN_OUT,
        "ln_mlp": T.FFN_NORM,
        "mlp.fc": T.FFN_UP,
        "mlp.proj": T.FFN_DOWN,
        "head": T.OUTPUT,  # untied only: a tied head is the token embedding (``tied_names``)
    }


def llama_cpp_alibi_slopes(n_heads: int, max_bias: float = ALIBI_MAX_BIAS) -> torch.Tensor:
    """The slopes llama.cpp's soft_max applies for ``max_bias`` (ggml's ``ggml_compute_forward_soft_max``)."""
    n_log2 = 2 ** int(torch.log2(torch.tensor(float(n_heads))).floor())
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
    return torch.tensor([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n_heads)])


def architecture(m) -> str | None:
    """The llama.cpp architecture the scheme of ``m`` (a ``ModelConfig``) declares for ``gguf``, or ``None``."""
    return declared_target(m, TARGET)


def declared() -> dict[str, str]:
    """Every registered scheme that declares a ``gguf`` architecture -> that architecture."""
    return declared_targets(TARGET)


def config_reason(m) -> str | None:
    """What ``gguf_reason`` can tell from the ``ModelConfig`` alone (the scheme's declaration, the settings)."""
    from alilama_core.contracts.exporter import undeclared
    from alilama_core.engine.registry import get_positional

    scheme = get_positional(m.positional)
    arch = architecture(m)
    if arch is None:
        return undeclared(m.positional, scheme, TARGET, "llama.cpp", declared())
    if arch not in KNOWN:
        return (
            f"positional scheme {m.positional!r} declares gguf architecture {arch!r}; Alilama writes {', '.join(KNOWN)}"
        )
    if scheme.kind not in KNOWN[arch]:
        return f"positional scheme {m.positional!r} is a {scheme.kind!r} scheme; llama.cpp's {arch} takes {' or '.join(KNOWN[arch])}"
    if arch == "mpt" and scheme.kind == "bias" and not scheme.has_slopes:
        return f"llama.cpp's mpt computes ALiBi slopes only; positional scheme {m.positional!r} declares no has_slopes"
    extra = set(m.positional_options or {}) - ({"theta"} if arch == "gptneox" else set())
    if extra:
        return f"llama.cpp's {arch} has no setting for positional_options {sorted(extra)}"
    if m.activation != "gelu":
        return (
            f"llama.cpp's {arch} computes its MLP with GELU only (mpt, gpt2 and gptneox all do); "
            f"this model's activation is {m.activation!r}"
        )
    if m.qk_norm:
        return (
            f"llama.cpp's {arch} has no per-head query/key RMSNorm (model.qk_norm=true); "
            "mpt's optional Q/K norm is a LayerNorm over all heads, gpt2 and gptneox have none"
        )
    return None


def gguf_reason(model) -> str | None:
    """``None`` when llama.cpp has an architecture for ``model`` (an Alilama ``GPT``), else why not."""
    m = model.config
    reason = config_reason(m)
    if reason is not None:
        return reason
    arch = architecture(m)
    if model.positional.kind == "bias":
        ours = model.positional.slopes().cpu()
        if not torch.allclose(ours, llama_cpp_alibi_slopes(m.n_heads), rtol=0, atol=1e-7):
            return f"this model's ALiBi slopes are not llama.cpp's for max_alibi_bias {ALIBI_MAX_BIAS:g}"
    unmapped = [n for n, _ in model.named_parameters() if _kind_of(n) is None]
    if unmapped:
        return f"llama.cpp's {arch} has no place for the parameters {unmapped[:4]}"
    return None


def _kind_of(name: str):
    """``(gguf.MODEL_TENSOR, block or None, "weight"|"bias")`` of an Alilama weight name, or ``None``."""
    kinds = _tensor_kinds()
    match = re.fullmatch(r"(?:blocks\.(\d+)\.)?(.+)\.(weight|bias)", name)
    if match is None or match.group(2) not in kinds:
        return None
    block = int(match.group(1)) if match.group(1) is not None else None
    return kinds[match.group(2)], block, match.group(3)


def gguf_tensors(model) -> dict[str, torch.Tensor]:
    """llama.cpp tensor name -> float32 tensor, every bias present (zeros where the model has none)."""
    from gguf import MODEL_TENSOR as T
    from gguf import TENSOR_NAMES

    from alilama_core.runs.checkpoint import tied_names

    m = model.config
    tied = tied_names(model)
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items() if k not in tied}
    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        kind = _kind_of(name)
        if kind is None:
            continue  # buffers llama.cpp recomputes (ALiBi slopes, rotary frequencies), checked in gguf_reason
        tensor, block, part = kind
        out[TENSOR_NAMES[tensor].format(bid=block) + "." + part] = value
    for name, value in list(out.items()):  # biases the model was trained without
        if name.endswith(".weight") and not name.startswith(("token_embd", "position_embd", "output.")):
            out.setdefault(name[: -len("weight")] + "bias", torch.zeros(value.shape[0]))
    if tied and architecture(m) == "gptneox":  # it has no tied head: the embedding, again
        out[TENSOR_NAMES[T.OUTPUT] + ".weight"] = out[TENSOR_NAMES[T.TOKEN_EMBD] + ".weight"].clone()
    return out


def vocabulary(tok, vocab_size: int) -> dict[str, Any]:
    """llama.cpp's BPE vocabulary from the tokenizer's ``tokenizer.json``: tokens, types, merges, pre-tokenizer."""
    if not tok.hf_export:
        raise AlilamaError(
            f"the run's tokenizer (kind {tok.name!r}) cannot write a tokenizer.json, which the GGUF vocabulary "
            "is made from; export needs a tokenizer that declares hf_export"
        )
    with tempfile.TemporaryDirectory(prefix="alilama-gguf-") as tmp:
        data = json.loads(Path(tok.save_hf(tmp)).read_text(encoding="utf-8"))
    pre = pre_tokenizer(split_pattern(data))
    by_id = {i: t for t, i in data["model"]["vocab"].items()}
    specials = {t["id"] for t in data.get("added_tokens", []) if t.get("special")}
    if tok.vocab_size > vocab_size:
        raise AlilamaError(f"the tokenizer has {tok.vocab_size} tokens but the model only {vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):  # ids the tokenizer never makes (a model padded past it): unused
        tokens.append(by_id.get(i, f"[UNUSED_{i}]"))
        types.append(TOKEN_CONTROL if i in specials else TOKEN_NORMAL if i in by_id else TOKEN_UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return {"tokens": tokens, "types": types, "merges": merges, "pre": pre}


def write_gguf(loaded, path: Path, dtype: str = "f32", name: str | None = None) -> dict[str, Any]:
    """Write ``loaded`` (a ``LoadedRun``) to the file ``path``; returns what was written (for the CLI).

    ``path`` is written in place: ``export_gguf`` gives it a temporary name and renames it when checked.
    """
    import gguf

    if dtype not in DTYPES:
        raise AlilamaError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    model, tok, m = loaded.model, loaded.tokenizer, loaded.config.model
    reason = gguf_reason(model)
    if reason is not None:
        raise UnsupportedError(f"cannot export as GGUF: {reason}; export hf --format remote-code keeps it")
    arch = architecture(m)
    vocab = vocabulary(tok, m.vocab_size)
    tensors = gguf_tensors(model)
    w = gguf.GGUFWriter(path, arch)
    try:
        w.add_name(name or path.stem)
        w.add_file_type(_file_type(dtype))
        w.add_context_length(m.context_length)
        w.add_embedding_length(m.d_model)
        w.add_block_count(m.n_layers)
        w.add_feed_forward_length(m.d_mlp)
        w.add_head_count(m.n_heads)
        w.add_head_count_kv(m.n_heads)
        w.add_layer_norm_eps(m.norm_eps)
        if arch == "mpt":
            w.add_max_alibi_bias(ALIBI_MAX_BIAS if model.positional.kind == "bias" else 0.0)
        if arch == "gptneox":
            w.add_rope_dimension_count(m.d_model // m.n_heads)
            w.add_rope_freq_base(float(model.positional.theta))
            w.add_parallel_residual(False)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(vocab["pre"])
        w.add_token_list(vocab["tokens"])
        w.add_token_types(vocab["types"])
        w.add_token_merges(vocab["merges"])
        if tok.eot_id is not None:
            w.add_bos_token_id(tok.eot_id)
            w.add_eos_token_id(tok.eot_id)
            w.add_pad_token_id(tok.eot_id)
        w.add_add_bos_token(False)
        w.add_add_eos_token(False)
        for tensor_name, value in tensors.items():
            data, qtype = _encode(value, dtype)
            w.add_tensor(tensor_name, data, raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    finally:
        with contextlib.suppress(OSError):  # after a failed write (a full disk): just close the file
            w.close()
    return {"architecture": arch, "dtype": dtype, "tensors": len(tensors), "pre": vocab["pre"]}


def _file_type(dtype: str):
    from gguf import LlamaFileType as F

    return {"f32": F.ALL_F32, "f16": F.MOSTLY_F16, "q8_0": F.MOSTLY_Q8_0}[dtype]


def _encode(value: torch.Tensor, dtype: str):
    """``(numpy array, gguf type)``: matrices in ``dtype``; vectors (norms, biases) stay f32, as llama.cpp keeps them."""
    import numpy as np
    from gguf import GGMLQuantizationType as Q
    from gguf import quants

    array = value.numpy().astype(np.float32)
    if array.ndim < 2 or dtype == "f32":
        return array, Q.F32
    if dtype == "f16":
        return array.astype(np.float16), Q.F16
    if array.shape[-1] % quants.GGML_QUANT_SIZES[Q.Q8_0][0]:
        return array.astype(np.float16), Q.F16  # rows that do not split into q8_0 blocks of 32
    return quants.quantize(array, Q.Q8_0), Q.Q8_0


def modelfile_text(loaded, gguf_name: str) -> str:
    """An ollama ``Modelfile`` for the GGUF file ``gguf_name`` beside it: a base model's plain template."""
    from alilama_core.engine.generation import SamplingSettings

    tok, m = loaded.tokenizer, loaded.config.model
    eot = {i: t for t, i in tok.special_tokens.items()}.get(tok.eot_id)
    defaults = SamplingSettings()
    lines = [
        "# ollama create NAME -f Modelfile, then: ollama run NAME 'Once upon a time'",
        f"FROM ./{gguf_name}",
        "# a base model: the prompt is continued as it is, with no chat roles",
        'TEMPLATE """{{ .Prompt }}"""',
        *([f'PARAMETER stop "{eot}"'] if eot else []),
        f"PARAMETER num_ctx {m.context_length}",
        f"PARAMETER temperature {defaults.temperature:g}",
        f"PARAMETER num_predict {defaults.max_new_tokens}",
    ]
    return "\n".join(lines) + "\n"


class GGUFExporter(Exporter):
    """One GGUF file for llama.cpp, ollama and LM Studio (and an ollama ``Modelfile`` beside it)."""

    name = "gguf"
    description = "one GGUF file for llama.cpp, ollama and LM Studio"
    target = "file"
    noun = "GGUF file"
    magic = b"GGUF"
    options = (
        ExportOption("dtype", "--dtype", "f32", "f32, f16 or q8_0 (matrices; norms and biases stay f32).", DTYPES),
        ExportOption("modelfile", "--modelfile", False, "Also write an ollama Modelfile beside the GGUF file."),
    )
    examples = (
        "alilama export gguf runs/essay out/essay.gguf",
        "alilama export gguf runs/essay out/q8.gguf --dtype q8_0 --modelfile",
        "alilama export gguf runs/essay out/e.gguf --check-with ~/llama/bin/python",
    )
    steps = 2
    reader = "llama.cpp"
    probe_file = str(PROBE_FILE)
    probe_needs = "llama-cpp-python, numpy and safetensors"
    greedy_must_match = False  # reported, not required: llama.cpp's GELU may tip a near tie

    @classmethod
    def check(cls) -> str | None:
        import importlib.util

        if importlib.util.find_spec("gguf") is None:
            return "exporting GGUF needs the gguf package: pip install 'alilama[gguf]'"
        return None

    def companions(self, out: Path) -> dict[str, Path]:
        if not self.options["modelfile"]:
            return {}
        if out.name == "Modelfile":
            raise AlilamaError("with --modelfile, OUT cannot be named Modelfile: that is the Modelfile's own name")
        return {"modelfile": out.parent / "Modelfile"}

    def problem(self, model_config) -> str | None:
        reason = config_reason(model_config)
        return None if reason is None else f"{reason}; export hf --format remote-code keeps it"

    def tolerance(self) -> float:
        return TOLERANCE[self.options["dtype"]]

    def write(self, loaded, staging: Staging, on_step) -> dict[str, Any]:
        import gguf

        dtype, out = self.options["dtype"], staging.out
        info = write_gguf(loaded, staging.path, dtype, name=out.stem)
        on_step(
            f"wrote {out.name}: llama.cpp architecture {info['architecture']}, {dtype}, pre-tokenizer {info['pre']}"
        )
        reader = gguf.GGUFReader(staging.path)
        arch = reader.fields["general.architecture"]
        written = bytes(arch.parts[arch.data[0]]).decode()
        if written != info["architecture"] or len(reader.tensors) != info["tensors"]:
            raise AlilamaError(f"{out} did not read back: architecture {written!r}, {len(reader.tensors)} tensors")
        del reader, arch  # they map the file
        on_step(f"read it back with gguf {_version('gguf')}: {info['tensors']} tensors")
        if "modelfile" in staging.companions:
            staging.companions["modelfile"].write_text(modelfile_text(loaded, out.name), encoding="utf-8")
            info["modelfile"] = str(out.parent / "Modelfile")
        return info

    def reading_from(self, result, where: str) -> Reading:
        return Reading(
            reader=f"llama-cpp-python {result['llama_cpp']}",
            max_logit_diff=float(result["max_logit_diff"]),
            greedy_equal=result.get("greedy_equal"),
            tokenizer_equal=result.get("tokenizer_equal"),
            where=where,
            raw=dict(result),
        )

    def mismatch(self, reading: Reading, wrong: list[str]) -> str:
        where = f"--check-with {reading.where}"
        if reading.tokenizer_equal is False:
            return f"{where}: llama.cpp's tokenizer gives other ids than the run's"
        dtype = self.options["dtype"]
        return (
            f"{where}: llama.cpp's logits differ from the run's by {reading.max_logit_diff:.2e}, "
            f"more than {self.tolerance():g} at {dtype}"
        )

    def checked_line(self, readings: list[Reading]) -> str:
        if not readings:
            return "not run in llama.cpp (--check-with PYTHON runs it where llama-cpp-python is installed)"
        return "ran it in llama.cpp: " + "; ".join(r.line() for r in readings)

    def summary(self, run: str, out: Path, info) -> list[str]:
        lines = [f"exported {run} to {out} ({info['architecture']}, {info['dtype']}) for llama.cpp"]
        if "modelfile" in info:
            lines.append(f"wrote {info['modelfile']}: ollama create NAME -f {info['modelfile']}")
        return lines


def export_gguf(
    run,
    out,
    *,
    dtype: str = "f32",
    checkpoint: str | None = None,
    modelfile: bool = False,
    overwrite: bool = False,
    check_with: list[str] | None = None,
    on_step=None,
) -> dict[str, Any]:
    """``alilama export gguf`` from Python: write ``run`` as the GGUF file ``out`` (and ``Modelfile`` beside it).

    What was written, with ``checks``: each ``check_with`` Python's llama.cpp reading (see
    ``alilama_core.runs.exports`` for the output rules, the staging and the read-back).
    """
    from alilama_core.runs.exports import export

    result = export(
        "gguf",
        run,
        out,
        checkpoint=checkpoint,
        overwrite=overwrite,
        check_with=check_with,
        on_step=on_step,
        dtype=dtype,
        modelfile=modelfile,
    )
    return {**result.info, "checks": [dict(r.raw) for r in result.readings]}


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)
