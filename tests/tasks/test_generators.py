"""Every built-in task: deterministic for a seed, right against a plain Python reference, and conformant."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alilama_core.base.errors import ConfigError, TokenizerError
from alilama_core.contracts.task import EOS, IGNORE, SEP, SymbolTokenizer, parse_lengths
from alilama_core.engine.registry import get_registry
from alilama_core.kit.task import check_task
from alilama_core.runs.tasks import TaskStream, collate, eval_set, get_task

BUILTIN = ["addition", "copy", "parity", "recall", "reverse", "sort"]


def reference(name: str, prompt: list[str]) -> list[str]:
    """The answer to ``prompt``, computed the obvious way on strings."""
    text = "".join(prompt)
    if name == "copy":
        return list(text)
    if name == "reverse":
        return list(text[::-1])
    if name == "sort":  # digits sort before letters in the task alphabet, as in ASCII
        return sorted(text)
    if name == "parity":
        return [str(text.count("1") % 2)]
    if name == "addition":  # digits least-significant first
        a, b = text.split("+")
        return list(str(int(a[::-1]) + int(b[::-1]))[::-1])
    if name == "recall":
        pairs, key = text.split("?")
        table = {pairs[i]: pairs[i + 1] for i in range(0, len(pairs), 2)}
        return [table[key]]
    raise AssertionError(name)


def test_builtins_are_registered():
    assert set(BUILTIN) <= set(get_registry().names("task"))
    assert get_registry().entry("task", "copy").distribution == "alilama"


@pytest.mark.parametrize("name", BUILTIN)
def test_conformance(name):
    assert "deterministic for a seed" in check_task(name)


@pytest.mark.parametrize("name", BUILTIN)
def test_answers_match_reference(name):
    task = get_task(name)
    rng = np.random.default_rng(7)
    for length in [1, 2, 3, 7, 16, 20]:
        for _ in range(50):
            prompt, answer = task.example(length, rng)
            assert answer == reference(name, prompt), (name, prompt, answer)


@pytest.mark.parametrize("name", BUILTIN)
def test_deterministic_for_a_seed(name):
    task = get_task(name)
    assert eval_set(task, 6, 40, seed=3) == eval_set(task, 6, 40, seed=3)
    assert eval_set(task, 6, 40, seed=3) != eval_set(task, 6, 40, seed=4)
    # the trainer's validation set is another draw than the test set at the same length and seed
    assert eval_set(task, 6, 40, seed=3, split="val") == eval_set(task, 6, 40, seed=3, split="val")
    assert eval_set(task, 6, 40, seed=3, split="val") != eval_set(task, 6, 40, seed=3)
    a = TaskStream(task, (1, 9), seed=5).draw(64)
    b = TaskStream(task, (1, 9), seed=5).draw(64)
    assert a == b


def test_lengths_and_sizes():
    copy = get_task("copy")
    lengths = {len(ids) for ids, _ in TaskStream(copy, (2, 5), seed=0).draw(400)}
    assert lengths == {2 * n + 2 for n in range(2, 6)}  # every length in the range, none outside
    add = get_task("addition")
    for prompt, answer in (add.example(4, np.random.default_rng(s)) for s in range(50)):
        a, b = "".join(prompt).split("+")
        assert len(a) == len(b) == 4 and a[-1] != "0" and b[-1] != "0"  # no leading zero (written last)
    recall = get_task("recall")
    prompt, _ = recall.example(26, np.random.default_rng(0))
    assert len(set(prompt[:-2:2])) == 26  # distinct keys


def test_stream_resumes_from_its_state():
    task = get_task("sort")
    stream = TaskStream(task, (1, 8), seed=11)
    stream.draw(10)
    state = stream.state()
    after = stream.draw(20)
    resumed = TaskStream(task, (1, 8), seed=999)
    resumed.set_state(state)
    assert resumed.draw(20) == after


def test_collate_scores_the_answer_only():
    task = get_task("reverse")
    examples = TaskStream(task, (1, 6), seed=0).draw(16)
    x, y = collate(examples)  # (B, T) each
    assert x.shape == y.shape and x.dtype == y.dtype == torch.int64
    for row, (ids, start) in enumerate(examples):
        n = len(ids) - 1
        assert x[row, :n].tolist() == ids[:-1]
        scored = [t for t in y[row].tolist() if t != IGNORE]
        assert scored == ids[start:]  # the answer then <eos>
        assert scored[-1] == EOS and ids[start - 1] == SEP
        assert (y[row, : start - 1] == IGNORE).all() and (y[row, n:] == IGNORE).all()


def test_options_and_lengths_are_checked():
    with pytest.raises(ConfigError, match="symbol"):
        get_task("copy", {"symbol": 5})
    with pytest.raises(ConfigError, match="symbols"):
        get_task("copy", {"symbols": 1})
    assert len(get_task("copy", {"symbols": 20}).symbols) == 20
    with pytest.raises(ConfigError, match="goes up to length 26"):
        TaskStream(get_task("recall"), (1, 30))
    assert parse_lengths("1-16") == (1, 16) and parse_lengths(8) == (8, 8)
    for bad in ("16-1", "0-3", "a-b", "1-"):
        with pytest.raises(ConfigError):
            parse_lengths(bad)


def test_symbol_tokenizer_round_trip(tmp_path):
    tok = get_task("recall").tokenizer()
    text = "a3c1?c=1<eos>"
    ids = tok.encode(text, allowed_special="all")
    assert tok.decode(ids) == text and tok.eot_id == EOS
    assert tok.encode("a3 c1") == tok.encode("a3c1")  # whitespace that is no symbol is skipped
    with pytest.raises(TokenizerError, match="special token"):
        tok.encode(text)
    assert [tok.decode([i]) for i in ids][-1] == "<eos>"
    tok.save(tmp_path)
    assert SymbolTokenizer.load(tmp_path).symbols == tok.symbols
    with pytest.raises(TokenizerError, match="no symbol"):
        tok.encode("a#")


def test_symbol_tokenizer_passes_the_tokenizer_kit():
    from alilama_core.kit.tokenizer import check_tokenizer

    assert "save and load" in check_tokenizer("symbols")


def test_check_task_catches_a_broken_task():
    from alilama_core.contracts.task import Task

    class Wrong(Task):
        name = "wrong"

        @property
        def symbols(self):
            return ["0", "1"]

        def example(self, length, rng):
            bits = [str(b) for b in rng.integers(0, 2, size=length)]
            return bits, bits + bits  # twice as long as sequence_length allows

        def sequence_length(self, length):
            return 2 * length + 2

    with pytest.raises(AssertionError, match="more than sequence_length"):
        check_task(Wrong)
