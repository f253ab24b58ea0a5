"""Model weights and run folders on disk.

A run folder (litgpt-like)::

    RUN/config.yaml            the full resolved config
    RUN/run.json               the data it trains on, integrity hashes, and its history
    RUN/tokenizer/             the tokenizer (``tokenizer_config.json`` names its plugin)
    RUN/step-00001000/         model.safetensors, trainer state
    RUN/final/                 model.safetensors of the finished run
    RUN/metrics.jsonl          one JSON object per logged step
    RUN/.alilama-output        marks the folder as an Alilama run (see ``alilama_core.outputs``)

Weights are safetensors (never pickle). The head is tied to the embedding, so
only ``tok_emb.weight`` is stored and the tie is restored on load.

Integrity: ``run.json`` records the SHA-256 of the run's tokenizer files and of
every checkpoint's ``model.safetensors`` (each checkpoint's ``state.json`` holds
its own too); ``load_run`` verifies them and names the file that differs
(``verify=False``, the CLI's ``--no-verify``, skips the check). Runs written
before hashes were recorded load unchecked.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alilama_core.errors import CheckpointError
from alilama_core.files import atomic_open, atomic_write_text

WEIGHTS = "model.safetensors"
TIED = ("head.weight",)
RUN_JSON = "run.json"


class IntegrityError(CheckpointError):
    """A file of a run differs from the hash recorded when it was written."""


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_weights(model, directory: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> Path:
    """Write ``model.safetensors`` into ``directory`` atomically (tied head left out)."""
    from safetensors.torch import save

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k not in TIED}
    path = Path(directory) / WEIGHTS
    with atomic_open(path, "wb") as f:
        f.write(save(state, metadata={"format": "pt", **(metadata or {})}))
    return path


def load_weights(model, directory: str | os.PathLike[str], sha256: str | None = None) -> None:
    """Load ``model.safetensors`` from ``directory`` into ``model``; clear errors for bad files.

    ``sha256``: the hash recorded when the file was written; a different file is refused.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(directory) / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"no {WEIGHTS} in {str(directory)!r}: the checkpoint is missing or incomplete")
    if sha256 is not None and file_sha256(path) != sha256:
        raise IntegrityError(
            f"{str(path)!r} differs from the weights written there (SHA-256 mismatch): the file is "
            "corrupt or was replaced; restore it, pick another checkpoint, or pass --no-verify to load it anyway"
        )
    try:
        state = load_file(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{str(path)!r} is corrupt or truncated ({exc}); delete it or pick another checkpoint"
        ) from exc
    expected = model.state_dict()
    missing = [k for k in expected if k not in state and k not in TIED]
    unexpected = [k for k in state if k not in expected]
    wrong = [
        (k, tuple(state[k].shape), tuple(expected[k].shape))
        for k in state
        if k in expected and state[k].shape != expected[k].shape
    ]
    if missing or unexpected or wrong:
        detail = "; ".join(f"{k} is {got} in the file but {want} in the config" for k, got, want in wrong[:3])
        names = ", ".join([*missing[:3], *unexpected[:3]])
        raise CheckpointError(
            f"{str(path)!r} holds a different architecture than the run's config.yaml describes"
            + (f": {detail}" if detail else "")
            + (f"{'; ' if detail else ': '}parameters missing or unexpected: {names}" if names else "")
            + ". Load it with the config it was trained with"
        )
    model.load_state_dict(state, strict=False)


def load_tokenizer(directory: str | os.PathLike[str]):
    """Load a saved tokenizer folder with the plugin of the kind it records (see ``tokenizer_kind``)."""
    from alilama_core.registry import get_tokenizer
    from alilama_core.tokenizer import tokenizer_kind

    return get_tokenizer(tokenizer_kind(directory)).load(directory)


# -- run.json ------------------------------------------------------------------------


def read_run_json(run: str | os.PathLike[str]) -> dict[str, Any]:
    """``RUN/run.json`` as a dict (empty when the run has none); a corrupt file is a clear error."""
    path = Path(run) / RUN_JSON
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"{str(path)!r} is corrupt ({exc}); restore it, or delete it and pass --data DIR on resume"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{str(path)!r} is corrupt (not a JSON object); restore it or delete it")
    return data


