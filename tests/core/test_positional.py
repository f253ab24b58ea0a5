from __future__ import annotations

import math

import pytest
import torch
from alilama_positional.alibi import alibi_slopes
from alilama_testing import tiny_config
from torch import nn
from torch.testing import assert_close

from alilama_core import ConfigError, build_model
from alilama_core.contracts.hookspecs import hookimpl
from alilama_core.contracts.positional import PositionalScheme
from alilama_core.engine.registry import get_positional, register_plugin, unregister_plugin


def test_alibi_slopes_for_eight_heads_are_halvings():
    assert alibi_slopes(8).tolist() == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]


def test_alibi_slopes_for_twelve_heads_follow_the_papers_rule():
    # 8 slopes of the 8-head geometric sequence, then every other slope of the 16-head one.
    expected = [2.0**-k for k in range(1, 9)] + [2.0**-x for x in (0.5, 1.5, 2.5, 3.5)]
    assert_close(alibi_slopes(12), torch.tensor(expected))


@pytest.mark.parametrize("n", [1, 2, 4, 16, 32])
def test_alibi_slopes_for_powers_of_two(n):
    assert_close(alibi_slopes(n), torch.tensor([2.0 ** (-8 * h / n) for h in range(1, n + 1)]))


def test_alibi_bias_is_minus_slope_times_distance_for_offset_queries():
    alibi = get_positional("alibi")(tiny_config(n_heads=4))
    bias = alibi.bias(torch.arange(5, 8), torch.arange(8))  # three queries after a cache of five
    assert bias.shape == (4, 3, 8)
    slopes = alibi.slopes()
    for h in range(4):
        for i, qpos in enumerate(range(5, 8)):
            for j in range(qpos + 1):
                assert math.isclose(bias[h, i, j].item(), -slopes[h].item() * (qpos - j), rel_tol=1e-6)


def test_alibi_slopes_survive_dtype_changes_and_reset():
    model = build_model(tiny_config()).to(torch.bfloat16)
    assert model.positional.slopes().dtype == torch.float32
    model.positional._slopes.zero_()
    model.reset_parameters()
    assert_close(model.positional.slopes(), alibi_slopes(4))


def test_rope_preserves_norm_and_depends_only_on_distance():
    rope = get_positional("rope")(tiny_config(n_heads=4, d_model=32))
    q = torch.randn(1, 4, 1, 8)
    k = torch.randn(1, 4, 1, 8)

    def score(i, j):
        return (rope.rotate(q, torch.tensor([i])) * rope.rotate(k, torch.tensor([j]))).sum()

    assert_close(rope.rotate(q, torch.tensor([9])).norm(), q.norm())
    assert_close(score(3, 1), score(103, 101), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(score(3, 1), score(3, 2))


def test_rope_rejects_odd_head_dimension():
    with pytest.raises(ConfigError, match="even head dimension"):
        build_model(tiny_config(positional="rope", n_heads=4, d_model=36))  # head dim 9


def test_nope_and_learned_kinds():
    assert get_positional("nope").kind == "none"
    assert get_positional("learned").kind == "embedding"
    assert get_positional("rope").kind == "rotary"
    assert get_positional("alibi").kind == "bias" and get_positional("alibi").has_slopes


class Kerple(PositionalScheme):
    """KERPLE-log: ``-r1[h] * log(1 + r2[h] * (i - j))``, both per-head and trainable."""

    kind = "bias"
    calls = 0

    def __init__(self, config) -> None:
        super().__init__(config)
        self.r1 = nn.Parameter(torch.ones(self.n_heads))
        self.r2 = nn.Parameter(torch.ones(self.n_heads))

    def bias(self, q_pos, k_pos):
        Kerple.calls += 1
        distance = (q_pos[:, None] - k_pos[None, :]).clamp(min=0).float()  # (T, S)
        return -self.r1[:, None, None] * torch.log1p(self.r2[:, None, None] * distance)  # (H, T, S)


class WrongSlopes(PositionalScheme):
    kind = "bias"
    has_slopes = True

    def slopes(self):
        return torch.full((self.n_heads,), 0.5)

    def bias(self, q_pos, k_pos):
        return -0.25 * (q_pos[:, None] - k_pos[None, :]).float().expand(self.n_heads, -1, -1)


class _Schemes:
    @hookimpl
    def register_positional_schemes(self, register):
        register("kerple-test", Kerple)
        register("wrong-slopes-test", WrongSlopes)


@pytest.fixture(scope="module")
def test_schemes():
    register_plugin(_Schemes(), name="test-schemes")
    yield
    unregister_plugin("test-schemes")


@pytest.mark.parametrize("attention", ["eager", "sdpa", "tiled", "auto"])
def test_a_learnable_bias_follows_its_parameters_and_is_computed_once_per_pass(test_schemes, attention):
    torch.manual_seed(0)
    model = build_model(tiny_config(positional="kerple-test", attention=attention, n_layers=3))
    assert not model.positional.bias_cacheable()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(0))
    before = None
    for _ in range(2):  # a second step would fail on a bias cached with its graph
        Kerple.calls = 0
        logits = model(x)
        assert Kerple.calls == 1  # once per forward pass, shared by the three layers
        if before is not None:
            assert not torch.allclose(logits, before)  # the bias moved with r1, r2
        before = logits.detach()
        opt.zero_grad()
        logits.square().mean().backward()
        assert model.positional.r1.grad is not None and model.positional.r1.grad.abs().sum() > 0
        opt.step()


def test_a_static_bias_is_reused_between_passes_and_the_opt_in_is_honoured(test_schemes):
    model = build_model(tiny_config(positional="kerple-test"))
    model.positional.requires_grad_(False)  # frozen: nothing can change it, so it is cached
    assert model.positional.bias_cacheable()
    x = torch.randint(0, 97, (1, 10))
    with torch.no_grad():
        model(x)
        Kerple.calls = 0
        model(x)
    assert Kerple.calls == 0
    model.positional.requires_grad_(True)
    model.positional.bias_is_static = False  # the instance-level opt-out wins
    assert not model.positional.bias_cacheable()
    model.positional.bias_is_static = True  # and the documented opt-in
    assert model.positional.bias_cacheable()


def test_slopes_are_checked_against_the_bias(test_schemes):
    assert get_positional("alibi")(tiny_config()).check_slopes() is None
    with pytest.raises(ConfigError, match="has_slopes.*differs"):
        build_model(tiny_config(positional="wrong-slopes-test"))
