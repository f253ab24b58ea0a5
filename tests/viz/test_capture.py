"""Attention capture: probabilities of every layer and head, for every scheme and backend."""

from __future__ import annotations

import pytest
import torch
from alilama_testing import available_backends
from viz.viz_helpers import VIZ_SCHEMES, scheme_model

from alilama_core.engine.capture import attention_probabilities, capture

BACKENDS = [b for b in available_backends() if b != "eager"]


def ids(b: int = 2, t: int = 24) -> torch.Tensor:
    return torch.randint(0, 97, (b, t), generator=torch.Generator().manual_seed(1))  # (B, T)


@pytest.mark.parametrize("positional", VIZ_SCHEMES)
def test_rows_sum_to_one_with_causal_zeros(positional):
    model = scheme_model(positional)
    result = capture(model, ids())
    assert len(result.attentions) == model.config.n_layers
    for att in result.attentions:
        assert att.shape == (2, model.config.n_heads, 24, 24)
        torch.testing.assert_close(att.sum(-1), torch.ones(2, model.config.n_heads, 24))
        assert torch.all(att.triu(1) == 0), "a token read a later token"
        assert torch.all(att >= 0)


@pytest.mark.parametrize("positional", VIZ_SCHEMES)
@pytest.mark.parametrize("attention", ["eager", *BACKENDS])
def test_logits_unchanged(positional, attention):
    model = scheme_model(positional, attention)
    x = ids()
    with torch.no_grad():
        plain = model(x)
    result = capture(model, x)
    assert torch.equal(result.logits, plain)
    assert all(not m.qkv._forward_hooks for m in model.blocks.modules() if hasattr(m, "qkv")), "hooks left behind"
    with torch.no_grad():
        assert torch.equal(model(x), plain)


@pytest.mark.parametrize("positional", VIZ_SCHEMES)
@pytest.mark.parametrize("attention", BACKENDS)
def test_equal_across_backends(positional, attention):
    reference = capture(scheme_model(positional, "eager"), ids())
    other = capture(scheme_model(positional, attention), ids())
    for a, b in zip(reference.attentions, other.attentions):
        torch.testing.assert_close(b, a, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("positional", ["alibi", "nope"])
def test_probabilities_reproduce_the_eager_backend(positional):
    """probabilities @ v is what the reference backend returns, with a cache offset and padding."""
    from alilama_attention.eager import eager_attention

    model = scheme_model(positional)
    scheme = model.positional if model.positional.kind == "bias" else None
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, n, 8, generator=g) for n in (5, 9, 9))  # T=5 queries after 4 cached
    pad = torch.ones(2, 9, dtype=torch.bool)
    pad[1, :3] = False  # second row left-padded
    for mask in (None, pad):
        probs = attention_probabilities(q, k, scheme, True, mask)  # (B, H, T, S)
        want = eager_attention(q, k, v, positional=scheme, causal=True, key_padding_mask=mask)
        torch.testing.assert_close(probs @ v, want, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 5))
    assert torch.all(probs[1, :, :, :3] == 0), "a padded key was read"


def test_padding_and_positions_passed_through():
    model = scheme_model("rope")
    x = ids(2, 10)
    pad = torch.ones(2, 10, dtype=torch.bool)
    pad[1, :4] = False
    positions = torch.stack([torch.arange(10), (torch.arange(10) - 4).clamp(min=0)])  # (B, T)
    with torch.no_grad():
        plain = model(x, key_padding_mask=pad, position_ids=positions)
    result = capture(model, x, key_padding_mask=pad, position_ids=positions)
    assert torch.equal(result.logits, plain)
    for att in result.attentions:
        assert torch.all(att[1, :, 4:, :4] == 0), "a real token read a padded one"
        torch.testing.assert_close(att.sum(-1), torch.ones(2, 4, 10))


@pytest.mark.parametrize("positional", ["alibi", "sinusoidal"])
def test_logit_lens_ends_at_the_logits(positional):
    model = scheme_model(positional)
    result = capture(model, ids())
    lens = result.lens()  # (L, B, T, V)
    assert lens.shape == (model.config.n_layers, *result.logits.shape)
    torch.testing.assert_close(lens[-1], result.logits)
    assert not torch.allclose(lens[0], lens[-1])


def test_mean_distance_of_uniform_attention():
    """A model that reads every earlier token equally has mean distance i/2 at query i."""
    model = scheme_model("nope")
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[: 2 * model.config.d_model].zero_()  # q = k = 0: uniform rows
            block.attn.qkv.bias[: 2 * model.config.d_model].zero_()
    result = capture(model, ids(1, 9))
    want = torch.arange(9, dtype=torch.float32).div(2).mean()
    torch.testing.assert_close(result.mean_distance(), torch.full((2, 4), float(want)))
