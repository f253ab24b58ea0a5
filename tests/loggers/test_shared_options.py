"""A study's one experiment: each logger's ``shared_options``, as ``alilama sweep --logger`` turns them into overrides."""

import pytest

from alilama_core.base.errors import ConfigError, UnknownPluginError
from alilama_core.contracts.logger import Logger
from alilama_core.engine.registry import register_plugin, unregister_plugin
from alilama_core.contracts.hookspecs import hookimpl
from alilama_core.runs.sweep_plan import shared_logger_overrides


@pytest.mark.parametrize(
    "name, options",
    [
        ("tensorboard", ["train.logger_options.tensorboard.dir=/s/tensorboard"]),
        ("csv", ["train.logger_options.csv.dir=/s/csv"]),
        (
            "mlflow",
            [
                "train.logger_options.mlflow.tracking_uri=sqlite:////s/mlflow.db",
                "train.logger_options.mlflow.experiment=st",
            ],
        ),
        ("wandb", ["train.logger_options.wandb.project=st"]),
    ],
)
def test_a_builtin_logger_names_its_shared_experiment(name, options):
    assert shared_logger_overrides(name, "/s", "st") == [f"train.loggers=[{name}]", *options]


class Alone(Logger):
    name = "alone"

    def start(self, run):
        return {}

    def log_scalars(self, step, scalars):
        pass


class AlonePlugin:
    @hookimpl
    def register_loggers(self, register):
        register("alone", Alone, description="a logger with no shared experiment")


def test_a_logger_without_a_shared_experiment_is_refused_and_an_unknown_one_listed():
    register_plugin(AlonePlugin(), name="alone-plugin")
    try:
        with pytest.raises(ConfigError, match="'alone' cannot log a study's runs into one experiment"):
            shared_logger_overrides("alone", "/s", "st")
    finally:
        unregister_plugin("alone-plugin")
    with pytest.raises(UnknownPluginError, match="csv"):
        shared_logger_overrides("nope", "/s", "st")
