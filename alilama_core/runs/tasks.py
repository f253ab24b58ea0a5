"""Algorithmic tasks as training data: symbol tokens, an endless example stream, and exact-match scoring.

A ``Task`` (see ``alilama_core.contracts.task``) generates ``(prompt, answer)``
pairs; this module turns them into token batches with a loss mask, and scores
a model on fixed, seeded test sets::

    >>> from alilama_core.runs.tasks import get_task, TaskStream, collate
    >>> task = get_task("reverse")
    >>> stream = TaskStream(task, (1, 8), seed=0)
    >>> x, y = collate(stream.draw(4))   # (4, T) inputs, (4, T) targets, -100 where unscored

Targets of the prompt and the padding are ``IGNORE`` (-100), the default
``ignore_index`` of ``torch.nn.functional.cross_entropy``, so a trainer scores
the answer tokens only without any other change to its loss.

Exact match is computed with teacher forcing: an example counts as right when
the argmax at every answer position (and at ``<eos>``) is the right token.
That is the same as greedy decoding producing the whole answer: the greedy
path follows the teacher-forced one until the first wrong token.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alilama_core.base.errors import ConfigError
from alilama_core.base.limits import describe, limit
from alilama_core.contracts.task import (
    EOS,
    IGNORE,
    PAD,
    SEP,
    Example,
    SymbolTokenizer,  # noqa: F401  (the "symbols" tokenizer's registered path)
    _check_length,
    check_length_count,
    parse_lengths,
)
from alilama_core.engine.registry import get_registry
from alilama_core.runs.tokenizers import save_tokenizer, tokenizer_hash

# -- tasks by name and lengths ----------------------------------------------------------


def get_task(name: str, options: dict[str, Any] | None = None):
    """The registered task ``name``, built with ``options``."""

    return get_registry().get("task", name)(**(options or {}))


def check_eval_size(task, lengths: Sequence[int], examples: int, what: str = "--examples") -> None:
    """Refuse a test too large to run: ``examples`` per length past ``MAX_TASK_EXAMPLES``, any
    length past ``MAX_TASK_LENGTH``, or more than ``MAX_EVAL_TOKENS`` tokens in all."""
    if examples > limit("MAX_TASK_EXAMPLES"):
        raise ConfigError(f"{what}={examples:,} examples per length: {describe('MAX_TASK_EXAMPLES')}")
    check_length_count(lengths, "the lengths")
    for length in lengths:
        _check_length(length, "the lengths")
    tokens = examples * sum(task.sequence_length(n) for n in lengths if task.max_length is None or n <= task.max_length)
    if tokens > limit("MAX_EVAL_TOKENS"):
        raise ConfigError(
            f"{examples:,} examples at lengths {', '.join(map(str, lengths))} make about {tokens:,} tokens to "
            f"score; give fewer examples or shorter lengths, or raise the bound: {describe('MAX_EVAL_TOKENS')}"
        )


def check_task_context(task, lengths: tuple[int, int]) -> int:
    """The positions the longest training example of ``task`` takes (the ``model.context_length`` a task run
    needs); refused past ``MAX_TASK_CONTEXT``, since every training step attends over them."""
    lo, hi = lengths
    need = task.sequence_length(hi) - 1
    most = limit("MAX_TASK_CONTEXT")
    if need > most:
        fits = max((n for n in range(1, hi) if task.sequence_length(n) - 1 <= most), default=0)
        fits_lo = fits if lo == hi else min(lo, fits)
        shorter = f"Give task.lengths={_span(fits_lo, fits)} or shorter, or raise" if fits else "Raise"
        raise ConfigError(
            f"task.lengths={_span(lo, hi)} makes examples of task {task.name!r} up to {need:,} tokens long: every "
            f"training step would attend over {need:,} positions (model.context_length must cover them), more "
            f"than a task run may take. {shorter} the bound: {describe('MAX_TASK_CONTEXT')}"
        )
    return need


def _span(lo: int, hi: int) -> str:
    """``task.lengths`` as written: ``"1-16"``, or ``"8"`` for one length."""
    return str(hi) if lo == hi else f"{lo}-{hi}"


def check_lengths(task, lengths: tuple[int, int] | Sequence[int]) -> None:
    """Raise ``ConfigError`` when ``task`` cannot generate some of ``lengths``."""
    if task.max_length is not None and max(lengths) > task.max_length:
        raise ConfigError(f"task {task.name!r} goes up to length {task.max_length}, asked for {max(lengths)}")


# -- examples, batches and the stream ---------------------------------------------------


def encode_example(task, prompt: list[str], answer: list[str], ids: dict[str, int]) -> Example:
    """``prompt = answer <eos>`` as token ids, and the index of the first answer token."""
    tokens = [ids[s] for s in prompt]
    tokens.append(SEP)
    start = len(tokens)
    tokens.extend(ids[s] for s in answer)
    tokens.append(EOS)
    return tokens, start


def collate(examples: Sequence[Example]):
    """Right-padded ``(x, y)`` long tensors of shape ``(B, T)``; ``y`` is ``IGNORE`` where unscored.

    ``x`` is each example without its last token, ``y`` the example shifted by
    one; the targets of prompt positions and of padding are ``IGNORE``.
    """
    import torch

    t = max(len(ids) for ids, _ in examples) - 1
    x = np.full((len(examples), t), PAD, dtype=np.int64)
    y = np.full((len(examples), t), IGNORE, dtype=np.int64)
    for row, (ids, start) in enumerate(examples):
        n = len(ids) - 1
        x[row, :n] = ids[:-1]
        y[row, start - 1 : n] = ids[start:]  # targets: the answer and <eos>
    return torch.from_numpy(x), torch.from_numpy(y)  # (B, T) each


class TaskStream:
    """An endless, seeded stream of encoded examples with lengths drawn uniformly from ``lengths``.

    ``rng`` (a ``numpy.random.Generator``) is the whole state: save
    ``rng.bit_generator.state`` and restore it to resume exactly. Under DDP
    every process draws the same global batch and keeps its own share, as with
    random text windows.
    """

    def __init__(self, task, lengths: tuple[int, int], seed: int | None = None, rng: np.random.Generator | None = None):
        check_lengths(task, lengths)
        self.task, self.lengths = task, lengths
        self.rng = rng if rng is not None else np.random.Generator(np.random.PCG64(seed or 0))
        self._ids = {s: i for i, s in enumerate(task.vocabulary())}

    def draw(self, n: int) -> list[Example]:
        """The next ``n`` examples."""
        sizes = self.rng.integers(self.lengths[0], self.lengths[1] + 1, size=n)
        return [encode_example(self.task, *self.task.example(int(k), self.rng), self._ids) for k in sizes]

    def __iter__(self) -> Iterator[Example]:
        while True:
            yield from self.draw(256)

    def state(self) -> dict:
        return self.rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state


def eval_set(task, length: int, n: int, seed: int = 0, split: str = "test") -> list[Example]:
    """``n`` examples of exactly ``length``, the same for a task, length, seed and split on every machine.

    ``split="test"``: the sets ``alilama eval`` scores; ``"val"``: the trainer's validation set, drawn
    from a stream of its own so that no test score is of examples a run was validated on.
    """
    check_lengths(task, [length])
    words = [seed, length, zlib.crc32(task.name.encode())]
    if split != "test":  # the test sets keep the stream they have always had
        words.append(zlib.crc32(split.encode()))
    rng = np.random.Generator(np.random.PCG64(words))
    ids = {s: i for i, s in enumerate(task.vocabulary())}
    return [encode_example(task, *task.example(length, rng), ids) for _ in range(n)]


# -- scoring -------------------------------------------------------------------------------


@dataclass
class TaskScore:
    """Accuracy of a model on one test set: exact match and per-token accuracy (teacher-forced)."""

    length: int
    tokens: int
    """Tokens of the longest example (the context the model needs)."""
    exact_match: float | None
    token_accuracy: float | None
    loss: float | None
    examples: int
    note: str = ""


def score_examples(model, examples: Sequence[Example], batch_size: int = 64) -> tuple[int, int, int, float]:
    """(exactly right examples, right answer tokens, answer tokens, summed loss in nats)."""
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    exact = right = total = 0
    nats = 0.0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            x, y = collate(examples[i : i + batch_size])
            x, y = x.to(device), y.to(device)
            logits = model(x)  # (B, T, V)
            scored = y != IGNORE  # (B, T)
            hit = (logits.argmax(-1) == y) & scored  # (B, T)
            exact += int((hit.sum(1) == scored.sum(1)).sum())
            right += int(hit.sum())
            total += int(scored.sum())
            nats += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").item()
    model.train(was_training)
    return exact, right, total, nats


def evaluate_task(
    model, task, lengths: Sequence[int], examples: int = 256, seed: int = 0, batch_size: int = 64
) -> list[TaskScore]:
    """Score ``model`` on ``task`` at each length; ``n/a`` rows where the model has no positions for it."""
    check_eval_size(task, lengths, examples, "examples")
    limit = model.positional.max_positions
    rows = []
    for length in lengths:
        need = task.sequence_length(length) - 1
        if task.max_length is not None and length > task.max_length:
            rows.append(
                TaskScore(length, need, None, None, None, 0, f"{task.name} goes up to length {task.max_length}")
            )
            continue
        if limit is not None and need > limit:
            rows.append(
                TaskScore(length, need, None, None, None, 0, f"{model.config.positional} covers {limit} positions")
            )
            continue
        exact, right, total, nats = score_examples(model, eval_set(task, length, examples, seed), batch_size)
        rows.append(TaskScore(length, need, exact / examples, right / total, nats / total, examples))
    return rows


def run_task(run: str | os.PathLike[str], config, task: str | None = None):
    """The task config of ``run`` (whose config is ``config``); refuses a text run, or a ``task`` it was not trained on."""
    tcfg = getattr(config, "task", None)
    if tcfg is None or not tcfg.name:
        raise ConfigError(
            f"{str(run)!r} was trained on text, not a task (its config has no task.name): "
            "score it on text (alilama eval RUN --data FILE)"
        )
    if task is not None and task != tcfg.name:
        raise ConfigError(
            f"{str(run)!r} was trained on task {tcfg.name!r}, not {task!r}; its vocabulary fits only its own task"
        )
    return tcfg


# -- what a trainer needs ---------------------------------------------------------------------


class TaskData:
    """A task in place of prepared text, for a trainer: the same few things it reads from ``TokenData``.

    ``dir / "tokenizer"`` holds the task's symbol tokenizer (copied into the run
    like a text tokenizer, so every tool that loads a run can label tokens);
    ``meta`` has ``vocab_size`` and ``tokenizer_hash``; ``draw(rng, n)`` gives the
    next ``n`` training examples from the trainer's own seeded generator (whose
    state the checkpoints keep, so a resumed run draws what it would have);
    ``evaluate(model)`` scores the fixed validation set at the longest trained length.
    It is a ``DataSource`` (``alilama_core.contracts.data``), like ``TokenData``.
    """

    writes_samples = False  # a task has no text prompts

    def __init__(self, cfg) -> None:
        import tempfile

        self.task = get_task(cfg.task.name, cfg.task.options)
        self.lengths = parse_lengths(cfg.task.lengths)
        check_lengths(self.task, self.lengths)
        check_eval_size(self.task, [self.lengths[1]], cfg.task.val_examples, "task.val_examples")
        self.longest = check_task_context(self.task, self.lengths)
        if self.longest > cfg.model.context_length:
            raise ConfigError(
                f"task {self.task.name!r} at length {self.lengths[1]} needs {self.longest} positions but "
                f"model.context_length is {cfg.model.context_length}; set model.context_length={self.longest}"
            )
        self._tmp = tempfile.TemporaryDirectory(prefix="alilama-task-")
        self.dir = Path(self._tmp.name)
        save_tokenizer(self.task.tokenizer(), self.dir / "tokenizer")
        self.meta = {
            "vocab_size": len(self.task.vocabulary()),
            "tokenizer_hash": tokenizer_hash(self.dir / "tokenizer"),
        }
        self.val = eval_set(self.task, self.lengths[1], cfg.task.val_examples, cfg.task.seed, split="val")
        self._stream: TaskStream | None = None
        self.tokenizer_dir = self.dir / "tokenizer"
        self.vocab_size = self.meta["vocab_size"]
        self.name = cfg.task.name

    def draw(self, rng: np.random.Generator, n: int) -> list[Example]:
        """The next ``n`` examples (a global batch) drawn with ``rng``."""
        if self._stream is None or self._stream.rng is not rng:
            self._stream = TaskStream(self.task, self.lengths, rng=rng)
        examples = self._stream.draw(n)
        self._batch = (n, sum(len(ids) - start for ids, start in examples))  # examples, scored tokens
        return examples

    def weight(self, y) -> float:
        """Factor for the mean loss of micro-batch targets ``y`` ``(b, T)`` drawn from the last ``draw``.

        Examples differ in length, so micro-batches (on one process, or on each
        of several) hold different numbers of answer tokens; scaling each
        micro-batch's mean by its share makes the averaged loss, and gradient,
        the mean over every answer token of the global batch, as in one pass.
        """
        examples, scored = self._batch
        return int((y != IGNORE).sum()) * examples / (y.shape[0] * scored)

    loss_weight = weight

    def train_with(self, cfg) -> TaskData:
        return self  # the config was read when the task was made

    def collate(self, items: Sequence[Example]):
        return collate(items)

    def batch(self, rng: np.random.Generator, n: int, device="cpu"):
        x, y = collate(self.draw(rng, n))
        return x.to(device), y.to(device)

    def describe(self) -> dict[str, Any]:
        return {
            "data": None,
            "task": self.name,
            "data_meta": {k: self.meta.get(k) for k in ("tokenizer_hash", "vocab_size", "dtype", "splits")},
        }

    def inputs(self) -> list[Path]:
        return []

    def evaluate(self, model) -> dict[str, float]:
        """Validation loss (nats per answer token; ``val_bpb`` in bits), exact match and token accuracy."""
        import torch

        with torch.no_grad():
            exact, right, total, nats = score_examples(model, self.val)
        loss = nats / total
        return {
            "val_loss": loss,
            "val_bpb": loss / float(np.log(2)),
            "val_exact": exact / len(self.val),
            "val_token_accuracy": right / total,
        }
