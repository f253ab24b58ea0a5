"""The default trainer: one process, or DDP under ``torchrun`` (gloo on CPU, NCCL on GPU).

Each optimiser step draws ``train.batch_size`` random windows of
``context_length + 1`` tokens from the memory-mapped train split (the essay's
"random story fragments"); under DDP every rank draws the same global batch and
takes its share, so the global batch, and the losses, are those of one process.
AdamW with weight decay on matrices only, linear warm-up then cosine decay to
``min_lr``, gradient clipping, accumulation, optional bf16 autocast and
``torch.compile``.

The run folder (config, run.json, checkpoints with the optimiser and RNG
states and the sampler's position, metrics.jsonl) is written through the core's
``RunFolder`` (``alilama_core.runs.writer``) and the batches come from a
``DataSource`` (prepared text or a task): this module is the loop only. Resuming
gives exactly the losses of an uninterrupted run on CPU. Ctrl-C or SIGTERM writes
a checkpoint before exiting; with ``train.max_time`` the cosine is laid over the
time budget, and the run ends at it with a checkpoint and a last evaluation.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from alilama_core.contracts.config import Config, estimate_parameters
from alilama_core.contracts.errors import AlilamaError, ConfigError
from alilama_core.contracts.trainer import Trainer
from alilama_core.engine.model import GPT, build_model
from alilama_core.engine.threads import apply_threads, choose_threads, default_threads
from alilama_core.engine.validate import check_memory
from alilama_core.runs.sources import open_data_source
from alilama_core.runs.tokenizers import load_tokenizer
from alilama_core.runs.writer import RunFolder


def lr_at(step: int, cfg, elapsed: float | None = None) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``max_steps``.

    With a time budget (``train.max_time``) and the seconds trained so far
    (``elapsed``), the cosine is laid over the budget too: its progress is the
    larger of the steps' and the time's, so ``min_lr`` is reached at the budget's end.
    """
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.max_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    if elapsed is not None and cfg.max_time is not None:
        progress = max(progress, min(1.0, elapsed / cfg.max_time))
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


