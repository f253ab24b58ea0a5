"""Choosing loggers: ``train.loggers`` and ``train.logger_options`` from the CLI, unknown names and
options refused, a missing library named with its extra, and a logger that raises on every call."""

from __future__ import annotations

import os
import socket
import time
import warnings

import pytest
from alilama_testing import TINY_TRAIN, losses, ok, run_cli
from loggers.readers import metrics_rows

from alilama_core.base.errors import AlilamaWarning, ConfigError, PluginUnavailableError, UnknownPluginError
from alilama_core.contracts.logger import Logger
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.validate import check_config
from alilama_core.kit import registered


class Raising(Logger):
    """A tracker that cannot be reached: every call raises."""

    name = "raising"

    def start(self, run):
        raise ConnectionError("tracker unreachable")

    def log_scalars(self, step, scalars):
        raise ConnectionError("tracker unreachable")

    def end(self, summary, stopped):
        raise ConnectionError("tracker unreachable")

    def close(self):
        raise ConnectionError("tracker unreachable")


class LateRaising(Logger):
    """Starts, then fails on its first row (a full disk)."""

    name = "late"
    calls: list[str] = []

    def start(self, run):
        return {}

    def log_scalars(self, step, scalars):
        LateRaising.calls.append(f"scalars {step}")
        raise OSError(28, "No space left on device")

    def end(self, summary, stopped):
        LateRaising.calls.append("end")


class NeedsAPackage(Logger):
    name = "needs"
    requires = ("alilama_no_such_module",)
    extra = "needs-extra"

    def start(self, run):
        return {}

    def log_scalars(self, step, scalars):
        pass

    def end(self, summary, stopped):
        pass


def test_loggers_and_their_options_from_overrides():
    cfg = cfgmod.apply_overrides(
        cfgmod.preset("tiny"),
        [
            "train.loggers=[tensorboard, csv]",
            "train.logger_options.wandb.project=stories",
            "train.logger_options.csv.dir=/tmp/x",
        ],
    )
    assert cfg.train.loggers == ["tensorboard", "csv"]
    assert cfg.train.logger_options == {"wandb": {"project": "stories"}, "csv": {"dir": "/tmp/x"}}
    check_config(cfg)
    assert cfgmod.preset("tiny").train.loggers == []  # by default: metrics.jsonl only


def test_unknown_logger_lists_the_known_ones():
    with pytest.raises(
        UnknownPluginError, match="unknown logger 'tensorbored'; available: csv, (ledger, )?mlflow, tensorboard, wandb"
    ):
        check_config(cfgmod.apply_overrides(cfgmod.preset("tiny"), ["train.loggers=[tensorbored]"]))
    with pytest.raises(UnknownPluginError, match="unknown logger 'wandbb'"):
        check_config(cfgmod.apply_overrides(cfgmod.preset("tiny"), ["train.logger_options.wandbb.project=x"]))
    with pytest.raises(ConfigError, match="logger 'wandb' has no option.*'projekt'"):
        check_config(
            cfgmod.apply_overrides(
                cfgmod.preset("tiny"), ["train.loggers=[wandb]", "train.logger_options.wandb.projekt=x"]
            )
        )
    with pytest.raises(ConfigError, match="more than once"):
        check_config(cfgmod.apply_overrides(cfgmod.preset("tiny"), ["train.loggers=[csv, csv]"]))


def test_unknown_logger_from_the_cli_before_training(data_dir, tmp_path):
    out = run_cli("train", "--data", str(data_dir), "--out", str(tmp_path / "r"), *TINY_TRAIN, "train.loggers=[nope]")
    assert out.returncode != 0 and "unknown logger 'nope'; available: csv, " in out.stderr
    assert "mlflow, tensorboard, wandb" in out.stderr
    assert not (tmp_path / "r").exists()


def test_a_missing_library_names_its_extra():
    with registered("logger", "needs", NeedsAPackage):
        with pytest.raises(
            PluginUnavailableError, match=r"alilama_no_such_module.*pip install 'alilama\[needs-extra\]'"
        ):
            check_config(cfgmod.apply_overrides(cfgmod.preset("tiny"), ["train.loggers=[needs]"]))


def _train(data_dir, out, loggers: list[str], *overrides: str):
    from alilama_trainers.trainer import DefaultTrainer

    cfg = cfgmod.apply_overrides(
        cfgmod.preset("tiny"),
        [
            "model.vocab_size=320",
            *TINY_TRAIN[4:],
            "train.max_steps=6",
            "train.device=cpu",
            f"train.loggers=[{','.join(loggers)}]",
        ],
    )
    cfg = cfgmod.apply_overrides(cfg, list(overrides))
    return DefaultTrainer(check_config(cfg), echo=lambda *a: None, show_progress=False).fit(str(data_dir), str(out))


