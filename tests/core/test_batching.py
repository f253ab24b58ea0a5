"""Continuous batching (``alilama_core.engine.batching``): each sequence gets what ``generate`` gives it alone."""

from __future__ import annotations

import pytest
import torch
from alilama_testing import tiny_config

from alilama_core import build_model
from alilama_core.base.errors import ConfigError
from alilama_core.engine.batching import ContinuousBatch, prefill_groups
from alilama_core.engine.generation import SamplingSettings, generate
from alilama_core.engine.request import Request

EOT = 96
PROMPTS = [[5, 17, 3], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50], [7], [60, 61, 62, 63, 64], [9, 9, 9, 9]]


def model_for(positional: str, **overrides):
    torch.manual_seed(0)
    return build_model(tiny_config(positional=positional, attention="sdpa", **overrides)).eval()


def alone(model, prompt, settings) -> list[int]:
    return generate(model, [prompt], settings, eot_id=EOT)[0]


def run_staggered(batch: ContinuousBatch, prompts, settings_for, joins_at) -> dict[int, list[int]]:
    """Join prompt i before step ``joins_at[i]`` (waiting for a free row), step until all end; tokens per prompt."""
    out: dict[int, list[int]] = {}
    handle_of: dict[int, int] = {}
    waiting = list(range(len(prompts)))
    step = 0
    while waiting or len(batch):
        for i in list(waiting):
            if joins_at[i] <= step and batch.free_rows:
                handle, event = batch.join(prompts[i], settings_for(i))
                handle_of[handle] = i
                out[i] = [] if event.token is None else [event.token]
                waiting.remove(i)
        for event in batch.step():
            if event.token is not None:
                out[handle_of[event.handle]].append(event.token)
        step += 1
        assert step < 500
    return out


@pytest.mark.parametrize("positional", ["alibi", "rope", "learned", "nope"])
def test_greedy_sequences_joining_at_different_steps_equal_generate_alone(positional):
    model = model_for(positional)
    settings = SamplingSettings(max_new_tokens=12, temperature=0)
    batch = ContinuousBatch(model, rows=3, capacity=64, eot_id=EOT)
    got = run_staggered(batch, PROMPTS, lambda i: settings, joins_at=[0, 0, 2, 5, 5])
    for i, prompt in enumerate(PROMPTS):
        assert got[i] == alone(model, prompt, settings), (positional, i)


def test_seeded_sampling_is_the_sequences_own():
    model = model_for("alibi")

    def settings(i: int) -> SamplingSettings:
        return SamplingSettings(max_new_tokens=10, temperature=0.9, top_k=20, top_p=0.95, seed=100 + i)

    got = run_staggered(ContinuousBatch(model, rows=2, capacity=64, eot_id=EOT), PROMPTS, settings, [0, 1, 1, 3, 4])
    for i, prompt in enumerate(PROMPTS):
        assert got[i] == alone(model, prompt, settings(i)), i


def test_sequences_that_sample_alike_share_one_computation_and_each_draws_its_own():
    """Rows with equal temperature, top-k and top-p (and nothing else) draw together, from one computation of
    their probabilities; each still draws with its own generator the tokens it makes alone, a group with a NaN
    temperature fails alone, and a row whose logits are not numbers fails without its group."""
    model = model_for("rope")

    def settings(i: int) -> SamplingSettings:
        return SamplingSettings(max_new_tokens=10, temperature=0.8, top_p=0.9, seed=7 + i)

    batch = ContinuousBatch(model, rows=5, capacity=64, eot_id=EOT)
    shared = []
    compute = batch._shared_draws
    batch._shared_draws = lambda sequences, logits: shared.append(compute(sequences, logits)) or shared[-1]
    got = run_staggered(batch, PROMPTS, settings, [0, 0, 0, 1, 1])
    assert max(len(s) for s in shared) >= 4  # the shared path ran, for every row that samples alike
    for i, prompt in enumerate(PROMPTS):
        assert got[i] == alone(model, prompt, settings(i)), i

    batch = ContinuousBatch(model, rows=3, capacity=64, eot_id=EOT)
    handles = [batch.join(PROMPTS[i], settings(i))[0] for i in range(3)]
    nan = SamplingSettings(max_new_tokens=10, temperature=float("nan"), top_p=0.9)
    batch.live[handles[1]].request.settings = batch.live[handles[2]].request.settings = nan  # a NaN group of two
    events = {e.handle: e for e in batch.step()}
    assert events[handles[1]].finish_reason == "error" and events[handles[2]].finish_reason == "error"
    assert events[handles[0]].finish_reason is None and handles[0] in batch.live

    batch = ContinuousBatch(model, rows=3, capacity=64, eot_id=EOT)
    handles = [batch.join(PROMPTS[i], settings(i))[0] for i in range(3)]
    logits = torch.randn(3, model.config.vocab_size)
    logits[batch.live[handles[1]].row] = float("nan")  # one row's logits, in a group of three
    events = {e.handle: e for e in batch._events(logits)}
    assert events[handles[1]].finish_reason == "error" and "not finite" in str(events[handles[1]].error)
    assert all(events[h].finish_reason is None and events[h].token is not None for h in (handles[0], handles[2]))


