"""Writing a run folder: ``RunFolder``, the core's ``RunWriter`` (see ``alilama_core.contracts.runs``).

``runs.checkpoint`` reads the format and names its files; this module writes
it, so a trainer owns its loop only. One process writes a run folder (under its
exclusive lock); under DDP the other ranks pass ``main=False`` and only load.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from alilama_core.base.errors import CheckpointError, ConfigError, DataError, OutputError
from alilama_core.base.files import atomic_write_text, disk_full_guard, exclusive_lock, make_temp_folder
from alilama_core.contracts.logger import split_row
from alilama_core.engine import configs as cfgmod
from alilama_core.runs.checkpoint import (
    CONFIG,
    FINAL,
    METRICS,
    OPTIMIZER,
    RNG,
    STATE,
    STATE_KEYS,
    TOKENIZER,
    WEIGHTS,
    attention_record,
    checkpoints,
    file_sha256,
    load_weights,
    read_metrics,
    read_run_json,
    recorded_weights_hash,
    save_weights,
    step_name,
    verify_tokenizer,
    write_run_json,
)
from alilama_core.runs.outputs import building, check_output, check_writable_path, clean_stale
from alilama_core.runs.tokenizers import tokenizer_hash
from alilama_core.runs.trackers import STATE as LOGGER_STATE
from alilama_core.runs.trackers import Trackers, summary_of

# Model settings that the checkpoints' weights depend on: they cannot change on resume.
ARCHITECTURE = (
    "vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "d_mlp",
    "context_length",
    "positional",
    "bias",
    "norm_bias",
)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def config_changes(old, new) -> dict[str, list]:
    """``{"section.field": [old, new]}`` for every field that differs."""
    a, b = cfgmod.flat(old), cfgmod.flat(new)
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def load_state(path: Path) -> Any:
    """A checkpoint's optimizer or RNG state, loaded with ``weights_only=True``: tensors and plain data only.

    A file that holds anything else (a pickle that would build objects or run code)
    is refused, never loaded another way.
    """
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's note on the pickle protocol of a foreign file
        try:
            return torch.load(path, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise CheckpointError(
                f"{path.name} holds objects other than tensors and plain data, so it was not loaded (a file "
                "that was not written by training, possibly tampered with); delete this checkpoint folder "
                "to resume from an earlier one"
            ) from exc


def truncate_metrics(path: Path, step: int, echo=print) -> None:
    """Drop metric lines past ``step`` (logged after the checkpoint we resume from).

    A line that is not valid JSON (torn by a kill mid-write) is dropped with a warning.
    """
    if not path.is_file():
        return
    keep, torn = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            row_step = row["step"]
        except (ValueError, KeyError, TypeError):
            torn += 1
            continue
        if isinstance(row_step, int) and row_step <= step:
            keep.append(line)
    if torn:
        echo(f"warning: dropped {torn} unreadable line(s) of {path} (torn by an interrupted write)")
    atomic_write_text(path, "".join(line + "\n" for line in keep))


def after_disk_full(run: Path, ready: bool) -> str:
    """What to do once space is freed after a full disk stopped training into ``run``."""
    import shlex

    if not ready:  # the new run folder was never swapped in
        return "run the same command again"
    done = [p for p in checkpoints(run) if (p / WEIGHTS).is_file() and (p / STATE).is_file()]
    command = f"`alilama train --resume {shlex.quote(str(run))}`"
    if not done:
        return f"run {command}: the run has no checkpoint yet, so it starts again from step 0"
    size = sum(f.stat().st_size for f in done[-1].iterdir() if f.is_file())
    return (
        f"run {command} to continue from {done[-1].name}, its newest complete checkpoint "
        f"(each checkpoint takes about {size / 1e6:.1f} MB)"
    )


class RunFolder:
    """The ``RunWriter`` of the core: creates, resumes, checkpoints and logs a run folder."""

    def __init__(self, path: str | os.PathLike[str], config, trainer: str, echo=print, main: bool = True) -> None:
        self.path = Path(path)
        self.config, self.trainer, self.echo, self.main = config, trainer, echo, main
        self.record: dict[str, Any] = {"checkpoints": {}}
        self.saved = None  # the run's saved config, when resuming
        self.finished: dict[str, Any] | None = None
        self.ready = False  # whether ``path`` holds this run (a new one is swapped in by ``begin``)
        self._metrics = None
        # the loggers of train.loggers (rank 0 only); each metrics row also goes to them
        self.trackers = Trackers.from_config(config) if main else Trackers({})
        self._last_eval: dict[str, Any] = {}

    # -- before anything is written -----------------------------------------------------

    def precheck(self, data_dir, *, resume: bool, overwrite: bool) -> None:
        self.ready = resume
        if resume and not (self.path / CONFIG).is_file():
            self.check_resume()  # a clear error before anything is created
        if not resume and self.main:  # cheap checks before the lock is made beside the run
            inputs = [] if getattr(self.config, "task", None) and self.config.task.name else [data_dir]
            check_output(self.path, "run", overwrite, inputs=inputs)

    def check_resume(self):
        """The run's saved config; refuse overrides that change the architecture."""
        run = self.path
        if not run.is_dir():
            raise CheckpointError(f"cannot resume: {str(run)!r} does not exist")
        if not (run / CONFIG).is_file():
            raise CheckpointError(f"cannot resume: {str(run)!r} holds no Alilama run (no config.yaml)")
        saved = cfgmod.load(run / CONFIG)
        changed = [
            k
            for k in config_changes(saved, self.config)
            if k.startswith("model.") and k.split(".", 1)[1] in ARCHITECTURE
        ]
        if changed:
            detail = ", ".join(
                f"{k} {getattr(saved.model, k[6:])!r} -> {getattr(self.config.model, k[6:])!r}" for k in changed
            )
            raise ConfigError(
                f"cannot resume with a different architecture ({detail}): the run's checkpoints hold "
                "the old one. Drop those overrides, or start a new run with --out"
            )
        if saved.train.optimizer != self.config.train.optimizer:  # its state in the checkpoints is the old one's
            raise ConfigError(
                f"cannot resume with another optimiser (train.optimizer {saved.train.optimizer!r} -> "
                f"{self.config.train.optimizer!r}): the checkpoints hold the old one's state. "
                "Drop the override, or start a new run with --out"
            )
        self.saved = saved
        return saved

    @contextmanager
    def held(self) -> Iterator[None]:
        with (
            disk_full_guard(self.path, "run folder", lambda: after_disk_full(self.path, self.ready)),
            ExitStack() as held,
        ):
            if self.main:  # one writer per run folder, for the whole run
                check_writable_path(self.path, "run folder")
                try:
                    held.enter_context(exclusive_lock(self.path, "run"))
                except OSError as exc:
                    raise OutputError(
                        f"cannot write the run folder {str(self.path)!r}: {exc.strerror or exc}"
                    ) from None
            try:
                yield
            finally:
                self.close()

    # -- creating or reopening ----------------------------------------------------------

    def begin(self, source, model, optimizer, *, resume: bool, overwrite: bool, barrier=None) -> dict[str, Any] | None:
        """Create or reopen the run folder (main process only); on resume, load the newest checkpoint.

        ``barrier``: called once the folder is ready (under DDP, every rank waits for rank 0 there).
        """
        if self.main:  # every check passed: only now is the run folder written
            self.record = self._open(source) if resume else self._create(source, overwrite)
            self.ready = True
        if barrier is not None:
            barrier()
        state = self.resume(model, optimizer) if resume else None
        if self.finished is None:
            self.after_begin()
            self.start_trackers(source, model, state, resume)
        return state

    def start_trackers(self, source, model, state: dict[str, Any] | None, resume: bool) -> None:
        """Start the run's loggers (a resumed run's with the states ``run.json`` kept); keep their states."""
        if not (self.main and self.trackers):
            return
        try:
            parameters = int(sum(p.numel() for p in model.parameters()))
        except (AttributeError, TypeError):  # a trainer's model that is not an nn.Module
            parameters = None
        kept = self.trackers.start(
            self.path,
            self.config,
            parameters=parameters,
            data=source.describe(),
            resumed_from=(state["step"] if state else 0) if resume else None,
            states=self.record.get(LOGGER_STATE),
            history=read_metrics(self.path) if resume and (self.path / METRICS).is_file() else None,
        )
        if kept != self.record.get(LOGGER_STATE, {}):
            self.record[LOGGER_STATE] = kept
            write_run_json(self.path, self.record)

    def after_begin(self) -> None:
        """Open metrics.jsonl for appending (main process)."""
        if self.main and self._metrics is None:
            self._metrics = open(self.path / METRICS, "a", encoding="utf-8")

    def _create(self, source, overwrite: bool) -> dict:
        """Build the run folder beside ``path`` and swap it in; returns its run.json record."""
        check_output(self.path, "run", overwrite, inputs=source.inputs())
        with building(self.path, "run", "run folder") as work:
            cfgmod.save(self.config, work / CONFIG)
            shutil.copytree(source.tokenizer_dir, work / TOKENIZER)
            record = {
                "format": 1,
                **source.describe(),
                "tokenizer_sha256": tokenizer_hash(work / TOKENIZER),
                "checkpoints": {},
                "history": [{"action": "start", "time": _now(), "pid": os.getpid(), "trainer": self.trainer}],
            }
            self._record_attention(record)
            write_run_json(work, record)
        return record

    def _open(self, source) -> dict:
        """Check an existing run for resuming (under its lock); returns its run.json record."""
        run = self.path
        if not os.access(run, os.W_OK):
            raise OutputError(f"cannot resume: {str(run)!r} is not writable")
        removed = clean_stale(run)
        if removed:
            self.echo(f"removed {len(removed)} unfinished temporary file(s) left by an interrupted process")
        record = read_run_json(run)
        verify_tokenizer(run, record)
        if tokenizer_hash(run / TOKENIZER) != source.meta["tokenizer_hash"]:
            raise DataError(
                f"the run's tokenizer ({run / TOKENIZER}) differs from the one the data in "
                f"{str(source.tokenizer_dir.parent)!r} was prepared with; resume with the same data"
            )
        record.setdefault("format", 1)
        record.setdefault("checkpoints", {})
        record.setdefault("history", [])
        record.setdefault("tokenizer_sha256", tokenizer_hash(run / TOKENIZER))
        data = source.describe()["data"]
        if data is not None:
            record["data"] = data
        self._record_attention(record)
        return record

    def _record_attention(self, record: dict) -> None:
        """Keep in ``record`` the backend this training uses when it is not exact (see ``attention_record``).

        A resumed run records the backend of its latest training.
        """
        kept = attention_record(self.config.model.attention, self.config.model.attention_options)
        if kept is None:
            record.pop("attention", None)
        else:
            record["attention"] = kept

    # -- resuming -------------------------------------------------------------------------

    def resume(self, model, optimizer) -> dict[str, Any] | None:
        """Load the newest complete checkpoint into ``model``, ``optimizer`` and torch's RNG; its state.

        Falls back past corrupt checkpoints with a warning; ``None`` when the run
        has no checkpoint yet (it starts from step 0). Sets ``finished`` when the
        run had already reached ``train.max_steps`` or spent its time budget; else records the resume.
        """
        state = self._load_latest(model, optimizer)
        step = state["step"] if state is not None else 0
        tcfg, saved = self.config.train, self.saved or self.check_resume()
        if (
            tcfg.max_steps is not None and step > tcfg.max_steps
        ):  # the config must never record fewer steps than the weights have had
            raise ConfigError(
                f"cannot resume with train.max_steps={tcfg.max_steps}: the run has already reached step "
                f"{step}. Give train.max_steps={step} or more"
                + (
                    f" (or leave it out to keep {saved.train.max_steps})"
                    if saved.train.max_steps is None or saved.train.max_steps >= step
                    else ""
                )
                + "; to use an earlier state, pick a checkpoint with --checkpoint in generate, eval or export"
            )
        finished = _finished_by(tcfg, state or {})
        if finished and (self.path / FINAL / WEIGHTS).is_file():
            self.echo(f"the run is finished: {finished}")
            best = state["best"] if state is not None else {}
            done = {"val_loss": best["val_loss"]} if best.get("val_loss") is not None else {}
            self.finished = {"step": step, "finished": True, **done}
            return state
        if self.main:
            changes = config_changes(saved, self.config)
            if changes:
                cfgmod.save(self.config, self.path / CONFIG)
                self.echo("saved to the run's config: " + ", ".join(f"{k}={v[1]!r}" for k, v in changes.items()))
            self.record["history"].append(
                {"action": "resume", "time": _now(), "pid": os.getpid(), "from_step": step, "changed": changes}
            )
            write_run_json(self.path, self.record)
            truncate_metrics(self.path / METRICS, step, self.echo)
        return state

    def _load_latest(self, model, optimizer) -> dict | None:
        import torch

        errors = []
        found = checkpoints(self.path)
        for path in reversed(found):
            try:
                for required in (WEIGHTS, OPTIMIZER, STATE, RNG):
                    if not (path / required).is_file():
                        raise CheckpointError(f"{path.name} lacks {required}")
                state = json.loads((path / STATE).read_text(encoding="utf-8"))
                if not isinstance(state, dict):
                    raise CheckpointError("state.json is not a JSON object")
                lacking = [k for k in STATE_KEYS if k not in state]
                if lacking:
                    raise CheckpointError(f"state.json lacks {', '.join(lacking)}")
                load_weights(model, path, recorded_weights_hash(path, self.record))
                try:
                    optimizer.load_state_dict(load_state(path / OPTIMIZER))
                    rng = load_state(path / RNG)
                    torch.set_rng_state(rng["torch"])
                except CheckpointError:
                    raise
                except Exception as exc:  # a truncated pickle-free torch file
                    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    raise CheckpointError(f"optimizer or RNG state unreadable ({reason})") from exc
                if errors:
                    self.echo(f"warning: skipped corrupt checkpoints: {'; '.join(errors)}")
                self.echo(f"resuming from {path.name} (step {state['step']})")
                return state
            except (CheckpointError, ValueError, UnicodeDecodeError) as exc:
                errors.append(f"{path.name}: {exc}")
        if not found:
            self.echo("the run has no checkpoint yet: starting from step 0")
            return None
        raise CheckpointError(
            f"no complete checkpoint to resume from in {str(self.path)!r}"
            + (f" ({'; '.join(errors)})" if errors else "")
        )

    # -- while training -------------------------------------------------------------------

    def log(self, row: dict[str, Any]) -> None:
        if not self.main:
            return
        self.after_begin()
        self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()
        _, evaluation, _ = split_row(row)  # the last evaluation, for the loggers' end
        self._last_eval = evaluation or self._last_eval
        self.trackers.log(row)

    def save_checkpoint(self, step: int, model, optimizer, state: dict[str, Any]) -> Path:
        self.trackers.flush()  # what the loggers hold up to a checkpoint survives a kill
        return self._save(step_name(step), model, optimizer, state)

    def finish(self, model, state: dict[str, Any]) -> Path:
        """The final weights, and in run.json what they are: their step, tokens and why training ended."""
        self.record["final"] = {k: state[k] for k in ("step", "tokens", "time_s", "stopped") if k in state}
        final = self._save(FINAL, model, None, state)
        self.trackers.end(summary_of(state, self._last_eval), state.get("stopped"))
        return final

    def _save(self, name: str, model, optimizer, state: dict) -> Path:
        import torch

        run, record = self.path, self.record
        final = run / name
        tmp = None
        try:
            # torch reports a short write without its reason: recognise a full disk before the partial files go
            with disk_full_guard(final, "checkpoint", lambda: after_disk_full(run, True)):
                tmp = make_temp_folder(run, prefix=f".{name}.")
                digest = file_sha256(save_weights(model, tmp))
                if optimizer is not None:
                    torch.save(optimizer.state_dict(), tmp / OPTIMIZER)
                    torch.save({"torch": torch.get_rng_state()}, tmp / RNG)
                state = {**state, "weights_sha256": digest}
                (tmp / STATE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
                if record["checkpoints"].pop(name, None) is not None:
                    write_run_json(run, record)  # never leave a hash that describes the folder being replaced
                if final.exists():
                    shutil.rmtree(final)
                os.replace(tmp, final)
        except BaseException:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        record["checkpoints"][name] = digest
        write_run_json(run, record)
        return final

    def prune(self, best_step: int | None) -> None:
        steps = checkpoints(self.path)
        keep = set(steps[-self.config.train.keep_last :])
        if best_step is not None:
            keep.add(self.path / step_name(best_step))
        for path in steps:
            if path not in keep:
                self.record["checkpoints"].pop(path.name, None)
                shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        self.trackers.close()
        if self._metrics is not None:
            try:
                self._metrics.close()
            except OSError:  # every line was flushed when written: only a write that already failed is retried
                pass
            self._metrics = None


def _finished_by(tcfg, state: dict[str, Any]) -> str | None:
    """Why a run whose newest checkpoint has ``state`` has nothing left to train, or ``None``."""
    step = state.get("step", 0)
    if tcfg.max_steps is not None and step >= tcfg.max_steps:
        return (
            f"it reached train.max_steps={tcfg.max_steps} at step {step}; "
            f"to train on, raise it (e.g. train.max_steps={2 * tcfg.max_steps})"
        )
    if tcfg.max_time is not None and state.get("time_s", 0.0) >= tcfg.max_time:
        return (
            f"it spent its time budget, train.max_time={tcfg.max_time:g} s, at step {step}; "
            f"to train on, raise it (e.g. train.max_time={2 * tcfg.max_time:g})"
        )
    return None
