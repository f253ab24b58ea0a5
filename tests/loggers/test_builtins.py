"""The four built-in loggers on their real libraries: each passes the conformance kit, and what each
wrote for a run trained through the CLI, read back with that tool's own reader, equals metrics.jsonl;
killed with SIGKILL and resumed, each holds every step once; ``eval --log`` adds to them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from alilama_testing import TINY_TRAIN, killed_and_resumed, ok, run_cli
from loggers.readers import (
    folder,
    kit_steps,
    metrics_rows,
    metrics_series,
    mlflow_client,
    series,
    tensorboard_series,
    wandb_files,
    wandb_history,
)

from alilama_core.kit import check_logger

BUILTINS = ["csv", "tensorboard", "wandb", "mlflow"]
OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
ALL = "train.loggers=[csv,tensorboard,wandb,mlflow]"


@pytest.fixture(autouse=True)
def offline_wandb(monkeypatch):
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    # wandb.init in this process (the kit's checks) publishes its service here; a training started as
    # a subprocess must own its W&B process, as it does from a shell, or a SIGKILL leaves its run open
    monkeypatch.delenv("WANDB_SERVICE", raising=False)


@pytest.mark.slow  # the logger kit, importing each tracker's library
@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_passes_the_kit(name):
    """Each built-in passes the kit, with its own files read back after an interrupted, resumed run."""
    done = check_logger(name, read_steps=kit_steps(name))
    assert "interrupted, resumed, evaluated" in done and len(done) == 5


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("loggers") / "run"
    args = ["train", "--data", str(data_dir), "--out", str(run), *TINY_TRAIN, "train.max_steps=8", ALL]
    ok(run_cli(*args, env=OFFLINE))
    return run


@pytest.mark.parametrize("name", BUILTINS)
def test_every_scalar_step_equals_metrics_jsonl(trained, name):
    """Every number metrics.jsonl holds (train_loss, lr, grad_norm, tokens, elapsed_s, val_loss, val_bpb)
    is in the tracker under its name, at the same steps, with the same value."""
    expected, found = metrics_series(trained), series(trained, name)
    assert {"train_loss", "lr", "grad_norm", "tokens", "val_loss", "val_bpb"} <= set(expected)
    for key, points in expected.items():
        assert [s for s, _ in found[key]] == [s for s, _ in points], key
        assert [v for _, v in found[key]] == pytest.approx([v for _, v in points], rel=1e-6), key


def test_mlflow_params_history_and_final_metrics(trained):
    client, run_id = mlflow_client(trained)
    record = client.get_run(run_id)
    params, rows = record.data.params, metrics_rows(trained)
    assert params["model.d_model"] == "32" and params["train.max_steps"] == "8"
    assert int(params["model.parameters"]) > 1000 and params["data.data"]
    assert record.info.status == "FINISHED" and record.info.run_name == "run"
    last_eval = [r for r in rows if "val_loss" in r][-1]
    assert record.data.metrics["val_loss"] == pytest.approx(last_eval["val_loss"])  # the final metrics
    assert record.data.tags["final.stopped"] == "max_steps" and record.data.tags["final.step"] == "8"
    samples = [a.path for a in client.list_artifacts(run_id, "samples")]
    assert samples == ["samples/step-00000004.txt", "samples/step-00000008.txt"]


def test_wandb_offline_run_holds_config_history_and_summary(trained):
    history = wandb_history(trained)
    assert [r["_step"] for r in history] == [r["step"] for r in metrics_rows(trained)]
    kept = json.loads((trained / "run.json").read_text())["loggers"]["wandb"]
    (path,) = wandb_files.run_files(trained / kept["dir"], kept["id"])
    config, summary = wandb_files.config(path), wandb_files.summary(path)
    assert config["model.d_model"] == "32" and int(config["model.parameters"]) > 1000
    assert summary["stopped"] == "max_steps" and summary["step"] == 8
    assert [r["samples"] for r in history if "samples" in r] == [
        "\n\n".join(r["samples"]) for r in metrics_rows(trained) if "samples" in r
    ]


def test_csv_files(trained):
    where = folder(trained, "csv")
    with open(where / "params.csv", newline="") as f:
        params = dict(csv.reader(f))
    assert params["model.n_layers"] == "2" and params["train.loggers"] == "[csv, tensorboard, wandb, mlflow]"
    with open(where / "samples.csv", newline="") as f:
        samples = list(csv.DictReader(f))
    assert [int(s["step"]) for s in samples] == [4, 8] and samples[0]["text"].startswith("Once")
    with open(where / "summary.csv", newline="") as f:
        assert dict(csv.reader(f))["stopped"] == "max_steps"


def test_killed_and_resumed_every_tracker_holds_each_step_once(data_dir, tmp_path):
    """SIGKILL mid-training, then `train --resume`: in every tracker, each step once and none missing."""
    run = tmp_path / "killed"
    args = ["train", "--data", str(data_dir), *TINY_TRAIN, "train.max_steps=16", ALL]
    killed_and_resumed(args, run)  # WANDB_MODE=offline is in the environment (offline_wandb)
    steps = [r["step"] for r in metrics_rows(run)]
    assert steps == list(range(1, 17))
    for name in BUILTINS:
        found = series(run, name)
        assert "train_loss" in found, f"{name} holds {sorted(found)}"
        assert [s for s, _ in found["train_loss"]] == steps, name
        assert [s for s, _ in found["val_loss"]] == [s for s in steps if s % 4 == 0], name
    elapsed = [v for _, v in metrics_series(run)["elapsed_s"]]  # seconds of training, on across the resume
    assert elapsed == sorted(elapsed)
    for name in ("csv", "tensorboard"):  # the trackers that drop what the killed process logged past its checkpoint
        assert [v for _, v in series(run, name)["elapsed_s"]] == pytest.approx(elapsed, rel=1e-6), name
    tb = folder(run, "tensorboard")
    assert len(list(tb.glob("events.out.tfevents.*"))) == 2  # the same folder, one file per process
    values = [v for _, v in metrics_series(run)["train_loss"]]
    assert [v for _, v in tensorboard_series(tb)["train_loss"]] == pytest.approx(values, rel=1e-6)
    kept = json.loads((run / "run.json").read_text())["loggers"]
    assert len(wandb_files.run_files(run / kept["wandb"]["dir"], kept["wandb"]["id"])) == 2  # one W&B run id
    client, run_id = mlflow_client(run)
    assert len(client.search_runs([client.get_run(run_id).info.experiment_id])) == 1  # one MLflow run


def test_eval_log_adds_results_at_the_checkpoint_step(trained, corpus):
    out = run_cli("eval", str(trained), "--data", str(corpus), "--context-lengths", "64", "--log", "--json")
    ok(out)
    json.loads(out.stdout)  # --json output stays clean; the note goes to stderr
    assert "logged 2 results to csv, tensorboard, wandb, mlflow" in out.stderr
    key = f"eval/{corpus.stem}/ctx64/loss"
    for name in ("csv", "tensorboard", "mlflow"):
        assert [s for s, _ in series(trained, name)[key]] == [8], name
    kept = json.loads((trained / "run.json").read_text())["loggers"]["wandb"]
    last = wandb_files.run_files(trained / kept["dir"], kept["id"])[-1]
    assert wandb_files.summary(last)[key] > 0 and wandb_files.summary(last)["eval_step"] == 8


def test_task_eval_log(tmp_path):
    run = tmp_path / "copy"
    ok(
        run_cli(
            "train",
            "--task",
            "copy",
            "--out",
            str(run),
            *TINY_TRAIN[:2],
            "--no-progress",
            "task.lengths=1-4",
            "task.val_examples=16",
            "train.max_steps=4",
            "train.eval_every=4",
            "train.loggers=[csv]",
        )
    )
    out = run_cli("eval", str(run), "--task", "copy", "--lengths", "2,4", "--examples", "16", "--log")
    ok(out)
    assert "logged 6 results to csv" in out.stderr
    found = series(run, "csv")
    assert [s for s, _ in found["eval/copy/len4/exact_match"]] == [4]
    assert 0.0 <= found["eval/copy/len2/token_accuracy"][0][1] <= 1.0


def test_under_ddp_only_rank_0_logs(data_dir, tmp_path):
    """Two processes under torchrun: the loggers run on rank 0 alone, so each step is logged once."""
    from alilama_testing import run_ddp

    args = ["--preset", "tiny", "--data", str(data_dir), "--no-progress", "train.max_steps=4", "train.log_every=1"]
    args += ["train.batch_size=8", "train.warmup_steps=1", "train.device=cpu", "train.loggers=[csv,tensorboard]"]
    ddp = run_ddp(tmp_path / "two", args, port=29533)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    for name in ("csv", "tensorboard"):
        assert [s for s, _ in series(tmp_path / "two", name)["train_loss"]] == [1, 2, 3, 4], name
    assert len(list(folder(tmp_path / "two", "tensorboard").glob("events.out.tfevents.*"))) == 1
