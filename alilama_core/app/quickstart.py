"""``alilama quickstart``: corpus -> tokenizer -> data -> a small ALiBi model -> samples, offline.

The default corpus is the project's own procedural stories (``alilama_core.runs.stories``),
so the quickstart needs no network. Training is planned by a time budget
(``train.max_time``, with ``train.max_steps`` null), which the trainer honours
whatever this machine's speed: warm-up ends within a tenth of the budget, the
cosine reaches its minimum at the end, there is an evaluation with samples at
each quarter of the budget, and the stop writes the final checkpoint and a last
evaluation of it. Nothing is timed or re-planned beforehand, so a machine that
is busier during the run than before it still gets one plan.
"""

from __future__ import annotations

import time
from pathlib import Path


from alilama_core.base.errors import AlilamaError
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
            "train.batch_size=16",  # in a budget of minutes, more updates beat bigger batches
            "train.lr=0.003",
            "train.min_lr=0.0003",
            "train.warmup_steps=30",
            "train.log_every=10",
            "train.checkpoint_every=null",
            "train.eval_tokens=32768",
            "train.sample_tokens=40",
        ],
    )
    cfg.train.sample_prompts = SAMPLE_PROMPTS[:2]
    return cfg


def training_seconds(minutes: float) -> float:
    """The training budget within the quickstart's ``minutes``: the rest is room for the other steps."""
    return minutes * 60 / 1.15


def run_quickstart(
    out,
    data=None,
    steps=None,
    minutes=3.5,
    stories=20000,
    overwrite=True,
    echo=print,
    threads=None,
    build_decode=True,
) -> dict:
    """The whole pipeline into ``out``; ``threads``: CPU threads for encoding and training (``train.threads``).

    ``build_decode``: after training, build the run's compiled decode step, which the samples and every later
    ``generate``, ``chat``, ``serve`` or ``load_run`` decode on. Its seconds are outside ``minutes`` (the
    budget of the stages before it) and printed as a stage of their own.
    """
    from alilama_core.app.plot import plot_runs
    from alilama_core.app.prepare import iter_documents, prepare
    from alilama_core.contracts.tokenizer import END_OF_TEXT
    from alilama_core.engine.generation import SamplingSettings, stream_text
    from alilama_core.engine.registry import get_tokenizer, get_trainer
    from alilama_core.engine.threads import choose_threads, default_threads, free_cores
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.tokenizers import save_tokenizer

    choose_threads(threads)  # a bad --threads is refused before any work
    started = time.perf_counter()
    if threads is None:  # a first run on a laptop or a shared runner: leave the busy cores alone
        threads, cores = free_cores(), default_threads()
        busy = f"; {cores - threads} busy with other work" if threads < cores else ""
        echo(f"threads: {threads} of {cores} physical cores{busy} (--threads N to choose)")
    out = Path(out)
    run = out / "run"
    if run.exists() and not overwrite:
        raise AlilamaError(f"{str(run)!r} exists; pass --overwrite or choose another --out")
    if data is None:
        from alilama_core.runs.stories import write_corpus

        corpus = out / "corpus" / "stories.txt"
        size = write_corpus(corpus, stories, seed=0)
        echo(f"[1/6] wrote {stories:,} built-in stories ({size / 1e6:.1f} MB) to {corpus}")
    else:
        corpus = Path(data)
        if not corpus.is_file():
            raise AlilamaError(f"--data {data!r} does not exist")
        echo(f"[1/6] corpus: {corpus}")

    t = time.perf_counter()
    tokenizer = get_tokenizer("bpe").train(iter_documents([str(corpus)]), VOCAB, special_tokens=[END_OF_TEXT])
    save_tokenizer(tokenizer, out / "tokenizer")  # records its kind beside it
    echo(
        f"[2/6] trained a {tokenizer.vocab_size}-id BPE tokenizer in {time.perf_counter() - t:.1f} s -> {out / 'tokenizer'}"
    )

    meta = prepare([str(corpus)], out / "tokenizer", out / "data", val_fraction=0.05, overwrite=True, threads=threads)
    train_split = meta["splits"]["train"]
    echo(
        f"[3/6] encoded {train_split['tokens']:,} train tokens "
        f"({train_split['tokens'] / max(1, train_split['bytes']):.3f} tokens per byte) -> {out / 'data'}"
    )

    cfg = quickstart_config(tokenizer.vocab_size)
    cfg.train.threads = threads
    if steps is None:
        budget = training_seconds(minutes)
        echo(
            f"[4/6] training for {budget / 60:.1f} min (train.max_time={budget:.0f} s): as many steps as fit, "
            f"an evaluation with samples at each quarter of the budget"
        )
        cfg.train.max_steps, cfg.train.max_time, cfg.train.eval_every = None, budget, None
    else:
        echo(f"[4/6] training {steps} steps")
        cfg.train.max_steps = steps
        cfg.train.eval_every = max(10, steps // 4)
    trainer = get_trainer("default")(cfg, echo=echo)
    result = trainer.fit(str(out / "data"), str(run), overwrite=True)
    curve = plot_runs([run], run / "loss.png")
    if build_decode:
        from alilama_core.app.run_options import build_decode_step

        build_decode_step(run, echo=lambda line: echo(f"[5/6] {line}"))
    else:
        echo("[5/6] decode: no compiled step built (--no-build-decode): the samples decode eagerly")

    loaded = load_run(run)
    echo("[6/6] samples:")
    for i, prompt in enumerate(SAMPLE_PROMPTS):
        settings = SamplingSettings(max_new_tokens=60, temperature=0.7, top_k=40, seed=i)  # a seed each
        text = prompt + "".join(stream_text(loaded.model, loaded.tokenizer, prompt, settings))
        echo("  " + text.replace("\n", " "))
    echo(f"val loss {result['val_loss']:.3f}, val bits per byte {result['val_bpb']:.3f}")
    echo(f"run folder: {run}   loss curve: {curve}   total time: {time.perf_counter() - started:.0f} s")
    echo(f"next: alilama generate {run} --prompt 'Once upon a time'")
    return {**result, "run": str(run), "curve": str(curve)}
