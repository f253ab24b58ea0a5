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
``PRE_TOKENIZERS``, read from llama.cpp's ``llama-vocab.cpp``):

====================================================  ===============  ====================================
split (``tokenizer.json``'s regex)                    llama.cpp        how
====================================================  ===============  ====================================
GPT-4's (Alilama's default), Llama-3's spelling       ``dbrx``         the same regex (llama.cpp's
                                                                       ``LLAMA3`` list), every merge
                                                                       applied, no BOS
cl100k_base's (tiktoken's and tokenizer.json's)       ``dbrx``         the GPT-4 split but ``\\s++$``: the
                                                                       same ids when no token joins a line
                                                                       break to the whitespace after it
                                                                       (checked; cl100k_base has none)
GPT-2's (``ByteLevel``), r50k's (tiktoken's)          ``gpt-2``        the same split
o200k_base's                                          ``gpt-4o``       llama.cpp's own approximation:
                                                                       other ids for combining marks
                                                                       (``LLAMA_CPP_DIFFERS``)
====================================================  ===============  ====================================

A ``tokenizer.json`` whose BPE sets ``ignore_merges`` (a word that is a token is
that token, whatever the merges) takes ``llama-bpe`` for the GPT-4 split, the one
of these that skips merges so; Alilama's BPE applies every merge (an imported
vocabulary too: each of its tokens is what the merges make of its bytes). A
tokenizer that splits otherwise is refused, naming its pattern.

Added tokens are written as their text, taken out of the text before the BPE
as ``tokenizer.json`` does: special ones as control tokens (found when special
tokens are parsed), the others (GPT-NeoX's runs of spaces) as user-defined
tokens (found always, as HF tokenizers finds them). llama.cpp finds them longest
token first where HF tokenizers finds them leftmost-longest, and has no
``lstrip``, ``rstrip`` or ``single_word``: tokens with those flags, and tokens
that can share characters in a text (but runs of one character, which both find
alike), are refused by name (``added_token_problem``). llama.cpp normalizes no
BPE text: a ``tokenizer.json`` that composes it (NFC, as GPT-NeoX's and Qwen2's
do) gets other ids on text that is not in NFC, so it is refused unless
``--approximate-tokenizer`` (``NORMALIZER_DIFFERS``); any other normalizer is
refused.
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
from alilama_core.contracts import splits
from alilama_core.contracts.exporter import Exporter, ExportOption, Reading, Staging
from alilama_core.runs.exports import declared_target, declared_targets

DTYPES = ("f32", "f16", "q8_0")
ALIBI_MAX_BIAS = 8.0
"""The ``max_alibi_bias`` whose llama.cpp slopes are Alilama's ALiBi slopes."""
TARGET = "gguf"
"""The key a positional scheme declares its llama.cpp architecture under (``PositionalScheme.export_targets``)."""
KNOWN = {"mpt": ("bias", "none"), "gpt2": ("embedding",), "gptneox": ("rotary",)}
"""The llama.cpp architectures this module writes, and the scheme kinds each takes."""


PRE_TOKENIZERS = {
    # (split pattern, tokenizer.json's ignore_merges) -> llama.cpp's pre-tokenizer
    (splits.GPT4, False): "dbrx",
    (splits.LLAMA3, False): "dbrx",
    (splits.CL100K, False): "dbrx",
    (splits.CL100K_HF, False): "dbrx",
    (splits.GPT4, True): "llama-bpe",
    (splits.LLAMA3, True): "llama-bpe",
    (splits.CL100K, True): "llama-bpe",
    (splits.CL100K_HF, True): "llama-bpe",
    (splits.GPT2, False): "gpt-2",
    (splits.R50K, False): "gpt-2",
    (splits.O200K, False): "gpt-4o",
}
r"""Split patterns llama.cpp knows, with whether the BPE skips merges for a word that is a token
(``ignore_merges``) -> its pre-tokenizer (``tokenizer.ggml.pre``) that splits and merges the same way.

In llama.cpp 0.3.36's ``llama-vocab.cpp``: ``dbrx`` and ``llama-bpe`` both split with the Llama-3
regex (the GPT-4 pattern written with ``\s*[\r\n]+`` and without possessive quantifiers: the same
chunks), run by ``unicode_regex_split_custom_llama3``; ``llama-bpe`` also sets ``ignore_merges`` (and a
BOS, which the file's ``add_bos_token = false`` turns off). ``gpt-2`` is GPT-2's regex
(``unicode_regex_split_custom_gpt2``), every merge applied. ``gpt-4o`` rewrites o200k's letter classes
(``LLAMA_CPP_DIFFERS``). cl100k's ``\s++$`` (whitespace that ends the text is one chunk, where the GPT-4
split cuts it after its last line break) has no llama.cpp pre-tokenizer: ``dbrx`` gives the same ids
when no token spans that cut (``split_at_end_problem``)."""
LLAMA_CPP_DIFFERS = {
    "gpt-4o": (
        "llama.cpp's gpt-4o approximates o200k's split: combining marks are no letters there, so text with "
        "them (Devanagari, Thai, decomposed accents) can get other ids"
    ),
}
"""llama.cpp pre-tokenizers named in ``PRE_TOKENIZERS`` that split some text otherwise (measured in
``tests/hf/test_gguf_vocabularies.py``): said when such a file is written."""
NORMALIZER_DIFFERS = {
    "NFC": (
        "llama.cpp does not normalize text to NFC: text that is not in NFC, such as decomposed accents, gets other ids"
    ),
}
"""Normalizers a ``tokenizer.json`` may apply that llama.cpp does not (its BPE vocabularies normalize
nothing: ``llm_tokenizer_bpe_session::tokenize`` splits the text as given; the NFD of ``llama-vocab.cpp``
serves WordPiece vocabularies only), with what differs: said when such a file is written. Any other
normalizer is refused."""
LLAMA_CPP_NAMED = {
    "phi-3": "Phi-3 (it strips the whitespace after special tokens, and fails to load a vocabulary without '</s>')",
    "phi3": "Phi-3 (it strips the whitespace after special tokens, and fails to load a vocabulary without '</s>')",
    "modern-bert": "ModernBERT (it strips the whitespace before a '[MASK]' token)",
}
"""Parts of a model's name (``general.name``, lowercased) for which llama.cpp 0.3.36 changes how tokens are
found (``llama-vocab.cpp``, the per-token attributes set by model name: ``LLAMA_TOKEN_ATTR_RSTRIP`` on every
control and user-defined token for Phi-3, ``LLAMA_TOKEN_ATTR_LSTRIP`` on ``[MASK]`` for ModernBERT):
refused, since the file is named after the output file."""


def _byte_of_char() -> dict[str, int]:
    """The byte each character of a byte-level token string stands for (GPT-2's printable alphabet)."""
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(others)}}


