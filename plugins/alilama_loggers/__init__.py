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


@hookimpl
def register_loggers(register):
    for name, (target, description) in LOGGERS.items():
        register(name, target, description=description)
