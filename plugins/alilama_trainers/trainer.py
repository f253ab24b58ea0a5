"""The default trainer: one process, or DDP under ``torchrun`` (gloo on CPU, NCCL on GPU).

Each optimiser step draws ``train.batch_size`` random windows of
``context_length + 1`` tokens from the memory-mapped train split (the essay's
"random story fragments"); under DDP every rank draws the same global batch and
takes its share, so the global batch, and the losses, are those of one process.
AdamW with weight decay on matrices only, linear warm-up then cosine decay to
``min_lr``, gradient clipping, accumulation, optional bf16 autocast and
``torch.compile``.

Checkpoints (``RUN/step-XXXXXXXX/``) hold the weights (safetensors), the
optimiser state, the RNG states and the data sampler's position; they are
written under a temporary name and renamed, so a checkpoint folder is complete
or absent. Resuming from one gives exactly the losses of an uninterrupted run
on CPU. Ctrl-C or SIGTERM writes a checkpoint before exiting.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import signal
import tempfile
import time
import warnings
from contextlib import ExitStack, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from alilama_core import config as cfgmod
from alilama_core.checkpoint import (
    WEIGHTS,
    attention_record,
    checkpoints,
    file_sha256,
    load_tokenizer,
    load_weights,
    read_run_json,
    recorded_weights_hash,
    save_weights,
    verify_tokenizer,
    write_run_json,
)
from alilama_core.config import Config, check_memory, estimate_parameters
from alilama_core.data import DataError, TokenData, check_fits, random_windows, tokenizer_hash
from alilama_core.errors import AlilamaError, CheckpointError, ConfigError
from alilama_core.evaluate import window_nll
from alilama_core.files import atomic_write_text, disk_full_guard, exclusive_lock
from alilama_core.interfaces import Trainer
from alilama_core.tasks import TaskData, collate
from alilama_core.model import GPT, build_model
from alilama_core.outputs import (
    OutputError,
    check_output,
    clean_stale,
    mark,
    new_folder_beside,
    stale_beside,
    swap_in,
)

LN2 = math.log(2)


def lr_at(step: int, cfg) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``max_steps``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.max_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, cfg) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices (embedding included), none on biases and norms."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


class Distributed:
    """Rank, world size and device; initialises the process group under torchrun."""

    def __init__(self, device: str) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available() and device in ("auto", "cuda")
        self.device = torch.device(f"cuda:{local}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        if self.world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    @staticmethod
    def is_main() -> bool:
        """Whether this process is rank 0 (before the process group exists)."""
        return int(os.environ.get("RANK", "0")) == 0

    def mean(self, value: float) -> float:
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t)
        return t.item() / self.world

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def close(self) -> None:
        if self.world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


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
# Bytes per parameter while training with AdamW in float32: weights, gradients, two moments.
TRAINING_BYTES_PER_PARAMETER = 16


def _load_state(path: Path) -> Any:
    """A checkpoint's optimizer or RNG state, loaded with ``weights_only=True``: tensors and plain data only.

    A file that holds anything else (a pickle that would build objects or run code)
    is refused, never loaded another way.
    """
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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _flat(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_changes(old: Config, new: Config) -> dict[str, list]:
    """``{"section.field": [old, new]}`` for every field that differs."""
    a, b = _flat(cfgmod.to_dict(old)), _flat(cfgmod.to_dict(new))
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


class DefaultTrainer(Trainer):
    name = "default"

    def __init__(self, config: Config, echo=print, show_progress: bool = True) -> None:
        super().__init__(config, echo=echo, show_progress=show_progress)
        self._stop: str | None = None

    # -- checks made before anything is written ----------------------------------

    def _check_samples_fit(self, model: GPT, tokenizer) -> None:
        """Refuse sample lengths that would run past a bounded positional table."""
        tcfg = self.config.train
        limit = model.positional.max_positions
        if limit is None or not tcfg.sample_prompts:
            return
        width = max(len(tokenizer.encode(p, allowed_special="none")) or 1 for p in tcfg.sample_prompts)
        room = limit - width + 1  # new tokens that still have a position
        if tcfg.sample_tokens > room:
            raise ConfigError(
                f"train.sample_tokens={tcfg.sample_tokens} runs past the {limit} positions of "
                f"positional scheme {self.config.model.positional!r} (the longest sample prompt has {width} "
                f"tokens); set train.sample_tokens={max(room, 0)} or less, or shorten train.sample_prompts"
            )

    def _check_resume(self, run: Path) -> Config:
        """The run's saved config; refuse overrides that change the architecture."""
        if not run.is_dir():
            raise CheckpointError(f"cannot resume: {str(run)!r} does not exist")
        if not (run / "config.yaml").is_file():
            raise CheckpointError(f"cannot resume: {str(run)!r} holds no Alilama run (no config.yaml)")
        saved = cfgmod.load(run / "config.yaml")
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
        return saved

    # -- run folder ---------------------------------------------------------------

    def _new_run(self, run: Path, data: TokenData, overwrite: bool, is_task: bool = False) -> dict:
        """Build the run folder beside ``run`` and swap it in; returns its run.json record."""
        check_output(run, "run", overwrite, inputs=[] if is_task else [data.dir])
        for stale in stale_beside(run):
            shutil.rmtree(stale, ignore_errors=True)
        work = new_folder_beside(run, "run folder")
        try:
            cfgmod.save(self.config, work / "config.yaml")
            shutil.copytree(data.dir / "tokenizer", work / "tokenizer")
            record = {
                "format": 1,
                "data": None if is_task else str(data.dir.resolve()),
                "task": self.config.task.name if is_task else None,
                "data_meta": {k: data.meta.get(k) for k in ("tokenizer_hash", "vocab_size", "dtype", "splits")},
                "tokenizer_sha256": tokenizer_hash(work / "tokenizer"),
                "checkpoints": {},
                "history": [{"action": "start", "time": _now(), "pid": os.getpid(), "trainer": self.name}],
            }
            self._record_attention(record)
            write_run_json(work, record)
            mark(work, "run")
            swap_in(work, run)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return record

    def _open_run(self, run: Path, data: TokenData) -> dict:
        """Check an existing run for resuming (under its lock); returns its run.json record."""
        if not os.access(run, os.W_OK):
            raise OutputError(f"cannot resume: {str(run)!r} is not writable")
        removed = clean_stale(run)
        if removed:
            self.echo(f"removed {len(removed)} unfinished temporary file(s) left by an interrupted process")
        record = read_run_json(run)
        verify_tokenizer(run, record)
        if tokenizer_hash(run / "tokenizer") != data.meta["tokenizer_hash"]:
            raise DataError(
                f"the run's tokenizer ({run / 'tokenizer'}) differs from the one the data in "
                f"{str(data.dir)!r} was prepared with; resume with the same data"
            )
        record.setdefault("format", 1)
        record.setdefault("checkpoints", {})
        record.setdefault("history", [])
        record.setdefault("tokenizer_sha256", tokenizer_hash(run / "tokenizer"))
        if not getattr(self.config, "task", None) or not self.config.task.name:
            record["data"] = str(data.dir.resolve())
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

    # -- checkpoints --------------------------------------------------------------

    def _save_checkpoint(self, run: Path, name: str, model: GPT, opt, state: dict, record: dict) -> Path:
        final = run / name
        tmp = None
        try:
            # torch reports a short write without its reason: recognise a full disk before the partial files go
            with disk_full_guard(final, "checkpoint", lambda: _after_disk_full(run, True)):
                tmp = Path(tempfile.mkdtemp(dir=run, prefix=f".{name}.", suffix=".tmp"))
                digest = file_sha256(save_weights(model, tmp))
                if opt is not None:
                    torch.save(opt.state_dict(), tmp / "optimizer.pt")
                    torch.save({"torch": torch.get_rng_state()}, tmp / "rng.pt")
                state = {**state, "weights_sha256": digest}
                (tmp / "state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
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

    def _prune(self, run: Path, best_step: int | None, record: dict) -> None:
        steps = checkpoints(run)
        keep = set(steps[-self.config.train.keep_last :])
        if best_step is not None:
            keep.add(run / f"step-{best_step:08d}")
        for path in steps:
            if path not in keep:
                record["checkpoints"].pop(path.name, None)
                shutil.rmtree(path, ignore_errors=True)

    def _load_latest(self, run: Path, model: GPT, opt, record: dict) -> dict | None:
        """Load the newest complete checkpoint; fall back past corrupt ones with a warning.

        ``None`` when the run has no checkpoint at all yet (it starts from step 0).
        """
        errors = []
        found = checkpoints(run)
        for path in reversed(found):
            try:
                for required in (WEIGHTS, "optimizer.pt", "state.json", "rng.pt"):
                    if not (path / required).is_file():
                        raise CheckpointError(f"{path.name} lacks {required}")
                state = json.loads((path / "state.json").read_text(encoding="utf-8"))
                if not isinstance(state, dict):
                    raise CheckpointError("state.json is not a JSON object")
                lacking = [k for k in ("step", "tokens", "best", "sampler") if k not in state]
                if lacking:
                    raise CheckpointError(f"state.json lacks {', '.join(lacking)}")
                load_weights(model, path, recorded_weights_hash(path, record))
                try:
                    opt.load_state_dict(_load_state(path / "optimizer.pt"))
                    rng = _load_state(path / "rng.pt")
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
            f"no complete checkpoint to resume from in {str(run)!r}" + (f" ({'; '.join(errors)})" if errors else "")
        )

    # -- evaluation and samples ---------------------------------------------------

    @torch.no_grad()
    def evaluate(self, model: GPT, tokens: np.ndarray, bytes_per_token: float) -> dict[str, float]:
        """Mean loss over non-overlapping windows of the val split, and bits per byte."""
        if isinstance(tokens, TaskData):  # a task: answer tokens of its fixed validation set
            return tokens.evaluate(model)
        t = model.config.context_length
        limit = self.config.train.eval_tokens or len(tokens)
        starts = np.arange(0, min(len(tokens), limit + 1) - t - 1 + 1, t)
        if len(starts) == 0:
            raise DataError(f"the val split has {len(tokens)} tokens, fewer than one window of {t + 1}")
        total, count, _ = window_nll(model, tokens, starts, t, batch_size=32)
        loss = total / count
        return {"val_loss": loss, "val_bpb": loss / LN2 / bytes_per_token}

    @torch.no_grad()
    def samples(self, model: GPT, tokenizer, step: int) -> list[str]:
        from alilama_core.generation import SamplingSettings, generate

        cfg = self.config.train
        settings = SamplingSettings(max_new_tokens=cfg.sample_tokens, temperature=0.8, top_k=40, seed=step)
        was_training = model.training
        model.eval()
        out = []
        for prompt in cfg.sample_prompts:
            ids = tokenizer.encode(prompt, allowed_special="none") or [tokenizer.eot_id]
            new = generate(model, [ids], settings, eot_id=tokenizer.eot_id)[0]
            out.append(prompt + tokenizer.decode(new))
        model.train(was_training)
        return out

    # -- the loop -----------------------------------------------------------------

    def _on_signal(self, signum, frame) -> None:
        self._stop = signal.Signals(signum).name

    def fit(
        self,
        data_dir: str,
        out_dir: str,
        resume: bool = False,
        overwrite: bool = False,
        stop_at: int | None = None,
    ) -> dict[str, Any]:
        """Train into ``out_dir``. ``stop_at``: checkpoint and stop after that step (split a run over jobs)."""
        cfg = self.config.validate()
        tcfg = cfg.train
        run = Path(out_dir)
        if resume and not (run / "config.yaml").is_file():
            self._check_resume(run)  # a clear error before anything is created
        if not resume and Distributed.is_main():  # cheap checks before the lock is made beside the run
            inputs = [] if getattr(cfg, "task", None) and cfg.task.name else [data_dir]
            check_output(run, "run", overwrite, inputs=inputs)
        dist = Distributed(tcfg.device)
        self._run_ready = resume  # whether ``run`` holds this run (a new one is swapped in by _new_run)
        try:
            with (
                disk_full_guard(run, "run folder", lambda: _after_disk_full(run, self._run_ready)),
                ExitStack() as held,
            ):
                if dist.main:  # one writer per run folder, for the whole run
                    _lock_run(held, run)
                return self._fit(cfg, tcfg, dist, Path(data_dir), run, resume, overwrite, stop_at)
        finally:
            dist.close()

    def _fit(self, cfg, tcfg, dist, data_dir: Path, run: Path, resume: bool, overwrite: bool, stop_at):
        task = TaskData(cfg) if cfg.task.name else None  # generated examples instead of prepared text
        data = task or TokenData(data_dir)
        if data.meta["vocab_size"] > cfg.model.vocab_size:
            raise AlilamaError(
                f"the data's tokenizer has {data.meta['vocab_size']} ids but model.vocab_size is "
                f"{cfg.model.vocab_size}; set model.vocab_size={data.meta['vocab_size']}"
            )
        context = cfg.model.context_length
        if task is None:
            train_tokens, val_tokens = data.split("train"), data.split("val")
            check_fits(train_tokens, context, "train")
            check_fits(val_tokens, context, "val")
        else:
            train_tokens = val_tokens = task
        if tcfg.batch_size % dist.world:
            raise AlilamaError(
                f"train.batch_size ({tcfg.batch_size}) must be divisible by the number of processes ({dist.world})"
            )
        share = tcfg.batch_size // dist.world
        micro = min(tcfg.micro_batch_size or share, share)
        if share % micro:
            raise AlilamaError(f"train.micro_batch_size ({micro}) must divide the per-process batch ({share})")
        accumulation = share // micro

        saved = self._check_resume(run) if resume else None
        _check_training_memory(cfg.model, dist.device)
        tokenizer = load_tokenizer(data.dir / "tokenizer")

        torch.manual_seed(tcfg.seed)
        model = build_model(cfg.model).to(dist.device)
        if task is None:
            self._check_samples_fit(model, tokenizer)
        record: dict[str, Any] = {"checkpoints": {}}
        if dist.main:  # every check passed: only now is the run folder written
            record = self._open_run(run, data) if resume else self._new_run(run, data, overwrite, task is not None)
            self._run_ready = True
        dist.barrier()
        opt = make_optimizer(model, tcfg)
        sampler = np.random.Generator(np.random.PCG64(tcfg.seed))
        step, tokens_seen, best = 0, 0, {"val_loss": None, "step": None}
        train_loss = None
        if resume:
            state = self._load_latest(run, model, opt, record)
            if state is not None:
                step, tokens_seen, best = state["step"], state["tokens"], state["best"]
                sampler.bit_generator.state = state["sampler"]
            if step > tcfg.max_steps:  # the config must never record fewer steps than the weights have had
                raise ConfigError(
                    f"cannot resume with train.max_steps={tcfg.max_steps}: the run has already reached step "
                    f"{step}. Give train.max_steps={step} or more"
                    + (f" (or leave it out to keep {saved.train.max_steps})" if saved.train.max_steps >= step else "")
                    + "; to use an earlier state, pick a checkpoint with --checkpoint in generate, eval or export"
                )
            if step >= tcfg.max_steps and (run / "final" / WEIGHTS).is_file():
                self.echo(
                    f"the run is finished: it reached train.max_steps={tcfg.max_steps} at step {step}; "
                    f"to train on, raise it (e.g. train.max_steps={2 * tcfg.max_steps})"
                )
                done = {"val_loss": best["val_loss"]} if best.get("val_loss") is not None else {}
                return {"step": step, "finished": True, **done}
            if dist.main:
                changes = config_changes(saved, cfg)
                if changes:
                    cfgmod.save(cfg, run / "config.yaml")
                    self.echo("saved to the run's config: " + ", ".join(f"{k}={v[1]!r}" for k, v in changes.items()))
                record["history"].append(
                    {"action": "resume", "time": _now(), "pid": os.getpid(), "from_step": step, "changed": changes}
                )
                write_run_json(run, record)
                _truncate_metrics(run / "metrics.jsonl", step, self.echo)
        train_model: torch.nn.Module = model
        if tcfg.compile:
            train_model = torch.compile(model)
        if dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            train_model = DDP(train_model, device_ids=[dist.device.index] if dist.device.type == "cuda" else None)
        autocast = (
            torch.autocast(device_type=dist.device.type, dtype=torch.bfloat16)
            if tcfg.dtype == "bfloat16"
            else nullcontext()
        )
        bytes_per_token = data.bytes_per_token("val") if task is None else 1.0
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        metrics_file = open(run / "metrics.jsonl", "a", encoding="utf-8") if dist.main else None
        progress = _Progress(tcfg.max_steps, step, self.show_progress and dist.main, self.echo if dist.main else None)
        tokens_at_start = tokens_seen
        started = time.perf_counter()
        last_eval: dict[str, float] = {}

        def checkpoint_state() -> dict:
            return {"step": step, "tokens": tokens_seen, "best": best, "sampler": sampler.bit_generator.state}

        try:
            model.train()
            while step < tcfg.max_steps:
                lr = lr_at(step, tcfg)
                for group in opt.param_groups:
                    group["lr"] = lr
                if task is None:
                    starts = sampler.integers(0, len(train_tokens) - context, size=tcfg.batch_size)
                else:  # the same global batch of examples on every rank, as with windows
                    starts = task.draw(sampler, tcfg.batch_size)
                mine = starts[dist.rank * share : (dist.rank + 1) * share]
                loss_sum = 0.0
                for i in range(accumulation):
                    if task is None:
                        x, y = random_windows(train_tokens, mine[i * micro : (i + 1) * micro], context)
                    else:  # targets of prompt and padding are -100: the loss scores answers only
                        x, y = collate(mine[i * micro : (i + 1) * micro])
                    x, y = x.to(dist.device), y.to(dist.device)
                    sync = i == accumulation - 1 or dist.world == 1
                    with autocast, nullcontext() if sync else train_model.no_sync():
                        logits = train_model(x)
                        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
                        if task is not None:  # so the step's loss is the global batch's mean over answer tokens
                            loss = loss * task.weight(y)
                    (loss / accumulation).backward()
                    loss_sum += loss.item()
                grad_norm = None
                if tcfg.grad_clip is not None:
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip).item()
                opt.step()
                opt.zero_grad(set_to_none=True)
                step += 1
                tokens_seen += tcfg.batch_size * context
                train_loss = dist.mean(loss_sum / accumulation)
                row: dict[str, Any] = {"step": step, "tokens": tokens_seen, "lr": lr, "train_loss": train_loss}
                if grad_norm is not None:
                    row["grad_norm"] = grad_norm
                evaluate_now = step % tcfg.eval_every == 0 or step == tcfg.max_steps
                new_best = False
                if evaluate_now and dist.main:
                    last_eval = self.evaluate(model, val_tokens, bytes_per_token)
                    row.update(last_eval)
                    if best["val_loss"] is None or last_eval["val_loss"] < best["val_loss"]:
                        best, new_best = {"val_loss": last_eval["val_loss"], "step": step}, True
                sample_every = tcfg.sample_every or tcfg.eval_every
                sample_now = dist.main and tcfg.sample_prompts and task is None  # a task has no text prompts
                if sample_now and (step % sample_every == 0 or step == tcfg.max_steps):
                    row["samples"] = self.samples(model, tokenizer, step)
                    progress.print(f"step {step} samples:")
                    for text in row["samples"]:
                        progress.print("  " + text.replace("\n", " "))
                elapsed = time.perf_counter() - started
                progress.update(step, train_loss, tokens_seen - tokens_at_start, elapsed, last_eval)
                if dist.main and (step % tcfg.log_every == 0 or "val_loss" in row or step == tcfg.max_steps):
                    row["elapsed_s"] = round(elapsed, 3)
                    metrics_file.write(json.dumps(row) + "\n")
                    metrics_file.flush()
                if stop_at is not None and step >= stop_at and step < tcfg.max_steps:
                    self._stop = f"stopped at step {stop_at} (--stop-at)"
                out_of_time = tcfg.max_time is not None and elapsed >= tcfg.max_time
                stop = self._stop or ("time budget" if out_of_time else None)
                if dist.main and (step % tcfg.checkpoint_every == 0 or stop or new_best or step == tcfg.max_steps):
                    self._save_checkpoint(run, f"step-{step:08d}", model, opt, checkpoint_state(), record)
                    self._prune(run, best["step"], record)
                if stop:
                    if self._stop:
                        progress.print(f"{self._stop}: checkpoint written at step {step}; resume with --resume")
                        progress.close()
                        dist.barrier()
                        return {"step": step, "interrupted": self._stop, **last_eval}
                    break
            if dist.main:
                if not last_eval:
                    last_eval = self.evaluate(model, val_tokens, bytes_per_token)
                self._save_checkpoint(run, "final", model, None, checkpoint_state(), record)
            progress.close()
            dist.barrier()
            return {"step": step, "tokens": tokens_seen, "train_loss": train_loss, **last_eval}
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if metrics_file:
                try:
                    metrics_file.close()
                except OSError:  # every line was flushed when written: only a write that already failed is retried
                    pass


