"""The default trainer: one process, or DDP under ``torchrun`` (gloo on CPU, NCCL on GPU).

Each optimiser step draws ``train.batch_size`` random windows of
``context_length + 1`` tokens from the memory-mapped train split (the essay's
"random story fragments"); under DDP every rank draws the same global batch and
takes its share, so the global batch, and the losses, are those of one process.
The optimiser is the one ``train.optimizer`` names in the registry (``adamw``,
``muon`` or a plugin's: ``alilama_trainers.optimizers``), linear warm-up then cosine
(or WSD) decay to ``min_lr``, gradient clipping, accumulation, optional bf16
autocast and ``torch.compile``: it honours every setting of
``alilama_core.contracts.trainer.SETTINGS``.

The run folder (config, run.json, checkpoints with the optimiser and RNG
states and the sampler's position, metrics.jsonl) is written through the core's
``RunFolder`` (``alilama_core.runs.writer``) and the batches come from a
``DataSource`` (prepared text or a task): this module is the loop only. Resuming
gives exactly the losses of an uninterrupted run on CPU. Ctrl-C or SIGTERM writes
a checkpoint before exiting.

With a time budget (``train.max_time``; ``train.max_steps`` may then be null)
the run is planned by time, whatever the machine's step rate: warm-up ends
within a tenth of the budget, the cosine reaches ``min_lr`` at its end,
evaluations, samples and checkpoints come every ``1/train.evals_per_budget`` of
it (as well as by steps), and the stop at the budget writes a last evaluation,
its metrics row and the final checkpoint, all of the step the weights are from.
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
from alilama_core.base.errors import AlilamaError, ConfigError
from alilama_core.contracts.optimizer import set_lr
from alilama_core.contracts.trainer import SETTING_NAMES, Trainer
from alilama_core.engine.model import GPT, build_model
from alilama_core.engine.registry import build_optimizer, optimizer_for
from alilama_core.engine.threads import apply_threads, choose_threads, default_threads
from alilama_core.engine.validate import check_memory
from alilama_core.runs.sources import open_data_source
from alilama_core.runs.tokenizers import load_tokenizer
from alilama_core.runs.writer import RunFolder


# Under a time budget, warm-up ends after this share of it at the latest.
BUDGET_WARMUP_SHARE = 0.1


def lr_at(step: int, cfg, elapsed: float | None = None) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``max_steps``
    (``train.schedule=wsd``: stable at ``lr``, then linear to ``min_lr`` over the last ``decay_share``).

    With a time budget (``train.max_time``) and the seconds trained so far
    (``elapsed``), the schedule is laid over the budget too: warm-up ends at its
    steps or at ``BUDGET_WARMUP_SHARE`` of the budget, whichever comes first, and
    the cosine's progress is the larger of the steps' and the time's, so
    ``min_lr`` is reached at the budget's end however fast the steps are.
    """
    timed = elapsed is not None and cfg.max_time is not None
    if step < cfg.warmup_steps:
        warm = (step + 1) / cfg.warmup_steps
        if timed:
            warm = max(warm, elapsed / (BUDGET_WARMUP_SHARE * cfg.max_time))
        if warm < 1.0:
            return cfg.lr * warm
    progress = 0.0
    if cfg.max_steps is not None:
        progress = max(0.0, min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)))
    if timed:
        progress = max(progress, min(1.0, elapsed / cfg.max_time))
    if getattr(cfg, "schedule", "cosine") == "wsd":  # stable, then a straight line down over the last share
        decay = max(0.0, (progress - (1 - cfg.decay_share)) / cfg.decay_share)
        return cfg.lr - (cfg.lr - cfg.min_lr) * decay
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


