"""KV-cached sampling: equals uncached, stops where told, batches like single prompts."""

from __future__ import annotations

import pytest
import torch
from alilama_testing import SCHEMES, available_backends, tiny_config

from alilama_core import ConfigError, build_model
from alilama_core.engine.generation import SamplingSettings, generate, next_token
from alilama_core.engine.registry import get_attention

BACKENDS = [b for b in available_backends() if "cpu" in get_attention(b).devices]


def _model(positional="alibi", attention="sdpa", **kw):
    torch.manual_seed(0)
    return build_model(tiny_config(positional=positional, attention=attention, **kw)).eval()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("positional", SCHEMES)
def test_cached_generation_equals_uncached(positional, backend):
    model = _model(positional, backend)
    prompt = [[5, 17, 3, 44, 2]]
    greedy = dict(max_new_tokens=12, temperature=0)
    cached = generate(model, prompt, SamplingSettings(**greedy, use_cache=True))
    uncached = generate(model, prompt, SamplingSettings(**greedy, use_cache=False))
    assert cached == uncached and len(cached[0]) == 12


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("positional", SCHEMES)
def test_left_padded_batch_cached_equals_uncached(positional, backend):
    model = _model(positional, backend)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9, 8], [40, 41, 42, 43]]
    greedy = dict(max_new_tokens=8, temperature=0)
    cached = generate(model, prompts, SamplingSettings(**greedy, use_cache=True))
    uncached = generate(model, prompts, SamplingSettings(**greedy, use_cache=False))
    assert cached == uncached and all(len(row) == 8 for row in cached)


def test_repetition_penalty_sees_the_whole_sequence_with_the_cache():
    model = _model()
    settings = dict(max_new_tokens=12, temperature=0, repetition_penalty=1.5)
    cached = generate(model, [[5, 5, 6], [7]], SamplingSettings(**settings, use_cache=True))
    uncached = generate(model, [[5, 5, 6], [7]], SamplingSettings(**settings, use_cache=False))
    assert cached == uncached


@pytest.mark.parametrize("positional", SCHEMES)
def test_batch_with_different_lengths_equals_one_by_one(positional):
    model = _model(positional, "auto")
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9, 8], [40, 41, 42, 43]]
    settings = SamplingSettings(max_new_tokens=10, temperature=0)
    batched = generate(model, prompts, settings)
    alone = [generate(model, [p], settings)[0] for p in prompts]
    assert batched == alone


def test_generation_runs_past_the_trained_context_with_alibi():
    model = _model("alibi", "auto", context_length=16)
    out = generate(model, [[1, 2, 3]], SamplingSettings(max_new_tokens=40, temperature=0))
    assert len(out[0]) == 40


def test_learned_positions_stop_at_the_end_of_their_table():
    model = _model("learned", "sdpa", context_length=16)
    new = generate(model, [[1, 2, 3]], SamplingSettings(max_new_tokens=20, temperature=0))[0]
    assert len(new) == 14  # the last token is predicted at position 16: the table's end
    assert new == generate(model, [[1, 2, 3]], SamplingSettings(max_new_tokens=14, temperature=0))[0]
    with pytest.raises(ConfigError, match="the prompt has 17 tokens but .* covers 16 positions"):
        generate(model, [list(range(17))], SamplingSettings(max_new_tokens=1))


def test_stops_at_the_end_of_text_token():
    model = _model()
    free = generate(model, [[3, 1, 4]], SamplingSettings(max_new_tokens=15, temperature=0))[0]
    cut = next(i for i, t in enumerate(free) if t not in free[:i] and i > 0)
    stopped = generate(model, [[3, 1, 4]], SamplingSettings(max_new_tokens=15, temperature=0), eot_id=free[cut])
    assert stopped[0] == free[:cut]


def test_top_k_one_is_greedy_and_seeds_reproduce():
    model = _model()
    prompt = [[7, 7, 8]]
    greedy = generate(model, prompt, SamplingSettings(max_new_tokens=10, temperature=0))
    top1 = generate(model, prompt, SamplingSettings(max_new_tokens=10, temperature=1.0, top_k=1, seed=3))
    assert top1 == greedy
    a = generate(model, prompt, SamplingSettings(max_new_tokens=20, temperature=1.5, seed=1))
    b = generate(model, prompt, SamplingSettings(max_new_tokens=20, temperature=1.5, seed=1))
    c = generate(model, prompt, SamplingSettings(max_new_tokens=20, temperature=1.5, seed=2))
    assert a == b and a != c


