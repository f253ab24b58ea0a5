"""``alilama quickstart``: corpus -> tokenizer -> data -> a small ALiBi model -> samples, offline.

The default corpus is the project's own procedural stories (``alilama_core.app.stories``),
so the quickstart needs no network. The number of steps is set from a short
timing of this machine so that training fits the time budget.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from alilama_core import config as cfgmod
from alilama_core.errors import AlilamaError

VOCAB = 2048
SAMPLE_PROMPTS = ["Once upon a time", "One day, a little", "Tom and his dog"]


def quickstart_config(vocab_size: int) -> cfgmod.Config:
    cfg = cfgmod.preset("essay")
    cfg = cfgmod.apply_overrides(
        cfg,
        [
            f"model.vocab_size={vocab_size}",
            "model.n_layers=4",
            "model.attention=auto",
            "train.batch_size=32",
            "train.lr=0.003",
            "train.min_lr=0.0003",
            "train.warmup_steps=30",
            "train.log_every=10",
            "train.checkpoint_every=200",
            "train.eval_tokens=32768",
            "train.sample_tokens=40",
        ],
    )
    cfg.train.sample_prompts = SAMPLE_PROMPTS[:2]
    return cfg


def replan(step: int, elapsed: float, budget: float, max_steps: int, warmup: int) -> int:
    """The step count that fills ``budget`` seconds of training, at the rate seen so far.

    During warm-up the plan may grow or shrink (the learning rate there depends
    on the step alone); after it, the plan only shrinks, so the cosine's progress
    never goes back and the learning rate never rises again.

    >>> replan(step=20, elapsed=10.0, budget=100.0, max_steps=100, warmup=30)  # 0.5 s a step
    200
    >>> replan(step=100, elapsed=80.0, budget=100.0, max_steps=400, warmup=30)  # slower than planned
    125
    """
    if step <= 0 or elapsed <= 0:
        return max_steps
    target = step + int(max(0.0, budget - elapsed) / (elapsed / step))
    if step < warmup:
        return max(target, warmup + 1)
    return max(step + 1, min(max_steps, target))


class StepPlanner:
    """Re-plans ``train.max_steps`` while the trainer runs, from the run's own ``metrics.jsonl``.

    The trainer reads ``train.max_steps`` at every step, so the budget is spent
    on the machine's real speed rather than on a guess made while it was busy.
    """

    def __init__(self, train_cfg, metrics: Path, budget: float, poll: float = 1.0) -> None:
        import threading

        self.cfg, self.metrics, self.budget, self.poll = train_cfg, Path(metrics), budget, poll
        self.plans: list[int] = [train_cfg.max_steps]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quickstart-planner", daemon=True)

    def update(self) -> None:
        """Read the last logged step and re-plan once."""
        import json

        try:
            lines = self.metrics.read_text(encoding="utf-8").splitlines()
        except OSError:
            return
        for line in reversed(lines):
            try:
                row = json.loads(line)
            except ValueError:  # a line being written
                continue
            if "elapsed_s" in row:
                planned = replan(row["step"], row["elapsed_s"], self.budget, self.cfg.max_steps, self.cfg.warmup_steps)
                if planned != self.cfg.max_steps:
                    self.cfg.eval_every = max(10, planned // 4)
                    self.cfg.max_steps = planned
                    self.plans.append(planned)
                return

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            self.update()

    def __enter__(self) -> "StepPlanner":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def seconds_per_step(cfg: cfgmod.Config, steps: int = 5) -> float:
    """Time a few training steps of ``cfg``'s model on random tokens: the fastest, a steady estimate.

    On a busy machine the median overstates a step; the training loop corrects
    the plan either way (``StepPlanner``).
    """
    from alilama_core.model import build_model

    model = build_model(cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, cfg.model.vocab_size, (cfg.train.batch_size, cfg.model.context_length + 1))
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        logits = model(x[:, :-1])
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()).backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - start)
    return min(times[1:])


def run_quickstart(out, data=None, steps=None, minutes=3.5, stories=20000, overwrite=True, echo=print) -> dict:
    from alilama_core.app.plot import plot_runs
    from alilama_core.app.prepare import iter_documents, prepare
    from alilama_core.checkpoint import load_run
    from alilama_core.generation import SamplingSettings, stream_text
    from alilama_core.registry import get_tokenizer, get_trainer
    from alilama_core.tokenizer import END_OF_TEXT, save_tokenizer

    started = time.perf_counter()
    out = Path(out)
    run = out / "run"
    if run.exists() and not overwrite:
        raise AlilamaError(f"{str(run)!r} exists; pass --overwrite or choose another --out")
    if data is None:
        from alilama_core.app.stories import write_corpus

        corpus = out / "corpus" / "stories.txt"
        size = write_corpus(corpus, stories, seed=0)
        echo(f"[1/5] wrote {stories:,} built-in stories ({size / 1e6:.1f} MB) to {corpus}")
    else:
        corpus = Path(data)
        if not corpus.is_file():
            raise AlilamaError(f"--data {data!r} does not exist")
        echo(f"[1/5] corpus: {corpus}")

    t = time.perf_counter()
    tokenizer = get_tokenizer("bpe").train(iter_documents([str(corpus)]), VOCAB, special_tokens=[END_OF_TEXT])
    save_tokenizer(tokenizer, out / "tokenizer")  # records its kind beside it
    echo(
        f"[2/5] trained a {tokenizer.vocab_size}-id BPE tokenizer in {time.perf_counter() - t:.1f} s -> {out / 'tokenizer'}"
    )

    meta = prepare([str(corpus)], out / "tokenizer", out / "data", val_fraction=0.05, overwrite=True)
    train_split = meta["splits"]["train"]
    echo(
        f"[3/5] encoded {train_split['tokens']:,} train tokens "
        f"({train_split['tokens'] / max(1, train_split['bytes']):.3f} tokens per byte) -> {out / 'data'}"
    )

    cfg = quickstart_config(tokenizer.vocab_size)
    budget = minutes * 60 / 1.15  # training seconds; the rest is room for evals and samples
    planned = steps is None
    if planned:
        per_step = seconds_per_step(cfg)
        steps = max(cfg.train.warmup_steps + 10, int(budget / per_step))
        echo(
            f"[4/5] training for {minutes:.1f} min: {steps} steps planned (~{per_step:.2f} s each), re-planned as it runs"
        )
    else:
        echo(f"[4/5] training {steps} steps")
    cfg.train.max_steps = steps
    cfg.train.eval_every = max(10, steps // 4)
    cfg.train.max_time = minutes * 60 * 1.2
    trainer = get_trainer("default")(cfg, echo=echo)
    if planned:
        (run / "metrics.jsonl").unlink(missing_ok=True)  # only this run's rows drive the plan
        with StepPlanner(cfg.train, run / "metrics.jsonl", budget) as planner:
            result = trainer.fit(str(out / "data"), str(run), overwrite=True)
        if len(planner.plans) > 1:
            first, last, n = planner.plans[0], planner.plans[-1], len(planner.plans) - 1
            echo(f"re-planned the step budget {n} time(s) as the step rate settled: {first} -> {last} steps")
    else:
        result = trainer.fit(str(out / "data"), str(run), overwrite=True)
    curve = plot_runs([run], run / "loss.png")

    loaded = load_run(run)
    echo("[5/5] samples:")
    for prompt in SAMPLE_PROMPTS:
        settings = SamplingSettings(max_new_tokens=60, temperature=0.7, top_k=40, seed=0)
        text = prompt + "".join(stream_text(loaded.model, loaded.tokenizer, prompt, settings))
        echo("  " + text.replace("\n", " "))
    echo(f"val loss {result['val_loss']:.3f}, val bits per byte {result['val_bpb']:.3f}")
    echo(f"run folder: {run}   loss curve: {curve}   total time: {time.perf_counter() - started:.0f} s")
    echo(f"next: alilama generate {run} --prompt 'Once upon a time'")
    return {**result, "run": str(run), "curve": str(curve)}
