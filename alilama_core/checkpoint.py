"""Model weights and run folders on disk.

A run folder (litgpt-like)::

    RUN/config.yaml            the full resolved config
    RUN/tokenizer/             the tokenizer (``tokenizer_config.json`` names its plugin)
    RUN/step-00001000/         model.safetensors, trainer state
    RUN/final/                 model.safetensors of the finished run
    RUN/metrics.jsonl          one JSON object per logged step

Weights are safetensors (never pickle). The head is tied to the embedding, so
only ``tok_emb.weight`` is stored and the tie is restored on load.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alilama_core.errors import CheckpointError, TokenizerError
from alilama_core.files import atomic_open

WEIGHTS = "model.safetensors"
TIED = ("head.weight",)


def save_weights(model, directory: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> Path:
    """Write ``model.safetensors`` into ``directory`` atomically (tied head left out)."""
    from safetensors.torch import save

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k not in TIED}
    path = Path(directory) / WEIGHTS
    with atomic_open(path, "wb") as f:
        f.write(save(state, metadata={"format": "pt", **(metadata or {})}))
    return path


def load_weights(model, directory: str | os.PathLike[str]) -> None:
    """Load ``model.safetensors`` from ``directory`` into ``model``; clear errors for bad files."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(directory) / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"no {WEIGHTS} in {str(directory)!r}: the checkpoint is missing or incomplete")
    try:
        state = load_file(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{str(path)!r} is corrupt or truncated ({exc}); delete it or pick another checkpoint") from exc
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k not in TIED]
    if missing or unexpected:
        raise CheckpointError(
            f"{str(path)!r} does not match the model config: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )


def load_tokenizer(directory: str | os.PathLike[str]):
    """Load a saved tokenizer folder with the plugin named in its ``tokenizer_config.json``."""
    from alilama_core.registry import get_tokenizer

    directory = Path(directory)
    config = directory / "tokenizer_config.json"
    if not config.is_file():
        raise TokenizerError(f"{str(directory)!r} holds no tokenizer (tokenizer_config.json is missing)")
    try:
        name = json.loads(config.read_text(encoding="utf-8")).get("name", "bpe")
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{str(config)!r} is not valid JSON: {exc}") from exc
    return get_tokenizer(name).load(directory)


@dataclass
class Run:
    """A loaded run: its config, model (eval mode), tokenizer and the checkpoint used."""

    path: Path
    config: Any
    model: Any
    tokenizer: Any
    checkpoint: Path


def checkpoints(run: Path) -> list[Path]:
    """Step checkpoints of ``run``, oldest first."""
    return sorted(p for p in run.glob("step-*") if p.is_dir() and p.name[5:].isdigit())


def load_run(
    run: str | os.PathLike[str],
    checkpoint: str | None = None,
    map_location: str = "cpu",
    attention: str | None = None,
) -> Run:
    """Load ``RUN/final`` (or the latest step, or ``checkpoint`` by folder name).

    ``attention`` runs the model with another backend than the one it was trained with.
    """
    from alilama_core import config as cfgmod
    from alilama_core.model import build_model

    path = Path(run)
    if not (path / "config.yaml").is_file():
        raise CheckpointError(f"{str(path)!r} is not an Alilama run folder (no config.yaml)")
    config = cfgmod.load(path / "config.yaml")
    if attention is not None:
        config.model.attention = attention
    if checkpoint is not None:
        candidates = [path / checkpoint]
    else:
        candidates = [path / "final", *reversed(checkpoints(path))]
    candidates = [c for c in candidates if (c / WEIGHTS).is_file()]
    if not candidates:
        raise CheckpointError(f"{str(path)!r} has no checkpoint with {WEIGHTS} yet (train first)")
    model = build_model(config.model)
    load_weights(model, candidates[0])
    model.to(map_location).eval()
    tokenizer = load_tokenizer(path / "tokenizer")
    return Run(path, config, model, tokenizer, candidates[0])