def test_a_sequence_that_leaves_frees_its_row_at_once_and_makes_no_more_tokens():
    model = model_for("rope")
    settings = SamplingSettings(max_new_tokens=30, temperature=0)
    batch = ContinuousBatch(model, rows=2, capacity=64, eot_id=None)
    first, _ = batch.join(PROMPTS[0], settings)
    second, _ = batch.join(PROMPTS[1], settings)
    assert batch.free_rows == 0
    with pytest.raises(ConfigError, match="the batch is full"):
        batch.join(PROMPTS[2], settings)
    batch.step()
    batch.leave(first)
    assert batch.free_rows == 1
    third, _ = batch.join(PROMPTS[2], settings)  # the freed row, without waiting for a step
    handles = {e.handle for _ in range(3) for e in batch.step()}
    assert handles == {second, third}
    got = [e.token for _ in range(6) for e in batch.step() if e.handle == third]
    assert len(got) == 6


def test_a_small_cache_drops_columns_no_one_uses_and_ends_what_cannot_fit():
    model = model_for("alibi")
    settings = SamplingSettings(max_new_tokens=14, temperature=0)
    batch = ContinuousBatch(model, rows=2, capacity=20, eot_id=None)
    got = run_staggered(batch, PROMPTS[:4], lambda i: settings, joins_at=[0, 3, 9, 12])
    for i, prompt in enumerate(PROMPTS[:4]):
        want = alone(model, prompt, settings)
        fits = 20 - len(prompt)  # tokens a sequence can make before it fills the cache alone
        assert got[i] == want[:fits], i
    assert len(got[1]) < 14  # the 11-token prompt ran out of room: it ended with "length"


def test_finish_reasons_and_the_end_of_a_learned_table():
    model = model_for("learned", context_length=16)
    batch = ContinuousBatch(model, rows=2, capacity=64, eot_id=EOT)
    handle, event = batch.join(PROMPTS[1], SamplingSettings(max_new_tokens=50, temperature=0))
    events = [event] + [e for _ in range(20) for e in batch.step()]
    tokens = [e.token for e in events if e.token is not None]
    assert events[-1].finish_reason in ("length", "stop") and len(batch) == 0
    assert tokens == alone(model, PROMPTS[1], SamplingSettings(max_new_tokens=50, temperature=0))
    assert len(PROMPTS[1]) + len(tokens) <= 16 + 1  # never past the table
    with pytest.raises(ConfigError, match="covers 16 positions"):
        batch.join(list(range(20)), SamplingSettings(max_new_tokens=5))


def test_a_sequence_that_fails_ends_alone_and_the_others_go_on():
    """A sequence whose sampling fails (a NaN temperature that got past every check) gets an error event;
    the other rows decode on to the tokens they make alone."""
    model = model_for("alibi")
    settings = SamplingSettings(max_new_tokens=10, temperature=0)
    batch = ContinuousBatch(model, rows=3, capacity=64, eot_id=EOT)
    good, _ = batch.join(PROMPTS[0], settings)
    bad, _ = batch.join(PROMPTS[1], SamplingSettings(max_new_tokens=10, temperature=1.0, seed=1))
    batch.live[bad].request.settings.temperature = float("nan")  # as if validation had missed it
    events = batch.step()
    failed = [e for e in events if e.handle == bad]
    assert failed[0].finish_reason == "error" and isinstance(failed[0].error, RuntimeError)
    assert bad not in batch.live and good in batch.live
    tokens = [e.token for e in events if e.handle == good]
    while len(batch):
        tokens += [e.token for e in batch.step() if e.token is not None]
    assert tokens == alone(model, PROMPTS[0], settings)[1:]


def test_join_refuses_bad_input_before_it_changes_anything():
    model = model_for("alibi")
    batch = ContinuousBatch(model, rows=2, capacity=64, eot_id=EOT)
    for settings, prompt, phrase in (
        (SamplingSettings(temperature=float("nan")), [1, 2], "temperature must be a finite number"),
        (SamplingSettings(seed=2**70), [1, 2], "seed must be between 0 and 2**63-1"),
        (SamplingSettings(logit_bias={10_000: 1.0}), [1, 2], "logit_bias names token 10000"),
        (SamplingSettings(temperature=1e-300), [1, 2], "at least 1e-05"),
        (SamplingSettings(), [1, 10_000], "outside this model's"),
    ):
        with pytest.raises(ConfigError, match=phrase.replace("*", r"\*").replace("(", r"\(").replace(")", r"\)")):
            batch.join(prompt, settings)
    assert batch.free_rows == 2 and not batch.live