def _after_disk_full(run: Path, ready: bool) -> str:
    """What to do once space is freed after a full disk stopped training into ``run``."""
    import shlex

    if not ready:  # the new run folder was never swapped in
        return "run the same command again"
    done = [p for p in checkpoints(run) if (p / WEIGHTS).is_file() and (p / "state.json").is_file()]
    command = f"`alilama train --resume {shlex.quote(str(run))}`"
    if not done:
        return f"run {command}: the run has no checkpoint yet, so it starts again from step 0"
    size = sum(f.stat().st_size for f in done[-1].iterdir() if f.is_file())
    return (
        f"run {command} to continue from {done[-1].name}, its newest complete checkpoint "
        f"(each checkpoint takes about {size / 1e6:.1f} MB)"
    )


def _check_training_memory(model_cfg, device: torch.device) -> None:
    """Refuse a model whose weights, gradients and AdamW moments cannot fit, before allocating."""
    if device.type != "cuda":
        check_memory(model_cfg, TRAINING_BYTES_PER_PARAMETER, "training (weights, gradients, AdamW moments)")
        return
    need = estimate_parameters(model_cfg) * TRAINING_BYTES_PER_PARAMETER
    free, _ = torch.cuda.mem_get_info(device)
    if need > free:
        raise ConfigError(
            f"this model has about {estimate_parameters(model_cfg):,} parameters; training needs about "
            f"{need / 2**30:,.1f} GiB on {device} but {free / 2**30:,.1f} GiB is free. Choose a smaller model"
        )


