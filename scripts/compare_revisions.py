"""Alilama at two revisions side by side in one run: the essay model's logits, training and generation speed.

Each revision runs from its own source tree (a git worktree), in child processes
that take turns, with the installed editable finder set aside so the tree's own
modules load; the native extensions are the installed ones. Logits must be
bit-identical; speeds are medians over rounds, and the ratio is what to quote
on a shared machine::

    git worktree add /tmp/alilama-old 46f8e12
    .venv/bin/python scripts/compare_revisions.py /tmp/alilama-old . --rounds 5

It prints one table and exits 1 when the logits differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# Loads Alilama from the source tree in argv[1] (not the editable install), with the installed native extensions.
PRELUDE = r"""
import json, os, sys, time
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith('_editable')]
tree = sys.argv[1]
sys.path[:0] = [tree, tree + '/plugins', tree + '/integrations']
import importlib.machinery, importlib.util
SO = json.loads(os.environ['ALILAMA_SO'])  # the installed native extensions, by module name
class Extensions:
    def find_spec(self, name, path=None, target=None):
        if name in SO:
            return importlib.util.spec_from_file_location(name, SO[name], loader=importlib.machinery.ExtensionFileLoader(name, SO[name]))
sys.meta_path.insert(0, Extensions())
"""

CHILD = (
    PRELUDE
    + r"""
import torch
torch.set_num_threads(int(os.environ.get('THREADS', '2')))
import alilama_core
from alilama_core import build_model, preset
what, out = sys.argv[2], sys.argv[3]
cfg = preset('essay')
torch.manual_seed(0)
model = build_model(cfg.model)
assert alilama_core.__file__.startswith(tree), alilama_core.__file__
if what == 'logits':
    x = torch.randint(0, cfg.model.vocab_size, (4, cfg.model.context_length), generator=torch.Generator().manual_seed(1))
    model.eval()
    with torch.no_grad():
        torch.save(model(x), out)
elif what == 'train':
    get_trainer = alilama_core.registry.get_trainer  # a path both revisions have
    cfg.model.vocab_size = int(sys.argv[5])
    t = cfg.train
    t.max_steps, t.warmup_steps, t.log_every, t.eval_every, t.checkpoint_every = 12, 2, 100, 10**9, 10**9
    t.eval_tokens, t.sample_prompts, t.device = 512, [], 'cpu'
    start = time.perf_counter()
    get_trainer('default')(cfg, echo=lambda *a, **k: None, show_progress=False).fit(sys.argv[4], out)
    print(json.dumps({'seconds': time.perf_counter() - start}))
elif what == 'generate':
    SamplingSettings, generate = alilama_core.SamplingSettings, alilama_core.generate
    model.eval()
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8]] * 4
    settings = SamplingSettings(max_new_tokens=100, temperature=0.0)
    generate(model, prompts, settings)  # warm up
    start = time.perf_counter()
    generate(model, prompts, settings)
    print(json.dumps({'seconds': time.perf_counter() - start}))
"""
)


def extensions() -> dict[str, str]:
    import importlib.util

    names = ("alilama_bpe._native", "alilama_attention._kernels")
    return {n: s.origin for n in names if (s := importlib.util.find_spec(n)) is not None and s.origin}


def child(tree: Path, what: str, out: Path, *extra: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree.resolve()), what, str(out), *extra],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        env={**os.environ, "ALILAMA_SO": json.dumps(extensions())},
    )
    if result.returncode != 0:
        raise SystemExit(f"{tree} {what} failed:\n{result.stderr[-3000:]}")
    last = result.stdout.strip().splitlines()
    return json.loads(last[-1]) if last else {}


def prepared_data(root: Path) -> tuple[Path, int]:
    """A small prepared data folder from the built-in stories (made with the installed Alilama)."""
    from alilama_core.app.prepare import iter_documents, prepare
    from alilama_core.runs.stories import write_corpus
    from alilama_core.engine.registry import get_tokenizer

    write_corpus(root / "stories.txt", 400, seed=0)
    tok = get_tokenizer("bpe").train(iter_documents([str(root / "stories.txt")]), 512, special_tokens=["<|endoftext|>"])
    tok.save(root / "tok")
    prepare([str(root / "stories.txt")], root / "tok", root / "data", val_fraction=0.05)
    return root / "data", tok.vocab_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        same = True
        child(args.old, "logits", tmp / "old.pt")
        child(args.new, "logits", tmp / "new.pt")
        import torch

        a, b = torch.load(tmp / "old.pt"), torch.load(tmp / "new.pt")
        same = torch.equal(a, b)
        data, vocab = prepared_data(tmp)
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for name, tree in (("old", args.old), ("new", args.new)):
                run = tmp / f"run-{name}-{r}"
                times.setdefault((name, "train"), []).append(
                    child(tree, "train", run, str(data), str(vocab))["seconds"]
                )
                shutil.rmtree(run, ignore_errors=True)
                times.setdefault((name, "generate"), []).append(child(tree, "generate", tmp / "unused")["seconds"])
        print(f"essay logits bit-identical: {same} (max |diff| {(a - b).abs().max().item():.3g})")
        print(f"{'':28}{'old':>10}{'new':>10}{'new/old':>10}")
        for what, label in (("train", "12 training steps (s)"), ("generate", "4 x 100 tokens greedy (s)")):
            old, new = statistics.median(times[("old", what)]), statistics.median(times[("new", what)])
            print(f"{label:28}{old:10.2f}{new:10.2f}{new / old:10.2f}")
        print(f"medians of {args.rounds} rounds, threads={os.environ.get('THREADS', '2')}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
