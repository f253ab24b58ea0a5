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
import shutil
import signal
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from alilama_core import config as cfgmod
from alilama_core.checkpoint import WEIGHTS, checkpoints, load_tokenizer, load_weights, save_weights
from alilama_core.config import Config
from alilama_core.data import DataError, TokenData, check_fits, random_windows, tokenizer_hash
from alilama_core.errors import AlilamaError, CheckpointError
from alilama_core.evaluate import window_nll
from alilama_core.files import atomic_write_text
from alilama_core.interfaces import Trainer
from alilama_core.model import GPT, build_model

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


class DefaultTrainer(Trainer):
    name = "default"

    def __init__(self, config: Config, echo=print, show_progress: bool = True) -> None:
        super().__init__(config)
        self.echo = echo
        self.show_progress = show_progress
        self._stop: str | None = None

    # -- run folder ---------------------------------------------------------------

    def _prepare_run(self, run: Path, data: TokenData, resume: bool, overwrite: bool) -> None:
        if run.exists() and any(run.iterdir()):
            if resume:
                if not (run / "config.yaml").is_file():
                    raise CheckpointError(f"cannot resume: {str(run)!r} holds no Alilama run (no config.yaml)")
                if tokenizer_hash(run / "tokenizer") != data.meta["tokenizer_hash"]:
                    raise DataError(
                        f"the run's tokenizer ({run / 'tokenizer'}) differs from the one the data in "
                        f"{str(data.dir)!r} was prepared with; resume with the same data"
                    )
                return
            if not overwrite:
                what = "a different run" if (run / "config.yaml").is_file() else "other files"
                raise AlilamaError(
                    f"{str(run)!r} already holds {what}; pass --resume to continue it, "
                    "--overwrite to replace it, or choose another --out"
                )
            shutil.rmtree(run)
        elif resume:
            raise CheckpointError(f"cannot resume: {str(run)!r} does not exist")
        run.mkdir(parents=True, exist_ok=True)
        cfgmod.save(self.config, run / "config.yaml")
        shutil.copytree(data.dir / "tokenizer", run / "tokenizer")

    # -- checkpoints --------------------------------------------------------------

    def _save_checkpoint(self, run: Path, name: str, model: GPT, opt, state: dict) -> Path:
        final = run / name
        tmp = Path(tempfile.mkdtemp(dir=run, prefix=f".{name}.", suffix=".tmp"))
        try:
            save_weights(model, tmp)
            if opt is not None:
                torch.save(opt.state_dict(), tmp / "optimizer.pt")
                torch.save({"torch": torch.get_rng_state()}, tmp / "rng.pt")
            (tmp / "state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final

    def _prune(self, run: Path, best_step: int | None) -> None:
        steps = checkpoints(run)
        keep = set(steps[-self.config.train.keep_last :])
        if best_step is not None:
            keep.add(run / f"step-{best_step:08d}")
        for path in steps:
            if path not in keep:
                shutil.rmtree(path, ignore_errors=True)

    def _load_latest(self, run: Path, model: GPT, opt) -> dict:
        """Load the newest complete checkpoint; fall back past corrupt ones with a warning."""
        errors = []
        for path in reversed(checkpoints(run)):
            try:
                for required in (WEIGHTS, "optimizer.pt", "state.json", "rng.pt"):
                    if not (path / required).is_file():
                        raise CheckpointError(f"{path.name} lacks {required}")
                state = json.loads((path / "state.json").read_text(encoding="utf-8"))
                load_weights(model, path)
                try:
                    opt.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
                    rng = torch.load(path / "rng.pt", weights_only=True)
                except Exception as exc:  # a truncated pickle-free torch file
                    raise CheckpointError(f"{path.name}: optimizer or RNG state unreadable ({exc})") from exc
                torch.set_rng_state(rng["torch"])
                if errors:
                    self.echo(f"warning: skipped corrupt checkpoints: {'; '.join(errors)}")
                self.echo(f"resuming from {path.name} (step {state['step']})")
                return state
            except (CheckpointError, json.JSONDecodeError, KeyError) as exc:
                errors.append(f"{path.name}: {exc}")
        raise CheckpointError(
            f"no complete checkpoint to resume from in {str(run)!r}"
            + (f" ({'; '.join(errors)})" if errors else "")
        )

    # -- evaluation and samples ---------------------------------------------------

    @torch.no_grad()
    def evaluate(self, model: GPT, tokens: np.ndarray, bytes_per_token: float) -> dict[str, float]:
        """Mean loss over non-overlapping windows of the val split, and bits per byte."""
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
        from alilama_core.generate import SamplingSettings, generate

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
        dist = Distributed(tcfg.device)
        try:
            return self._fit(cfg, tcfg, dist, Path(data_dir), Path(out_dir), resume, overwrite, stop_at)
        finally:
            dist.close()

    def _fit(self, cfg, tcfg, dist, data_dir: Path, run: Path, resume: bool, overwrite: bool, stop_at):
        data = TokenData(data_dir)
        if data.meta["vocab_size"] > cfg.model.vocab_size:
            raise AlilamaError(
                f"the data's tokenizer has {data.meta['vocab_size']} ids but model.vocab_size is "
                f"{cfg.model.vocab_size}; set model.vocab_size={data.meta['vocab_size']}"
            )
        train_tokens, val_tokens = data.split("train"), data.split("val")
        context = cfg.model.context_length
        check_fits(train_tokens, context, "train")
        check_fits(val_tokens, context, "val")
        if tcfg.batch_size % dist.world:
            raise AlilamaError(
                f"train.batch_size ({tcfg.batch_size}) must be divisible by the number of processes ({dist.world})"
            )
        share = tcfg.batch_size // dist.world
        micro = min(tcfg.micro_batch_size or share, share)
        if share % micro:
            raise AlilamaError(f"train.micro_batch_size ({micro}) must divide the per-process batch ({share})")
        accumulation = share // micro

        if dist.main:
            self._prepare_run(run, data, resume, overwrite)
        dist.barrier()
        tokenizer = load_tokenizer(run / "tokenizer")

        torch.manual_seed(tcfg.seed)
        model = build_model(cfg.model).to(dist.device)
        opt = make_optimizer(model, tcfg)
        sampler = np.random.Generator(np.random.PCG64(tcfg.seed))
        step, tokens_seen, best = 0, 0, {"val_loss": None, "step": None}
        if resume:
            state = self._load_latest(run, model, opt)
            step, tokens_seen, best = state["step"], state["tokens"], state["best"]
            sampler.bit_generator.state = state["sampler"]
            if dist.main:
                _truncate_metrics(run / "metrics.jsonl", step)
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
        bytes_per_token = data.bytes_per_token("val")
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
                starts = sampler.integers(0, len(train_tokens) - context, size=tcfg.batch_size)
                mine = starts[dist.rank * share : (dist.rank + 1) * share]
                loss_sum = 0.0
                for i in range(accumulation):
                    x, y = random_windows(train_tokens, mine[i * micro : (i + 1) * micro], context)
                    x, y = x.to(dist.device), y.to(dist.device)
                    sync = i == accumulation - 1 or dist.world == 1
                    with autocast, (nullcontext() if sync else train_model.no_sync()):
                        logits = train_model(x)
                        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
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
                if dist.main and (step % sample_every == 0 or step == tcfg.max_steps) and tcfg.sample_prompts:
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
                    self._save_checkpoint(run, f"step-{step:08d}", model, opt, checkpoint_state())
                    self._prune(run, best["step"])
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
                self._save_checkpoint(run, "final", model, None, checkpoint_state())
            progress.close()
            dist.barrier()
            return {"step": step, "tokens": tokens_seen, "train_loss": train_loss, **last_eval}
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if metrics_file:
                metrics_file.close()


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines past ``step`` (logged after the checkpoint we resume from)."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text(encoding="utf-8").splitlines() if line and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(line + "\n" for line in keep))


class _Progress:
    """A rich progress bar (step, loss, tokens/s, time left) that can be switched off."""

    def __init__(self, total: int, start: int, enabled: bool, echo=None) -> None:
        self.enabled, self.echo = enabled, echo
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(), transient=False,
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