def write_run_json(run: str | os.PathLike[str], data: dict[str, Any]) -> None:
    atomic_write_text(Path(run) / RUN_JSON, json.dumps(data, indent=2) + "\n")


def verify_tokenizer(run: str | os.PathLike[str], record: dict[str, Any] | None = None) -> None:
    """Raise ``IntegrityError`` if ``RUN/tokenizer`` differs from the hash in ``run.json``."""
    from alilama_core.data import tokenizer_hash

    record = read_run_json(run) if record is None else record
    want = record.get("tokenizer_sha256")
    folder = Path(run) / "tokenizer"
    if want and folder.is_dir() and tokenizer_hash(folder) != want:
        raise IntegrityError(
            f"the tokenizer in {str(folder)!r} differs from the one the run was trained with (SHA-256 "
            "mismatch); restore the run's own tokenizer, or pass --no-verify to load it anyway"
        )


def recorded_weights_hash(checkpoint: Path, record: dict[str, Any] | None = None) -> str | None:
    """The SHA-256 recorded for ``checkpoint``'s weights: in ``run.json``, else in its ``state.json``."""
    record = read_run_json(checkpoint.parent) if record is None else record
    want = record.get("checkpoints", {}).get(checkpoint.name)
    if want:
        return want
    try:
        return json.loads((checkpoint / "state.json").read_text(encoding="utf-8")).get("weights_sha256")
    except (OSError, ValueError, AttributeError):
        return None


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
    verify: bool = True,
) -> Run:
    """Load ``RUN/final`` (or the latest step, or ``checkpoint`` by folder name).

    ``attention`` runs the model with another backend than the one it was trained with.
    ``verify`` checks the tokenizer and the weights against the hashes the run recorded.
    """
    from alilama_core import config as cfgmod
    from alilama_core.model import build_model

    path = Path(run)
    if not (path / "config.yaml").is_file():
        raise CheckpointError(f"{str(path)!r} is not an Alilama run folder (no config.yaml)")
    config = cfgmod.load(path / "config.yaml")
    if attention is not None and attention != config.model.attention:
        config.model.attention = attention
        config.model.attention_options = {}  # the settings were the trained backend's own
    if checkpoint is not None:
        if not (path / checkpoint / WEIGHTS).is_file():
            have = ", ".join(p.name for p in [path / "final", *checkpoints(path)] if (p / WEIGHTS).is_file())
            raise CheckpointError(
                f"{str(path)!r} has no checkpoint {checkpoint!r} with {WEIGHTS}; it has: {have or 'none'}"
            )
        candidates = [path / checkpoint]
    else:
        candidates = [path / "final", *reversed(checkpoints(path))]
    candidates = [c for c in candidates if (c / WEIGHTS).is_file()]
    if not candidates:
        raise CheckpointError(f"{str(path)!r} has no checkpoint with {WEIGHTS} yet (train first)")
    record = read_run_json(path) if verify else {}
    if verify:
        verify_tokenizer(path, record)
    tokenizer = load_tokenizer(path / "tokenizer")
    if tokenizer.vocab_size > config.model.vocab_size:
        raise CheckpointError(
            f"the tokenizer in {str(path / 'tokenizer')!r} has {tokenizer.vocab_size} ids but the model has "
            f"model.vocab_size={config.model.vocab_size}: it is not the run's tokenizer; restore the run's own"
        )
    model = build_model(config.model)
    load_weights(model, candidates[0], recorded_weights_hash(candidates[0], record) if verify else None)
    model.to(map_location).eval()
    return Run(path, config, model, tokenizer, candidates[0])


def resume_config(run: str | os.PathLike[str], overrides: list[str] | None = None) -> tuple[Any, str | None]:
    """What continuing run folder ``run`` trains with: its saved config with ``overrides`` applied
    (validated), and the prepared data folder it records (``None`` when it records none)."""
    from alilama_core import config as cfgmod

    path = Path(run)
    if not (path / "config.yaml").is_file():
        raise CheckpointError(f"cannot resume: {str(path)!r} is not a run folder (no config.yaml)")
    config = cfgmod.apply_overrides(cfgmod.load(path / "config.yaml"), overrides).validate()
    return config, read_run_json(path).get("data")
