"""Helpers of the viz tests: tiny models and run folders for every scheme, the example plugin's included."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from alilama_testing import SCHEMES, tiny_config

STORY = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    'One day, she saw a big red ball in the park. "Can I play with you?" asked the ball. '
    'Lily laughed and said, "Balls can\'t talk!" Her dog, Max, barked: woof, woof!\n'
)
PROMPT = 'Lily saw a big red ball. She said, "Can I play?" Max barked: woof!'
PLUGIN_SCHEME = "sinusoidal"
VIZ_SCHEMES = [*SCHEMES, PLUGIN_SCHEME]


def need_scheme(name: str) -> None:
    """Skip with the install command when the example plugin is missing."""
    if name == PLUGIN_SCHEME and importlib.util.find_spec("alilama_sinusoidal") is None:
        pytest.skip("example plugin not installed: pip install -e docs/plugins/alilama-sinusoidal")


def scheme_model(positional: str, attention: str = "eager", **overrides):
    """A tiny model of ``positional`` in eval mode, seeded."""
    from alilama_core import build_model

    need_scheme(positional)
    torch.manual_seed(0)
    base = {"d_model": 32, "n_heads": 4, "context_length": 64}
    base.update(overrides)
    return build_model(tiny_config(positional=positional, attention=attention, **base)).eval()


def build_run(root: Path, positional: str, tokenizer, attention: str = "sdpa") -> Path:
    """A run folder (config.yaml, tokenizer/, final/model.safetensors) of an untrained tiny model."""
    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights

    model = scheme_model(positional, attention, vocab_size=tokenizer.vocab_size)
    run = root / f"run-{positional}"
    save_weights(model, run / "final")
    save(Config(model=model.config), run / "config.yaml")
    tokenizer.save(run / "tokenizer")
    return run
