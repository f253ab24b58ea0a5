"""``csv``: a run's metrics as CSV files (no dependency).

In ``RUN/trackers/csv/`` (or ``dir/<run name>`` with ``train.logger_options.csv.dir``):
``metrics.csv`` (``step,key,value``: one line per number, evaluations included),
``samples.csv`` (``step,index,text``), ``params.csv`` (``key,value``: the
hyperparameters) and, at the end, ``summary.csv`` (``key,value``). A resumed
run first drops the lines logged past the checkpoint it continues from; a new
run starts the files afresh (a run replaced with ``--overwrite`` may have left
them in ``dir/<run name>``).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, ClassVar

from alilama_core.base.files import atomic_write_text
from alilama_core.contracts.logger import Logger, RunStart
from alilama_loggers.common import describe_end, dir_state, log_dir, run_params

METRICS, SAMPLES, PARAMS, SUMMARY = "metrics.csv", "samples.csv", "params.csv", "summary.csv"
HEADERS = {METRICS: ["step", "key", "value"], SAMPLES: ["step", "index", "text"]}


def _rows_through(path: Path, step: int) -> list[list[str]]:
    """The data rows of ``path`` logged at ``step`` or before (a line torn by a kill is dropped)."""
    width = len(HEADERS[path.name])
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    return [r for r in rows if len(r) == width and r[0].isdigit() and int(r[0]) <= step]


def _write_table(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    import io

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    atomic_write_text(path, out.getvalue())


class CsvLogger(Logger):
    name = "csv"
    defaults: ClassVar[dict[str, Any]] = {"dir": None}

    @classmethod
    def shared_options(cls, folder: str, study: str) -> dict[str, Any]:
        """Each run in ``folder/csv/<run>``."""
        return {"dir": f"{folder}/csv"}

    def start(self, run: RunStart) -> dict[str, Any]:
        self.dir = log_dir(run, self.options["dir"])
        self.dir.mkdir(parents=True, exist_ok=True)
        if run.purpose == "train":
            _write_table(self.dir / PARAMS, ["key", "value"], sorted(run_params(run).items()))
        fresh = run.purpose == "train" and run.resumed_from is None  # a new run: an old one's rows are not its own
        if fresh:
            (self.dir / SUMMARY).unlink(missing_ok=True)
        self.files, self.writers = {}, {}
        for name, header in HEADERS.items():
            path = self.dir / name
            if fresh:
                _write_table(path, header, [])
            elif run.resumed_from is not None and path.is_file():
                _write_table(path, header, _rows_through(path, run.resumed_from))
            new = not path.is_file()
            self.files[name] = open(path, "a", newline="", encoding="utf-8")
            self.writers[name] = csv.writer(self.files[name])
            if new:
                self.writers[name].writerow(header)
        return dir_state(run, self.dir)

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self.writers[METRICS].writerows([step, key, repr(value)] for key, value in scalars.items())

    def log_samples(self, step: int, samples: list[str]) -> None:
        self.writers[SAMPLES].writerows([step, i, text] for i, text in enumerate(samples))

    def flush(self) -> None:
        for f in self.files.values():
            f.flush()

    def end(self, summary: dict[str, Any], stopped: str | None) -> None:
        _write_table(self.dir / SUMMARY, ["key", "value"], list(describe_end(summary, stopped).items()))

    def close(self) -> None:
        for f in getattr(self, "files", {}).values():
            f.close()
        self.files = {}