@pytest.mark.parametrize("positional", ["alibi", "rope", "learned", "nope"])
def test_sequences_that_join_together_are_prefilled_in_one_pass_and_get_what_they_get_alone(positional):
    """``join_many``: prompts of different lengths in one left-padded forward pass, then each sequence's greedy
    and seeded sampled tokens are those ``generate`` gives it alone, and an echoed prompt's scores are its own."""
    model = model_for(positional)
    prompts = [PROMPTS[0], PROMPTS[3], PROMPTS[4], PROMPTS[2]]  # 3, 5, 4 and 1 tokens: one group
    prefills: list[tuple[int, ...]] = []
    model.register_forward_pre_hook(
        lambda _, args: prefills.append(tuple(args[0].shape)) if args[0].size(1) > 1 else None
    )

    def settings(i: int) -> SamplingSettings:
        if i % 2:
            return SamplingSettings(max_new_tokens=10, temperature=0.9, top_k=20, seed=40 + i)
        return SamplingSettings(max_new_tokens=10, temperature=0)

    batch = ContinuousBatch(model, rows=6, capacity=64, eot_id=EOT)
    batch.join(PROMPTS[1], settings(0))  # a sequence already decoding: the joiners' rows end where its row ends
    batch.step()
    prefills.clear()
    results = batch.join_many([Request(p, settings(i)) for i, p in enumerate(prompts)])
    assert prefills == [(4, 5)]  # one forward pass, as wide as the longest prompt
    out = {handle: ([] if event.token is None else [event.token]) for handle, event in results}
    while len(batch):
        for event in batch.step():
            if event.handle in out and event.token is not None:
                out[event.handle].append(event.token)
    for i, (prompt, (handle, _)) in enumerate(zip(prompts, results)):
        assert out[handle] == alone(model, prompt, settings(i)), (positional, i)

    echo = SamplingSettings(max_new_tokens=2, temperature=0)
    together = ContinuousBatch(model, rows=3, capacity=64, eot_id=EOT).join_many(
        [Request(PROMPTS[3], echo, logprobs=2, echo=True), Request(PROMPTS[0], echo)]
    )
    by_itself = ContinuousBatch(model, rows=1, capacity=64, eot_id=EOT).join(PROMPTS[3], echo, 2, echo=True)[1]
    assert [s.token for s in together[0][1].prompt] == PROMPTS[3]
    for got, want in zip(together[0][1].prompt[1:], by_itself.prompt[1:]):
        assert got.logprob == pytest.approx(want.logprob, abs=1e-5)


def test_a_bad_join_among_good_ones_is_refused_alone():
    model = model_for("alibi")
    batch = ContinuousBatch(model, rows=3, capacity=64, eot_id=EOT)
    greedy = SamplingSettings(max_new_tokens=4, temperature=0)
    results = batch.join_many(
        [
            Request(PROMPTS[0], greedy),
            Request([1, 10_000], greedy),  # a token outside the vocabulary
            Request(PROMPTS[3], SamplingSettings(temperature=float("nan"))),
            Request(PROMPTS[4], greedy),
            Request(PROMPTS[2], greedy),
            Request(PROMPTS[1], greedy),  # one more than the batch's free rows
        ]
    )
    errors = [str(r) if isinstance(r, Exception) else None for r in results]
    assert "outside this model's" in errors[1] and "finite number" in errors[2] and "batch is full" in errors[5]
    assert [e is None for e in errors] == [True, False, False, True, True, False]
    assert len(batch) == 3 and batch.free_rows == 0
    first_tokens = {r[0]: r[1].token for r in results if not isinstance(r, Exception)}
    for (handle, _), prompt in zip([results[0], results[3], results[4]], [PROMPTS[0], PROMPTS[4], PROMPTS[2]]):
        assert first_tokens[handle] == alone(model, prompt, greedy)[0]


def test_prefill_groups_bound_the_padding_and_score_an_echo_alone():
    greedy = SamplingSettings()
    requests = [Request([1] * n, greedy) for n in (4, 5, 40, 3, 6, 41)]
    requests.append(Request([1] * 5, greedy, logprobs=1, echo=True))
    groups = prefill_groups(requests, list(range(len(requests))))
    assert groups == [[6], [3, 0, 1, 4], [2, 5]]
    for group in groups:
        lengths = [len(requests[i].prompt) for i in group]
        assert max(lengths) * len(lengths) <= 2 * sum(lengths)
    assert prefill_groups(requests, [0, 2, 3]) == [[3, 0], [2]]  # 40 tokens beside 3 and 4: more padding than tokens