# Bytes per parameter while training with AdamW in float32: weights, gradients, two moments.
TRAINING_BYTES_PER_PARAMETER = 16


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

    # -- evaluation and samples ---------------------------------------------------

    @torch.no_grad()
    def samples(self, model: GPT, tokenizer, step: int) -> list[str]:
        from alilama_core.engine.generation import SamplingSettings, generate

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
        writer = RunFolder(out_dir, cfg, self.name, echo=self.echo, main=Distributed.is_main())
        writer.precheck(data_dir, resume=resume, overwrite=overwrite)
        dist = Distributed(cfg.train.device)
        previous_threads = torch.get_num_threads()
        try:
            threads = apply_threads(process_threads(cfg.train.threads))
            with writer.held():
                return self._fit(cfg, cfg.train, dist, Path(data_dir), writer, resume, overwrite, stop_at, threads)
        finally:
            if torch.get_num_threads() != previous_threads:  # leave the caller's process as it was
                torch.set_num_threads(previous_threads)
            dist.close()

    def banner(self, cfg, model: GPT, data, dist: Distributed, threads: int, start: int) -> list[str]:
        """The lines printed before step 1: what this run is about to do."""
        tcfg, context = cfg.train, cfg.model.context_length
        per_step = tcfg.batch_size * context
        steps = tcfg.max_steps
        lines = [
            f"model: {model.num_parameters():,} parameters | "
            f"{per_step:,} tokens per step (batch {tcfg.batch_size} x context {context})"
        ]
        train_tokens = getattr(data, "train_tokens", None)
        if train_tokens is not None and len(train_tokens):
            epochs = per_step * steps / len(train_tokens)
            lines.append(
                f"data: {len(train_tokens):,} train tokens; {steps:,} steps cover {epochs:.3g} epochs of the train split"
            )
        else:  # a task: freshly generated examples, no epochs
            lines.append(
                f"data: task {getattr(data, 'name', '?')}: {tcfg.batch_size} examples per step, "
                f"{tcfg.batch_size * steps:,} generated examples over {steps:,} steps"
            )
        device = str(dist.device) + (f" x {dist.world} processes (DDP)" if dist.world > 1 else "")
        precision = "float32" if tcfg.dtype == "float32" else f"{tcfg.dtype} autocast"
        budget = f" | time budget {tcfg.max_time:g} s" if tcfg.max_time is not None else ""
        lines.append(
            f"device {device} | threads {threads} per process | dtype {precision}"
            + (" | torch.compile" if tcfg.compile else "")
            + f" | attention {_attention_choice(cfg.model, model, dist.device, tcfg.dtype)}"
            + budget
        )
        if start:
            lines.append(f"starting at step {start:,} of {steps:,}")
        return lines

    def _fit(
        self, cfg, tcfg, dist, data_dir: Path, writer: RunFolder, resume: bool, overwrite: bool, stop_at, threads: int
    ):
        data = open_data_source(cfg, data_dir)  # prepared text, or a task's generated examples
        context = cfg.model.context_length
        if tcfg.batch_size % dist.world:
            raise AlilamaError(
                f"train.batch_size ({tcfg.batch_size}) must be divisible by the number of processes ({dist.world})"
            )
        share = tcfg.batch_size // dist.world
        micro = min(tcfg.micro_batch_size or share, share)
        if share % micro:
            raise AlilamaError(f"train.micro_batch_size ({micro}) must divide the per-process batch ({share})")
        accumulation = share // micro

        if resume:
            writer.check_resume()
        _check_training_memory(cfg.model, dist.device)
        tokenizer = load_tokenizer(data.tokenizer_dir)

        torch.manual_seed(tcfg.seed)
        model = build_model(cfg.model).to(dist.device)
        if data.writes_samples:
            self._check_samples_fit(model, tokenizer)
        opt = make_optimizer(model, tcfg)
        sampler = np.random.Generator(np.random.PCG64(tcfg.seed))
        step, tokens_seen, best = 0, 0, {"val_loss": None, "step": None}
        train_loss = None
        state = writer.begin(data, model, opt, resume=resume, overwrite=overwrite, barrier=dist.barrier)
        if writer.finished is not None:
            return writer.finished
        spent = 0.0  # seconds of training before this process, counted against train.max_time
        if state is not None:
            step, tokens_seen, best = state["step"], state["tokens"], state["best"]
            sampler.bit_generator.state = state["sampler"]
            spent = float(state.get("time_s", 0.0))
        budget = tcfg.max_time
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
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        bar = self.show_progress and dist.main and sys.stdout.isatty()  # outside a terminal: plain lines
        progress = _Progress(tcfg.max_steps, step, bar, self.echo if dist.main else None, tcfg.log_every)
        if dist.main:
            for line in self.banner(cfg, model, data, dist, threads, step):
                progress.print(line)
        tokens_at_start = tokens_seen
        started = time.perf_counter()
        last_eval: dict[str, float] = {}

        def checkpoint_state() -> dict:
            state = {"step": step, "tokens": tokens_seen, "best": best, "sampler": sampler.bit_generator.state}
            if budget is not None:  # the time trained so far, so a resumed run keeps its budget and schedule
                state["time_s"] = spent + time.perf_counter() - started
            return state

        try:
            model.train()
            while step < tcfg.max_steps:
                lr = lr_at(step, tcfg, None if budget is None else spent + time.perf_counter() - started)
                for group in opt.param_groups:
                    group["lr"] = lr
                starts = data.draw(sampler, tcfg.batch_size)  # the same global batch on every rank
                mine = starts[dist.rank * share : (dist.rank + 1) * share]
                loss_sum = 0.0
                for i in range(accumulation):
                    x, y = data.collate(mine[i * micro : (i + 1) * micro])  # y is -100 where unscored
                    x, y = x.to(dist.device), y.to(dist.device)
                    sync = i == accumulation - 1 or dist.world == 1
                    with autocast, nullcontext() if sync else train_model.no_sync():
                        logits = train_model(x)
                        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
                        # so the step's loss is the global batch's mean over scored tokens
                        loss = loss * data.loss_weight(y)
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
                out_of_time = budget is not None and spent + time.perf_counter() - started >= budget
                evaluate_now = step % tcfg.eval_every == 0 or step == tcfg.max_steps or out_of_time
                new_best = False
                if evaluate_now and dist.main:
                    last_eval = data.evaluate(model)
                    row.update(last_eval)
                    progress.evaluation(step, last_eval)
                    if best["val_loss"] is None or last_eval["val_loss"] < best["val_loss"]:
                        best, new_best = {"val_loss": last_eval["val_loss"], "step": step}, True
                sample_every = tcfg.sample_every or tcfg.eval_every
                sample_now = dist.main and tcfg.sample_prompts and data.writes_samples
                if sample_now and (step % sample_every == 0 or step == tcfg.max_steps):
                    row["samples"] = self.samples(model, tokenizer, step)
                    progress.print(f"step {step} samples:")
                    for text in row["samples"]:
                        progress.print("  " + text.replace("\n", " "))
                elapsed = time.perf_counter() - started
                left = None if budget is None else max(0.0, budget - spent - elapsed)
                progress.update(step, train_loss, tokens_seen - tokens_at_start, elapsed, last_eval, lr, left)
                if step % tcfg.log_every == 0 or "val_loss" in row or step == tcfg.max_steps:
                    row["elapsed_s"] = round(elapsed, 3)
                    writer.log(row)
                if stop_at is not None and step >= stop_at and step < tcfg.max_steps:
                    self._stop = f"stopped at step {stop_at} (--stop-at)"
                stop = self._stop or ("time budget" if out_of_time else None)
                if dist.main and (step % tcfg.checkpoint_every == 0 or stop or new_best or step == tcfg.max_steps):
                    writer.save_checkpoint(step, model, opt, checkpoint_state())
                    writer.prune(best["step"])
                if stop:
                    if self._stop:
                        progress.print(f"{self._stop}: checkpoint written at step {step}; resume with --resume")
                        progress.close()
                        dist.barrier()
                        return {"step": step, "interrupted": self._stop, **last_eval}
                    break
            if dist.main:
                if not last_eval:
                    last_eval = data.evaluate(model)
                    progress.evaluation(step, last_eval)
                writer.finish(model, checkpoint_state())
            timed_out = step < tcfg.max_steps  # the loop ended by the time budget
            if timed_out:
                progress.print(f"stopped by the time budget (train.max_time={budget:.4g} s) at step {step}")
            progress.close()
            dist.barrier()
            done = {"stopped": "time budget"} if timed_out else {}
            return {"step": step, "tokens": tokens_seen, "train_loss": train_loss, **last_eval, **done}
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def process_threads(requested: int | None) -> int:
    """``train.threads`` for this process: as given, else the physical cores shared among a machine's ranks."""
    if requested is not None:
        return choose_threads(requested)
    local_world = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, default_threads() // local_world)


