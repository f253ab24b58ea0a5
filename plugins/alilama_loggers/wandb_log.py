"""``wandb``: a Weights & Biases run; with ``WANDB_MODE=offline`` (or the option ``mode: offline``)
it is written to ``RUN/trackers/wandb/wandb/offline-run-*`` and uploaded later by ``wandb sync``.

The config (flattened), the parameter count and the data are the run's config;
each metrics row is one history step; samples are a text value ``samples``;
the end's summary, and why the run stopped, go to the run's summary. The run
id is kept in ``run.json``, so a resumed training continues the same W&B run
(``resume="allow"``) and skips the steps that run already holds (an
interrupted process may have logged past its checkpoint; W&B keeps steps in
order and never rewrites one). ``alilama eval --log`` adds its results to the
run's summary (W&B takes no step older than its last).
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from alilama_core.contracts.logger import Logger, RunStart, replay
from alilama_loggers.common import describe_end, dir_state, log_dir, run_params
from alilama_loggers.wandb_files import logged_steps


class WandbLogger(Logger):
    name = "wandb"
    defaults: ClassVar[dict[str, Any]] = {
        "project": "alilama",
        "entity": None,
        "group": None,
        "tags": [],
        "mode": None,
        "dir": None,
    }
    requires = ("wandb",)
    extra = "wandb"

    @classmethod
    def shared_options(cls, folder: str, study: str) -> dict[str, Any]:
        """One project ``study``."""
        return {"project": study}

    def start(self, run: RunStart) -> dict[str, Any]:
        import wandb

        opts = self.options
        folder = log_dir(run, opts["dir"])
        folder.mkdir(parents=True, exist_ok=True)
        run_id = run.state.get("id") or uuid.uuid4().hex[:8]
        self.purpose = run.purpose
        self.run = wandb.init(
            project=opts["project"],
            entity=opts["entity"],
            group=opts["group"],
            tags=list(opts["tags"] or []) or None,
            mode=opts["mode"],
            name=run.name,
            id=run_id,
            resume="allow",
            dir=str(folder),
            config=run_params(run) if run.purpose == "train" else None,
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off"),
        )
        self.skip_through = -1
        if run.resumed_from is not None:
            # W&B writes in the background, so a killed process may have left fewer steps than its
            # last checkpoint had, or more: the steps it lacks are replayed, those it holds skipped.
            held = max([*logged_steps(folder, run_id), self.run.step - 1, -1])
            replay(self, run.history, held)
            self.skip_through = max(held, run.resumed_from)
        return {"id": run_id, "project": opts["project"], **dir_state(run, folder)}

    def _log(self, step: int, values: dict[str, Any]) -> None:
        if step > self.skip_through:
            self.run.log(values, step=step)

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self._log(step, scalars)

    def log_evaluation(self, step: int, results: dict[str, float]) -> None:
        if self.purpose == "eval":
            self.run.summary.update({**results, "eval_step": step})
        else:
            self._log(step, results)

    def log_samples(self, step: int, samples: list[str]) -> None:
        self._log(step, {"samples": "\n\n".join(samples)})

    def end(self, summary: dict[str, Any], stopped: str | None) -> None:
        self.run.summary.update(describe_end(summary, stopped))
        self.run.finish()
        self.run = None

    def close(self) -> None:
        if getattr(self, "run", None) is not None:
            self.run.finish()
            self.run = None
