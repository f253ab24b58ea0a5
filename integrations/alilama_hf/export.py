"""Export a trained run as a Hugging Face model folder (``alilama export hf RUN OUT``).

Two formats; ``--format auto`` (the default) picks the first that is exact:

- ``native``: transformers' own architecture (``MptForCausalLM`` for ALiBi
  without biases, ``GPT2LMHeadModel`` for learned positions,
  ``GPTNeoXForCausalLM`` for RoPE; see ``alilama_hf.native``). No code in the
  folder, no ``trust_remote_code``; the export checks the logits before
  writing.
- ``remote-code``: ``AlilamaConfig``, the modeling code, the eager attention
  maths (``alilama_core.engine.attention_math``) and the positional scheme's
  standalone module (``PositionalScheme.export_source()``, the built-in schemes'
  as much as a plugin's) copied beside the weights, loaded with
  ``trust_remote_code=True``.

Both compute exact attention (the full causal softmax), so a run trained with a
backend that declares ``exact=False`` (a sliding window) is refused by name.

The folder::

    OUT/config.json               the architecture's config (remote code: auto_map to the copied code)
    OUT/model.safetensors         weights under transformers names; a tied head is not stored
    OUT/generation_config.json    bos/eos/pad ids
    OUT/configuration_alilama.py  remote code only
    OUT/modeling_alilama.py       remote code only
    OUT/attention_math.py         remote code only: alilama_core.engine.attention_math, verbatim
    OUT/positional_NAME.py        remote code only: the scheme's standalone module (export_source())
    OUT/tokenizer.json            byte-level BPE for the tokenizers library
    OUT/tokenizer_config.json     PreTrainedTokenizerFast, special tokens and model_max_length
    OUT/special_tokens_map.json
    OUT/README.md                 the model card
    OUT/.alilama-output           marks the folder as Alilama's export (``--force`` replaces only such a folder)
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alilama_core.contracts.errors import AlilamaError, UnsupportedError

HERE = Path(__file__).resolve().parent
CODE_FILES = ("configuration_alilama.py", "modeling_alilama.py")
ATTENTION_MATH = "attention_math.py"
"""The name of the copy of ``alilama_core.engine.attention_math`` in the folder (``modeling_alilama`` imports it)."""
AUTO_MAP = {
    "AutoConfig": "configuration_alilama.AlilamaConfig",
    "AutoModel": "modeling_alilama.AlilamaModel",
    "AutoModelForCausalLM": "modeling_alilama.AlilamaForCausalLM",
    "AutoModelForSequenceClassification": "modeling_alilama.AlilamaForSequenceClassification",
}
FORMATS = ("auto", "native", "remote-code")
EXPORT_STEPS = 6
"""How many times ``export`` calls its ``on_step``: loaded, format, weights, tokenizer, folder checked, model card."""
NATIVE_TOLERANCE = 1e-4
"""Largest logit difference the export accepts between Alilama and the native architecture (seen: ~1e-6)."""
PROBE_FILE = HERE / "probe_folder.py"
"""The standalone check of a written folder (torch and transformers only), run in-process and by ``check_with``."""
PROBE_PROMPT = "Once upon a time, there was a little"
PROBE_NEW_TOKENS = 32
PROBE_TIMEOUT_S = 600
SCHEME_TEXT = {
    "alibi": (
        "ALiBi (Press et al., 2022): no position embedding; each head adds `-m_h * (i - j)` to the "
        "attention score of query `i` on key `j`, with fixed slopes `m_h`. The model can generate "
        "past its training context ({context_length} tokens)."
    ),
    "rope": (
        "RoPE (Su et al., 2021), GPT-NeoX half rotation, theta = {rope_theta:g}: queries and keys "
        "are rotated by their position. The model can generate past its training context "
        "({context_length} tokens), though quality usually drops there."
    ),
    "learned": (
        "Learned absolute positions (as in GPT-2): a table of {context_length} vectors added to the "
        "token embeddings. Inputs and generations are limited to {context_length} tokens."
    ),
    "nope": "NoPE: no positional information; the causal mask alone orders the tokens.",
}


# -- weights -----------------------------------------------------------------------------

_PREFIXES = (  # (Alilama, transformers) name prefixes
    ("tok_emb.", "model.embed_tokens."),
    ("positional.", "model.positional."),
    ("blocks.", "model.layers."),
    ("ln_f.", "model.norm."),
    ("head.", "lm_head."),
)
_TIED = {"head.weight", "lm_head.weight"}
"""The head's names on both sides: the copy of the token embedding a tied model does not store."""


