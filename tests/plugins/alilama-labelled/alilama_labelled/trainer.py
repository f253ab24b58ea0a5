"""A subclass of the built-in trainer, written against the declared ``Trainer`` contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alilama_core.base.files import atomic_write_text
from alilama_core.engine.registry import get_trainer

DefaultTrainer = get_trainer("default")


class LabelledTrainer(DefaultTrainer):
    """Trains as the default trainer does; records ``train.trainer_options.label`` in ``RUN/label.txt``."""

    name = "labelled"
    defaults = {"label": "unlabelled"}

    def fit(
        self, data_dir: str, out_dir: str, resume: bool = False, overwrite: bool = False, stop_at: int | None = None
    ) -> dict[str, Any]:
        result = super().fit(data_dir, out_dir, resume=resume, overwrite=overwrite, stop_at=stop_at)
        if (Path(out_dir) / "config.yaml").is_file():
            atomic_write_text(Path(out_dir) / "label.txt", f"{self.options['label']} step {result['step']}\n")
        return result
