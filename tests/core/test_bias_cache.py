"""A bias kept between forward passes follows the values of its scheme's parameters and buffers.

A model keeps its masks in its own ``BiasCache``, valid for one state of the
scheme (each tensor's identity, storage and version counter): loading new
weights into a frozen model, or an optimizer step, never leaves a stale bias,
and a scheme whose values did not change (ALiBi) keeps its cache hit.
"""

from __future__ import annotations

import copy

import pytest
import torch
from alilama_testing import tiny_config
from torch import nn

from alilama_core import build_model
from alilama_core.contracts.attention import AttentionBias, BiasCache
from alilama_core.contracts.hookspecs import hookimpl
from alilama_core.contracts.positional import PositionalScheme
from alilama_core.engine.registry import register_plugin, unregister_plugin

TOKENS = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(0))


def kerple(attention: str, seed: int, r1: float = 1.0, r2: float = 1.0):
    """The docs' KERPLE-log example (a learnable bias), as the plugin in tests/plugins/alilama-kerple."""
    pytest.importorskip("alilama_kerple", reason="the KERPLE example plugin is not installed (make install)")
    torch.manual_seed(seed)
    return build_model(
        tiny_config(positional="kerple-log", attention=attention, positional_options={"r1": r1, "r2": r2})
    )


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(TOKENS)


def _load_state_dict(model, other):
    model.load_state_dict(other.state_dict())


def _copy_into_parameters(model, other):
    with torch.no_grad():
        for p, q in zip(model.parameters(), other.parameters(), strict=True):
            p.copy_(q)


def _assign_new_parameters(model, other):
    model.load_state_dict(other.state_dict(), assign=True)


def _replace_data(model, other):
    for p, q in zip(model.parameters(), other.parameters(), strict=True):
        p.data = q.detach().clone()


WRITES = [_load_state_dict, _copy_into_parameters, _assign_new_parameters, _replace_data]


@pytest.mark.parametrize("write", WRITES, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_new_weights_in_a_frozen_learnable_bias_model_give_the_new_models_logits(attention, write):
    model = kerple(attention, seed=0)
    logits(model)  # a pass while the scheme trains
    model.requires_grad_(False)
    before = logits(model)  # frozen: this pass may keep its bias
    assert torch.equal(logits(model), before)
    other = kerple(attention, seed=1, r1=0.5, r2=3.0)  # other weights, other r1 and r2
    write(model, other)
    fresh = kerple(attention, seed=2)
    fresh.load_state_dict(other.state_dict())
    got, want = logits(model), logits(fresh)
    assert not torch.allclose(want, before)  # the new weights do change the logits
    assert torch.equal(got, want)


def test_new_weights_in_the_scheme_alone_are_seen():
    model = kerple("sdpa", seed=0).requires_grad_(False)
    before = logits(model)
    with torch.no_grad():
        model.positional.raw_r2.add_(1.0)  # only the bias changes
    want = kerple("sdpa", seed=0)
    want.load_state_dict(model.state_dict())
    after = logits(model)
    assert not torch.allclose(after, before)
    assert torch.equal(after, logits(want))


def test_after_an_in_place_write_into_data_clearing_the_cache_gives_the_new_values():
    model = kerple("sdpa", seed=0).requires_grad_(False)
    before = logits(model)
    model.positional.raw_r2.data.add_(1.0)  # through .data: no version counter sees it
    model.bias_cache.clear()  # the documented remedy
    want = kerple("sdpa", seed=0)
    want.load_state_dict(model.state_dict())
    after = logits(model)
    assert not torch.allclose(after, before)
    assert torch.equal(after, logits(want))


@pytest.mark.parametrize("fused", [False, True])
def test_an_optimizer_step_between_eval_passes_gives_fresh_logits(fused):
    model = kerple("sdpa", seed=0)
    before = logits(model)  # an eval pass, under no_grad, before training
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused)  # fused steps bump no version counter
    model.train()
    model(TOKENS).square().mean().backward()
    opt.step()
    want = kerple("sdpa", seed=3)
    want.load_state_dict(model.state_dict())
    after = logits(model)
    assert not torch.allclose(after, before)
    assert torch.equal(after, logits(want))


def test_a_static_valued_scheme_keeps_its_masks_between_passes_in_the_model():
    torch.manual_seed(0)
    model = build_model(tiny_config(positional="alibi", attention="sdpa")).requires_grad_(False)
    first = logits(model)
    kept = dict(model.bias_cache.masks)
    assert kept  # the full-sequence mask was kept
    assert "_alilama_masks" not in vars(model.positional)  # by the model, not on the scheme
    assert torch.equal(logits(model), first)
    assert model.bias_cache.masks.keys() == kept.keys()
    assert all(model.bias_cache.masks[key] is mask for key, mask in kept.items())  # reused, not rebuilt
    model.reset_parameters()
    assert not model.bias_cache.masks