def to_hf_state_dict(state: dict[str, Any], tied: bool = True) -> dict[str, Any]:
    """Alilama ``GPT`` state dict to ``AlilamaForCausalLM`` names; a ``tied`` head is left out.

    The scheme's weights (``positional.*``) keep their names under ``model.positional``;
    an untied head (``tie_embeddings=False``) is ``lm_head.weight``.

    >>> sorted(to_hf_state_dict({"tok_emb.weight": 0, "head.weight": 0, "blocks.0.attn.qkv.bias": 1}))
    ['model.embed_tokens.weight', 'model.layers.0.attn.qkv.bias']
    >>> sorted(to_hf_state_dict({"tok_emb.weight": 0, "head.weight": 0}, tied=False))
    ['lm_head.weight', 'model.embed_tokens.weight']
    """
    return _rename(state, _PREFIXES, tied)


def from_hf_state_dict(state: dict[str, Any], tied: bool = True) -> dict[str, Any]:
    """``AlilamaForCausalLM`` (or ``AlilamaModel``) state dict back to Alilama ``GPT`` names (``tied``: no head)."""
    state = {k if k.startswith(("model.", "lm_head.")) else f"model.{k}": v for k, v in state.items()}
    return _rename(state, tuple((b, a) for a, b in _PREFIXES), tied)


def _rename(state: dict[str, Any], prefixes, tied: bool) -> dict[str, Any]:
    out = {}
    for key, value in state.items():
        if tied and key in _TIED:
            continue
        for old, new in prefixes:
            if key.startswith(old):
                out[new + key[len(old) :]] = value
                break
        else:
            raise AlilamaError(f"cannot map weight {key!r}: not part of Alilama's GPT")
    return out


# -- positional schemes and the attention maths --------------------------------------------


def attention_math_source() -> Path:
    """The file of ``alilama_core.engine.attention_math``, which the folder holds as ``attention_math.py``."""
    from alilama_core.engine import attention_math

    return Path(attention_math.__file__)


