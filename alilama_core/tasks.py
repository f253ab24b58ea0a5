"""Algorithmic tasks as training data: symbol tokens, an endless example stream, and exact-match scoring.

A ``Task`` (see ``alilama_core.interfaces``) generates ``(prompt, answer)``
pairs; this module turns them into token batches with a loss mask, and scores
a model on fixed, seeded test sets::

    >>> from alilama_core.tasks import get_task, TaskStream, collate
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

import json
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alilama_core.errors import ConfigError, TokenizerError
from alilama_core.files import atomic_write_text
from alilama_core.limits import loads_json
from alilama_core.tokenizer import Tokenizer
from alilama_core.limits import describe, limit

IGNORE = -100
"""Target id of unscored positions (prompt and padding)."""
PAD, EOS, SEP = 0, 1, 2
"""Token ids of the three specials every task vocabulary starts with."""

Example = tuple[list[int], int]
"""Token ids of one example and the index of its first scored token (the first answer token)."""


# -- the symbol tokenizer ----------------------------------------------------------


class SymbolTokenizer(Tokenizer):
    """One token per symbol of a fixed list (a task's vocabulary); no merges.

    Symbols written ``<like-this>`` are special tokens and follow tiktoken's
    ``allowed_special`` rules. ``encode`` reads symbols greedily, longest first,
    and skips whitespace that is not a symbol; ``decode`` joins symbols, so each
    id decodes to its symbol::

        >>> tok = SymbolTokenizer(["<pad>", "<eos>", "=", "0", "1"])
        >>> tok.encode("01=10")
        [3, 4, 2, 4, 3]
        >>> tok.decode([4, 2, 1])
        '1=<eos>'
    """

    name = "symbols"

    def __init__(self, symbols: Sequence[str]) -> None:
        symbols = list(symbols)
        if not symbols or len(set(symbols)) != len(symbols) or not all(isinstance(s, str) and s for s in symbols):
            raise TokenizerError("symbols must be distinct, non-empty strings")
        self.symbols = symbols
        self.ids = {s: i for i, s in enumerate(symbols)}
        self._specials = {s: i for i, s in enumerate(symbols) if len(s) > 2 and s[0] == "<" and s[-1] == ">"}
        self._longest = max(len(s) for s in symbols)

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int, *, special_tokens: Sequence[str] = (), threads=None, progress=None
    ) -> "SymbolTokenizer":
        """The symbols are ``special_tokens``, then every distinct character of ``texts``."""
        chars = sorted({c for text in texts for c in text})
        symbols = [*special_tokens, *(c for c in chars if c not in special_tokens)]
        if len(symbols) > vocab_size:
            raise TokenizerError(f"the texts hold {len(symbols)} symbols, more than vocab_size={vocab_size}")
        return cls(symbols)

    def encode(self, text: str, allowed_special="none_raise") -> list[int]:
        if allowed_special == "all":
            allowed = set(self._specials)
        elif allowed_special in ("none", "none_raise"):
            allowed = set()
        else:
            allowed = set(allowed_special)
        if allowed_special != "none":
            for special in self._specials.keys() - allowed:
                if special in text:
                    raise TokenizerError(
                        f"the text holds the special token {special!r}; pass allowed_special='all' to encode it as one"
                    )
        out, i = [], 0
        while i < len(text):
            for size in range(min(self._longest, len(text) - i), 0, -1):
                piece = text[i : i + size]
                if piece in self.ids and (piece not in self._specials or piece in allowed):
                    out.append(self.ids[piece])
                    i += size
                    break
            else:
                if not text[i].isspace():
                    raise TokenizerError(f"{text[i]!r} at offset {i} is no symbol of this vocabulary")
                i += 1
        return out

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        return "".join(self.symbols[i] for i in ids)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return self.decode(ids).encode("utf-8")

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._specials)

    @property
    def eot_id(self) -> int | None:
        """``<|endoftext|>`` when the vocabulary has it, else a task's ``<eos>``."""
        return self._specials.get("<|endoftext|>", self._specials.get("<eos>"))

    def save(self, directory: str | os.PathLike[str]) -> None:
        data = {"name": self.name, "symbols": self.symbols}
        atomic_write_text(Path(directory) / "tokenizer_config.json", json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> "SymbolTokenizer":
        path = Path(directory) / "tokenizer_config.json"
        try:
            return cls(loads_json(path.read_text(encoding="utf-8"), TokenizerError, repr(str(path)))["symbols"])
        except TokenizerError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TokenizerError(f"{str(path)!r} is no saved symbol tokenizer: {exc}") from None


# -- tasks by name and lengths ----------------------------------------------------------


def get_task(name: str, options: dict[str, Any] | None = None):
    """The registered task ``name``, built with ``options``."""
    from alilama_core.registry import get_registry

    return get_registry().get("task", name)(**(options or {}))


def parse_lengths(spec: str | int, what: str = "task.lengths") -> tuple[int, int]:
    """``"1-16"`` -> ``(1, 16)``; ``8`` or ``"8"`` -> ``(8, 8)``."""
    text = str(spec).strip()
    lo, sep, hi = text.partition("-")
    try:
        pair = (int(lo), int(hi) if sep else int(lo))
    except ValueError:
        raise ConfigError(f"{what} must look like 1-16 or 8, got {spec!r}") from None
    if pair[0] < 1 or pair[1] < pair[0]:
        raise ConfigError(f"{what} must be a range lo-hi with 1 <= lo <= hi, got {spec!r}")
    _check_length(pair[1], f"{what}={spec}")
    return pair


def _check_length(length: int, what: str) -> None:
    if length > limit("MAX_TASK_LENGTH"):
        raise ConfigError(f"{what} asks for examples of length {length:,}: {describe('MAX_TASK_LENGTH')}")


def parse_length_list(spec: str) -> list[int]:
    """``"8,16,32"`` -> ``[8, 16, 32]``."""
    try:
        lengths = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--lengths must be comma-separated integers, e.g. 8,16,32; got {spec!r}") from None
    if not lengths or min(lengths) < 1:
        raise ConfigError(f"--lengths needs positive integers, got {spec!r}")
    check_length_count(lengths, "--lengths")
    for length in lengths:
        _check_length(length, "--lengths")
    return lengths


def check_length_count(lengths: Sequence[int], what: str) -> None:
    """Refuse more than ``MAX_EVAL_LENGTHS`` lengths to evaluate at."""
    if len(lengths) > limit("MAX_EVAL_LENGTHS"):
        raise ConfigError(f"{what} gives {len(lengths):,} lengths to evaluate at: {describe('MAX_EVAL_LENGTHS')}")


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


def eval_set(task, length: int, n: int, seed: int = 0) -> list[Example]:
    """``n`` examples of exactly ``length``, the same for a task, length and seed on every machine."""
    check_lengths(task, [length])
    rng = np.random.Generator(np.random.PCG64([seed, length, zlib.crc32(task.name.encode())]))
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


def evaluate_task_run(
    run: str | os.PathLike[str],
    lengths: Sequence[int],
    task: str | None = None,
    examples: int = 256,
    seed: int | None = None,
    checkpoint: str | None = None,
    attention: str | None = None,
    force_attention: bool = False,
    verify: bool = True,
):
    """Load a task run and score it at ``lengths``; returns ``(task, rows)``.

    ``attention``, ``force_attention`` and ``verify`` as in ``load_run``.
    """
    from alilama_core.checkpoint import load_run

    loaded = load_run(run, checkpoint=checkpoint, attention=attention, force_attention=force_attention, verify=verify)
    tcfg = getattr(loaded.config, "task", None)
    if tcfg is None or not tcfg.name:
        raise ConfigError(f"{str(run)!r} was not trained on a task (its config has no task.name)")
    if task is not None and task != tcfg.name:
        raise ConfigError(
            f"{str(run)!r} was trained on task {tcfg.name!r}, not {task!r}; its vocabulary fits only its own task"
        )
    built = get_task(tcfg.name, tcfg.options)
    rows = evaluate_task(loaded.model, built, lengths, examples, tcfg.seed if seed is None else seed)
    return built, rows


# -- what a trainer needs ---------------------------------------------------------------------


class TaskData:
    """A task in place of prepared text, for a trainer: the same few things it reads from ``TokenData``.

    ``dir / "tokenizer"`` holds the task's symbol tokenizer (copied into the run
    like a text tokenizer, so every tool that loads a run can label tokens);
    ``meta`` has ``vocab_size`` and ``tokenizer_hash``; ``draw(rng, n)`` gives the
    next ``n`` training examples from the trainer's own seeded generator (whose
    state the checkpoints keep, so a resumed run draws what it would have);
    ``evaluate(model)`` scores the fixed validation set at the longest trained length.
    """

    def __init__(self, cfg) -> None:
        import tempfile

        from alilama_core.data import tokenizer_hash
        from alilama_core.tokenizer import save_tokenizer

        self.task = get_task(cfg.task.name, cfg.task.options)
        self.lengths = parse_lengths(cfg.task.lengths)
        check_lengths(self.task, self.lengths)
        check_eval_size(self.task, [self.lengths[1]], cfg.task.val_examples, "task.val_examples")
        self.longest = self.task.sequence_length(self.lengths[1]) - 1
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
        self.val = eval_set(self.task, self.lengths[1], cfg.task.val_examples, cfg.task.seed)
        self._stream: TaskStream | None = None

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

    def evaluate(self, model) -> dict[str, float]:
        """Validation loss (nats per answer token; ``val_bpb`` in bits), exact match and token accuracy."""
        exact, right, total, nats = score_examples(model, self.val)
        loss = nats / total
        return {
            "val_loss": loss,
            "val_bpb": loss / float(np.log(2)),
            "val_exact": exact / len(self.val),
            "val_token_accuracy": right / total,
        }


# -- conformance ---------------------------------------------------------------------------------


def check_task(task, lengths: Sequence[int] = (1, 2, 3, 5, 8), samples: int = 20) -> list[str]:
    """Check a ``Task`` (registered name, class or instance) against its contract; return the checks run.

    Raises ``AssertionError`` saying what fails (also as ``alilama_core.testing.check_task``).

    Checked: a name and distinct, non-empty symbols after the specials; examples
    that use only the task's symbols, with a non-empty answer and no more tokens
    than ``sequence_length``; the same examples for the same seed and varied ones
    across seeds; unknown options refused with ``ConfigError``; ``score`` accepting
    the right answer and refusing a wrong one; and the symbol tokenizer saving,
    loading and round-tripping every example. Run it from a plugin's tests::

        def test_my_task():
            check_task(MyTask)      # or check_task("my-task") once registered
    """
    import tempfile

    from alilama_core.interfaces import Task

    if isinstance(task, str):
        from alilama_core.registry import get_registry

        task = get_registry().get("task", task)
    cls = task if isinstance(task, type) else type(task)
    assert issubclass(cls, Task), f"{cls.__name__} is not a Task subclass"
    instance = task if not isinstance(task, type) else cls()
    assert isinstance(cls.name, str) and cls.name, f"{cls.__name__}.name must be a non-empty string"
    vocab = instance.vocabulary()
    assert tuple(vocab[: len(Task.SPECIALS)]) == Task.SPECIALS, f"vocabulary() must start with {Task.SPECIALS}"
    assert len(set(vocab)) == len(vocab), f"{cls.name}: symbols repeat a special or each other: {vocab}"
    assert all(isinstance(s, str) and s and not s.isspace() for s in vocab), (
        f"{cls.name}: symbols must be non-empty strings"
    )
    try:
        cls(no_such_option=1)
    except ConfigError:
        pass
    else:
        raise AssertionError(f"{cls.name}: an unknown option must raise ConfigError")
    own = set(instance.symbols)
    if instance.max_length is not None:
        lengths = [n for n in lengths if n <= instance.max_length] + [instance.max_length]
    tok = instance.tokenizer()
    with tempfile.TemporaryDirectory() as folder:
        from alilama_core.checkpoint import load_tokenizer
        from alilama_core.tokenizer import save_tokenizer

        save_tokenizer(tok, folder)

        tok = load_tokenizer(folder)
    assert tok.vocab_size == len(vocab), f"{cls.name}: the saved tokenizer has {tok.vocab_size} ids, not {len(vocab)}"
    for length in lengths:
        runs = []
        for seed in (0, 0, 1):
            rng = np.random.Generator(np.random.PCG64(seed))
            runs.append([instance.example(length, rng) for _ in range(samples)])
        assert runs[0] == runs[1], f"{cls.name}: examples at length {length} differ for the same seed"
        if length >= 3:
            assert runs[0] != runs[2], f"{cls.name}: examples at length {length} are the same for seeds 0 and 1"
        for prompt, answer in runs[0]:
            assert isinstance(prompt, list) and isinstance(answer, list), f"{cls.name}: example() must return two lists"
            assert answer, f"{cls.name}: empty answer at length {length}"
            assert set(prompt) | set(answer) <= own, f"{cls.name}: {prompt}={answer} uses symbols outside symbols"
            size = len(prompt) + len(answer) + 2
            assert size <= instance.sequence_length(length), (
                f"{cls.name}: an example of length {length} takes {size} tokens, "
                f"more than sequence_length({length}) = {instance.sequence_length(length)}"
            )
            assert instance.score(list(answer), answer), f"{cls.name}: score() refuses the right answer"
            wrong = list(answer)
            wrong[0] = next(s for s in instance.symbols if s != answer[0])
            assert not instance.score(wrong, answer), f"{cls.name}: score() accepts a wrong answer"
            ids, start = encode_example(instance, prompt, answer, tok.ids)
            assert tok.encode(tok.decode(ids), allowed_special="all") == ids, (
                f"{cls.name}: the tokenizer does not round-trip {prompt}={answer}"
            )
            assert ids[start - 1] == SEP and ids[-1] == EOS
    return [
        "vocabulary",
        "unknown options",
        "deterministic for a seed",
        "varies across seeds",
        "symbols used",
        "sequence_length",
        "score",
        "tokenizer save, load and round trip",
    ]
