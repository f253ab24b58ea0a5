"""The plugin's own tests: the pattern every plugin can copy."""

import torch

from alilama_core import ModelConfig, build_model
from alilama_core.engine.registry import get_positional


def test_registered_through_the_entry_point():
    assert get_positional("sinusoidal").kind == "embedding"


def test_model_builds_and_runs_past_the_context():
    config = ModelConfig(
        vocab_size=50,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_mlp=32,
        context_length=8,
        positional="sinusoidal",
        attention="sdpa",
    )
    model = build_model(config)
    assert model(torch.zeros(1, 20, dtype=torch.long)).shape == (1, 20, 50)


def test_conforms_to_the_plugin_contract():
    """The conformance kit every plugin runs: shapes, cache, positions per row, backends against eager,
    a left-padded batch against each prompt alone, save and load, bad input."""
    from alilama_core.kit import check_positional_scheme

    done = check_positional_scheme("sinusoidal")
    assert "cached == uncached" in done and "sdpa == eager" in done
    assert "positions per row" in done and "padded batch == alone (sdpa)" in done
