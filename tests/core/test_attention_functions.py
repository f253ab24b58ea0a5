"""Backends called directly: outputs and gradients with a KV-cache offset, many head counts."""

from __future__ import annotations

import math

import pytest
import torch
from alilama_testing import available_backends, tiny_config
from torch.testing import assert_close

from alilama_core.engine.registry import get_attention, get_positional

BACKENDS = [b for b in available_backends() if b != "eager"]


def _qkv(h: int, t: int, s: int, d: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, h, t, d, generator=g, requires_grad=True)
    k = torch.randn(2, h, s, d, generator=g, requires_grad=True)
    v = torch.randn(2, h, s, d, generator=g, requires_grad=True)
    return q, k, v


@pytest.mark.fast  # flex too: the fast tier's check of it (small shapes, compiled in seconds)
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
            scores = torch.stack([q[0, h, i] @ k[0, h, j] / math.sqrt(8) - slopes[h] * (qi - j) for j in range(qi + 1)])
            weights = torch.softmax(scores, dim=0)
            manual = sum(weights[j] * v[0, h, j] for j in range(qi + 1))
            assert_close(out[0, h, i], manual, rtol=1e-5, atol=1e-6)


def test_a_static_bias_is_kept_between_passes_and_masks_are_4d():
    from alilama_core.contracts.attention import AttentionBias

    alibi = get_positional("alibi")(tiny_config())
    cpu = torch.device("cpu")
    a = AttentionBias(alibi, 16, 16, cpu).mask(torch.float32)
    b = AttentionBias(alibi, 16, 16, cpu).mask(torch.float32)
    c = AttentionBias(alibi, 8, 16, cpu).mask(torch.float32)
    assert a is b and c is not a
    assert a.shape == (1, 4, 16, 16)  # 4-D keeps SDPA on its fused CPU kernel
    assert torch.isinf(a[0, 0, 0, 1]) and a[0, 0, 1, 0] < 0 and a[0, 0, 1, 1] == 0


def test_a_padded_query_sees_itself_so_no_row_is_fully_masked():
    from alilama_core.contracts.attention import AttentionBias

    alibi = get_positional("alibi")(tiny_config())
    keep = torch.tensor([[False, False, True, True], [True, True, True, True]])
    mask = AttentionBias(alibi, 4, 4, "cpu", keep).mask(torch.float16)  # (B, H, T, S)
    assert mask.shape == (2, 4, 4, 4)
    assert torch.isfinite(mask.amax(dim=-1)).all()  # every row keeps a finite entry
    assert torch.isinf(mask[0, :, 2, :2]).all()  # real tokens never see padding


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_low_precision_left_padding_has_no_nan(backend, dtype):
    """Two layers in fp16/bf16 with left padding: finite, and real tokens match fp32 eager."""
    from alilama_core import build_model

    torch.manual_seed(0)
    ref = build_model(tiny_config(attention="eager")).eval()
    model = build_model(tiny_config(attention=backend)).eval()
    model.load_state_dict(ref.state_dict())
    model = model.to(dtype)
    idx = torch.randint(1, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    keep = torch.ones(2, 12, dtype=torch.bool)
    keep[0, :5] = False
    with torch.no_grad():
        got = model(idx, key_padding_mask=keep).float()
        want = ref(idx, key_padding_mask=keep)
    assert torch.isfinite(got).all()
    tol = 5e-2 if dtype == torch.float16 else 2e-1
    assert_close(got[:, 5:][keep[:, 5:]], want[:, 5:][keep[:, 5:]], rtol=tol, atol=tol)


def test_backends_take_the_shared_bias_and_work_without_it():
    """A precomputed ``AttentionBias`` gives the same output as the scheme alone."""
    from alilama_core.contracts.attention import AttentionBias

    alibi = get_positional("alibi")(tiny_config())
    q, k, v = _qkv(4, 5, 9)
    shared = AttentionBias(alibi, 5, 9, "cpu")
    with torch.no_grad():
        for name in ["eager", *BACKENDS]:
            if not get_attention(name).shared_bias:  # a backend on the older signature never gets bias=
                continue
            fn = get_attention(name).fn
            assert_close(
                fn(q, k, v, positional=alibi, bias=shared), fn(q, k, v, positional=alibi), rtol=1e-5, atol=1e-6
            )