def test_top_p_and_temperature_shape_the_distribution():
    logits = torch.tensor([[4.0, 3.0, 0.0, -1.0]])
    g = torch.Generator().manual_seed(0)
    draws = {int(next_token(logits, SamplingSettings(top_p=0.5), None, g)) for _ in range(200)}
    assert draws == {0}  # token 0 alone has p > 0.5
    draws = {int(next_token(logits, SamplingSettings(top_p=0.9), None, g)) for _ in range(300)}
    assert draws == {0, 1}
    cold = [int(next_token(logits, SamplingSettings(temperature=0.05), None, g)) for _ in range(100)]
    assert set(cold) == {0}
    hot = {int(next_token(logits, SamplingSettings(temperature=100.0), None, g)) for _ in range(300)}
    assert hot == {0, 1, 2, 3}


def test_repetition_penalty_discourages_seen_tokens():
    logits = torch.tensor([[2.0, 1.9, -1.0]])
    history = torch.tensor([[0]])
    s = SamplingSettings(temperature=0, repetition_penalty=2.0)
    assert int(next_token(logits, s, history, None)) == 1


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(temperature=-1), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=1.5), "top_p"),
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(repetition_penalty=0), "repetition_penalty"),
    ],
)
def test_invalid_settings(kw, message):
    with pytest.raises(ConfigError, match=message):
        SamplingSettings(**kw).validate()


def test_logit_bias_and_openai_penalties_in_the_sampler():
    """``logit_bias`` is added; presence counts once and frequency once per use, over the generated tokens."""
    from alilama_core.engine.generation import next_token

    logits = torch.tensor([[0.0, 0.1, 0.2, 3.0, 0.3, 2.0]])
    greedy = SamplingSettings(temperature=0)
    assert int(next_token(logits, greedy, None, None)[0]) == 3
    assert int(next_token(logits, SamplingSettings(temperature=0, logit_bias={3: -100}), None, None)[0]) == 5
    assert int(next_token(logits, SamplingSettings(temperature=0, logit_bias={0: 100}), None, None)[0]) == 0
    generated = torch.tensor([[3, 3, 5]])
    # 3: 3.0 - 2 * 0.6 - 0.5 = 1.3; 5: 2.0 - 0.6 - 0.5 = 0.9; so 3 stays the likeliest
    both = SamplingSettings(temperature=0, frequency_penalty=0.6, presence_penalty=0.5)
    assert int(next_token(logits, both, None, None, generated)[0]) == 3
    # 3: 3.0 - 2 * 1.2 = 0.6; 5: 2.0 - 1.2 = 0.8: now 5
    assert (
        int(next_token(logits, SamplingSettings(temperature=0, frequency_penalty=1.2), None, None, generated)[0]) == 5
    )
    # presence alone: 3 and 5 both lose 1.5 once: 1.5 and 0.5; 4 (0.3) is not below 5
    assert int(next_token(logits, SamplingSettings(temperature=0, presence_penalty=1.5), None, None, generated)[0]) == 3
    assert torch.equal(logits, torch.tensor([[0.0, 0.1, 0.2, 3.0, 0.3, 2.0]]))  # the caller's logits are left alone


def test_a_tiny_temperature_samples_the_argmax_without_nans():
    from alilama_core.engine.generation import MIN_TEMPERATURE, next_token

    logits = torch.tensor([[1.0, 5.0, 4.999, -2.0]])
    generator = torch.Generator().manual_seed(0)
    settings = SamplingSettings(temperature=MIN_TEMPERATURE, top_p=0.9, top_k=3)
    assert [int(next_token(logits, settings, None, generator)[0]) for _ in range(20)] == [1] * 20


def test_a_draw_follows_the_probabilities_never_takes_an_impossible_id_and_refuses_nan():
    from alilama_core.engine.generation import draw

    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 1.0]])
    n = 100_000
    uniform = torch.rand(n, 1, generator=torch.Generator().manual_seed(0))
    ids = draw(probs[:1].expand(n, -1).contiguous(), uniform)
    share = torch.bincount(ids, minlength=4).double() / n
    assert share[1] == 0 and torch.allclose(share, probs[0].double(), atol=0.01), share
    assert draw(probs, torch.tensor([[0.0], [0.999999]])).tolist() == [0, 3]  # the ends of [0, 1)
    with pytest.raises(RuntimeError, match="not finite and positive"):
        draw(torch.tensor([[0.5, float("nan")]]), torch.tensor([[0.3]]))


@pytest.mark.parametrize("scale", [0.05, 1.0, 4.0])  # flat (the cut lies past the first ids looked at) to peaked
def test_the_nucleus_keeps_what_a_full_sort_keeps(scale):
    from alilama_core.engine.generation import nucleus

    logits = torch.randn(16, 4096, generator=torch.Generator().manual_seed(3)) * scale
    for top_p in (0.05, 0.5, 0.9, 0.99):
        ordered, order = torch.sort(logits, descending=True, dim=-1)
        probs = ordered.softmax(dim=-1)
        kept = torch.zeros_like(logits, dtype=torch.bool).scatter(1, order, probs.cumsum(-1) - probs <= top_p)
        assert torch.equal(nucleus(logits, top_p) > float("-inf"), kept), (scale, top_p)