_JOINED_ACROSS_LAST_BREAK = re.compile(rb"[\r\n][\t\x0b\x0c \x80-\xff][^\r\n]*\Z")
"""A token whose last line break is followed by whitespace (or a byte of a non-ASCII character)."""


def split_at_end_problem(pattern: str, tokens: list[str]) -> str | None:
    r"""Why ``dbrx`` would not give cl100k's ids for ``tokens`` (byte-level strings), or ``None``.

    cl100k's ``\s++$`` keeps whitespace that ends the text whole (``"x\n  "``: ``"\n  "``) where
    llama.cpp cuts it after its last line break (``"\n"``, ``"  "``). The ids are the same unless a
    token joins that line break to the whitespace after it; none of cl100k_base's does.
    """
    if pattern not in (splits.CL100K, splits.CL100K_HF):
        return None
    byte_of = _byte_of_char()
    for token in tokens:
        raw = bytes(byte_of.get(c, 0x21) for c in token)  # special tokens' characters: not line breaks
        if _JOINED_ACROSS_LAST_BREAK.search(raw):
            return (
                f"the tokenizer splits with cl100k's pattern, whose \\s++$ keeps whitespace that ends the text "
                f"in one chunk where llama.cpp's split cuts it after the last line break, and its token "
                f"{raw.decode('utf-8', 'replace')!r} joins such a line break to the whitespace after it, so "
                "llama.cpp would give other ids for text that ends so"
            )
    return None


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
        return splits.GPT2
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        split = steps[0]
        regex = (split.get("pattern") or {}).get("Regex")
        if regex is not None and split.get("behavior") == "Isolated" and not split.get("invert"):
            return regex
    raise UnsupportedError(
        f"the tokenizer's tokenizer.json pre-tokenizer ({json.dumps(pre)[:300]}) is not a byte-level split "
        "that llama.cpp runs: GGUF export takes a Split by one regex then ByteLevel, or ByteLevel with GPT-2's regex"
    )


