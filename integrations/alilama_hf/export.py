"""Export a trained run as a Hugging Face model folder (``alilama export hf RUN OUT``).

The folder holds everything a Hub user needs, on a machine without Alilama::

    OUT/config.json               AlilamaConfig, with auto_map pointing at the copied code
    OUT/model.safetensors         weights under transformers names; the tied head is not stored
    OUT/generation_config.json    bos/eos/pad ids
    OUT/configuration_alilama.py  the config class   (remote code)
    OUT/modeling_alilama.py       the model classes  (remote code)
    OUT/tokenizer.json            byte-level BPE for the tokenizers library
    OUT/tokenizer_config.json     PreTrainedTokenizerFast, special tokens set to <|endoftext|>
    OUT/special_tokens_map.json
    OUT/README.md                 the model card

so that::

    tok = AutoTokenizer.from_pretrained(OUT)
    model = AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

from alilama_core.errors import AlilamaError

HERE = Path(__file__).resolve().parent
CODE_FILES = ("configuration_alilama.py", "modeling_alilama.py")
AUTO_MAP = {
    "AutoConfig": "configuration_alilama.AlilamaConfig",
    "AutoModel": "modeling_alilama.AlilamaModel",
    "AutoModelForCausalLM": "modeling_alilama.AlilamaForCausalLM",
}
EOT = "<|endoftext|>"
SCHEME_TEXT = {
    "alibi": (
        "ALiBi (Press et al., 2022): no position embedding; each head adds `-m_h * (i - j)` to the "
        "attention score of query `i` on key `j`, with fixed slopes `m_h`. The model can generate "
        "past its training context."
    ),
    "rope": (
        "RoPE (Su et al., 2021), GPT-NeoX half rotation, theta = {rope_theta:g}: queries and keys "
        "are rotated by their position. The model can generate past its training context, though "
        "quality usually drops there."
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
    ("positional.table.", "model.embed_positions."),
    ("blocks.", "model.layers."),
    ("ln_f.", "model.norm."),
)
_TIED = {"head.weight", "lm_head.weight"}


def to_hf_state_dict(state: dict[str, Any]) -> dict[str, Any]:
    """Alilama ``GPT`` state dict to ``AlilamaForCausalLM`` names; the tied head is left out.

    >>> sorted(to_hf_state_dict({"tok_emb.weight": 0, "head.weight": 0, "blocks.0.attn.qkv.bias": 1}))
    ['model.embed_tokens.weight', 'model.layers.0.attn.qkv.bias']
    """
    return _rename(state, _PREFIXES)


def from_hf_state_dict(state: dict[str, Any]) -> dict[str, Any]:
    """``AlilamaForCausalLM`` (or ``AlilamaModel``) state dict back to Alilama ``GPT`` names."""
    state = {k if k.startswith(("model.", "lm_head.")) else f"model.{k}": v for k, v in state.items()}
    return _rename(state, tuple((b, a) for a, b in _PREFIXES))


def _rename(state: dict[str, Any], prefixes) -> dict[str, Any]:
    out = {}
    for key, value in state.items():
        if key in _TIED:
            continue
        for old, new in prefixes:
            if key.startswith(old):
                out[new + key[len(old) :]] = value
                break
        else:
            raise AlilamaError(f"cannot map weight {key!r}: not part of Alilama's built-in GPT")
    return out


def hf_config(model_config, tokenizer=None, **extra):
    """An ``AlilamaConfig`` from Alilama's ``ModelConfig`` (and the tokenizer's end-of-text id)."""
    from dataclasses import asdict

    from alilama_hf.configuration_alilama import POSITIONAL_SCHEMES, AlilamaConfig

    fields = asdict(model_config)
    if fields["positional"] not in POSITIONAL_SCHEMES:
        raise AlilamaError(
            f"positional scheme {fields['positional']!r} comes from a plugin; the exported modeling code "
            f"knows only {', '.join(POSITIONAL_SCHEMES)}"
        )
    eot = getattr(tokenizer, "eot_id", None) if tokenizer is not None else None
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
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    missing, unexpected = hf.load_state_dict(to_hf_state_dict(state), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise AlilamaError(f"weights do not match the Hugging Face model: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.eval()


# -- the folder ----------------------------------------------------------------------------


def export(
    run: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    checkpoint: str | None = None,
    repo_id: str | None = None,
    license: str = "mit",
    datasets: list[str] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the Hugging Face folder for ``run`` into ``out``; returns ``out``."""
    from transformers import GenerationConfig

    import alilama_hf
    from alilama_core.checkpoint import load_run

    alilama_hf.register_auto_classes()
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise AlilamaError(f"{str(out)!r} exists and is not empty; choose another folder or pass --force")
    loaded = load_run(run, checkpoint=checkpoint)
    tok = loaded.tokenizer
    if not hasattr(tok, "save_hf"):
        raise AlilamaError(f"the run's tokenizer ({type(tok).__name__}) cannot write a Hugging Face tokenizer.json")
    if tok.vocab_size > loaded.config.model.vocab_size:
        raise AlilamaError(
            f"the tokenizer has {tok.vocab_size} tokens but the model only {loaded.config.model.vocab_size}"
        )
    model = hf_model(loaded.model, tok)
    config = model.config
    config.auto_map = dict(AUTO_MAP)
    config.architectures = ["AlilamaForCausalLM"]
    eot = tok.eot_id
    model.generation_config = GenerationConfig(
        bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, max_new_tokens=config.context_length
    )
    out.mkdir(parents=True, exist_ok=True)
    _save_quietly(model, out)
    _fix_config_json(out / "config.json")
    for name in CODE_FILES:
        shutil.copyfile(HERE / name, out / name)
    # Only learned positions stop at the training context; a limit would make the others warn.
    write_tokenizer(tok, out, model_max_length=config.context_length if config.positional == "learned" else None)
    card = model_card(
        Path(run), loaded, parameters=loaded.model.num_parameters(), repo_id=repo_id or str(out),
        license=license, datasets=datasets,
    )
    (out / "README.md").write_text(card, encoding="utf-8")
    return out


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


