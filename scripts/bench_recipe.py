"""The essay recipe against the ``fast`` preset: bits per byte at equal tokens seen, and step time.

Both train the essay's model size on TinyStories' ``train.txt`` through
``alilama train``, one thread per run, two runs side by side, and evaluate on
all of ``valid.txt`` every 2^20 tokens. Each recipe trains with seeds
``--seeds``; ``essay`` for ``--tokens`` x 2^20 tokens, ``fast`` for half that
(the issue's goal: the essay recipe's last figure in at most half the tokens)
and, with ``--fast-full``, for all of them too. The finished models are
evaluated once on ``--test`` (``test.txt``), which nothing here tunes on.

Then the training step (forward, backward, the recipe's optimiser step) of the
two recipes alternates in one process, one thread, ``--rounds`` rounds of
``--steps`` steps: the median step time of each, measured side by side::

    .venv/bin/python scripts/bench_recipe.py --data /tmp/recipe/ts --out /tmp/recipe/bench \\
        --test ../shared/data/tinystories/test.txt

(``scripts/search_recipe.py`` says how the data folder is made.) It prints the
Markdown tables of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from recipe_runs import MI, TOKENS_PER_STEP, Run, test_bpb, train_all


def spread(values: list[float]) -> str:
    """``mean ± half the range`` (two seeds: the two values are mean ± this)."""
    mean = statistics.fmean(values)
    return f"{mean:.4f} ± {(max(values) - min(values)) / 2:.4f}"


def step_times(steps: int, rounds: int) -> dict[str, float]:
    """Median seconds per training step of each recipe, alternating in rounds, one thread."""
    import torch
    import torch.nn.functional as F
    from alilama_trainers.trainer import make_optimizer

    from alilama_core import build_model, preset

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4096, (32, 128), generator=g)
    y = torch.randint(0, 4096, (32, 128), generator=g)
    setups = {}
    for name in ("essay", "fast"):
        cfg = preset(name)
        torch.manual_seed(0)
        model = build_model(cfg.model).train()
        setups[name] = (model, make_optimizer(model, cfg.train))
    times: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(rounds):
        for name, (model, opt) in setups.items():
            for i in range(steps + 2):
                start = time.perf_counter()
                loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                if i >= 2:  # two warm-up steps per round
                    times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--test", type=Path, help="Text to evaluate the finished models on once (test.txt).")
    parser.add_argument("--tokens", type=int, default=10, help="The essay recipe's budget, in 2^20 tokens.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--fast-full", action="store_true", help="Also train fast for the whole budget.")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="Steps per round of the step-time comparison.")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    budgets = {"essay": [args.tokens], "fast": [args.tokens // 2, *([args.tokens] if args.fast_full else [])]}
    runs = [Run(name, name, [], seed, b * MI) for name, bs in budgets.items() for b in bs for seed in args.seeds]
    runs.sort(key=lambda r: -r.tokens)  # the longest first, so the two workers end together
    curves = dict(zip(((r.name, r.tokens, r.seed) for r in runs), train_all(runs, args.data, args.out, args.jobs, 256)))

    marks = sorted({2, args.tokens // 2, args.tokens})
    columns = [(name, b) for name, bs in budgets.items() for b in bs]
    print(f"\nvalid.txt bits per byte by tokens seen (mean ± half the spread over seeds {args.seeds}):\n")
    print("| tokens seen | " + " | ".join(f"{n} ({b} x 2^20 run)" for n, b in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for mark in marks:
        cells = []
        for name, b in columns:
            got = [curves[(name, b * MI, s)].get(mark * MI) for s in args.seeds]
            cells.append(spread(got) if mark <= b and None not in got else "")
        print(f"| {mark} x 2^20 | " + " | ".join(cells) + " |")
    essay_end = [curves[("essay", args.tokens * MI, s)][args.tokens * MI] for s in args.seeds]
    half = args.tokens // 2
    fast_half = [curves[("fast", half * MI, s)][half * MI] for s in args.seeds]
    reached = max(fast_half) <= min(essay_end)
    print(
        f"\nfast after {half} x 2^20 tokens: {spread(fast_half)}; essay after {args.tokens} x 2^20: "
        f"{spread(essay_end)}; goal (every fast seed at or below every essay seed): {'met' if reached else 'not met'}"
    )
    for mark in range(1, args.tokens + 1):  # where fast first reaches the essay recipe's last figure
        got = [curves[("fast", half * MI, s)].get(mark * MI) for s in args.seeds]
        if None not in got and statistics.fmean(got) <= statistics.fmean(essay_end):
            print(f"fast's mean reaches the essay recipe's {args.tokens} x 2^20 mean at {mark} x 2^20 tokens")
            break

    if args.test:
        print(f"\n{args.test.name} bits per byte of the finished models (once):\n")
        print("| run | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean |")
        print("|---" * (len(args.seeds) + 2) + "|")
        for name, b in columns:
            values = [test_bpb(Run(name, name, [], s, b * MI).folder(args.out), args.test) for s in args.seeds]
            print(
                f"| {name}, {b} x 2^20 tokens | "
                + " | ".join(f"{v:.4f}" for v in values)
                + f" | {statistics.fmean(values):.4f} |"
            )

    times = step_times(args.steps, args.rounds)
    ratio = times["fast"] / times["essay"]
    print(f"\ntraining step, B=32, T=128, one thread, {args.rounds} alternating rounds of {args.steps} steps:\n")
    print("| recipe | median ms | tokens/s |\n|---|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds * 1000:.0f} | {TOKENS_PER_STEP / seconds:,.0f} |")
    print(f"\nfast / essay step time: {ratio:.3f} (goal: within 10%, at most 1.10)")


if __name__ == "__main__":
    main()
