"""``tensorboard``: TensorBoard event files, through ``torch.utils.tensorboard.SummaryWriter``.

Every number of a metrics row is a scalar under its own name (``train_loss``,
``lr``, ``val_bpb``, ...) at its step; the hyperparameters, the samples and
the summary are text. Written to ``RUN/trackers/tensorboard/``, or with
``train.logger_options.tensorboard.dir=DIR`` to ``DIR/<run name>`` (a study's
runs side by side: ``tensorboard --logdir DIR``). A resumed run writes to the
same folder with ``purge_step`` one past its checkpoint, so TensorBoard drops
what an interrupted process logged after it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from alilama_core.contracts.logger import Logger, RunStart
from alilama_loggers.common import describe_end, dir_state, log_dir, run_params


def markdown_table(values: dict[str, Any]) -> str:
    """``values`` as a two-column markdown table (TensorBoard renders text as markdown)."""
    lines = ["| key | value |", "|---|---|"]
    lines += [f"| {k} | {str(v).replace('|', '/')} |" for k, v in values.items()]
    return "\n".join(lines)


class TensorBoardLogger(Logger):
    name = "tensorboard"
    defaults: ClassVar[dict[str, Any]] = {"dir": None, "flush_secs": 120}

    @classmethod
    def shared_options(cls, folder: str, study: str) -> dict[str, Any]:
        """Each run in ``folder/tensorboard/<run>`` (``tensorboard --logdir folder/tensorboard`` lists them all)."""
        return {"dir": f"{folder}/tensorboard"}

    requires = ("tensorboard",)
    extra = "tensorboard"

    def start(self, run: RunStart) -> dict[str, Any]:
        from torch.utils.tensorboard import SummaryWriter

        folder = log_dir(run, self.options["dir"])
        purge = None if run.resumed_from is None else run.resumed_from + 1
        self.writer = SummaryWriter(str(folder), purge_step=purge, flush_secs=self.options["flush_secs"])
        if run.purpose == "train" and run.resumed_from is None:
            self.writer.add_text("hyperparameters", markdown_table(run_params(run)), 0)
        return dir_state(run, folder)

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def log_samples(self, step: int, samples: list[str]) -> None:
        self.writer.add_text("samples", "\n\n".join(f"    {s}" for s in samples), step)

    def flush(self) -> None:
        self.writer.flush()

    def end(self, summary: dict[str, Any], stopped: str | None) -> None:
        self.writer.add_text("summary", markdown_table(describe_end(summary, stopped)), summary.get("step", 0))
        self.writer.flush()

    def close(self) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.close()
            self.writer = None
