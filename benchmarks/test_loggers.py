"""The cost of experiment loggers: essay-config training with ``train.loggers=[tensorboard, csv]``
beside the same training with none (``metrics.jsonl`` only), in one run.

Both are ``DefaultTrainer.fit`` over the same steps, data and seed, logging a
metrics row every ``train.log_every`` steps as the essay preset does; the
first round of each is a warm-up (TensorBoard's import is paid there).
Goal: the loggers cost at most 2% (docs/benchmarks.md).

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_loggers.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds --benchmark-sort=name
"""

from __future__ import annotations

import shutil

import pytest
from alilama_bench import FULL
from test_training import STEPS, data_dir, essay_config  # noqa: F401 - the training benchmark's data and config
from alilama_trainers.trainer import DefaultTrainer

from alilama_core.runs.data import TokenData


@pytest.mark.slow  # trains with each logger
@pytest.mark.parametrize("loggers", [[], ["tensorboard", "csv"]], ids=["none", "tensorboard+csv"])
def test_training_with_loggers(benchmark, data_dir, tmp_path, loggers):  # noqa: F811
    cfg = essay_config(TokenData(data_dir).meta["vocab_size"])
    cfg.train.loggers = list(loggers)

    def run():
        shutil.rmtree(tmp_path / "run", ignore_errors=True)
        DefaultTrainer(cfg, echo=lambda *a: None, show_progress=False).fit(str(data_dir), str(tmp_path / "run"))

    benchmark.group = f"{STEPS} training steps, essay config, loggers (a metrics row every {cfg.train.log_every})"
    benchmark.extra_info["tokens"] = STEPS * 32 * 128
    benchmark.pedantic(run, rounds=5 if FULL else 1, warmup_rounds=1 if FULL else 0)
    if loggers:
        assert (tmp_path / "run" / "trackers" / "tensorboard").is_dir()
        assert (tmp_path / "run" / "trackers" / "csv" / "metrics.csv").is_file()


@pytest.mark.slow  # trains with each logger
def test_logger_overhead_paired(benchmark, data_dir, tmp_path, capsys):  # noqa: F811
    """The ratio on a shared, noisy machine: each round trains once without loggers and once with
    tensorboard+csv, back to back, and the ratio is the median of the rounds' ratios (a slow spell
    of the machine slows both halves of a round alike)."""
    cfg = essay_config(TokenData(data_dir).meta["vocab_size"])
    with_loggers = essay_config(TokenData(data_dir).meta["vocab_size"])
    with_loggers.train.loggers = ["tensorboard", "csv"]
    times: dict[str, list[float]] = {"none": [], "tensorboard+csv": []}

    def fit(config, label: str) -> None:
        import time

        shutil.rmtree(tmp_path / label, ignore_errors=True)
        start = time.perf_counter()
        DefaultTrainer(config, echo=lambda *a: None, show_progress=False).fit(str(data_dir), str(tmp_path / label))
        times[label].append(time.perf_counter() - start)

    def pair() -> None:
        fit(cfg, "none")
        fit(with_loggers, "tensorboard+csv")

    benchmark.group = f"{STEPS} training steps, essay config, without and with loggers, back to back"
    rounds = 5 if FULL else 1
    benchmark.pedantic(pair, rounds=rounds, warmup_rounds=1 if FULL else 0)
    import statistics

    kept = len(times["none"]) - rounds  # the warm-up round is left out
    ratios = [b / a for a, b in zip(times["none"][kept:], times["tensorboard+csv"][kept:])]
    ratio = statistics.median(ratios)
    benchmark.extra_info.update(ratio=ratio, ratios=ratios, times=times)
    with capsys.disabled():  # the ratio is the figure of docs/benchmarks.md
        print(
            f"\nloggers tensorboard+csv / none, {STEPS} essay steps: median ratio {ratio:.4f} "
            f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)}; median s none "
            f"{statistics.median(times['none'][kept:]):.2f}, with {statistics.median(times['tensorboard+csv'][kept:]):.2f})"
        )


def test_one_metrics_row_to_the_loggers(benchmark, tmp_path):
    """What the loggers add per metrics row, alone: ``Trackers.log`` of one essay row to tensorboard+csv
    (the end-to-end ratio above is this, once per ``train.log_every`` steps, over a step's time)."""
    from alilama_core.engine import configs as cfgmod
    from alilama_core.runs.trackers import Trackers

    cfg = cfgmod.preset("essay")
    cfg.train.loggers = ["tensorboard", "csv"]
    trackers = Trackers.from_config(cfg)
    trackers.start(tmp_path / "run", cfg, parameters=2_000_000, data={"data": "stories"})
    step = iter(range(1, 10**9))
    row = {"tokens": 40960, "lr": 3e-3, "train_loss": 2.5, "grad_norm": 0.4, "elapsed_s": 4.6}

    benchmark.group = "one metrics row to the loggers"
    benchmark.pedantic(lambda: trackers.log({"step": next(step), **row}), rounds=2000 if FULL else 10, iterations=1)
    trackers.close()
