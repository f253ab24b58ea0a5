"""``alilama quickstart``: corpus -> tokenizer -> data -> a small ALiBi model -> samples, offline.

The default corpus is the project's own procedural stories (``alilama_core.app.stories``),
so the quickstart needs no network. Training runs under a time budget
(``train.max_time``) that the trainer honours: its cosine schedule is laid over
the budget and it stops, with a checkpoint and a last evaluation, when the budget
is spent; ``train.max_steps`` is only a bound, from a short timing of this machine.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from alilama_core.contracts.errors import AlilamaError
from alilama_core.engine import configs as cfgmod

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


def seconds_per_step(cfg: cfgmod.Config, steps: int = 5) -> float:
    """Time a few training steps of ``cfg``'s model on random tokens: the fastest, a steady estimate.

    On a busy machine the median overstates a step; the time budget
    (``train.max_time``) decides when training ends either way.
    """
    from alilama_core.engine.model import build_model

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


def run_quickstart(
    out, data=None, steps=None, minutes=3.5, stories=20000, overwrite=True, echo=print, threads=None
) -> dict:
    """The whole pipeline into ``out``; ``threads``: CPU threads for encoding and training (``train.threads``)."""
    from alilama_core.app.plot import plot_runs
    from alilama_core.app.prepare import iter_documents, prepare
    from alilama_core.contracts.tokenizer import END_OF_TEXT
    from alilama_core.engine.generation import SamplingSettings, stream_text
    from alilama_core.engine.registry import get_tokenizer, get_trainer
    from alilama_core.engine.threads import apply_threads, choose_threads
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.tokenizers import save_tokenizer

    choose_threads(threads)  # a bad --threads is refused before any work
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

    meta = prepare([str(corpus)], out / "tokenizer", out / "data", val_fraction=0.05, overwrite=True, threads=threads)
    train_split = meta["splits"]["train"]
    echo(
        f"[3/5] encoded {train_split['tokens']:,} train tokens "
        f"({train_split['tokens'] / max(1, train_split['bytes']):.3f} tokens per byte) -> {out / 'data'}"
    )

    cfg = quickstart_config(tokenizer.vocab_size)
    cfg.train.threads = threads  # None: the trainer's default, one per physical core
    budget = minutes * 60 / 1.15  # training seconds; the rest is room for evals and samples
    if steps is None:
        previous = torch.get_num_threads()
        apply_threads(threads)  # time the steps with the threads training will use
        try:
            per_step = seconds_per_step(cfg)
        finally:
            torch.set_num_threads(previous)
        planned = max(cfg.train.warmup_steps + 10, int(budget / per_step))
        echo(
            f"[4/5] training for {budget / 60:.1f} min (train.max_time={budget:.0f} s): about {planned} steps "
            f"(~{per_step:.2f} s each), at most {2 * planned}"
        )
        cfg.train.max_steps = 2 * planned  # a bound: the time budget ends training, wherever the step rate settles
        cfg.train.eval_every = max(10, planned // 4)
        cfg.train.max_time = budget
        cfg.train.warmup_steps = min(cfg.train.warmup_steps, max(1, planned // 10))  # warm-up goes by steps
    else:
        echo(f"[4/5] training {steps} steps")
        cfg.train.max_steps = steps
        cfg.train.eval_every = max(10, steps // 4)
    trainer = get_trainer("default")(cfg, echo=echo)
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