def _fix_config_json(path: Path) -> None:
    """Keep config.json to what a fresh machine needs: auto_map, architectures, the fields."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data["auto_map"] = dict(AUTO_MAP)
    data["architectures"] = ["AlilamaForCausalLM"]
    data["tie_word_embeddings"] = True
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_tokenizer(tok, out: Path, model_max_length: int | None = None) -> None:
    """``tokenizer.json`` + ``tokenizer_config.json`` + ``special_tokens_map.json`` for ``AutoTokenizer``."""
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
        **specials,
        "added_tokens_decoder": {
            str(i): {
                "content": t, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True,
            }
            for i, t in sorted(id_to_special.items())
        },
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# -- the model card ------------------------------------------------------------------------


def _read_yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, yaml.YAMLError):
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


def _guess_datasets(run: Path, raw: dict) -> list[str]:
    text = json.dumps(raw).lower() + " " + str(run).lower()
    data = raw.get("data") if isinstance(raw.get("data"), dict) else {}
    for key in ("hf_dataset", "dataset", "hub_dataset"):
        if isinstance(data.get(key), str) and "/" in data[key]:
            return [data[key]]
    return ["roneneldan/TinyStories"] if "tinystories" in text else []


def model_card(
    run: Path,
    loaded,
    *,
    parameters: int,
    repo_id: str,
    license: str = "mit",
    datasets: list[str] | None = None,
) -> str:
    """The README.md of an exported model: YAML front matter and a short, factual body."""
    import yaml

    m = loaded.config.model
    raw = _read_yaml(run / "config.yaml")
    rows = _read_metrics(run / "metrics.jsonl")
    datasets = list(datasets) if datasets else _guess_datasets(run, raw)
    front: dict[str, Any] = {
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "license": license,
        "tags": ["alilama", "custom_code", "gpt", m.positional, "text-generation"],
    }
    if datasets:
        front["datasets"] = datasets
    name = repo_id.rstrip("/").split("/")[-1] or run.name
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "", f"# {name}", ""]
    lines += [
        f"A {_params(parameters)}-parameter decoder-only transformer trained with "
        "Alilama, a toolkit to train, study and share small GPT models. "
        "The modeling code ships with the weights, so it loads with `trust_remote_code=True`.",
        "",
        "## Architecture",
        "",
        "| | |",
        "|---|---|",
        f"| parameters | {parameters:,} (head tied to the token embedding) |",
        f"| layers | {m.n_layers} pre-norm blocks (LayerNorm, eps {m.norm_eps:g}) |",
        f"| model width | {m.d_model} |",
        f"| attention heads | {m.n_heads} x {m.d_model // m.n_heads} |",
        f"| MLP | {m.d_mlp}, exact GELU |",
        f"| training context | {m.context_length} tokens |",
        f"| vocabulary | {m.vocab_size} (byte-level BPE) |",
        f"| positions | {m.positional} |",
        f"| linear biases | {'yes' if m.bias else 'no'} |",
        "",
        "## Positional scheme",
        "",
        SCHEME_TEXT[m.positional].format(rope_theta=m.rope_theta, context_length=m.context_length),
        "",
        "## Training",
        "",
    ]
    lines += _training_lines(raw, rows, datasets, loaded.checkpoint.name)
    lines += ["", "## Evaluation", ""]
    lines += _eval_lines(rows, run)
    lines += ["", "## Usage", "", "```python", *_usage(repo_id), "```", ""]
    lines += [
        "`trust_remote_code=True` runs `modeling_alilama.py` and `configuration_alilama.py` from this "
        "repository on your machine: read them first (they are short and import only torch and "
        "transformers), and pin a `revision=` to keep running the code you read. Where the `alilama` "
        "package is installed, `import alilama_hf` registers the classes and no remote code is needed.",
        "",
        "With Alilama: `alilama generate RUN --prompt \"Once upon a time\"`.",
        "",
    ]
    return "\n".join(lines)


def _params(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _training_lines(raw: dict, rows: list[dict], datasets: list[str], checkpoint: str) -> list[str]:
    lines = []
    if datasets:
        lines.append("Data: " + ", ".join(f"[{d}](https://huggingface.co/datasets/{d})" for d in datasets) + ".")
    else:
        lines.append("Data: not recorded in the run folder.")
    train = raw.get("train") if isinstance(raw.get("train"), dict) else {}
    budget = []
    keys = ("max_steps", "batch_size", "lr", "min_lr", "warmup_steps", "weight_decay", "dtype", "seed")
    budget += [f"`{k}` {train[k]}" for k in keys if k in train]
    if budget:
        lines += ["", "Training config: " + ", ".join(budget) + "."]
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
        lines += ["", "Budget: " + ", ".join(done) + f" (weights from `{checkpoint}`)."]
    else:
        lines += ["", f"Budget: no metrics.jsonl in the run folder (weights from `{checkpoint}`)."]
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
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict):
            figures = [f"{k} {_num(v)}" for k, v in data.items() if isinstance(v, (int, float))]
            if figures:
                lines += ["", f"`{path.name}`: " + ", ".join(figures) + "."]
    return lines or ["No evaluation figures were recorded in the run folder."]


def _eval_keys(rows: list[dict]) -> list[str]:
    keys: list[str] = []
    for r in rows:
        for k in r:
            if k.startswith(("val_", "eval_")) and k not in keys and isinstance(r[k], (int, float)):
                keys.append(k)
    return keys


def _usage(repo_id: str) -> list[str]:
    return [
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}", trust_remote_code=True)',
        f'model = AutoModelForCausalLM.from_pretrained("{repo_id}", trust_remote_code=True)',
        'inputs = tokenizer("Once upon a time", return_tensors="pt")',
        "out = model.generate(**inputs, max_new_tokens=100, do_sample=True, temperature=0.8, top_k=40)",
        "print(tokenizer.decode(out[0], skip_special_tokens=True))",
    ]
