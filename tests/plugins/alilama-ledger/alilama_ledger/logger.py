"""``ledger``: each call as ``{"call": ..., "step": ..., ...}`` in ``ledger.jsonl``, written by a third party."""

from __future__ import annotations

import json
from pathlib import Path

from alilama_core.contracts.logger import Logger, RunStart

FILE = "ledger.jsonl"


class LedgerLogger(Logger):
    name = "ledger"
    defaults = {"dir": None, "label": "ledger"}

    def start(self, run: RunStart) -> dict:
        self.dir = Path(run.state.get("dir") or self.options["dir"] or run.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / FILE
        if run.resumed_from is not None and path.is_file():  # drop what was logged past the checkpoint
            kept = [
                line
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= run.resumed_from
            ]
            path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        self.file = open(path, "a", encoding="utf-8")
        self._write("start", 0, purpose=run.purpose, parameters=run.parameters, resumed_from=run.resumed_from)
        return {"dir": str(self.dir)}

    def _write(self, call: str, step: int, **values) -> None:
        self.file.write(json.dumps({"call": call, "step": step, "label": self.options["label"], **values}) + "\n")

    def log_scalars(self, step, scalars):
        self._write("scalars", step, values=scalars)

    def log_evaluation(self, step, results):
        self._write("evaluation", step, values=results)

    def log_samples(self, step, samples):
        self._write("samples", step, samples=samples)

    def flush(self):
        self.file.flush()

    def end(self, summary, stopped):
        self._write("end", summary.get("step", 0), summary=summary, stopped=stopped)

    def close(self):
        if getattr(self, "file", None) is not None:
            self.file.close()
            self.file = None