def pre_tokenizer(pattern: str, ignore_merges: bool = False) -> str:
    """llama.cpp's pre-tokenizer (``tokenizer.ggml.pre``) that splits and merges as ``pattern`` with
    ``ignore_merges`` does (``PRE_TOKENIZERS``)."""
    if (pattern, ignore_merges) in PRE_TOKENIZERS:
        return PRE_TOKENIZERS[pattern, ignore_merges]
    if (pattern, False) in PRE_TOKENIZERS:
        raise UnsupportedError(
            f"the tokenizer's tokenizer.json sets ignore_merges (a word that is a token is not merged) with the "
            f"split pattern {pattern!r}, and llama.cpp's pre-tokenizer for that split "
            f"({PRE_TOKENIZERS[pattern, False]!r}) applies every merge; export hf instead"
        )
    raise UnsupportedError(
        f"the tokenizer splits text with the pattern {pattern!r}, and llama.cpp has no pre-tokenizer known to "
        "split it the same way; GGUF export knows the GPT-4 pattern (Alilama's default), also as Llama-3 and "
        "cl100k_base write it (llama.cpp's 'dbrx'), GPT-2's and r50k_base's ('gpt-2') and o200k_base's "
        "('gpt-4o'). Train the tokenizer with one of them, or export hf instead"
    )


def normalizer(tokenizer_json: dict) -> str | None:
    """The normalizer a ``tokenizer.json`` applies before splitting: ``None`` or ``"NFC"`` (also as a
    ``Sequence`` of it), which llama.cpp does not apply (``NORMALIZER_DIFFERS``); any other is refused."""
    norm = tokenizer_json.get("normalizer")
    steps = (norm.get("normalizers") or [] if norm.get("type") == "Sequence" else [norm]) if norm else []
    kinds = {step.get("type") if isinstance(step, dict) else None for step in steps}
    if not kinds:
        return None
    if len(kinds) == 1 and kinds <= NORMALIZER_DIFFERS.keys():
        return kinds.pop()
    raise UnsupportedError(
        f"the tokenizer's tokenizer.json normalizes the text ({json.dumps(norm)[:200]}), and llama.cpp's BPE "
        "vocabularies apply no normalizer; export hf instead"
    )


_ADDED_FLAGS = ("lstrip", "rstrip", "single_word")


def _one_character_run(text: str) -> str | None:
    """The character ``text`` repeats (``"   "``: ``" "``), or ``None``."""
    return text[0] if len(set(text)) == 1 else None


def _overlapping(tokens: list[str]) -> tuple[str, str] | None:
    """Two tokens that can share characters in a text (one inside the other, or an end of one the start of
    the other), but for runs of one character (``"  "`` and ``"   "``), or ``None``. One token's own
    overlaps (``"aba"`` in ``"ababa"``) do not count: both find it left to right."""
    texts = set(tokens)
    lengths = sorted({len(t) for t in texts})
    starts: dict[str, list[str]] = {}  # a proper start -> two of the tokens it starts, those not runs first
    for t in sorted(texts):
        for k in range(1, len(t)):
            kept = starts.setdefault(t[:k], [])
            if len(kept) < 2:
                kept.append(t)
            elif not _one_character_run(t) and _one_character_run(kept[-1]):
                kept[-1] = t

    def apart(a: str, b: str) -> bool:
        run = _one_character_run(a)
        return run is not None and run == _one_character_run(b)

    for t in sorted(texts):
        for n in lengths:
            if n >= len(t):
                break
            for i in range(len(t) - n + 1):
                if t[i : i + n] in texts and not apart(t[i : i + n], t):
                    return t[i : i + n], t
        for i in range(1, len(t)):
            for other in starts.get(t[i:], ()):
                if other != t and not apart(t, other):
                    return t, other
    return None