def _attention_choice(model_cfg, model: GPT, device: torch.device, dtype: str) -> str:
    """The attention setting, and for a router (``auto``) the backend it picks for training's shape class."""
    backend = model.backend
    if backend.resolve is None:
        return model_cfg.attention
    try:
        from alilama_core.contracts.attention import AttentionCase, shape_class

        positional = model.positional
        trainable = positional.kind == "bias" and any(p.requires_grad for p in positional.parameters())
        t = model_cfg.context_length
        case = AttentionCase(
            device.type,
            torch.bfloat16 if dtype == "bfloat16" else torch.float32,
            model_cfg.d_model // model_cfg.n_heads,
            shape_class(t, t),
            positional.kind,
            positional.has_slopes,
            training=True,
            bias_trainable=trainable,
        )
        return f"{model_cfg.attention} -> {backend.resolve(case).name} (training, {case.shape})"
    except Exception:  # the banner never stops a run
        return model_cfg.attention


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


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


class _Progress:
    """A rich progress bar (step, loss, tokens/s, time left) that can be switched off."""

    def __init__(self, total: int, start: int, enabled: bool, echo=None, log_every: int = 10) -> None:
        self.enabled, self.echo = enabled, echo
        self.total, self.start, self.log_every = total, start, log_every
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

    def update(
        self,
        step: int,
        loss: float,
        new_tokens: int,
        elapsed: float,
        last_eval: dict,
        lr: float | None = None,
        budget_left: float | None = None,
    ) -> None:
        rate = new_tokens / max(elapsed, 1e-9)
        if not self.enabled:  # outside a terminal: one plain line every log_every steps
            if self.echo is not None and (step % self.log_every == 0 or step == self.total):
                done = step - self.start
                eta = elapsed / done * (self.total - step) if done > 0 else 0.0
                if budget_left is not None:
                    eta = min(eta, budget_left)
                lr_text = f" | lr {lr:.3g}" if lr is not None else ""
                self.echo(
                    f"step {step}/{self.total} | loss {loss:.4f}{lr_text} | {rate:,.0f} tok/s | "
                    f"elapsed {_clock(elapsed)} | ETA {_clock(eta)}"
                )
            return
        info = f"loss {loss:.3f}"
        if last_eval:
            info += f" | val {last_eval['val_loss']:.3f} ({last_eval['val_bpb']:.3f} bpb)"
        self.progress.update(self.task, completed=step, info=f"{info} | {rate:,.0f} tok/s")

    def evaluation(self, step: int, result: dict) -> None:
        """Outside a terminal, a line per evaluation (the bar shows the last one instead)."""
        if self.enabled or self.echo is None:
            return
        line = f"step {step}/{self.total} eval | val loss {result['val_loss']:.4f} | val bpb {result['val_bpb']:.4f}"
        if "val_exact" in result:
            line += f" | exact {result['val_exact']:.3f} | token accuracy {result['val_token_accuracy']:.3f}"
        self.echo(line)

    def print(self, text: str) -> None:
        if self.enabled:
            self.progress.console.print(text, markup=False, highlight=False)
        elif self.echo is not None:
            self.echo(text)

    def close(self) -> None:
        if self.enabled:
            self.progress.stop()
            self.enabled = False
