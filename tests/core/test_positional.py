from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from alilama_core import ConfigError, build_model
from alilama_core.registry import get_positional
from alilama_positional.alibi import alibi_slopes
from alilama_testing import tiny_config


def test_alibi_slopes_for_eight_heads_are_halvings():
    assert alibi_slopes(8).tolist() == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]


def test_alibi_slopes_for_twelve_heads_follow_the_papers_rule():
    # 8 slopes of the 8-head geometric sequence, then every other slope of the 16-head one.
    expected = [2.0 ** -k for k in range(1, 9)] + [2.0 ** -x for x in (0.5, 1.5, 2.5, 3.5)]
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
