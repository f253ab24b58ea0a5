"""The small, seeded search that chose the ``fast`` preset's settings.

Greedy, in three stages, on TinyStories' ``train.txt``, judged by bits per byte
on all of ``valid.txt`` (``test.txt`` is never read here). Every trial trains
the essay's model size (d=128, 8 blocks, vocab 4096) for ``--tokens`` x 2^20
tokens with one thread, seed ``--seed``, warm-up ``--warmup`` steps:

1. the optimiser and schedule (``OPTIMISERS``), each from the essay recipe;
2. one change each (``CHANGES``: AdamW's rate, QK-norm, ReLU², an untied head)
   from stage 1's best;
3. every stage-2 change that beat its start, together; kept if it beats the
   best single change.

A change counts only if it lowers valid bpb by more than ``--min-gain``
(default 0.005, about what another seed moves a trial): a setting kept for
less would cost users for nothing they could measure (QK-norm, for one, has
no llama.cpp architecture, so a model with it cannot be exported as GGUF).
The lowest valid bpb wins each stage::

    alilama tokenizer train --input ../shared/data/tinystories/train.txt --vocab-size 4096 \\
        --special '<|endoftext|>' --out /tmp/recipe/tok4096
    alilama data prepare -i ../shared/data/tinystories/train.txt \\
        --val-input ../shared/data/tinystories/valid.txt --tokenizer /tmp/recipe/tok4096 -o /tmp/recipe/ts
    .venv/bin/python scripts/search_recipe.py --data /tmp/recipe/ts --out /tmp/recipe/search

It prints each stage's table (Markdown, for docs/training.md) and the chosen overrides.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from recipe_runs import MI, Run, train_all

OPTIMISERS = {
    "muon 0.01, wsd": ["train.optimizer=muon", "train.muon_lr=0.01", "train.schedule=wsd"],
    "muon 0.02, wsd": ["train.optimizer=muon", "train.muon_lr=0.02", "train.schedule=wsd"],
    "muon 0.04, wsd": ["train.optimizer=muon", "train.muon_lr=0.04", "train.schedule=wsd"],
    "adamw, wsd": ["train.schedule=wsd"],
}
"""Stage 1: the optimiser and schedule, each from the essay recipe."""
CHANGES = {
    "AdamW lr 0.006": ["train.lr=0.006", "train.min_lr=0.0006"],
    "qk_norm": ["model.qk_norm=true"],
    "relu2": ["model.activation=relu2"],
    "untied head": ["model.tie_embeddings=false"],
}
"""Stage 2: one change each from stage 1's best; stage 3: every change that helped, together."""


def merged(base: list[str], change: list[str]) -> list[str]:
    """``base`` overrides with ``change``'s keys replaced (or added)."""
    keys = {c.split("=", 1)[0] for c in change}
    return [b for b in base if b.split("=", 1)[0] not in keys] + change


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="Prepared data (train.txt, valid.txt as val).")
    parser.add_argument("--out", type=Path, required=True, help="Folder for the trials' run folders.")
    parser.add_argument("--tokens", type=int, default=1, help="Tokens per trial, in 2^20.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=25, help="Warm-up steps of every trial.")
    parser.add_argument("--jobs", type=int, default=2, help="Trials side by side (one thread each).")
    parser.add_argument("--min-gain", type=float, default=0.005, help="Smallest bpb gain that keeps a change.")
    args = parser.parse_args()

    def trials(named: dict[str, list[str]]) -> dict[str, float]:
        """Valid bpb of each named set of overrides (trained side by side)."""
        runs = [
            Run("trial", "essay", [f"train.warmup_steps={args.warmup}", *o], args.seed, args.tokens * MI)
            for o in named.values()
        ]
        results = train_all(runs, args.data, args.out, args.jobs)
        return {name: r[max(r)] for name, r in zip(named, results)}

    def table(title: str, scores: dict[str, float]) -> None:
        print(f"\n**{title}**\n\n| trial | valid bpb |\n|---|---|")
        for name, bpb in sorted(scores.items(), key=lambda kv: kv[1]):
            print(f"| {name} | {bpb:.4f} |")

    first = trials({"essay recipe": [], **OPTIMISERS})
    table("stage 1: optimiser and schedule (from the essay recipe)", first)
    base_name = min(first, key=first.get)
    if first[base_name] > first["essay recipe"] - args.min_gain:
        base_name = "essay recipe"
    base = [] if base_name == "essay recipe" else OPTIMISERS[base_name]
    second = trials({base_name: base, **{f"+ {n}": merged(base, c) for n, c in CHANGES.items()}})
    table(f"stage 2: one change each (from {base_name})", second)
    print(
        f"\nhelped by more than {args.min_gain}: {', '.join(n for n in CHANGES if second[f'+ {n}'] < second[base_name] - args.min_gain) or 'none'}"
    )
    helped = [n for n in CHANGES if second[f"+ {n}"] < second[base_name] - args.min_gain]
    scores = dict(second)
    best_name, best = base_name, base
    if helped:
        best_name = min((f"+ {n}" for n in helped), key=second.get)
        best = merged(base, CHANGES[best_name[2:]])
    if len(helped) > 1:
        together = base
        for n in helped:
            together = merged(together, CHANGES[n])
        name = f"{base_name} + " + " + ".join(helped)
        scores.update(trials({name: together}))
        table("stage 3: every change that helped, together", {name: scores[name], best_name: scores[best_name]})
        if scores[name] < scores[best_name] - args.min_gain:
            best_name, best = name, together
    label = f"{base_name} {best_name}" if best_name.startswith("+") else best_name
    print(f"\nchosen: {label} ({scores[best_name]:.4f} bpb at {args.tokens} x 2^20 tokens, seed {args.seed})")
    print(" ".join(best))


if __name__ == "__main__":
    main()
