"""The ``hf`` exporter: a run as a Hugging Face model folder (``alilama export hf RUN OUT``).

Two formats; ``--format auto`` (the default) picks the first that is exact:

- ``native``: transformers' own architecture, the one the positional scheme
  declares for ``hf`` (``PositionalScheme.export_targets``: ALiBi ``mpt``,
  learned ``gpt2``, RoPE ``gpt_neox``; see ``alilama_exporters.native``). No code
  in the folder, no ``trust_remote_code``; the logits are checked before writing.
- ``remote-code``: ``AlilamaConfig``, the modeling code, the eager attention
  maths (``alilama_core.engine.attention_math``) and the positional scheme's
  standalone module (``PositionalScheme.export_source()``) copied beside the
  weights, loaded with ``trust_remote_code=True``.

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
    OUT/README.md                 the model card (``alilama_exporters.model_card``)
    OUT/.alilama-output           marks the folder as Alilama's export (``--overwrite`` replaces only such a folder)

The core stages the folder, reads it back with this transformers
(``probe_folder.probe``) and each ``--check-with`` Python, and swaps it in
(``alilama_core.runs.exports``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from alilama_core.base.errors import AlilamaError
from alilama_core.contracts.exporter import Exporter, ExportOption, Reading, Staging

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
NATIVE_TOLERANCE = 1e-4
"""Largest logit difference accepted between Alilama and a reader of the folder (seen: ~1e-6)."""
PROBE_FILE = HERE / "probe_folder.py"
"""The standalone check of a written folder (torch and transformers only), run in-process and by ``check_with``."""


def _modeling_dir() -> Path:
    import alilama_hf.modeling_alilama as modeling

    return Path(modeling.__file__).resolve().parent


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


# -- models --------------------------------------------------------------------------------


def attention_math_source() -> Path:
    """The file of ``alilama_core.engine.attention_math``, which the folder holds as ``attention_math.py``."""
    from alilama_core.engine import attention_math

    return Path(attention_math.__file__)


def hf_config(model_config, tokenizer=None, **extra):
    """An ``AlilamaConfig`` from Alilama's ``ModelConfig`` (and the tokenizer's end-of-text id)."""
    from dataclasses import asdict

    from alilama_hf.configuration_alilama import AlilamaConfig
    from alilama_hf.schemes import plugin_module

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
    from alilama_exporters import native

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


# -- the exporter --------------------------------------------------------------------------


class HFExporter(Exporter):
    """A Hugging Face model folder: ``AutoModelForCausalLM`` and ``AutoTokenizer`` load it."""

    name = "hf"
    description = "a Hugging Face model folder: AutoModelForCausalLM and AutoTokenizer load it"
    target = "folder"
    noun = "Hugging Face export"
    busy_noun = "export folder"
    contents = (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "configuration_alilama.py",
        "modeling_alilama.py",
        "attention_math.py",
        "positional_*.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "README.md",
    )
    options = (
        ExportOption(
            "format",
            "--format",
            "auto",
            "auto (a transformers architecture where exact, else remote code), native or remote-code.",
            FORMATS,
        ),
        ExportOption("repo_id", "--repo-id", None, "USER/NAME: the card's title and usage snippet."),
        ExportOption(
            "license", "--license", None, "Hub license id for the card (mit, apache-2.0, ...); none by default."
        ),
        ExportOption("datasets", "--dataset", [], "Hub dataset id for the card (repeatable)."),
    )
    examples = (
        "alilama export hf runs/essay out/essay-hf",
        "alilama export hf runs/essay out/essay-hf --format remote-code --overwrite",
        "alilama export hf runs/essay out/essay-hf --repo-id you/essay --license mit",
        "alilama export hf runs/essay out/hf --check-with ~/venvs/hf4/bin/python",
    )
    steps = 4
    reader = "transformers"
    reads_here = True
    uploads_to = "the Hugging Face Hub"
    probe_file = str(PROBE_FILE)
    probe_needs = "torch, transformers and safetensors"

    @classmethod
    def check(cls) -> str | None:
        import importlib.util

        missing = [m for m in ("transformers", "tokenizers", "huggingface_hub") if importlib.util.find_spec(m) is None]
        if missing:
            return f"exporting needs the Hugging Face extras: pip install 'alilama[hf]' (missing {', '.join(missing)})"
        return None

    def validate(self, run: Path) -> None:
        from alilama_hf.push import check_dataset_id, check_repo_id

        license = self.options["license"]
        if license is not None and not re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", license):
            raise AlilamaError(
                f"--license must be a Hub license id such as mit, apache-2.0 or cc-by-4.0, got {license!r}"
            )
        if self.options["repo_id"] is not None:  # it lands in the card's Markdown and in its Python snippet
            check_repo_id(self.options["repo_id"])
        for dataset in self.options["datasets"]:
            check_dataset_id(dataset)
        if self.options["format"] not in FORMATS:
            raise AlilamaError(f"--format must be one of {', '.join(FORMATS)}, got {self.options['format']!r}")

    def push(self, run, repo, *, private=False, revision=None, checkpoint=None, on_step=None) -> str:
        """Export ``run`` and upload it to the Hub repository ``repo`` with the user's token (``alilama_hf.push``)."""
        from alilama_hf.push import push

        options = {k: self.options[k] for k in ("license", "datasets", "format")}
        return push(run, repo, private=private, revision=revision, checkpoint=checkpoint, on_step=on_step, **options)

    def problem(self, model_config) -> str | None:
        return None  # remote code holds any model; --format native says why it cannot, when it cannot

    def write(self, loaded, staging: Staging, on_step: Callable[[str], None]) -> dict[str, Any]:
        import alilama_hf

        alilama_hf.register_auto_classes()
        chosen = _write_folder(loaded, staging.path, staging.run, self.options, on_step)
        self.remote_code = chosen == "remote-code"
        return {"format": chosen}

    def read_back(self, path: Path, expected: Path, python: str | None = None) -> Reading | None:
        if python is None:
            from alilama_exporters.probe_folder import probe

            return self.reading_from(probe(path, expected), "this Python")
        return super().read_back(path, expected, python)

    def reading_from(self, result, where: str) -> Reading:
        return Reading(
            reader=f"transformers {result['transformers']}",
            max_logit_diff=float(result["max_logit_diff"]),
            greedy_equal=result.get("greedy_equal"),
            text_equal=result.get("text_equal"),
            tokenizer_equal=result.get("tokenizer_equal"),
            where=where,
            raw=dict(result),
        )

    def tolerance(self) -> float:
        return NATIVE_TOLERANCE

    def mismatch(self, reading: Reading, wrong: list[str]) -> str:
        fix = (
            "Alilama's model code does not run the same under that transformers version; read the folder "
            "with one that does (docs/huggingface.md lists those tested)"
            if getattr(self, "remote_code", False)
            else "Use --format remote-code, or a transformers version that reads it"
        )
        return (
            f"the exported folder, read by {reading.reader} ({reading.where}), is not the run's "
            f"model: {'; '.join(wrong)}. {fix}"
        )

    def checked_line(self, readings: list[Reading]) -> str:
        return "read the folder back: " + "; ".join(r.line() for r in readings)

    def summary(self, run: str, out: Path, info) -> list[str]:
        from alilama_core.engine.configs import load

        files = ", ".join(sorted(p.name for p in out.iterdir() if not p.name.startswith(".")))
        lines = [f"exported {run} to {out} as {exported_format(out)}: {files}"]
        if exported_format(out) != "remote-code":
            from alilama_exporters.native import reader_notes

            for line in reader_notes(load(Path(run) / "config.yaml").model):
                lines.append(f"note: {line} (docs/huggingface.md, Which tools read it)")
        if self.options["license"] is None:
            lines.append("note: no --license given; the model card says so (add one before publishing)")
        return lines


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
    check_with: Iterable[str] | None = None,
) -> Path:
    """``alilama export hf`` from Python: write the folder for ``run`` at ``out``; returns ``out``."""
    from alilama_core.runs.exports import export as export_run

    return export_run(
        "hf",
        run,
        out,
        checkpoint=checkpoint,
        overwrite=overwrite,
        check_with=check_with,
        on_step=on_step,
        repo_id=repo_id,
        license=license,
        datasets=list(datasets or []),
        format=format,
    ).out


