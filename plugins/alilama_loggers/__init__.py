"""The built-in experiment loggers (``train.loggers``), registered as a plugin like any other.

``csv`` needs nothing; ``tensorboard``, ``wandb`` and ``mlflow`` need their
libraries (the extras ``alilama[tensorboard]``, ``alilama[wandb]``,
``alilama[mlflow]``), imported only when a run starts with them.
"""

from alilama_core.contracts.hookspecs import hookimpl

LOGGERS = {
    "csv": ("alilama_loggers.csv_log:CsvLogger", "metrics, samples and settings as CSV files in the run"),
    "tensorboard": ("alilama_loggers.tensorboard_log:TensorBoardLogger", "TensorBoard event files"),
    "wandb": ("alilama_loggers.wandb_log:WandbLogger", "a Weights & Biases run (WANDB_MODE=offline: sync later)"),
    "mlflow": ("alilama_loggers.mlflow_log:MlflowLogger", "an MLflow run (a SQLite store in the run by default)"),
}


def shared_tracker(name: str, folder: str, study: str) -> list[str]:
    """Overrides that log every run of a study into one tracker, to compare them side by side.

    ``tensorboard``/``csv``: each run in ``folder/<name>/<run>`` (``tensorboard --logdir folder/tensorboard``);
    ``mlflow``: one SQLite store ``folder/mlflow.db``, experiment ``study``; ``wandb``: project ``study``::

        >>> shared_tracker("tensorboard", "runs/study", "positional")
        ['train.loggers=[tensorboard]', 'train.logger_options.tensorboard.dir=runs/study/tensorboard']
    """
    from pathlib import Path

    if name not in LOGGERS:
        raise ValueError(f"no logger {name!r}; choose one of {', '.join(LOGGERS)}")
    options = {
        "tensorboard": {"dir": f"{folder}/tensorboard"},
        "csv": {"dir": f"{folder}/csv"},
        "mlflow": {"tracking_uri": f"sqlite:///{Path(folder).resolve() / 'mlflow.db'}", "experiment": study},
        "wandb": {"project": study},
    }[name]
    return [f"train.loggers=[{name}]"] + [f"train.logger_options.{name}.{k}={v}" for k, v in options.items()]


@hookimpl
def register_loggers(register):
    for name, (target, description) in LOGGERS.items():
        register(name, target, description=description)
