"""The model card of a Hugging Face export: ``huggingface_hub.ModelCard``, metadata as ``ModelCardData``.

The body is short and made of facts the run records: the architecture (its
``ModelConfig``), the format written, the training data (the prepared data's
``meta.json``, which ``run.json`` names), the budget and the evaluations
(``metrics.jsonl``, read by ``alilama_core.runs.checkpoint``). Anything a card
shows that a user typed or named (a run folder, a source file, ``--repo-id``)
is escaped; Hub ids are checked first (``alilama_hf.push.check_repo_id``).

>>> markdown_text("my_run <b>")
'my\\\\_run \\\\<b\\\\>'
>>> code_span("a`b")
'`` a`b ``'
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from alilama_core.base.errors import AlilamaError

SCHEME_TEXT = {
    "alibi": "ALiBi (Press et al., 2022): each head adds `-m_h * (i - j)` to the score of query `i` on key `j`; "
    "it can generate past its {context_length}-token training context.",
    "rope": "RoPE (Su et al., 2021), GPT-NeoX half rotation, theta {rope_theta:g}; it can generate past its "
    "{context_length}-token training context, though quality usually drops there.",
    "learned": "Learned absolute positions (as in GPT-2): inputs and generations are limited to {context_length} tokens.",
    "nope": "NoPE: no positional information; the causal mask alone orders the tokens.",
}
ACTIVATION_NAMES = {"gelu": "exact GELU", "relu2": "ReLU² (relu(x)**2)"}
"""``model.activation`` as the card writes it."""
TRAIN_KEYS = ("max_steps", "max_time", "batch_size", "lr", "min_lr", "warmup_steps", "weight_decay", "dtype", "seed")
_HUB_CACHE_DATASET = re.compile(r"datasets--([\w.-]+)--([\w.-]+)")
_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#!|~&])")


# -- escaping --------------------------------------------------------------------------------


def markdown_text(text: str) -> str:
    """``text`` as literal Markdown inline text: one line, every Markdown special character escaped."""
    return _MARKDOWN.sub(r"\\\1", " ".join(str(text).split()))


def code_span(text: str) -> str:
    """``text`` as a Markdown inline code span, whatever backticks it holds."""
    text = " ".join(str(text).split())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    if not longest:
        return f"`{text}`"
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}"


def python_string(text: str) -> str:
    r"""``text`` as a double-quoted Python string literal that evaluates to exactly ``text``.

    >>> print(python_string('me/x"); import os; ("'))
    "me/x\"); import os; (\""
    """
    out = []
    for ch in str(text):
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:  # a line break, a control character: its escape
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return '"' + "".join(out) + '"'


# -- facts -----------------------------------------------------------------------------------


def prepared_data(run: Path) -> dict | None:
    """The ``meta.json`` of the data the run trained on (``RUN/run.json`` names its folder), or ``None``.

    The data folder may have moved or been deleted since: then the card says so.
    """
    from alilama_core.runs.checkpoint import read_run_json

    data_dir = read_run_json(run).get("data")
    if not isinstance(data_dir, str):
        return None
    try:
        meta = json.loads((Path(data_dir) / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta else None


def hub_datasets(meta: dict | None) -> list[str]:
    """Hub dataset ids of the sources that came from the Hub cache (``.../datasets--OWNER--NAME/...``)."""
    from alilama_hf.push import check_dataset_id

    found: list[str] = []
    for source in (meta or {}).get("sources", []):
        match = _HUB_CACHE_DATASET.search(str(source))
        if match and f"{match[1]}/{match[2]}" not in found:
            try:
                found.append(check_dataset_id(f"{match[1]}/{match[2]}"))
            except AlilamaError:
                continue
    return found


def _num(x: Any) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
        return f"{x:.3g}"
    return f"{x:.4g}"


def _params(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} minutes"
    return f"{seconds / 3600:.1f} hours"


# -- the card --------------------------------------------------------------------------------


def model_card(
    run: str | Path,
    loaded,
    *,
    parameters: int,
    repo_id: str | None = None,
    license: str | None = None,
    datasets: list[str] | None = None,
    format: str = "remote-code",
    format_note: str = "",
) -> str:
    """The README.md of an exported model: ``ModelCardData`` metadata and a short body of facts."""
    from huggingface_hub import ModelCard, ModelCardData

    from alilama_core.runs.checkpoint import read_metrics, read_run_json

    run = Path(run)
    m = loaded.config.model
    rows = read_metrics(run, missing_ok=True)
    meta = prepared_data(run)
    datasets = list(dict.fromkeys([*(datasets or []), *hub_datasets(meta)]))
    native = format == "native"
    arch = None
    if native:
        from alilama_exporters.native import describe

        arch = describe(m)
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag="text-generation",
        license=license,
        tags=["alilama", "gpt", m.positional, "text-generation", arch["model_type"] if native else "custom_code"],
        datasets=datasets or None,
    )
    title = markdown_text(repo_id.rstrip("/").split("/")[-1] if repo_id else run.resolve().name)
    body = [f"# {title}", ""]
    body += [
        f"A {_params(parameters)}-parameter decoder-only transformer trained with Alilama.",
        "",
        "## Format",
        "",
    ]
    if native:
        body.append(
            f"transformers' own `{arch['class']}` (`model_type: {arch['model_type']}`), exactly the Alilama "
            "model's computation: no `trust_remote_code` needed."
        )
        if arch["model_type"] == "mpt":
            from alilama_exporters.native import ALIBI_TABLE

            body.append(
                f"MPT's ALiBi table covers {max(m.context_length, ALIBI_TABLE):,} positions (`max_seq_len`), "
                f"past the {m.context_length}-token training context."
            )
    else:
        body.append(
            "Alilama's modeling code (`modeling_alilama.py`, `configuration_alilama.py`, `attention_math.py`, "
            f"`positional_*.py`), run with `trust_remote_code=True`: {format_note}."
        )
    head = "head tied to the token embedding" if m.tie_embeddings else "a head of its own, not tied"
    body += [
        "",
        "## Architecture",
        "",
        "| | |",
        "|---|---|",
        f"| parameters | {parameters:,} ({head}) |",
        f"| layers | {m.n_layers} pre-norm blocks (LayerNorm, eps {m.norm_eps:g}"
        + ("" if getattr(m, "norm_bias", True) else ", no bias")
        + ") |",
        f"| model width | {m.d_model} |",
        f"| attention heads | {m.n_heads} x {m.d_model // m.n_heads}"
        + (", queries and keys RMS-normalised per head" if m.qk_norm else "")
        + " |",
        f"| MLP | {m.d_mlp}, {ACTIVATION_NAMES.get(m.activation, m.activation)} |",
        f"| training context | {m.context_length} tokens |",
        f"| vocabulary | {m.vocab_size} |",
        f"| positions | {m.positional} |",
        f"| linear biases | {'yes' if m.bias else 'no'} |",
        "",
        SCHEME_TEXT.get(m.positional, f"`{m.positional}`: a positional scheme from an Alilama plugin.").format(
            rope_theta=m.rope_theta, context_length=m.context_length
        ),
        "",
        "## Training data",
        "",
        *_data_lines(meta, datasets),
        "",
        "## Training",
        "",
        *_training_lines(loaded.config.train, rows, loaded.checkpoint.name, read_run_json(run).get("final")),
        "",
        "## Evaluation",
        "",
        *_eval_lines(rows, run),
        "",
        "## Intended use",
        "",
        "Studying how small language models learn and behave; not a source of facts, and not evaluated for "
        "safety or bias.",
        "",
        "## Limitations",
        "",
        f"A small model ({_params(parameters)} parameters): it writes only in the style of its training data "
        "and makes factual and logical errors.",
        "",
        "## License",
        "",
        f"`{license}`." if license else "No license was given when this model was exported; ask the author first.",
        "",
        "## Usage",
        "",
        "```python",
        *_usage(repo_id or "PATH/TO/THIS/FOLDER", native),
        "```",
        "",
    ]
    if not native:
        body += [
            "`trust_remote_code=True` runs the `.py` files of this repository: read them first (they import only "
            "torch and transformers) and pin a `revision=`. Where Alilama is installed, "
            "`alilama_hf.register_auto_classes()` registers the classes and no remote code is needed.",
            "",
        ]
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body))
    return str(card)


def _data_lines(meta: dict | None, datasets: list[str]) -> list[str]:
    lines = []
    if datasets:
        links = ", ".join(f"[{markdown_text(d)}](https://huggingface.co/datasets/{d})" for d in datasets)
        lines.append(f"Hub datasets: {links}.")
    if not meta:
        return lines + ["The prepared data's metadata is not available, so sources and token counts are not recorded."]
    sources = [Path(str(s)).name for s in meta.get("sources", [])]
    if sources:
        lines.append("Sources: " + ", ".join(code_span(s) for s in sources) + ".")
    splits = meta.get("splits") if isinstance(meta.get("splits"), dict) else {}
    if splits:
        lines += ["", "| split | tokens | documents | bytes |", "|---|---|---|---|"]
        for name, st in splits.items():
            if isinstance(st, dict):
                cells = [_num(st.get(k, "")) for k in ("tokens", "documents", "bytes")]
                lines.append(f"| {markdown_text(name)} | " + " | ".join(cells) + " |")
    return lines


def _training_lines(train, rows: list[dict], checkpoint: str, final: dict | None = None) -> list[str]:
    """The training config and budget; ``final``: run.json's record of the final weights."""
    budget = [f"`{k}` {getattr(train, k)}" for k in TRAIN_KEYS if getattr(train, k, None) is not None]
    lines = ["Training config: " + ", ".join(budget) + "."] if budget else []
    steps = [r for r in rows if "step" in r]
    if not steps:
        return lines + [f"Budget: no metrics.jsonl in the run folder (weights from `{checkpoint}`)."]
    last = steps[-1]
    done = [f"{_num(last['step'])} optimizer steps"]
    if "tokens" in last:
        done.append(f"{_num(last['tokens'])} training tokens")
    if isinstance(last.get("elapsed_s"), (int, float)):
        done.append(_duration(last["elapsed_s"]))
    if isinstance(last.get("train_loss"), (int, float)):
        done.append(f"final train loss {last['train_loss']:.4f}")
    if isinstance(final, dict) and final.get("stopped") == "time budget" and final.get("step") == last["step"]:
        done.append(f"stopped by the time budget (`max_time` {train.max_time} s)")
    return lines + ["", "Budget: " + ", ".join(done) + f" (weights from `{checkpoint}`)."]


def _eval_lines(rows: list[dict], run: Path) -> list[str]:
    evals = [r for r in rows if any(k.startswith(("val_", "eval_")) for k in r)]
    keys = list(dict.fromkeys(k for r in evals for k in r if k.startswith(("val_", "eval_")) and _is_num(r[k])))
    lines = []
    if evals:
        lines += ["| step | tokens | " + " | ".join(keys) + " |", "|---" * (2 + len(keys)) + "|"]
        picks = sorted({*range(0, len(evals), math.ceil(len(evals) / 5)), len(evals) - 1})
        for r in (evals[i] for i in picks):
            cells = [_num(r.get("step", "")), _num(r.get("tokens", ""))] + [_num(r[k]) if k in r else "" for k in keys]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "Held-out loss in nats per token; `val_bpb` is bits per byte of text."]
    for path in sorted(run.glob("eval*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        figures = [f"{k} {_num(v)}" for k, v in data.items() if _is_num(v)] if isinstance(data, dict) else []
        if figures:
            lines += ["", f"{code_span(path.name)}: " + ", ".join(figures) + "."]
    return lines or ["No evaluation figures were recorded in the run folder."]


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _usage(where: str, native: bool) -> list[str]:
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