def test_copies_of_a_model_start_with_an_empty_cache():
    torch.manual_seed(0)
    model = build_model(tiny_config(positional="alibi", attention="sdpa"))
    first = logits(model)
    assert model.bias_cache.masks
    twin = copy.deepcopy(model)
    assert isinstance(twin.bias_cache, BiasCache) and not twin.bias_cache.masks
    assert torch.equal(logits(twin), first)


class Counted(PositionalScheme):
    """``-scale * (q - k)``; ``scale`` is a parameter; counts its ``bias()`` calls."""

    kind = "bias"
    calls = 0

    def __init__(self, config) -> None:
        super().__init__(config)
        self.scale = nn.Parameter(torch.tensor(0.25))

    def bias(self, q_pos, k_pos):
        type(self).calls += 1
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
        return (-self.scale * distance).expand(self.n_heads, -1, -1)  # (H, T, S)


class Constant(Counted):
    """Declared static: its bias depends on no parameter value (``scale`` is not used)."""

    bias_is_static = True
    calls = 0

    def bias(self, q_pos, k_pos):
        type(self).calls += 1
        distance = (q_pos[:, None] - k_pos[None, :]).float()
        return (-0.25 * distance).expand(self.n_heads, -1, -1)


class Never(Counted):
    bias_is_static = False
    calls = 0


class Sloped(PositionalScheme):
    """ALiBi-shaped with trainable slopes: kernels that take slopes (``tiled``) see it."""

    kind = "bias"
    has_slopes = True

    def __init__(self, config) -> None:
        super().__init__(config)
        self.m = nn.Parameter(torch.linspace(0.1, 0.8, self.n_heads))

    def slopes(self):
        return self.m.float()

    def bias(self, q_pos, k_pos):
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
        return -self.m[:, None, None] * distance  # (H, T, S)


class _Schemes:
    @hookimpl
    def register_positional_schemes(self, register):
        register("sloped-test", Sloped)
        register("counted-test", Counted)
        register("constant-test", Constant)
        register("never-test", Never)


@pytest.fixture(scope="module")
def schemes():
    register_plugin(_Schemes(), name="bias-cache-test-schemes")
    yield
    unregister_plugin("bias-cache-test-schemes")


def _passes(name: str, change) -> list[int]:
    """``bias()`` calls in each of three eval passes of a frozen model, ``change`` applied after the first."""
    model = build_model(tiny_config(positional=name, attention="sdpa", n_layers=3)).requires_grad_(False)
    scheme = type(model.positional)
    counts = []
    for i in range(3):
        scheme.calls = 0
        logits(model)
        counts.append(scheme.calls)
        if i == 0:
            change(model.positional)
    return counts


def _bump(positional):
    with torch.no_grad():
        positional.scale.add_(0.5)


def test_declarations_keep_their_meaning(schemes):
    assert _passes("counted-test", lambda p: None) == [1, 0, 0]  # frozen, unchanged: cached
    assert _passes("counted-test", _bump) == [1, 1, 0]  # a new value: built once, then cached again
    assert _passes("constant-test", _bump) == [1, 0, 0]  # True: cached by shape only
    assert _passes("never-test", lambda p: None) == [1, 1, 1]  # False: never cached


def test_a_trainable_scheme_is_never_kept_between_passes(schemes):
    model = build_model(tiny_config(positional="counted-test", attention="sdpa"))
    counts = []
    for _ in range(2):
        Counted.calls = 0
        logits(model)  # eval under no_grad: an optimizer could still change it unseen
        counts.append(Counted.calls)
    assert counts == [1, 1]
    assert not model.bias_cache.masks


def test_direct_calls_keep_their_masks_until_cleared():
    from alilama_core.engine.registry import get_positional

    alibi = get_positional("alibi")(tiny_config())
    a = AttentionBias(alibi, 16, 16, "cpu").mask(torch.float32)
    assert AttentionBias(alibi, 16, 16, "cpu").mask(torch.float32) is a
    AttentionBias.clear(alibi)
    b = AttentionBias(alibi, 16, 16, "cpu").mask(torch.float32)
    assert b is not a and torch.equal(a, b)
    with torch.no_grad():
        alibi._slopes.mul_(2.0)  # a buffer written in place is a new state
    c = AttentionBias(alibi, 16, 16, "cpu").mask(torch.float32)
    assert torch.equal(c[:, :, 1, 0], 2 * b[:, :, 1, 0])


@pytest.mark.parametrize("attention", ["tiled", "sdpa", "eager"])
def test_new_slopes_in_a_frozen_model_are_seen_by_every_backend(schemes, attention):
    torch.manual_seed(0)
    model = build_model(tiny_config(positional="sloped-test", attention=attention)).requires_grad_(False)
    before = logits(model)
    assert torch.equal(logits(model), before)
    with torch.no_grad():
        model.positional.m.mul_(3.0)
    want = build_model(tiny_config(positional="sloped-test", attention="eager"))
    want.load_state_dict(model.state_dict())
    after = logits(model)
    assert not torch.allclose(after, before)
    torch.testing.assert_close(after, logits(want), rtol=1e-5, atol=1e-5)
