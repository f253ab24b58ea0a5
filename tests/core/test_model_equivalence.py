"""Every positional scheme x every available backend agrees with the eager reference."""

from __future__ import annotations

import pytest
import torch
from alilama_testing import SCHEMES, available_backends, tiny_config, twin_models
from torch.testing import assert_close

from alilama_core import KVCache, build_model
from alilama_core.engine.registry import get_attention

# Backends that run on CPU tensors: a CUDA-only backend (flash) stays out even where it is installed.
BACKENDS = [b for b in available_backends() if b != "eager" and "cpu" in get_attention(b).devices]
LENGTHS = [1, 7, 128, 513]


def _trains_here(backend: str) -> bool:
    return "cpu" in get_attention(backend).trains_on


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("positional", SCHEMES)
def test_logits_and_gradients_match_eager(positional, backend, T):
    ref, other = twin_models(positional, backend)
    _assert_twins_agree(ref, other, backend, T)


def _assert_twins_agree(ref, other, backend: str, T: int) -> None:
    """Logits on ``T`` tokens and (where ``backend`` trains here) every gradient equal eager's."""
    idx = torch.randint(0, 97, (2, T), generator=torch.Generator().manual_seed(T))
    if not _trains_here(backend):
        with torch.no_grad():
            assert_close(other(idx), ref(idx), rtol=1e-4, atol=1e-5)
        return
    out_ref, out = ref(idx), other(idx)
    assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    out_ref.square().mean().backward()
    out.square().mean().backward()
    grads_ref = dict(ref.named_parameters())
    for name, p in other.named_parameters():
        assert_close(p.grad, grads_ref[name].grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
@pytest.mark.parametrize("positional", SCHEMES)
def test_cached_forward_matches_full_forward(positional, backend, T):
    """A prefix run into the KV cache, then T new tokens: same logits as one full pass."""
    _, model = twin_models(positional, backend)
    offset = 37
    idx = torch.randint(0, 97, (2, offset + T), generator=torch.Generator().manual_seed(T))
    with torch.no_grad():
        full = model(idx)
        cache = KVCache()
        prefix = model(idx[:, :offset], cache=cache)
        new = model(idx[:, offset:], cache=cache)
    assert len(cache) == offset + T
    assert_close(prefix, full[:, :offset], rtol=1e-4, atol=1e-5)
    assert_close(new, full[:, offset:], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("positional", SCHEMES)
def test_token_by_token_generation_matches_full_forward(positional):
    _, model = twin_models(positional, "sdpa")
    idx = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        cache = KVCache()
        steps = [model(idx[:, t : t + 1], cache=cache) for t in range(idx.size(1))]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
@pytest.mark.parametrize("positional", SCHEMES)
def test_causality(positional, backend):
    """Changing a later token never changes the logits of earlier positions."""
    _, model = twin_models(positional, backend)
    idx = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(2))
    changed = idx.clone()
    changed[0, 25] = (idx[0, 25] + 1) % 97
    with torch.no_grad():
        a, b = model(idx), model(changed)
    assert_close(a[:, :25], b[:, :25], rtol=0, atol=0)
    assert not torch.allclose(a[:, 25:], b[:, 25:])


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
@pytest.mark.parametrize("positional", SCHEMES)
def test_left_padded_batch_cached_logits_equal_uncached(positional, backend):
    """A left-padded batch decoded step by step into a growing cache: the uncached logits, real tokens."""
    _, model = twin_models(positional, backend)
    g = torch.Generator().manual_seed(5)
    idx = torch.randint(1, 97, (3, 24), generator=g)
    keep = torch.ones(3, 24, dtype=torch.bool)
    keep[1, :6] = False
    keep[2, :13] = False
    positions = (keep.long().cumsum(dim=1) - 1).clamp(min=0)  # (B, S) per-row positions
    with torch.no_grad():
        full = model(idx, key_padding_mask=keep, position_ids=positions)
        cache = KVCache(chunk=4)  # grows several times on the way
        parts = [model(idx[:, :15], cache=cache, key_padding_mask=keep[:, :15], position_ids=positions[:, :15])]
        for t in range(15, 24):
            parts.append(
                model(
                    idx[:, t : t + 1],
                    cache=cache,
                    key_padding_mask=keep[:, : t + 1],
                    position_ids=positions[:, t : t + 1],
                )
            )
    stepped = torch.cat(parts, dim=1)
    assert cache.capacity() >= 24 and len(cache) == 24
    assert torch.isfinite(stepped).all()
    assert_close(stepped[keep], full[keep], rtol=1e-4, atol=1e-5)


def test_the_cache_writes_in_place_and_grows_in_chunks():
    cache = KVCache(chunk=8)
    k = torch.randn(1, 2, 5, 4)
    keys, _ = cache.update(0, k, k)
    first = cache._keys[0]
    assert cache.capacity() == 8 and keys.shape == (1, 2, 5, 4)
    keys, _ = cache.update(0, k[:, :, :3], k[:, :, :3])
    assert cache._keys[0] is first and keys.shape[2] == 8  # filled in place, no new buffer
    keys, _ = cache.update(0, k[:, :, :1], k[:, :, :1])
    assert cache.capacity() == 16 and keys.shape[2] == 9  # grew by whole chunks, at least doubling
    assert_close(keys[:, :, :5], k)
    cache.crop(4)
    assert len(cache) == 4 and cache.keys[0].shape[2] == 4


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
def test_key_padding_mask_matches_unpadded(backend):
    """Left padding with a key mask gives the same logits as the unpadded sequence."""
    _, model = twin_models("alibi", backend)
    idx = torch.randint(1, 97, (1, 12), generator=torch.Generator().manual_seed(3))
    padded = torch.cat([torch.zeros(1, 5, dtype=torch.long), idx], dim=1)
    keep = torch.cat([torch.zeros(1, 5, dtype=torch.bool), torch.ones(1, 12, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        plain = model(idx)
        masked = model(padded, key_padding_mask=keep)
    assert torch.isfinite(masked).all()
    # ALiBi is relative, so real tokens see the same distances after the pad.
    assert_close(masked[:, 5:], plain, rtol=1e-4, atol=1e-5)


# -- the architecture settings (model.qk_norm, model.activation, model.tie_embeddings) -----------------

OPTIONS = {
    "qk_norm": {"qk_norm": True},
    "relu2": {"activation": "relu2"},
    "untied": {"tie_embeddings": False},
    "all three": {"qk_norm": True, "activation": "relu2", "tie_embeddings": False},
}


def _trained_gains(model) -> None:
    """Move the norms' gains off 1 so a path that skips them cannot agree by chance."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                p.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(len(name)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("positional", SCHEMES)
@pytest.mark.parametrize("option", OPTIONS)
def test_architecture_options_match_eager(option, positional, backend):
    """Each setting, with every scheme and backend: logits and gradients equal eager's."""
    ref, other = twin_models(positional, backend, **OPTIONS[option])
    _trained_gains(ref)
    other.load_state_dict(ref.state_dict())
    _assert_twins_agree(ref, other, backend, 33)


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
@pytest.mark.parametrize("positional", SCHEMES)
def test_architecture_options_cache_and_causality(positional, backend):
    """All three settings: KV-cache decoding equals the full pass, and a later token never moves earlier logits."""
    _, model = twin_models(positional, backend, **OPTIONS["all three"])
    _trained_gains(model)
    idx = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(4))
    changed = idx.clone()
    changed[:, 20] = (idx[:, 20] + 1) % 97
    with torch.no_grad():
        full, moved = model(idx), model(changed)
        cache = KVCache()
        steps = [model(idx[:, :11], cache=cache)] + [model(idx[:, t : t + 1], cache=cache) for t in range(11, 30)]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)
    assert_close(moved[:, :20], full[:, :20], rtol=0, atol=0)
    assert not torch.allclose(moved[:, 20:], full[:, 20:])


def test_each_architecture_option_changes_the_function():
    """The settings are computed, not ignored: each gives other logits than the essay's choice (same weights)."""
    torch.manual_seed(0)
    base = build_model(tiny_config())
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want = base(idx)
        for option in ("qk_norm", "relu2"):
            other = build_model(tiny_config(**OPTIONS[option]))
            other.load_state_dict(base.state_dict(), strict=False)
            assert not torch.allclose(other(idx), want, atol=1e-3), option
        untied = build_model(tiny_config(tie_embeddings=False))
        untied.load_state_dict({**base.state_dict(), "head.weight": base.tok_emb.weight.clone()})
        assert_close(untied(idx), want)  # untied with equal weights: the same function
        untied.head.weight.data.mul_(2)
        assert not torch.allclose(untied(idx), want, atol=1e-3)


def test_relu2_is_relu_squared_and_qk_norm_is_rms_per_head():
    from alilama_core.engine.model import ACTIVATION

    x = torch.linspace(-3, 3, 13)
    assert_close(ACTIVATION["relu2"](x), torch.where(x > 0, x * x, torch.zeros_like(x)))
    model = build_model(tiny_config(qk_norm=True))
    attn = model.blocks[0].attn
    q = torch.randn(2, 4, 5, 8)
    rms = q.pow(2).mean(-1, keepdim=True).add(model.config.norm_eps).rsqrt()
    assert_close(attn.q_norm(q), q * rms * attn.q_norm.weight)
    assert attn.q_norm.weight.shape == (model.config.head_dim,)


def test_untied_head_is_its_own_weight_and_counted():
    tied, untied = build_model(tiny_config()), build_model(tiny_config(tie_embeddings=False))
    assert untied.head.weight is not untied.tok_emb.weight
    assert untied.num_parameters() - tied.num_parameters() == 97 * tied.config.d_model


@pytest.mark.parametrize("bad, phrase", [("swish", "model.activation must be one of gelu, relu2"), ("", "gelu")])
def test_an_unknown_activation_is_refused_by_name(bad, phrase):
    from alilama_core.base.errors import ConfigError

    with pytest.raises(ConfigError, match=phrase):
        build_model(tiny_config(activation=bad))


def test_model_shapes_and_weight_tying():
    model = build_model(tiny_config(context_length=64))
    logits = model(torch.zeros(3, 10, dtype=torch.long))
    assert logits.shape == (3, 10, 97)
    assert model.head.weight is model.tok_emb.weight
    # the tied matrix is counted once
    assert model.num_parameters() == sum(p.numel() for p in set(model.parameters()))


def test_essay_preset_has_about_two_million_parameters():
    from alilama_core import preset

    model = build_model(preset("essay").model)
    assert 2_000_000 < model.num_parameters() < 2_200_000
    assert model.config.positional == "alibi" and model.config.attention == "sdpa"


def test_residual_stream_is_not_normalised():
    """Pre-norm: the residual adds to the raw stream (the seed added it to the normalised input)."""
    model = build_model(tiny_config(n_layers=1, context_length=16))
    block = model.blocks[0]
    with torch.no_grad():
        for p in block.parameters():
            p.zero_()
    x = torch.randn(2, 5, 32) * 3 + 1
    # With zeroed sublayers a pre-norm residual block is the identity on its input.
    assert_close(block(x, torch.arange(5)), x)


def test_model_applies_a_final_norm():
    model = build_model(tiny_config(n_layers=1, context_length=16))
    with torch.no_grad():
        model.ln_f.weight.fill_(2.0)
        a = model(torch.arange(8)[None])
        model.ln_f.weight.fill_(1.0)
        b = model(torch.arange(8)[None])
    assert not torch.allclose(a, b)


def test_learned_positions_refuse_past_their_table():
    from alilama_core import ConfigError

    model = build_model(tiny_config(positional="learned", context_length=16))
    model(torch.zeros(1, 16, dtype=torch.long))
    with pytest.raises(ConfigError, match="covers 16 positions.*alibi, rope"):
        model(torch.zeros(1, 17, dtype=torch.long))
    cache = KVCache()
    with torch.no_grad():
        model(torch.zeros(1, 10, dtype=torch.long), cache=cache)
        with pytest.raises(ConfigError, match="10 cached"):
            model(torch.zeros(1, 7, dtype=torch.long), cache=cache)


@pytest.mark.parametrize("positional", ["alibi", "rope"])
def test_alibi_and_rope_run_past_the_trained_context(positional):
    model = build_model(tiny_config(positional=positional, attention="sdpa", context_length=16))
    with torch.no_grad():
        assert model(torch.zeros(1, 64, dtype=torch.long)).shape == (1, 64, 97)


def test_flex_refuses_to_train_on_cpu_with_a_clear_message():
    from alilama_core import PluginUnavailableError

    if "flex" not in BACKENDS:
        pytest.skip("flex attention is not available in this torch build")
    model = build_model(tiny_config(attention="flex", context_length=16))
    with pytest.raises(PluginUnavailableError, match="no backward pass on CPU.*sdpa"):
        model(torch.zeros(1, 8, dtype=torch.long)).sum().backward()


@pytest.mark.slow
def test_compiled_flex_matches_eager(monkeypatch):
    """FlexAttention through torch.compile (the fused path) on CPU, inference."""
    if "flex" not in BACKENDS:
        pytest.skip("flex attention is not available in this torch build")
    monkeypatch.setenv("ALILAMA_FLEX_COMPILE", "1")
    ref, model = twin_models("alibi", "flex", context_length=128)
    idx = torch.randint(0, 97, (2, 100), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert_close(model(idx), ref(idx), rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", ["flash", "flex", "sdpa"])
def test_cuda_backends_match_eager(backend):
    from alilama_core.contracts.attention import attention_backend

    reason = attention_backend(get_attention(backend)).available()
    if reason:
        pytest.skip(reason)
    ref, model = twin_models("alibi", backend)
    ref, model = ref.cuda(), model.cuda()
    idx = torch.randint(0, 97, (2, 513), device="cuda")
    with torch.no_grad():
        assert_close(model(idx).float(), ref(idx).float(), rtol=2e-2, atol=2e-2)