class BudgetMarks:
    """The evaluations a time budget asks for: one each time another ``1/n`` of it is spent.

    ``spent`` is the training time before this process (a resumed run keeps
    its marks); ``due(elapsed)`` is true once per mark passed, never for the
    same mark twice.
    """

    def __init__(self, budget: float | None, n: int, spent: float = 0.0) -> None:
        self.every = budget / n if budget is not None and n > 0 else None
        self.n = n
        self.passed = self._count(spent)

    def _count(self, elapsed: float) -> int:
        return 0 if self.every is None else min(self.n, int(elapsed // self.every))

    def due(self, elapsed: float) -> bool:
        now = self._count(elapsed)
        if now > self.passed:
            self.passed = now
            return True
        return False


class Distributed:
    """Rank, world size and device; initialises the process group under torchrun."""

    def __init__(self, device: str) -> None:
        if device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"train.device must be auto, cpu or cuda, got {device!r}")
        if device == "cuda" and not torch.cuda.is_available():
            raise ConfigError(
                "train.device=cuda, but this PyTorch sees no CUDA GPU (torch.cuda.is_available() is false); "
                "set train.device=cpu (or auto), or install a CUDA build of PyTorch"
            )
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
    supports = SETTING_NAMES

    def __init__(self, config: Config, echo=print, show_progress: bool = True) -> None:
        super().__init__(config, echo=echo, show_progress=show_progress)
        optimizer_for(config.train)  # an unknown optimizer or option is refused before anything is written
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
        was_training = model.training
        model.eval()
        out = []
        for i, prompt in enumerate(cfg.sample_prompts):
            # a seed per prompt: an untrained model ignores its prompt, and one seed would repeat one text
            settings = SamplingSettings(
                max_new_tokens=cfg.sample_tokens, temperature=0.8, top_k=40, seed=step * 1000 + i
            )
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
            if steps is None:
                covers = f"one epoch of the train split is {len(train_tokens) / per_step:,.0f} steps"
            else:
                covers = f"{steps:,} steps cover {per_step * steps / len(train_tokens):.3g} epochs of the train split"
            lines.append(f"data: {len(train_tokens):,} train tokens; {covers}")
        else:  # a task: freshly generated examples, no epochs
            over = "each step" if steps is None else f"{tcfg.batch_size * steps:,} over {steps:,} steps"
            lines.append(
                f"data: task {getattr(data, 'name', '?')}: {tcfg.batch_size} freshly generated examples per step, "
                + over
            )
        device = str(dist.device) + (f" x {dist.world} processes (DDP)" if dist.world > 1 else "")
        precision = "float32" if tcfg.dtype == "float32" else f"{tcfg.dtype} autocast"
        budget = ""
        if tcfg.max_time is not None:
            budget = f" | time budget {tcfg.max_time:g} s" + (" (it decides the steps)" if steps is None else "")
        lines.append(
            f"device {device} | threads {threads} per process | dtype {precision}"
            + (" | torch.compile" if tcfg.compile else "")
            + f" | attention {_attention_choice(cfg.model, model, dist.device, tcfg.dtype)}"
            + budget
        )
        if start:
            lines.append(f"starting at step {start:,}" + ("" if steps is None else f" of {steps:,}"))
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
        opt = build_optimizer(model, tcfg)
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
        marks = BudgetMarks(budget, tcfg.evals_per_budget, spent)
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
        progress = _Progress(tcfg.max_steps, step, bar, self.echo if dist.main else None, tcfg.log_every, budget)
        if dist.main:
            for line in self.banner(cfg, model, data, dist, threads, step):
                progress.print(line)
        tokens_at_start = tokens_seen
        started = time.perf_counter()
        last_eval: dict[str, float] = {}

        def trained_s() -> float:
            """Seconds of training so far, across resumes."""
            return spent + time.perf_counter() - started

        def checkpoint_state() -> dict:
            state = {"step": step, "tokens": tokens_seen, "best": best, "sampler": sampler.bit_generator.state}
            state["time_s"] = trained_s()  # so a resumed run keeps its time budget, schedule and elapsed_s
            return state

        try:
            model.train()
            out_of_time = False
            while tcfg.max_steps is None or step < tcfg.max_steps:
                lr = lr_at(step, tcfg, None if budget is None else trained_s())
                set_lr(opt, lr)
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
                last = step == tcfg.max_steps
                out_of_time = budget is not None and trained_s() >= budget
                by_time = marks.due(trained_s())  # another 1/evals_per_budget of the budget is spent
                evaluate_now = _every(step, tcfg.eval_every) or last or out_of_time or by_time
                new_best = False
                if evaluate_now and dist.main:
                    last_eval = data.evaluate(model)
                    row.update(last_eval)
                    progress.evaluation(step, last_eval)
                    if best["val_loss"] is None or last_eval["val_loss"] < best["val_loss"]:
                        best, new_best = {"val_loss": last_eval["val_loss"], "step": step}, True
                if tcfg.sample_every is None:
                    sample_due = evaluate_now
                else:
                    sample_due = step % tcfg.sample_every == 0 or last or out_of_time
                if dist.main and tcfg.sample_prompts and data.writes_samples and sample_due:
                    row["samples"] = self.samples(model, tokenizer, step)
                    progress.print(f"step {step} samples:")
                    for text in row["samples"]:
                        progress.print("  " + text.replace("\n", " "))
                elapsed = time.perf_counter() - started
                left = None if budget is None else max(0.0, budget - spent - elapsed)
                progress.update(step, train_loss, tokens_seen - tokens_at_start, elapsed, last_eval, lr, left)
                if step % tcfg.log_every == 0 or "val_loss" in row or last:
                    row["elapsed_s"] = round(spent + elapsed, 3)  # across resumes, as train.max_time counts
                    writer.log(row)
                if stop_at is not None and step >= stop_at and not last:
                    self._stop = f"stopped at step {stop_at} (--stop-at)"
                stop = self._stop or ("time budget" if out_of_time else None)
                if dist.main and (_every(step, tcfg.checkpoint_every) or stop or new_best or last or by_time):
                    writer.save_checkpoint(step, model, opt, checkpoint_state())
                    writer.prune(best["step"])
                if stop:
                    if self._stop:
                        progress.close()  # interrupted: the total stays what is left to train
                        progress.print(f"{self._stop}: checkpoint written at step {step}; resume with --resume")
                        dist.barrier()
                        return {"step": step, "interrupted": self._stop, **last_eval}
                    break
            done = {"stopped": "time budget"} if out_of_time and step != tcfg.max_steps else {}
            if dist.main:
                if not last_eval:
                    last_eval = data.evaluate(model)
                    progress.evaluation(step, last_eval)
                writer.finish(model, {**checkpoint_state(), **done})
            progress.close(step)
            if done:
                progress.print(f"stopped by the time budget (train.max_time={budget:.4g} s) at step {step}")
            dist.barrier()
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


def _every(step: int, n: int | None) -> bool:
    """Whether ``step`` falls on a cadence of every ``n`` steps (``None``: no cadence by steps)."""
    return n is not None and step % n == 0


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
    """A rich progress bar (step, loss, tokens/s, time left), or plain lines outside a terminal.

    ``total`` is ``train.max_steps``; under a time budget (``budget`` seconds,
    ``total`` then a bound or ``None``) the total shown is the steps the budget
    will allow at the rate so far, and at the end the steps that ran.
    """

    def __init__(
        self,
        total: int | None,
        start: int,
        enabled: bool,
        echo=None,
        log_every: int = 10,
        budget: float | None = None,
        console=None,
    ) -> None:
        self.enabled, self.echo = enabled, echo
        self.total, self.start, self.log_every, self.budget = total, start, log_every, budget
        self.shown = total  # the total the bar and the lines show
        self.logged: tuple[int, str] | None = None  # the step and total of the last plain line
        self.last: tuple | None = None  # loss, lr, tokens/s and elapsed of the last step
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
            console=console,
        )
        self.progress.start()
        self.task = self.progress.add_task("train", total=total, completed=start, info="")

    def expected_total(self, step: int, elapsed: float, budget_left: float | None) -> int | None:
        """The steps this run will have made at its end: ``total``, or sooner, what the budget allows."""
        if budget_left is None or step <= self.start:
            return self.total
        estimate = step + int(budget_left * (step - self.start) / max(elapsed, 1e-9))
        return estimate if self.total is None else min(self.total, estimate)

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
        self.shown = self.expected_total(step, elapsed, budget_left)
        if not self.enabled:  # outside a terminal: one plain line every log_every steps
            if self.echo is not None and (step % self.log_every == 0 or step == self.total):
                done = step - self.start
                eta = elapsed / done * (self.shown - step) if done > 0 and self.shown is not None else 0.0
                if budget_left is not None:
                    eta = min(eta, budget_left)
                self._line(step, self._total_text(), loss, lr, rate, elapsed, eta)
            self.last = (loss, lr, rate, elapsed)
            return
        info = f"loss {loss:.3f}"
        if last_eval:
            info += f" | val {last_eval['val_loss']:.3f} ({last_eval['val_bpb']:.3f} bpb)"
        self.progress.update(self.task, completed=step, total=self.shown, info=f"{info} | {rate:,.0f} tok/s")

    def _total_text(self) -> str:
        if self.shown is None:
            return "?"
        return f"~{self.shown}" if self.budget is not None and self.shown != self.total else str(self.shown)

    def evaluation(self, step: int, result: dict) -> None:
        """Outside a terminal, a line per evaluation (the bar shows the last one instead)."""
        if self.enabled or self.echo is None:
            return
        line = f"step {step}/{self._total_text()} eval | val loss {result['val_loss']:.4f} | val bpb {result['val_bpb']:.4f}"
        if "val_exact" in result:
            line += f" | exact {result['val_exact']:.3f} | token accuracy {result['val_token_accuracy']:.3f}"
        self.echo(line)

    def print(self, text: str) -> None:
        if self.enabled:
            self.progress.console.print(text, markup=False, highlight=False)
        elif self.echo is not None:
            self.echo(text)

    def close(self, step: int | None = None) -> None:
        """End the bar at ``step``, its total the steps that ran (a plain last line if none was printed)."""
        if step is not None:
            self.shown = step
        if self.enabled:
            if step is not None:
                self.progress.update(self.task, completed=step, total=step)
            self.progress.stop()
            self.enabled = False
        elif step is not None and self.echo is not None and self.logged != (step, str(step)) and self.last:
            self._line(step, str(step), *self.last)

    def _line(self, step, total: str, loss, lr, rate, elapsed, eta=None) -> None:
        """A plain progress line: step, loss, learning rate, tokens/s, elapsed and ETA."""
        lr_text = f" | lr {lr:.3g}" if lr is not None else ""
        eta_text = f" | ETA {_clock(eta)}" if eta is not None else ""
        self.echo(
            f"step {step}/{total} | loss {loss:.4f}{lr_text} | {rate:,.0f} tok/s | elapsed {_clock(elapsed)}{eta_text}"
        )
        self.logged = (step, total)
