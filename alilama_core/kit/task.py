"""The conformance kit for a task plugin."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence

import numpy as np

from alilama_core.base.errors import ConfigError
from alilama_core.contracts.task import EOS, SEP, Task
from alilama_core.engine.registry import get_registry
from alilama_core.kit.common import Check, Subject, run_checks
from alilama_core.runs.tasks import encode_example
from alilama_core.runs.tokenizers import load_tokenizer, save_tokenizer


def check_task(
    task, lengths: Sequence[int] = (1, 2, 3, 5, 8), samples: int = 20, known_gaps: Mapping[str, str] | None = None
) -> list[str]:
    """Check a ``Task`` (registered name, class or instance) against its contract; return the checks run.

    Raises ``AssertionError`` saying what fails (also as ``alilama_core.kit.task.check_task``).

    Checked: a name and distinct, non-empty symbols after the specials; examples
    that use only the task's symbols, with a non-empty answer and no more tokens
    than ``sequence_length``; the same examples for the same seed and varied ones
    across seeds; unknown options refused with ``ConfigError``; ``score`` accepting
    the right answer and refusing a wrong one; and the symbol tokenizer saving,
    loading and round-tripping every example. Run it from a plugin's tests::

        def test_my_task():
            check_task(MyTask)      # or check_task("my-task") once registered
    """
    return run_checks(task_checks(task, lengths=lengths, samples=samples, known_gaps=known_gaps))


def task_checks(
    task, *, lengths: Sequence[int] = (1, 2, 3, 5, 8), samples: int = 20, known_gaps: Mapping[str, str] | None = None
) -> list[Check]:
    """The named checks of ``check_task``, one ``Check`` each (see ``parametrize_with_checks``)."""
    if isinstance(task, str):
        task = get_registry().get("task", task)
    cls = task if isinstance(task, type) else type(task)
    label = getattr(cls, "name", None) or cls.__name__

    def make_instance():
        assert issubclass(cls, Task), f"{cls.__name__} is not a Task subclass"
        return task if not isinstance(task, type) else cls()

    def lengths_checked(instance) -> list[int]:
        if instance.max_length is None:
            return list(lengths)
        return [n for n in lengths if n <= instance.max_length] + [instance.max_length]

    def draw():
        """Examples per length for seeds 0, 0 and 1."""
        instance = subject.instance
        out = {}
        for length in lengths_checked(instance):
            out[length] = [_examples(instance, length, seed, samples) for seed in (0, 0, 1)]
        return out

    subject = Subject(instance=make_instance, runs=draw)

    def vocabulary() -> None:
        instance = subject.instance
        assert isinstance(cls.name, str) and cls.name, f"{cls.__name__}.name must be a non-empty string"
        vocab = instance.vocabulary()
        assert tuple(vocab[: len(Task.SPECIALS)]) == Task.SPECIALS, f"vocabulary() must start with {Task.SPECIALS}"
        assert len(set(vocab)) == len(vocab), f"{cls.name}: symbols repeat a special or each other: {vocab}"
        assert all(isinstance(s, str) and s and not s.isspace() for s in vocab), (
            f"{cls.name}: symbols must be non-empty strings"
        )

    def unknown_options() -> None:
        try:
            cls(no_such_option=1)
        except ConfigError:
            pass
        else:
            raise AssertionError(f"{cls.name}: an unknown option must raise ConfigError")

    def deterministic() -> None:
        for length, (a, b, _) in subject.runs.items():
            assert a == b, f"{cls.name}: examples at length {length} differ for the same seed"

    def varies() -> None:
        for length, (a, _, c) in subject.runs.items():
            if length >= 3:
                assert a != c, f"{cls.name}: examples at length {length} are the same for seeds 0 and 1"

    def each_example():
        for length, (examples, _, _) in subject.runs.items():
            for prompt, answer in examples:
                assert isinstance(prompt, list) and isinstance(answer, list), (
                    f"{cls.name}: example() must return two lists"
                )
                assert answer, f"{cls.name}: empty answer at length {length}"
                yield length, prompt, answer

    def symbols_used() -> None:
        own = set(subject.instance.symbols)
        for _, prompt, answer in each_example():
            assert set(prompt) | set(answer) <= own, f"{cls.name}: {prompt}={answer} uses symbols outside symbols"

    def sequence_length() -> None:
        instance = subject.instance
        for length, prompt, answer in each_example():
            size = len(prompt) + len(answer) + 2
            assert size <= instance.sequence_length(length), (
                f"{cls.name}: an example of length {length} takes {size} tokens, "
                f"more than sequence_length({length}) = {instance.sequence_length(length)}"
            )

    def score() -> None:
        instance = subject.instance
        for _, _, answer in each_example():
            assert instance.score(list(answer), answer), f"{cls.name}: score() refuses the right answer"
            wrong = list(answer)
            wrong[0] = next(s for s in instance.symbols if s != answer[0])
            assert not instance.score(wrong, answer), f"{cls.name}: score() accepts a wrong answer"

    def tokenizer() -> None:
        instance = subject.instance
        with tempfile.TemporaryDirectory() as folder:
            save_tokenizer(instance.tokenizer(), folder)
            tok = load_tokenizer(folder)
        vocab = instance.vocabulary()
        assert tok.vocab_size == len(vocab), (
            f"{cls.name}: the saved tokenizer has {tok.vocab_size} ids, not {len(vocab)}"
        )
        for _, prompt, answer in each_example():
            ids, start = encode_example(instance, prompt, answer, tok.ids)
            assert tok.encode(tok.decode(ids), allowed_special="all") == ids, (
                f"{cls.name}: the tokenizer does not round-trip {prompt}={answer}"
            )
            assert ids[start - 1] == SEP and ids[-1] == EOS

    plan = [
        ("vocabulary", vocabulary),
        ("unknown options", unknown_options),
        ("deterministic for a seed", deterministic),
        ("varies across seeds", varies),
        ("symbols used", symbols_used),
        ("sequence_length", sequence_length),
        ("score", score),
        ("tokenizer save, load and round trip", tokenizer),
    ]
    return [Check("task", label, name, fn, gap=(known_gaps or {}).get(name)) for name, fn in plan]


def _examples(instance, length: int, seed: int, samples: int) -> list:
    rng = np.random.Generator(np.random.PCG64(seed))
    return [instance.example(length, rng) for _ in range(samples)]
