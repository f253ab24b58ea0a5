"""Backends called directly: outputs and gradients with a KV-cache offset, many head counts."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from alilama_core.registry import get_attention, get_positional
from alilama_testing import available_backends, tiny_config

BACKENDS = [b for b in available_backends() if b != "eager"]


def _qkv(h: int, t: int, s: int, d: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, h, t, d, generator=g, requires_grad=True)
    k = torch.randn(2, h, s, d, generator=g, requires_grad=True)
    v = torch.randn(2, h, s, d, generator=g, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("heads", [1, 3, 8, 12])
@pytest.mark.parametrize("t,offset", [(1, 0), (1, 50), (7, 0), (7, 20), (64, 65)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_matches_eager_with_offset(backend, t, offset, heads):
    config = tiny_config(n_heads=heads, d_model=8 * heads)
    alibi = get_positional("alibi")(config)
    eager, fn = get_attention("eager"), get_attention(backend)
    q, k, v = _qkv(heads, t, t + offset)
    expected = eager.fn(q, k, v, positional=alibi, causal=True)
    if "cpu" not in fn.trains_on:
        with torch.no_grad():
            assert_close(fn.fn(q, k, v, positional=alibi, causal=True), expected, rtol=1e-5, atol=1e-5)
        return
    got = fn.fn(q, k, v, positional=alibi, causal=True)
    assert_close(got, expected, rtol=1e-5, atol=1e-5)
    g_expected = torch.autograd.grad(expected.square().sum(), (q, k, v))
    g_got = torch.autograd.grad(got.square().sum(), (q, k, v))
    for a, b in zip(g_got, g_expected):
        assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_eager_is_the_textbook_formula():
    """eager == softmax(QK^T/sqrt(d) - m_h (i - j), causal) V, written out with loops."""
    config = tiny_config(n_heads=2, d_model=16)
    alibi = get_positional("alibi")(config)
    q, k, v = _qkv(2, 3, 5, d=8)
    out = get_attention("eager").fn(q, k, v, positional=alibi)
    slopes = alibi.slopes()
    for h in range(2):
        for i in range(3):
            qi = 2 + i  # absolute position of query i (two cached keys before it)
            scores = torch.stack(
                [q[0, h, i] @ k[0, h, j] / math.sqrt(8) - slopes[h] * (qi - j) for j in range(qi + 1)]
            )
            weights = torch.softmax(scores, dim=0)
            manual = sum(weights[j] * v[0, h, j] for j in range(qi + 1))
            assert_close(out[0, h, i], manual, rtol=1e-5, atol=1e-6)


def test_sdpa_caches_the_static_bias_per_shape():
    from alilama_attention.masks import dense_mask

    alibi = get_positional("alibi")(tiny_config())
    a = dense_mask(alibi, 16, 16, True, torch.device("cpu"), torch.float32)
    b = dense_mask(alibi, 16, 16, True, torch.device("cpu"), torch.float32)
    c = dense_mask(alibi, 8, 16, True, torch.device("cpu"), torch.float32)
    assert a is b and c is not a
    assert a.shape == (1, 4, 16, 16) and a.dim() == 4  # 4-D keeps SDPA on its fused CPU kernel
    assert torch.isinf(a[0, 0, 0, 1]) and a[0, 0, 1, 0] < 0 and a[0, 0, 1, 1] == 0
