"""The ``tiled`` CPU backend: exact ALiBi attention by query blocks, forward and backward."""

from __future__ import annotations

import alilama_attention.tiled as tiled
import pytest
import torch
from alilama_testing import tiny_config
from torch.testing import assert_close

from alilama_core import ModelConfig, build_model
from alilama_core.engine.registry import get_attention, get_positional


def _alibi(heads: int):
    return get_positional("alibi")(ModelConfig(n_heads=heads, d_model=8 * heads))


def _qkv(heads: int, t: int, s: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, heads, n, 8, generator=g, requires_grad=True) for n in (t, s, s)]


@pytest.mark.parametrize("heads", [3, 8, 12])
@pytest.mark.parametrize("T", [1, 63, 64, 65, 1000, pytest.param(2048, marks=pytest.mark.slow)])  # 2048: seconds a case
@pytest.mark.parametrize("offset", [0, 100])
def test_tiled_matches_eager_values_and_gradients(T, heads, offset, monkeypatch):
    monkeypatch.setattr(tiled, "QUERY_BLOCK", 64)  # several blocks even at T=65
    monkeypatch.setattr(tiled, "KEY_CHUNK", 96)  # key chunks that do not align with blocks
    alibi = _alibi(heads)
    q, k, v = _qkv(heads, T, T + offset, seed=T + heads)
    expected = get_attention("eager").fn(q, k, v, positional=alibi)
    got = get_attention("tiled").fn(q, k, v, positional=alibi)
    assert_close(got, expected)
    weights = torch.randn_like(expected)  # a loss whose gradient is not symmetric
    g_expected = torch.autograd.grad((expected * weights).sum(), (q, k, v))
    g_got = torch.autograd.grad((got * weights).sum(), (q, k, v))
    for name, a, b in zip("qkv", g_got, g_expected):
        assert_close(a, b, rtol=1e-4, atol=5e-5, msg=lambda m: f"d{name}: {m}")


def test_tiled_never_builds_a_t_by_s_bias(monkeypatch):
    """Every mask the fused kernel sees is a broadcast key bias or a block-sized diagonal."""
    seen = []
    real = tiled._fwd

    def spy(q, k, v, *args, attn_mask=None, **kwargs):
        seen.append((attn_mask.shape, attn_mask.stride()))
        return real(q, k, v, *args, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(tiled, "_fwd", spy)
    alibi = _alibi(4)
    q, k, v = _qkv(4, 512, 512, seed=0)
    with torch.no_grad():
        get_attention("tiled").fn(q, k, v, positional=alibi)
    for shape, stride in seen:
        rows, cols = shape[-2:]
        assert rows <= tiled.QUERY_BLOCK
        assert cols <= tiled.QUERY_BLOCK or stride[-2] == 0  # wide masks are broadcast rows
    # the masked upper triangle is skipped: the last block only sees keys up to itself
    assert len(seen) == 2 * (512 // tiled.QUERY_BLOCK) - 1


def test_tiled_falls_back_to_sdpa_where_it_does_not_apply():
    rope_model = build_model(tiny_config(positional="rope", attention="tiled"))
    ref = build_model(tiny_config(positional="rope", attention="eager"))
    ref.load_state_dict(rope_model.state_dict())
    x = torch.randint(0, 97, (2, 50))
    assert_close(rope_model(x), ref(x), rtol=1e-4, atol=1e-5)


def test_model_info_shows_tiled_for_long_inputs_on_cpu():
    from alilama_core.app.info import model_report

    report = model_report(tiny_config(attention="auto", context_length=2048))
    assert "long: tiled" in report["plugins"]["attention"]["detail"]
    assert "no T x S bias" in report["bias_memory"]


def test_default_attention_is_auto():
    assert ModelConfig().attention == "auto"