def plugin_module(positional: str) -> tuple[str, str, Path]:
    """``(module name, class name, source file)`` of a scheme's standalone module (``export_source()``).

    Every scheme, the built-in ones included, is exported through it. The module
    is registered in-process under that name, so ``hf_model`` can build the model.
    """
    from alilama_core.engine.registry import get_positional
    from alilama_hf.modeling_alilama import register_positional_class

    cls = get_positional(positional)
    source = cls.export_source()  # declared on PositionalScheme: None when the scheme cannot be exported
    if not source:
        raise AlilamaError(
            f"positional scheme {positional!r} ({cls.__module__}.{cls.__name__}) gives no standalone module "
            "to export: its class must define the classmethod export_source() (see docs/plugins.md)"
        )
    source = Path(source)
    if not source.is_file() or source.suffix != ".py":
        raise AlilamaError(f"{cls.__name__}.export_source() must name a .py file; {str(source)!r} is not one")
    name = "positional_" + re.sub(r"\W", "_", positional).lower()
    spec = importlib.util.spec_from_file_location(f"alilama_hf._exported.{name}", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    standalone = getattr(module, cls.__name__, None)
    if standalone is None:
        raise AlilamaError(f"{source} defines no class {cls.__name__!r} (the name of the scheme's class)")
    register_positional_class(name, standalone)
    return name, cls.__name__, source


# -- models --------------------------------------------------------------------------------


def hf_config(model_config, tokenizer=None, **extra):
    """An ``AlilamaConfig`` from Alilama's ``ModelConfig`` (and the tokenizer's end-of-text id)."""
    from dataclasses import asdict

    from alilama_hf.configuration_alilama import AlilamaConfig

    fields = asdict(model_config)
    fields.pop("attention_options", None)  # how attention is computed, not what
    fields["tie_word_embeddings"] = fields.pop("tie_embeddings", True)  # transformers' name
    fields["rope_theta"] = model_config.rope_theta  # rope's theta, from model.positional_options
    if "positional_module" not in extra:
        name, cls_name, _ = plugin_module(fields["positional"])
        extra = {**extra, "positional_module": name, "positional_class": cls_name}
    eot = tokenizer.eot_id if tokenizer is not None else None
    ids = dict(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot)
    return AlilamaConfig(**fields, **ids, **extra)


def hf_model(model, tokenizer=None):
    """An ``AlilamaForCausalLM`` holding ``model``'s weights (an Alilama ``GPT``), in eval mode."""
    import torch

    from alilama_hf.modeling_alilama import AlilamaForCausalLM

    config = hf_config(model.config, tokenizer)
    config._attn_implementation = "sdpa"
    with torch.device("cpu"):
        hf = AlilamaForCausalLM(config)
    tied = config.tie_word_embeddings
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    missing, unexpected = hf.load_state_dict(to_hf_state_dict(state, tied), strict=False)
    missing = [k for k in missing if not (tied and k == "lm_head.weight")]
    if missing or unexpected:
        raise AlilamaError(f"weights do not match the Hugging Face model: missing {missing}, unexpected {unexpected}")
    if tied:
        hf.tie_weights()
    return hf.eval()


def choose_format(model, tokenizer, format: str = "auto"):
    """``(format, transformers model, note)``: the native architecture where exact, else remote code."""
    from alilama_hf import native

    if format not in FORMATS:
        raise AlilamaError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    eot = tokenizer.eot_id if tokenizer is not None else None
    if format in ("auto", "native"):
        reason = native.native_reason(model.config)
        if reason is None:
            hf = native.native_model(model, eot)
            diff = native.max_logit_diff(model, hf, native.probe_ids(model.config))
            if diff <= NATIVE_TOLERANCE:
                return "native", hf, f"logits checked against Alilama's: largest difference {diff:.1e}"
            reason = f"its logits differ from Alilama's by {diff:.2e} (more than {NATIVE_TOLERANCE:g})"
        if format == "native":
            raise AlilamaError(f"cannot export as a transformers architecture: {reason}; use --format remote-code")
        note = f"not a transformers architecture: {reason}"
    else:
        reason = native.native_reason(model.config)
        note = "remote code asked for" + (
            " (it is also exact as a transformers architecture: --format native)"
            if reason is None
            else f"; not a transformers architecture: {reason}"
        )
    return "remote-code", hf_model(model, tokenizer), note


# -- the folder ----------------------------------------------------------------------------


def export(
    run: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    checkpoint: str | None = None,
    repo_id: str | None = None,
    license: str | None = None,
    datasets: list[str] | None = None,
    overwrite: bool = False,
    format: str = "auto",
    on_step: Callable[[str], None] | None = None,
    check_with: list[str] | None = None,
) -> Path:
    """Write the Hugging Face folder for ``run`` at ``out``; returns ``out``.

    ``format``: ``auto`` (native where exact, else remote code), ``native`` or
    ``remote-code``. ``license``: a Hub license id for the card (``None``: the
    card says that no license was given). ``overwrite`` (``--force``) replaces
    an export Alilama wrote there (``alilama_core.runs.outputs.check_export``). ``on_step(text)`` is called
    ``EXPORT_STEPS`` times, once each step is done, with what it did (the run loaded, the format chosen,
    the weights, the tokenizer, the model card).

    As with runs and data folders (``alilama_core.runs.outputs``), the folder is built
    beside ``out`` and swapped in when complete, under ``out``'s exclusive lock:
    a failure, a kill or a full disk leaves the old folder (or none), and a
    second export to the same ``out`` fails at once naming the first.

    Before the folder is swapped in, it is loaded back from disk as a reader
    would (``probe_folder.probe``: logits, greedy ids and text, the tokenizer)
    with the installed transformers and, for each Python in ``check_with``
    (``--check-with``: say, a virtual environment with another transformers
    version), in that interpreter; any difference from Alilama fails the export.
    """
    import alilama_hf
    from alilama_core.contracts.files import disk_full_guard, exclusive_lock
    from alilama_core.runs.outputs import building, check_export, follow_umask

    alilama_hf.register_auto_classes()
    if license is not None and not re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", license):
        raise AlilamaError(f"--license must be a Hub license id such as mit, apache-2.0 or cc-by-4.0, got {license!r}")
    from alilama_hf.card_text import check_dataset_id, check_repo_id

    if repo_id is not None:  # it lands in the card's Markdown and in its Python snippet
        check_repo_id(repo_id)
    for dataset in datasets or []:
        check_dataset_id(dataset)
    if format not in FORMATS:
        raise AlilamaError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    out = Path(out)
    check_export(out, "hf", run, overwrite)  # before the run is loaded
    with disk_full_guard(out, "export folder"), exclusive_lock(out, "export folder"):
        check_export(out, "hf", run, overwrite)  # again, under the lock
        with building(out, "hf", "export folder") as work:
            _write_export(
                run,
                work,
                checkpoint=checkpoint,
                repo_id=repo_id,
                license=license,
                datasets=datasets,
                format=format,
                on_step=on_step or (lambda text: None),
                check_with=list(check_with or []),
            )
            follow_umask(work)
    return out


def load_for_export(run: str | os.PathLike[str], checkpoint: str | None = None):
    """``load_run`` for every export road: the run's hashes are always verified."""
    from alilama_core.runs.checkpoint import load_run

    return load_run(run, checkpoint=checkpoint)


def _write_export(
    run: str | os.PathLike[str],
    out: Path,
    *,
    checkpoint: str | None,
    repo_id: str | None,
    license: str | None,
    datasets: list[str] | None,
    format: str,
    on_step: Callable[[str], None],
    check_with: list[str],
) -> None:
    """Write the folder's files into ``out``, a new empty folder; ``on_step`` and ``check_with`` as in ``export``."""
    from transformers import GenerationConfig

    loaded = load_for_export(run, checkpoint)
    on_step(f"loaded {run} checkpoint {loaded.checkpoint.name}")
    require_exact_attention(run, loaded, "an exported transformers model")
    tok = loaded.tokenizer
    if not tok.hf_export:  # an optional capability the tokenizer declares
        raise AlilamaError(
            f"the run's tokenizer (kind {tok.name!r}) cannot write a Hugging Face tokenizer.json; "
            "export needs a tokenizer that declares hf_export"
        )
    if tok.vocab_size > loaded.config.model.vocab_size:
        raise AlilamaError(
            f"the tokenizer has {tok.vocab_size} tokens but the model only {loaded.config.model.vocab_size}"
        )
    chosen, model, note = choose_format(loaded.model, tok, format)
    on_step(f"format {chosen}: {note}")
    eot = tok.eot_id
    model.generation_config = GenerationConfig(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot)
    if chosen == "remote-code":
        model.config.auto_map = dict(AUTO_MAP)
        model.config.architectures = ["AlilamaForCausalLM"]
    _save_quietly(model, out)
    if chosen == "remote-code":
        # what a fresh machine needs: the code's auto_map, its class, whether the head is tied
        tied = loaded.config.model.tie_embeddings
        _merge_config_json(
            out / "config.json",
            {"auto_map": dict(AUTO_MAP), "architectures": ["AlilamaForCausalLM"], "tie_word_embeddings": tied},
        )
        for name in CODE_FILES:
            shutil.copyfile(HERE / name, out / name)
        shutil.copyfile(attention_math_source(), out / ATTENTION_MATH)
        _, _, source = plugin_module(model.config.positional)
        shutil.copyfile(source, out / f"{model.config.positional_module}.py")
    else:
        from alilama_hf.native import reader_keys

        _merge_config_json(out / "config.json", reader_keys(loaded.config.model))
    on_step("wrote the weights and config.json" + (" and the model code" if chosen == "remote-code" else ""))
    from alilama_core.engine.chat import run_template

    write_tokenizer(tok, out, model_max_length=loaded.config.model.context_length, chat_template=run_template(run))
    on_step("converted the tokenizer: tokenizer.json, tokenizer_config.json, special_tokens_map.json")
    on_step(check_folder(loaded, out, check_with, remote_code=chosen == "remote-code"))
    card = model_card(
        Path(run),
        loaded,
        parameters=loaded.model.num_parameters(),
        repo_id=repo_id,
        license=license,
        datasets=datasets,
        format=chosen,
        format_note=note,
    )
    (out / "README.md").write_text(card, encoding="utf-8")
    on_step("wrote the model card: README.md")


def require_exact_attention(run, loaded, reader: str) -> None:
    """Refuse a run trained with a backend that is not exact attention: every export computes the full softmax."""
    backend = loaded.model.backend
    if not backend.exact:
        raise UnsupportedError(
            f"cannot export {str(run)!r}: it was trained with attention backend {backend.name!r}, which is not "
            f"exact attention (it declares exact=False), and {reader} computes full causal attention, so its "
            "logits would not be the run's. Export runs trained with an exact backend"
        )


def exported_format(folder: str | os.PathLike[str]) -> str:
    """``native (mpt)`` or ``remote-code``: what an export folder holds."""
    data = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    return "remote-code" if data.get("model_type") == "alilama" else f"native ({data.get('model_type')})"


def _save_quietly(model, out: Path) -> None:
    """``save_pretrained`` without its progress bar (one small file)."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def _merge_config_json(path: Path, keys: dict[str, Any]) -> None:
    """Add ``keys`` to the ``config.json`` that ``save_pretrained`` wrote."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(keys)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# -- the folder, read back -----------------------------------------------------------------


def write_expected(loaded, path: Path, max_new_tokens: int = PROBE_NEW_TOKENS, rows: int = 2) -> None:
    """Alilama's outputs that the probes (``probe_folder``, ``probe_gguf``, ``onnx_folder``) compare with."""
    import torch
    from safetensors.torch import save_file

    from alilama_core.engine.generation import SamplingSettings, generate, position_room
    from alilama_hf.native import probe_ids

    model, tok = loaded.model, loaded.tokenizer
    ids = probe_ids(model.config, rows=rows)
    prompt = tok.encode(PROBE_PROMPT)
    room = position_room(model, len(prompt))
    n = max_new_tokens if room is None else min(max_new_tokens, room)
    greedy = generate(model, [prompt], SamplingSettings(max_new_tokens=n, temperature=0), eot_id=tok.eot_id)[0]
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(ids.to(device)).float().cpu()
    tensors = {
        "ids": ids,
        "logits": logits,
        "prompt": torch.tensor(prompt, dtype=torch.long),
        "greedy": torch.tensor(greedy, dtype=torch.long),
    }
    meta = {
        "max_new_tokens": str(n),
        "eot": "" if tok.eot_id is None else str(tok.eot_id),
        "prompt_text": PROBE_PROMPT,
    }
    if all(i < tok.vocab_size for i in greedy):  # a model wider than its tokenizer may pick ids it cannot spell
        meta["greedy_text"] = tok.decode(greedy)
    save_file(tensors, str(path), metadata=meta)


def probe_failures(result: dict) -> list[str]:
    """What in a ``probe_folder.probe`` result differs from Alilama (empty: nothing)."""
    wrong = []
    if not result["max_logit_diff"] <= NATIVE_TOLERANCE:
        wrong.append(f"logits differ by {result['max_logit_diff']:.2e} (more than {NATIVE_TOLERANCE:g})")
    for key, what in (("greedy_equal", "greedy ids"), ("text_equal", "greedy text"), ("tokenizer_equal", "token ids")):
        if result[key] is False:  # None: not compared
            wrong.append(f"its {what} differ")
    return wrong


def run_standalone(
    python: str, argv: list[str], *, where: str, failed: str, hint: str = "", timeout: int = PROBE_TIMEOUT_S
) -> dict:
    """Run a standalone file (``argv``: its path, then its arguments) under another ``python``; its result.

    The file prints one JSON object as its last line (``probe_folder.py``, ``probe_gguf.py``,
    ``onnx_folder.py``). ``where`` names the option that chose the Python (``--check-with PY``), for the
    errors; ``failed`` says what did not work when the file exits non-zero; ``hint`` what that Python needs.
    """
    import subprocess

    try:
        proc = subprocess.run(
            [python, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AlilamaError(f"{where}: could not run it ({exc})") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise AlilamaError(f"{where}: {failed}: {tail}" + (f" ({hint})" if hint else ""))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_folder(loaded, folder: Path, check_with: list[str], remote_code: bool = False) -> str:
    """Read ``folder`` back with this transformers and each ``check_with`` Python; raise on any difference.

    ``remote_code``: the folder runs Alilama's own code (the error then does not suggest ``--format remote-code``).
    """
    import tempfile

    from alilama_hf.probe_folder import probe

    with tempfile.TemporaryDirectory(prefix="alilama-probe-") as tmp:
        expected = Path(tmp) / "expected.safetensors"
        write_expected(loaded, expected)
        results = [("this Python", probe(folder, expected))]
        results += [
            (
                python,
                run_standalone(
                    python,
                    [str(PROBE_FILE), str(folder), str(expected)],
                    where=f"--check-with {python}",
                    failed="the folder did not load there",
                    hint="that Python needs torch, transformers and safetensors",
                ),
            )
            for python in check_with
        ]
    for where, result in results:
        wrong = probe_failures(result)
        if wrong:
            fix = (
                "Alilama's model code does not run the same under that transformers version; read the folder "
                "with one that does (docs/huggingface.md lists those tested)"
                if remote_code
                else "Use --format remote-code, or a transformers version that reads it"
            )
            raise AlilamaError(
                f"the exported folder, read by transformers {result['transformers']} ({where}), is not the run's "
                f"model: {'; '.join(wrong)}. {fix}"
            )
    return "read the folder back: " + "; ".join(
        f"transformers {r['transformers']} ({where}): logits within {r['max_logit_diff']:.1e}, "
        + ("greedy text equal" if r["text_equal"] else "greedy ids equal")
        for where, r in results
    )


def write_tokenizer(tok, out: Path, model_max_length: int | None = None, chat_template: str | None = None) -> None:
    """``tokenizer.json`` + ``tokenizer_config.json`` + ``special_tokens_map.json`` for ``AutoTokenizer``.

    ``model_max_length`` is the training context: ``truncation=True`` cuts
    there (ALiBi and RoPE models can still be given longer inputs).
    """
    tok.save_hf(out)
    id_to_special = {i: t for t, i in tok.special_tokens.items()}
    eot = id_to_special.get(tok.eot_id) if tok.eot_id is not None else None
    specials = {}
    if eot is not None:
        specials = {"bos_token": eot, "eos_token": eot, "unk_token": eot, "pad_token": eot}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **({"model_max_length": model_max_length} if model_max_length else {}),
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        "padding_side": "left",
        **({"chat_template": chat_template} if chat_template else {}),
        **specials,
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, t in sorted(id_to_special.items())
        },
    }
    (out / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps(specials, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


# -- the model card ------------------------------------------------------------------------


def _read_yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_metrics(path: Path) -> list[dict]:
    rows = []
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by an interrupted run
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _num(x: Any) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
        return f"{x:.3g}"
    return f"{x:.4g}"


_HUB_CACHE_DATASET = re.compile(r"datasets--([\w.-]+)--([\w.-]+)")


def prepared_data(run: Path) -> dict | None:
    """The ``meta.json`` of the data the run trained on (``RUN/run.json`` names its folder), or ``None``."""
    data_dir = _read_json(run / "run.json").get("data")
    if not isinstance(data_dir, str):
        return None
    meta = _read_json(Path(data_dir) / "meta.json")
    return meta or None


def hub_datasets(meta: dict | None) -> list[str]:
    """Hub dataset ids of the sources that came from the Hub cache (``.../datasets--OWNER--NAME/...``)."""
    found: list[str] = []
    for source in (meta or {}).get("sources", []):
        match = _HUB_CACHE_DATASET.search(str(source))
        if match and f"{match[1]}/{match[2]}" not in found:
            found.append(f"{match[1]}/{match[2]}")
    return found


def model_card(
    run: Path,
    loaded,
    *,
    parameters: int,
    repo_id: str | None = None,
    license: str | None = None,
    datasets: list[str] | None = None,
    format: str = "remote-code",
    format_note: str = "",
) -> str:
    """The README.md of an exported model: Hub metadata and a short, factual body."""
    import yaml

    m = loaded.config.model
    raw = _read_yaml(run / "config.yaml")
    rows = _read_metrics(run / "metrics.jsonl")
    meta = prepared_data(run)
    datasets = list(dict.fromkeys([*(datasets or []), *_valid_ids(hub_datasets(meta))]))
    native = format == "native"
    arch = None
    if native:
        from alilama_hf.native import describe

        arch = describe(m)
    front: dict[str, Any] = {"library_name": "transformers", "pipeline_tag": "text-generation"}
    if license:
        front["license"] = license
    tags = ["alilama", "gpt", m.positional, "text-generation"]
    tags += [arch["model_type"]] if native else ["custom_code"]
    front["tags"] = tags
    if datasets:
        front["datasets"] = datasets
    from alilama_hf.card_text import markdown_text

    title = markdown_text(repo_id.rstrip("/").split("/")[-1] if repo_id else run.resolve().name)
    where = repo_id or "PATH/TO/THIS/FOLDER"
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "", f"# {title}", ""]
    lines += [
        f"A {_params(parameters)}-parameter decoder-only transformer trained with "
        "Alilama, a toolkit to train, study and share small GPT models.",
        "",
        "## Format",
        "",
    ]
    if native:
        lines += [
            f"Saved as transformers' own `{arch['class']}` (`model_type: {arch['model_type']}`): it computes "
            "exactly what the Alilama model computes, so it loads without `trust_remote_code` and works with "
            "tools that refuse remote code.",
        ]
        if m.positional == "alibi":
            from alilama_hf.native import ALIBI_TABLE

            lines += [
                "",
                f"MPT's ALiBi table is set to {max(m.context_length, ALIBI_TABLE):,} positions "
                f"(`max_seq_len`): the model runs past its {m.context_length}-token training context up to there.",
            ]
    else:
        lines += [
            "Saved with its modeling code (`modeling_alilama.py`, `configuration_alilama.py`, "
            "`attention_math.py` and the positional scheme's `positional_*.py`), which "
            "`trust_remote_code=True` runs: " + format_note + ".",
        ]
    lines += [
        "",
        "## Architecture",
        "",
        "| | |",
        "|---|---|",
        f"| parameters | {parameters:,} ("
        + ("head tied to the token embedding" if m.tie_embeddings else "a head of its own, not tied")
        + ") |",
        f"| layers | {m.n_layers} pre-norm blocks (LayerNorm, eps {m.norm_eps:g}"
        + ("" if getattr(m, "norm_bias", True) else ", no bias")
        + ") |",
        f"| model width | {m.d_model} |",
        f"| attention heads | {m.n_heads} x {m.d_model // m.n_heads}"
        + (", queries and keys RMS-normalised per head" if m.qk_norm else "")
        + " |",
        f"| MLP | {m.d_mlp}, {_ACTIVATION_NAMES[m.activation]} |",
        f"| training context | {m.context_length} tokens |",
        f"| vocabulary | {m.vocab_size} (byte-level BPE) |",
        f"| positions | {m.positional} |",
        f"| linear biases | {'yes' if m.bias else 'no'} |",
        "",
        "## Positional scheme",
        "",
        SCHEME_TEXT.get(
            m.positional,
            f"`{m.positional}`, from an Alilama plugin; its code ships as `positional_*.py` beside the model code.",
        ).format(rope_theta=m.rope_theta, context_length=m.context_length),
        "",
        "## Training data",
        "",
    ]
    lines += _data_lines(meta, datasets)
    lines += ["", "## Training", ""]
    lines += _training_lines(raw, rows, loaded.checkpoint.name, _read_json(run / "run.json").get("final"))
    lines += ["", "## Evaluation", ""]
    lines += _eval_lines(rows, run)
    lines += [
        "",
        "## Intended use",
        "",
        "Studying how small language models learn and behave: generation from short prompts in the style "
        "of the training data, probing, fine-tuning experiments and teaching.",
        "",
        "## Limitations",
        "",
        f"A small model ({_params(parameters)} parameters) trained on "
        + ("the data above" if meta or datasets else "data not recorded here")
        + ": it writes only in that style, makes factual and logical errors, and was not evaluated for "
        "safety or bias. It is not meant for any decision about people, nor as a source of facts.",
        "",
        "## License",
        "",
        f"`{license}`."
        if license
        else "No license was given when this model was exported "
        "(`alilama export hf --license ID`); ask the author before reusing it.",
        "",
        "## Usage",
        "",
        "```python",
        *_usage(where, native),
        "```",
        "",
    ]
    if not native:
        lines += [
            "`trust_remote_code=True` runs `modeling_alilama.py`, `configuration_alilama.py`, "
            "`attention_math.py` and `positional_*.py` from this "
            "repository on your machine: read them first (they are short and import only torch and "
            "transformers), and pin a `revision=` to keep running the code you read. The tokenizer needs no "
            "code: `trust_remote_code=False` loads it without asking. Where the `alilama` package is "
            "installed, `import alilama_hf` registers the classes and no remote code is needed.",
            "",
        ]
    lines += ['With Alilama: `alilama generate RUN --prompt "Once upon a time"`.', ""]
    return "\n".join(lines)


_ACTIVATION_NAMES = {"gelu": "exact GELU", "relu2": "ReLU² (relu(x)**2)"}
"""``model.activation`` (``alilama_core.contracts.config.ACTIVATIONS``) as the model card writes it."""


def _params(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _valid_ids(datasets: list[str]) -> list[str]:
    """The dataset ids found in a data folder's sources that are valid Hub ids (others are left out)."""
    from alilama_hf.card_text import check_dataset_id

    valid = []
    for dataset in datasets:
        try:
            valid.append(check_dataset_id(dataset))
        except AlilamaError:
            continue
    return valid


def _data_lines(meta: dict | None, datasets: list[str]) -> list[str]:
    from alilama_hf.card_text import code_span, markdown_text

    lines = []
    if datasets:
        lines.append(
            "Hub datasets: "
            + ", ".join(f"[{markdown_text(d)}](https://huggingface.co/datasets/{d})" for d in datasets)
            + "."
        )
    if not meta:
        lines += ([""] if lines else []) + [
            "The prepared data's metadata is not available (the run folder names no prepared data folder, "
            "or it was moved), so sources and token counts are not recorded here."
        ]
        return lines
    splits = meta.get("splits") if isinstance(meta.get("splits"), dict) else {}
    sources = [Path(str(s)).name for s in meta.get("sources", [])]
    if lines:
        lines.append("")
    if sources:
        lines.append("Sources: " + ", ".join(code_span(s) for s in sources) + ".")
    if splits:
        lines += ["", "| split | tokens | documents | bytes |", "|---|---|---|---|"]
        for name, st in splits.items():
            if isinstance(st, dict):
                lines.append(
                    f"| {name} | {_num(st.get('tokens', ''))} | {_num(st.get('documents', ''))} | {_num(st.get('bytes', ''))} |"
                )
    if "vocab_size" in meta:
        lines += ["", f"Tokenizer: byte-level BPE, {_num(meta['vocab_size'])} tokens."]
    return lines


_TRAIN_KEYS = (
    "max_steps",
    "max_time",
    "batch_size",
    "micro_batch_size",
    "lr",
    "min_lr",
    "warmup_steps",
    "weight_decay",
    "beta1",
    "beta2",
    "grad_clip",
    "dtype",
    "seed",
)


def _training_lines(raw: dict, rows: list[dict], checkpoint: str, final: dict | None = None) -> list[str]:
    """The card's training config and budget; ``final``: run.json's record of the final weights."""
    lines = []
    train = raw.get("train") if isinstance(raw.get("train"), dict) else {}
    budget = [f"`{k}` {train[k]}" for k in _TRAIN_KEYS if k in train and train[k] is not None]
    if budget:
        lines += ["Training config: " + ", ".join(budget) + "."]
    steps = [r for r in rows if "step" in r]
    if steps:
        last = steps[-1]
        done = [f"{_num(last['step'])} optimizer steps"]
        if "tokens" in last:
            done.append(f"{_num(last['tokens'])} training tokens")
        if isinstance(last.get("elapsed_s"), (int, float)):
            done.append(_duration(last["elapsed_s"]))
        if isinstance(last.get("train_loss"), (int, float)):
            done.append(f"final train loss {last['train_loss']:.4f}")
        if isinstance(final, dict) and final.get("stopped") == "time budget" and final.get("step") == last["step"]:
            done.append(f"stopped by the time budget (`max_time` {train.get('max_time')} s)")
        lines += ([""] if lines else []) + ["Budget: " + ", ".join(done) + f" (weights from `{checkpoint}`)."]
    else:
        lines += ([""] if lines else []) + [
            f"Budget: no metrics.jsonl in the run folder (weights from `{checkpoint}`)."
        ]
    return lines


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} minutes"
    return f"{seconds / 3600:.1f} hours"


def _eval_lines(rows: list[dict], run: Path) -> list[str]:
    evals = [r for r in rows if any(k.startswith(("val_", "eval_")) for k in r)]
    lines = []
    if evals:
        lines += ["| step | tokens | " + " | ".join(k for k in _eval_keys(evals)) + " |"]
        lines += ["|---" * (2 + len(_eval_keys(evals))) + "|"]
        picks = sorted({*range(0, len(evals), math.ceil(len(evals) / 5)), len(evals) - 1})
        for r in (evals[i] for i in picks):
            cells = [_num(r.get("step", "")), _num(r.get("tokens", ""))]
            cells += [_num(r[k]) if k in r else "" for k in _eval_keys(evals)]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "Held-out loss in nats per token; `val_bpb` is bits per byte of text."]
    for path in sorted(run.glob("eval*.json")):
        data = _read_json(path)
        figures = [f"{k} {_num(v)}" for k, v in data.items() if isinstance(v, (int, float))]
        if figures:
            from alilama_hf.card_text import code_span

            lines += ["", f"{code_span(path.name)}: " + ", ".join(figures) + "."]
    return lines or ["No evaluation figures were recorded in the run folder."]


def _eval_keys(rows: list[dict]) -> list[str]:
    keys: list[str] = []
    for r in rows:
        for k in r:
            if k.startswith(("val_", "eval_")) and k not in keys and isinstance(r[k], (int, float)):
                keys.append(k)
    return keys


def _usage(where: str, native: bool) -> list[str]:
    from alilama_hf.card_text import python_string

    trust = "" if native else ", trust_remote_code=True"
    tok_trust = "" if native else ", trust_remote_code=False"
    return [
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f"tokenizer = AutoTokenizer.from_pretrained({python_string(where)}{tok_trust})",
        f"model = AutoModelForCausalLM.from_pretrained({python_string(where)}{trust})",
        'inputs = tokenizer("Once upon a time", return_tensors="pt")',
        "out = model.generate(**inputs, max_new_tokens=100, do_sample=True, temperature=0.8, top_k=40)",
        "print(tokenizer.decode(out[0], skip_special_tokens=True))",
    ]