def _write_folder(loaded, out: Path, run: Path, options: dict[str, Any], on_step: Callable[[str], None]) -> str:
    """Write the folder's files into ``out``, a new empty folder; the format chosen."""
    from transformers import GenerationConfig

    from alilama_exporters.model_card import model_card

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
    chosen, model, note = choose_format(loaded.model, tok, options["format"])
    on_step(f"format {chosen}: {note}")
    eot = tok.eot_id
    model.generation_config = GenerationConfig(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot)
    if chosen == "remote-code":
        model.config.auto_map = dict(AUTO_MAP)
        model.config.architectures = ["AlilamaForCausalLM"]
    _save_quietly(model, out)
    if chosen == "remote-code":
        from alilama_hf.schemes import plugin_module

        # what a fresh machine needs: the code's auto_map, its class, whether the head is tied
        tied = loaded.config.model.tie_embeddings
        _merge_config_json(
            out / "config.json",
            {"auto_map": dict(AUTO_MAP), "architectures": ["AlilamaForCausalLM"], "tie_word_embeddings": tied},
        )
        for name in CODE_FILES:
            shutil.copyfile(_modeling_dir() / name, out / name)
        shutil.copyfile(attention_math_source(), out / ATTENTION_MATH)
        _, _, source = plugin_module(model.config.positional)
        shutil.copyfile(source, out / f"{model.config.positional_module}.py")
    else:
        from alilama_exporters.native import reader_keys

        _merge_config_json(out / "config.json", reader_keys(loaded.config.model))
    on_step("wrote the weights and config.json" + (" and the model code" if chosen == "remote-code" else ""))
    from alilama_core.engine.chat import run_template

    write_tokenizer(tok, out, model_max_length=loaded.config.model.context_length, chat_template=run_template(run))
    on_step("converted the tokenizer: tokenizer.json, tokenizer_config.json, special_tokens_map.json")
    card = model_card(
        run,
        loaded,
        parameters=loaded.model.num_parameters(),
        repo_id=options["repo_id"],
        license=options["license"],
        datasets=options["datasets"],
        format=chosen,
        format_note=note,
    )
    (out / "README.md").write_text(card, encoding="utf-8")
    on_step("wrote the model card: README.md")
    return chosen


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


def check_folder(loaded, folder: Path, check_with: list[str], remote_code: bool = False) -> str:
    """Read ``folder`` back with this transformers and each ``check_with`` Python; raise on any difference.

    What the export does before it swaps the folder in (``alilama_core.runs.exports.read_back``);
    ``remote_code``: the folder runs Alilama's own code (the error then does not suggest ``--format remote-code``).
    """
    import tempfile

    from alilama_core.runs.exports import read_back, write_expected

    exporter = HFExporter()
    exporter.remote_code = remote_code
    with tempfile.TemporaryDirectory(prefix="alilama-probe-") as tmp:
        expected = Path(tmp) / "expected.safetensors"
        write_expected(loaded, expected)
        return exporter.checked_line(read_back(exporter, Path(folder), expected, check_with))


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
