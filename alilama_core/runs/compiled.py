"""The compiled decode step of a run, kept in the run folder: ``RUN/compiled/decode-<key>.pt2``.

``alilama_core.engine.decode`` compiles a model's decode step into an
AOTInductor package once per model, for any batch size (30–100 s on a small CPU);
this module keeps those packages beside the run, so ``generate``, ``chat`` and
``serve`` load one in milliseconds instead of compiling again::

    run = load_run("runs/essay")
    attach(run)                          # the run's packages live in runs/essay/compiled/
    prepare(run)                         # build the step now (else: at the first decode="compiled")
    generate_text(run, "Once", SamplingSettings(decode="auto"))   # auto finds it

The key in a package's name covers what it was built from: torch and the
machine, the code of the step, the model's config (its attention backend
aside: the step computes exact attention itself) and every weight, the dtype and
device. New weights or another torch give a new key: the
package is built again and the packages of the run's older keys are removed. A
package is built in a temporary folder inside ``compiled/`` and renamed into
place, so a reader never sees half of one; one that does not load (truncated,
another machine's) is removed and rebuilt, never a crash.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from alilama_core.base.files import file_mode
from alilama_core.engine.decode import compiled_step, keep_packages

FOLDER = "compiled"
"""The run's subfolder of compiled packages."""
PREFIX = "decode-"


class RunPackages:
    """A run folder's compiled packages (an ``engine.decode.PackageStore``)."""

    def __init__(self, run: str | os.PathLike[str]) -> None:
        self.folder = Path(run) / FOLDER

    def path(self, key: str) -> Path:
        return self.folder / f"{PREFIX}{key}.pt2"

    def find(self, key: str) -> Path | None:
        path = self.path(key)
        return path if path.is_file() and path.stat().st_size > 0 else None

    def put(self, key: str, build: Callable[[Path], None]) -> Path:
        """Build in a temporary folder beside the final file and rename it into place; drop stale packages."""
        self.folder.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(dir=self.folder, prefix=".building-"))
        try:
            temporary = building / f"{PREFIX}{key}.pt2"
            build(temporary)
            os.chmod(temporary, file_mode())
            os.replace(temporary, self.path(key))  # atomic: a reader sees the old file, none, or the whole new one
        finally:
            shutil.rmtree(building, ignore_errors=True)
        self._drop_stale(key)
        return self.path(key)

    def discard(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def _drop_stale(self, key: str) -> None:
        """Remove the packages for the same device and dtype with another key (older weights or torch, or an
        older package for one batch size, ``device-dtype-bN-digest``)."""
        shape = key.rsplit("-", 1)[0]  # device-dtype
        for other in self.folder.glob(f"{PREFIX}{shape}-*.pt2"):
            if other != self.path(key):
                other.unlink(missing_ok=True)


def attach(run) -> None:
    """Keep ``run.model``'s compiled decode steps in ``run.path / "compiled"`` (``run``: a loaded ``Run``)."""
    keep_packages(run.model, RunPackages(run.path))


def prepare(run) -> tuple[float, str | None]:
    """Build (or load) the compiled decode step of ``run`` now (any batch size): ``(seconds, why not or None)``."""
    attach(run)
    start = time.perf_counter()
    step, reason = compiled_step(run.model, build=True)
    return time.perf_counter() - start, reason