def added_token_problem(added: list[dict], normalizer: str | None) -> str | None:
    """Why llama.cpp would find the added tokens of a ``tokenizer.json`` (``added_tokens``) elsewhere in a
    text than ``tokenizer.json`` does, or ``None``.

    llama.cpp 0.3.36 (``llama_vocab::impl::tokenizer_st_partition``) takes its control tokens (when special
    tokens are parsed) and user-defined tokens (always) out of the text before the BPE, as HF tokenizers
    does, but longest token first, each at every place it occurs left to right, where HF tokenizers finds
    them leftmost-longest; and strips whitespace around a token only for models it knows by name
    (``LLAMA_TOKEN_ATTR_LSTRIP``/``RSTRIP``), never whole words only. The two find the same places when no
    token has ``lstrip``, ``rstrip`` or ``single_word`` and no two tokens can share characters, but for runs
    of one character (GPT-NeoX's runs of spaces: both take the longest run first, left to right). A token
    looked for in NFC text (``normalized``) must be in NFC itself: llama.cpp looks for it as it is.
    """
    flagged = [t for t in added if any(t.get(flag) for flag in _ADDED_FLAGS)]
    if flagged:
        names = ", ".join(f"{t['content']!r} ({', '.join(f for f in _ADDED_FLAGS if t.get(f))})" for t in flagged[:5])
        more = f" and {len(flagged) - 5} more" if len(flagged) > 5 else ""
        return (
            f"the tokenizer's added tokens {names}{more} take in the whitespace around them or match whole "
            "words only, and llama.cpp's GGUF vocabulary has no such flags (it strips whitespace around tokens "
            "only for models it knows by name), so it would find them elsewhere"
        )
    if normalizer is not None:
        import unicodedata

        unnormalized = [
            t["content"]
            for t in added
            if t.get("normalized", not t.get("special")) and not unicodedata.is_normalized(normalizer, t["content"])
        ]
        if unnormalized:
            return (
                f"the tokenizer's added token {unnormalized[0]!r} is not in {normalizer}: the tokenizer finds it "
                f"in {normalizer} text as {unicodedata.normalize(normalizer, unnormalized[0])!r}, where llama.cpp "
                "looks for it as it is"
            )
    pair = _overlapping([t["content"] for t in added])
    if pair is not None:
        return (
            f"the tokenizer's added tokens {pair[0]!r} and {pair[1]!r} can share characters in a text, and "
            "llama.cpp finds added tokens longest first where the tokenizer finds them leftmost-longest, so it "
            "could cut such text otherwise"
        )
    return None


TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5  # llama.cpp's token types (gguf.TokenType)
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
    """llama.cpp's BPE vocabulary from the tokenizer's ``tokenizer.json``: tokens, types, merges, pre-tokenizer,
    and ``differs``: what llama.cpp would do otherwise (``LLAMA_CPP_DIFFERS``, ``NORMALIZER_DIFFERS``)."""
    if not tok.hf_export:
        raise AlilamaError(
            f"the run's tokenizer (kind {tok.name!r}) cannot write a tokenizer.json, which the GGUF vocabulary "
            "is made from; export needs a tokenizer that declares hf_export"
        )
    with tempfile.TemporaryDirectory(prefix="alilama-gguf-") as tmp:
        data = json.loads(Path(tok.save_hf(tmp)).read_text(encoding="utf-8"))
    pattern = split_pattern(data)
    pre = pre_tokenizer(pattern, bool(data["model"].get("ignore_merges")))
    problem = split_at_end_problem(pattern, list(data["model"]["vocab"]))
    norm = normalizer(data)
    added = data.get("added_tokens") or []
    problem = problem or added_token_problem(added, norm)
    if problem is not None:
        raise UnsupportedError(f"{problem}; export hf instead")
    by_id = {i: t for t, i in data["model"]["vocab"].items()}
    # added tokens as their text, found in the text before the BPE: special ones as control tokens (only
    # when special tokens are parsed), the others as user-defined tokens (always)
    by_id.update({t["id"]: t["content"] for t in added})
    kinds = {t["id"]: TOKEN_CONTROL if t.get("special") else TOKEN_USER_DEFINED for t in added}
    if tok.vocab_size > vocab_size:
        raise AlilamaError(f"the tokenizer has {tok.vocab_size} tokens but the model only {vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):  # ids the tokenizer never makes (a model padded past it): unused
        tokens.append(by_id.get(i, f"[UNUSED_{i}]"))
        types.append(kinds.get(i, TOKEN_NORMAL if i in by_id else TOKEN_UNUSED))
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    differs = [d for d in (LLAMA_CPP_DIFFERS.get(pre), NORMALIZER_DIFFERS.get(norm or "")) if d]
    return {"tokens": tokens, "types": types, "merges": merges, "pre": pre, "differs": differs}


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
    name = name or path.stem
    known = next((k for k in LLAMA_CPP_NAMED if k in name.lower()), None)
    if known is not None:
        raise AlilamaError(
            f"llama.cpp reads a model named {name!r} as {LLAMA_CPP_NAMED[known]}, so it would find tokens "
            f"otherwise: name the GGUF file without {known!r}"
        )
    vocab = vocabulary(tok, m.vocab_size)
    tensors = gguf_tensors(model)
    w = gguf.GGUFWriter(path, arch)
    try:
        w.add_name(name)
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
    info = {"architecture": arch, "dtype": dtype, "tensors": len(tensors), "pre": vocab["pre"]}
    return info | ({"tokenizer_differs": "; ".join(vocab["differs"])} if vocab["differs"] else {})


_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""Bytes of each fixed-size GGUF value type (``gguf.GGUFValueType``); 8 is a string, 9 an array."""


def read_header(path: Path) -> dict[str, Any]:
    """Walk a GGUF file's header, every metadata value and tensor description, as llama.cpp reads them.

    Returns its version, ``keys`` and ``tensors`` (counts), ``architecture`` and ``pre``
    (``tokenizer.ggml.pre``). Raises ``AlilamaError`` where the file is cut short or malformed. It takes
    0.3 s for o200k_base's 200,000 tokens, where ``gguf.GGUFReader``, which builds an array view of each
    string, takes 25 s (two cores).
    """
    import mmap
    import struct

    def fail(why: str) -> AlilamaError:
        return AlilamaError(f"{path} is not a well-formed GGUF file: {why}")

    if Path(path).stat().st_size < 24:
        raise fail("it is shorter than a GGUF header (24 bytes)")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = 0

        def take(fmt: str):
            nonlocal at
            try:
                values = struct.unpack_from("<" + fmt, data, at)
            except struct.error:
                raise fail(f"it ends at byte {len(data)}, inside a value at byte {at}") from None
            at += struct.calcsize("<" + fmt)
            return values

        def text() -> bytes:
            nonlocal at
            (n,) = take("Q")
            if at + n > len(data):
                raise fail(f"a string of {n} bytes at byte {at} runs past its end")
            at += n
            return data[at - n : at]

        def skip(kind: int) -> bytes | None:
            nonlocal at
            if kind == 8:
                return text()
            if kind == 9:
                item, count = take("IQ")
                if item in _SCALAR_SIZES:
                    at += _SCALAR_SIZES[item] * count
                else:
                    for _ in range(count):
                        skip(item)
                return None
            if kind not in _SCALAR_SIZES:
                raise fail(f"unknown value type {kind} at byte {at}")
            at += _SCALAR_SIZES[kind]
            return None

        magic, version, n_tensors, n_keys = take("4sIQQ")
        if magic != b"GGUF":
            raise fail(f"it starts with {magic!r}, not GGUF")
        strings: dict[str, str] = {}
        for _ in range(n_keys):
            key = bytes(text()).decode("utf-8", "replace")
            (kind,) = take("I")
            value = skip(kind)
            if value is not None:
                strings[key] = bytes(value).decode("utf-8", "replace")
        for _ in range(n_tensors):
            text()
            (dims,) = take("I")
            take(f"{dims}QIQ")
    return {
        "version": version,
        "keys": n_keys,
        "tensors": n_tensors,
        "architecture": strings.get("general.architecture"),
        "pre": strings.get("tokenizer.ggml.pre"),
    }


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
        ExportOption(
            "approximate_tokenizer",
            "--approximate-tokenizer",
            False,
            "Export a tokenizer that llama.cpp runs otherwise on some text: o200k's split (gpt-4o), NFC.",
        ),
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
        dtype, out = self.options["dtype"], staging.out
        info = write_gguf(loaded, staging.path, dtype, name=out.stem)
        arch = info["architecture"]
        differs = info.get("tokenizer_differs")
        if differs and not self.options["approximate_tokenizer"]:
            raise AlilamaError(
                f"{differs}. Pass --approximate-tokenizer to export it anyway, or export hf or onnx, "
                "which keep the run's tokenizer exact"
            )
        note = f" ({differs})" if differs else ""
        on_step(f"wrote {out.name}: llama.cpp architecture {arch}, {dtype}, pre-tokenizer {info['pre']}{note}")
        written = read_header(staging.path)
        if (written["architecture"], written["tensors"], written["pre"]) != (arch, info["tensors"], info["pre"]):
            raise AlilamaError(
                f"{out} did not read back: architecture {written['architecture']!r}, {written['tensors']} tensors, "
                f"pre-tokenizer {written['pre']!r}"
            )
        on_step(
            f"read it back: GGUF v{written['version']}, {written['keys']} metadata keys, {written['tensors']} tensors"
        )
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
    approximate_tokenizer: bool = False,
    overwrite: bool = False,
    check_with: list[str] | None = None,
    on_step=None,
) -> dict[str, Any]:
    """``alilama export gguf`` from Python: write ``run`` as the GGUF file ``out`` (and ``Modelfile`` beside it).

    What was written, with ``checks``: each ``check_with`` Python's llama.cpp reading (see
    ``alilama_core.runs.exports`` for the output rules, the staging and the read-back).
    ``approximate_tokenizer``: as ``--approximate-tokenizer``, export a tokenizer that llama.cpp runs
    otherwise on some text (``LLAMA_CPP_DIFFERS``, ``NORMALIZER_DIFFERS``).
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
        approximate_tokenizer=approximate_tokenizer,
    )
    return {**result.info, "checks": [dict(r.raw) for r in result.readings]}
