"""The one place that chooses what a run trains on: a task's example stream, or prepared text."""

from __future__ import annotations

import os

from alilama_core.base.errors import AlilamaError
from alilama_core.runs.data import TokenData
from alilama_core.runs.tasks import TaskData


def open_data_source(cfg, data_dir: str | os.PathLike[str]):
    """The ``DataSource`` that ``cfg`` trains on: its task (``task.name``), else the prepared text in ``data_dir``.

    Refuses data whose tokenizer has more ids than ``model.vocab_size``, and text
    splits shorter than one window.
    """

    source = TaskData(cfg) if cfg.task.name else TokenData(data_dir)
    if source.vocab_size > cfg.model.vocab_size:
        raise AlilamaError(
            f"the data's tokenizer has {source.vocab_size} ids but model.vocab_size is "
            f"{cfg.model.vocab_size}; set model.vocab_size={source.vocab_size}"
        )
    return source.train_with(cfg)