@pytest.mark.parametrize("broken", [Raising, LateRaising])
def test_a_failing_logger_warns_once_and_training_goes_on(data_dir, tmp_path, broken):
    with warnings.catch_warnings():
        warnings.simplefilter("error", AlilamaWarning)
        plain = _train(data_dir, tmp_path / "plain", [])
    with registered("logger", broken.name, broken), pytest.warns(AlilamaWarning) as caught:
        result = _train(data_dir, tmp_path / "broken", ["csv", broken.name])
    mine = [w for w in caught if issubclass(w.category, AlilamaWarning)]
    assert len(mine) == 1 and f"logger {broken.name!r} failed in" in str(mine[0].message)
    assert result["step"] == plain["step"] == 6 and (tmp_path / "broken" / "final").is_dir()
    assert losses(tmp_path / "broken") == losses(tmp_path / "plain")  # metrics.jsonl intact, every row
    assert [r["step"] for r in metrics_rows(tmp_path / "broken")] == list(range(1, 7))
    csv_rows = (tmp_path / "broken" / "trackers" / "csv" / "metrics.csv").read_text().splitlines()
    assert sum(1 for line in csv_rows if ",train_loss," in line) == 6  # the other logger kept going
    if broken is LateRaising:
        assert LateRaising.calls == ["scalars 1"]  # switched off after its first failure: never called again


@pytest.fixture
def refusing_uri():
    """An http URI on 127.0.0.1 whose port refuses connections: bound, never listened on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_failing_logger_through_the_cli_is_one_warning_line(data_dir, tmp_path, refusing_uri):
    """A tracker that cannot be reached (MLflow at a closed port, MLflow's own retry settings): said at once,
    one warning line, and the run completes (it waited minutes before the probe)."""
    started = time.perf_counter()
    out = run_cli(
        "train",
        "--data",
        str(data_dir),
        "--out",
        str(tmp_path / "r"),
        *TINY_TRAIN,
        "train.max_steps=4",
        "train.loggers=[mlflow]",
        f"train.logger_options.mlflow.tracking_uri={refusing_uri}",
        timeout=120,
    )
    ok(out)
    assert time.perf_counter() - started < 90
    assert out.stderr.count("warning: logger 'mlflow' failed in start()") == 1, out.stderr
    lines = out.stderr.splitlines()
    assert lines[:2] == [
        f"mlflow: connecting to the tracking server {refusing_uri} (at most 5 s)",
        f"mlflow: cannot reach the MLflow tracking server {refusing_uri} (Connection refused); start it, or fix "
        "train.logger_options.mlflow.tracking_uri; going on without MLflow",
    ], out.stderr
    assert [r["step"] for r in metrics_rows(tmp_path / "r")] == [1, 2, 3, 4]


def test_an_unreachable_mlflow_server_is_given_up_within_seconds(tmp_path, refusing_uri, capsys):
    from alilama_loggers.mlflow_log import PROBE_TIMEOUT_S, MlflowLogger

    from alilama_core.contracts.logger import RunStart

    before = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    logger = MlflowLogger({"tracking_uri": refusing_uri})
    run = RunStart(run_dir=tmp_path, dir=tmp_path / "trackers" / "mlflow", name="r", config={})
    started = time.perf_counter()
    with pytest.raises(ConnectionError, match=r"cannot reach the MLflow tracking server .* \(Connection refused\)"):
        logger.start(run)
    logger.close()  # nothing left to wait on
    assert time.perf_counter() - started < PROBE_TIMEOUT_S
    assert capsys.readouterr().err.startswith(f"mlflow: connecting to the tracking server {refusing_uri} (at most")
    assert {k: os.environ.get(k) for k in before} == before  # MLflow's own settings are left as they were


@pytest.mark.slow  # trains four runs
def test_a_study_logs_every_run_into_one_tracker(data_dir, tmp_path):
    """What `alilama sweep --logger` uses: one TensorBoard folder with a run per training, and one MLflow
    experiment holding every run."""
    from alilama_core.runs.sweep_plan import shared_logger_overrides as shared_tracker
    from loggers.readers import tensorboard_series
    from mlflow.tracking import MlflowClient

    study = tmp_path / "study"
    for name in ("alibi", "rope"):
        _train(data_dir, study / name, [], *shared_tracker("tensorboard", str(study), "s"), f"model.positional={name}")
        _train(
            data_dir, study / f"{name}-m", [], *shared_tracker("mlflow", str(study), "s"), f"model.positional={name}"
        )
    assert sorted(p.name for p in (study / "tensorboard").iterdir()) == ["alibi", "rope"]
    for name in ("alibi", "rope"):
        assert [s for s, _ in tensorboard_series(study / "tensorboard" / name)["train_loss"]] == list(range(1, 7))
    client = MlflowClient(tracking_uri=f"sqlite:///{study / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("s").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["alibi-m", "rope-m"]
    assert {r.data.params["model.positional"] for r in runs} == {"alibi", "rope"}
    assert all(r.info.artifact_uri.startswith(study.resolve().as_uri()) for r in runs)  # beside the store


def test_overwrite_replaces_a_run_that_holds_its_loggers_files(data_dir, tmp_path):
    """RUN/trackers is Alilama's own: --overwrite replaces the run rather than refusing it as foreign."""
    out = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--data", str(data_dir), "--out", str(out), *TINY_TRAIN]
    ok(run_cli(*args, "train.loggers=[csv]"))
    assert (out / "trackers" / "csv").is_dir()
    ok(run_cli(*args, "--overwrite"))
    assert not (out / "trackers").exists() and (out / "final").is_dir()