def _lock_run(held: ExitStack, run: Path) -> None:
    """Hold the run folder's exclusive lock in ``held``; an unwritable place is a clear error."""
    from alilama_core.outputs import check_writable_path

    check_writable_path(run, "run folder")
    try:
        held.enter_context(exclusive_lock(run, "run"))
    except OSError as exc:
        raise OutputError(f"cannot write the run folder {str(run)!r}: {exc.strerror or exc}") from None


def _truncate_metrics(path: Path, step: int, echo=print) -> None:
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


class _Progress:
    """A rich progress bar (step, loss, tokens/s, time left) that can be switched off."""

    def __init__(self, total: int, start: int, enabled: bool, echo=None) -> None:
        self.enabled, self.echo = enabled, echo
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            transient=False,
        )
        self.progress.start()
        self.task = self.progress.add_task("train", total=total, completed=start, info="")
        self.start = start

    def update(self, step: int, loss: float, new_tokens: int, elapsed: float, last_eval: dict) -> None:
        if not self.enabled:
            return
        rate = new_tokens / max(elapsed, 1e-9)
        info = f"loss {loss:.3f}"
        if last_eval:
            info += f" | val {last_eval['val_loss']:.3f} ({last_eval['val_bpb']:.3f} bpb)"
        self.progress.update(self.task, completed=step, info=f"{info} | {rate:,.0f} tok/s")

    def print(self, text: str) -> None:
        if self.enabled:
            self.progress.console.print(text, markup=False, highlight=False)
        elif self.echo is not None:
            self.echo(text)

    def close(self) -> None:
        if self.enabled:
            self.progress.stop()
            self.enabled = False
