"""Model weights and run folders on disk.

A run folder (litgpt-like)::

    RUN/config.yaml            the full resolved config
    RUN/run.json               the data it trains on, integrity hashes, its history, and its
                               attention backend when that is not exact (``attention_record``)
    RUN/tokenizer/             the tokenizer (``tokenizer_config.json`` names its plugin)
    RUN/step-00001000/         model.safetensors, trainer state
    RUN/final/                 model.safetensors of the finished run
    RUN/metrics.jsonl          one JSON object per logged step
    RUN/.alilama-output        marks the folder as an Alilama run (see ``alilama_core.runs.outputs``)

Weights are safetensors (never pickle). A head tied to the embedding (``model.tie_embeddings``,
the default) is stored once, as ``tok_emb.weight``, and the tie is restored on load; an untied
head is stored as ``head.weight``.

Integrity: ``run.json`` records the SHA-256 of the run's tokenizer files and of
every checkpoint's ``model.safetensors`` (each checkpoint's ``state.json`` holds
its own too); ``load_run`` verifies them and names the file that differs
(``verify=False``, the CLI's ``--no-verify``, skips the check). A run that
training wrote (it carries the ``.alilama-output`` marker, or a checkpoint's
``state.json``) but whose ``run.json`` is missing is refused. A checkpoint is
chosen by its folder name only (``final``, ``step-00001000``): a path, a link
out of the run, or a folder that ``run.json`` does not list is refused, so
one run's config and tokenizer are never paired with another run's weights.
Folders assembled by hand (config, tokenizer, weights, no ``run.json``) and
runs written before hashes were recorded load unchecked.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alilama_core.contracts.attention import attention_backend
from alilama_core.base.errors import AlilamaError, AlilamaWarning, CheckpointError, ConfigError, IntegrityError
from alilama_core.base.files import atomic_open, atomic_write_text
from alilama_core.base.limits import safetensors_problem
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import get_attention, get_registry
from alilama_core.engine.validate import check_config
from alilama_core.runs.outputs import kind_of
from alilama_core.runs.tokenizers import load_tokenizer, tokenizer_hash

# The run folder's names, here once: the readers below and the writer (``runs.writer``) use them.
WEIGHTS = "model.safetensors"
TIED = ("head.weight",)  # the names a tied model does not store (``tied_names``)
RUN_JSON = "run.json"
CONFIG = "config.yaml"
TOKENIZER = "tokenizer"
METRICS = "metrics.jsonl"
FINAL = "final"
STATE = "state.json"  # a checkpoint's trainer state: STATE_KEYS and its weights' hash
OPTIMIZER = "optimizer.pt"
RNG = "rng.pt"
STATE_KEYS = ("step", "tokens", "best", "sampler")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tied_names(model) -> tuple[str, ...]:
    """The weights of ``model`` that are another weight's copy, hence not stored: the tied head, if tied."""
    return TIED if model.head.weight is model.tok_emb.weight else ()


def save_weights(model, directory: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> Path:
    """Write ``model.safetensors`` into ``directory`` atomically (tied head left out)."""
    from safetensors.torch import save

    tied = tied_names(model)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k not in tied}
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
            "corrupt or was replaced; restore it, pick another checkpoint, or pass --no-verify (generate, eval; an export always checks) to load it anyway"
        )
    problem = safetensors_problem(path)  # the header against the file's size, before any tensor is read
    if problem:
        raise CheckpointError(f"{str(path)!r} is corrupt: {problem}; delete it or pick another checkpoint")
    try:
        state = load_file(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{str(path)!r} is corrupt or truncated ({exc}); delete it or pick another checkpoint"
        ) from exc
    expected = model.state_dict()
    tied = tied_names(model)
    missing = [k for k in expected if k not in state and k not in tied]
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

    record = read_run_json(run) if record is None else record
    want = record.get("tokenizer_sha256")
    folder = Path(run) / TOKENIZER
    if want and folder.is_dir() and tokenizer_hash(folder) != want:
        raise IntegrityError(
            f"the tokenizer in {str(folder)!r} differs from the one the run was trained with (SHA-256 "
            "mismatch); restore the run's own tokenizer, or pass --no-verify (generate, eval; an export always checks) to load it anyway"
        )


def recorded_weights_hash(checkpoint: Path, record: dict[str, Any] | None = None) -> str | None:
    """The SHA-256 recorded for ``checkpoint``'s weights: in ``run.json``, else in its ``state.json``."""
    record = read_run_json(checkpoint.parent) if record is None else record
    want = record.get("checkpoints", {}).get(checkpoint.name)
    if want:
        return want
    try:
        return json.loads((checkpoint / STATE).read_text(encoding="utf-8")).get("weights_sha256")
    except (OSError, ValueError, AttributeError):
        return None


def attention_record(name: str, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """What ``run.json`` keeps (key ``"attention"``) of the backend a run trains with.

    ``None`` for an exact backend (any exact backend computes the same attention),
    else ``{"name", "options", "exact": False}``: the run is then evaluated,
    sampled and exported with that backend only (see ``trained_attention``).
    """

    if attention_backend(get_attention(name)).exact:
        return None
    return {"name": name, "options": dict(options or {}), "exact": False}


def trained_attention(config: Any, record: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The non-exact backend a run was trained with, ``{"name", "options", "exact": False}``; ``None``: exact.

    ``run.json`` says so when the trainer recorded it (``attention_record``);
    otherwise the backend named in the run's ``config.yaml`` is asked, when it is installed.
    """

    kept = (record or {}).get("attention")
    if isinstance(kept, dict) and kept.get("exact") is False and isinstance(kept.get("name"), str):
        return {"name": kept["name"], "options": dict(kept.get("options") or {}), "exact": False}
    try:
        exact = attention_backend(get_attention(config.model.attention)).exact
    except AlilamaError:  # not installed: building the model says so
        return None
    if exact:
        return None
    return {"name": config.model.attention, "options": dict(config.model.attention_options or {}), "exact": False}


def _choose_attention(path: Path, config: Any, record: dict[str, Any], attention: str | None, force: bool) -> None:
    """Set ``config.model``'s backend for ``load_run`` (see its docstring); refuse a silent change of computation."""
    import warnings

    trained = trained_attention(config, record)
    if trained is None:  # exact: any exact backend computes the same attention
        if attention is None or attention == config.model.attention:
            return
        if not attention_backend(get_attention(attention)).exact and not force:
            raise ConfigError(
                f"attention {attention!r} is not exact attention (it declares exact=False), but the run in "
                f"{str(path)!r} was trained with exact attention ({config.model.attention!r}): its results would "
                f"not be the model's. Choose an exact backend, or pass --force-attention (force_attention=True) "
                f"to run it with {attention!r} anyway"
            )
        if not attention_backend(get_attention(attention)).exact:
            warnings.warn(
                f"running the run in {str(path)!r}, trained with exact attention, with non-exact {attention!r}: "
                "results are not the model's own",
                AlilamaWarning,
                stacklevel=3,
            )
        config.model.attention = attention
        config.model.attention_options = {}  # the settings were the trained backend's own
        return
    own = (trained["name"], trained["options"])
    if attention is None or attention == "auto":  # the run's own backend: the one that computes what it learned
        wanted = (config.model.attention, dict(config.model.attention_options or {}))
    elif attention == own[0]:
        wanted = own
    else:
        wanted = (attention, {})
    if wanted != own:
        setting = f"{wanted[0]!r}" + (f" with options {wanted[1]}" if wanted[1] else "")
        if not force:
            raise ConfigError(
                f"the run in {str(path)!r} was trained with attention {own[0]!r} (options {own[1]}), which is not "
                f"exact attention (it declares exact=False); {setting} computes different attention, so its "
                f"results would not be the model's. Drop --attention (or pass attention={own[0]!r}) to use "
                f"{own[0]!r}, or pass --force-attention (force_attention=True) to run it with {setting} anyway"
            )
        warnings.warn(
            f"the run in {str(path)!r} was trained with non-exact attention {own[0]!r}; running it with "
            f"{setting} as forced: results are not the model's own",
            AlilamaWarning,
            stacklevel=3,
        )
        config.model.attention, config.model.attention_options = wanted
        return
    if own[0] not in get_registry().names("attention"):
        raise ConfigError(
            f"the run in {str(path)!r} was trained with attention {own[0]!r}, which is not exact attention and "
            f"is not installed here; install the package that provides {own[0]!r} (no other backend computes "
            "what it computes)"
        )
    config.model.attention, config.model.attention_options = own[0], dict(own[1])


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


def step_name(step: int) -> str:
    """The folder name of the checkpoint at ``step`` (``step-00001000``)."""
    return f"step-{step:08d}"


def written_by_trainer(run: Path) -> bool:
    """Whether training wrote ``run`` (its ``.alilama-output`` marker, or a checkpoint's ``state.json``).

    Such a run has a ``run.json``; a folder assembled by hand (config, tokenizer,
    weights) has none, and loads unchecked.
    """

    return kind_of(run) == "run" or any((c / STATE).is_file() for c in [run / FINAL, *checkpoints(run)])


def checkpoint_folder(run: Path, name: str, record: dict[str, Any] | None = None) -> Path:
    """The checkpoint folder ``name`` of ``run`` (``final``, ``step-00001000``); anything else is refused.

    ``name`` must be a folder directly inside the run holding weights; with
    ``record`` (the run's ``run.json``), one that the record lists too.
    """
    have = [p.name for p in [run / FINAL, *checkpoints(run)] if (p / WEIGHTS).is_file()]
    listing = f"it has: {', '.join(have) or 'none'}"
    if name in ("", ".", "..") or "/" in name or "\\" in name or Path(name).name != name:
        raise CheckpointError(
            f"--checkpoint must name one of the checkpoint folders of the run {str(run)!r}, not a path; got "
            f"{name!r}; {listing}. To load another run's weights, give that run folder instead"
        )
    folder = run / name
    if not (folder / WEIGHTS).is_file():
        raise CheckpointError(f"{str(run)!r} has no checkpoint {name!r} with {WEIGHTS}; {listing}")
    if folder.resolve().parent != run.resolve():
        raise CheckpointError(
            f"{str(folder)!r} is a link to a folder outside the run ({str(folder.resolve())!r}); --checkpoint "
            f"must name one of the run's own checkpoints ({listing}). Give that other run folder instead"
        )
    recorded = (record or {}).get("checkpoints")
    if isinstance(recorded, dict) and recorded and name not in recorded:
        raise CheckpointError(
            f"{name!r} is not one of the checkpoints recorded in {str(run / RUN_JSON)!r} "
            f"({', '.join(sorted(recorded))}): it was not written by this run's training, or was replaced. "
            "Pick one of those, or pass --no-verify (generate, eval) to load it unchecked"
        )
    return folder


def load_run(
    run: str | os.PathLike[str],
    checkpoint: str | None = None,
    map_location: str = "cpu",
    attention: str | None = None,
    verify: bool = True,
    force_attention: bool = False,
) -> Run:
    """Load ``RUN/final`` (or the latest step, or ``checkpoint`` by folder name).

    ``attention`` runs the model with another backend than the one it was trained
    with (``None``: its own). Exact backends are interchangeable, but a run
    trained with a non-exact one (``exact=False``, e.g. a sliding window, which
    ``run.json`` records) computes its own attention: it is loaded with that
    backend for ``None`` and ``"auto"``, and any other backend is refused
    (``ConfigError``), as is a non-exact backend for an exact run, unless
    ``force_attention`` (then an ``AlilamaWarning`` says so).
    ``verify`` checks the tokenizer and the weights against the hashes the run recorded.
    """

    path = Path(run)
    if not (path / "config.yaml").is_file():
        raise CheckpointError(f"{str(path)!r} is not an Alilama run folder (no config.yaml)")
    config = cfgmod.load(path / "config.yaml")
    try:
        record = read_run_json(path)
    except CheckpointError:
        if verify:
            raise
        record = {}  # unchecked: a corrupt run.json does not stop the load
    if verify and not (path / RUN_JSON).is_file() and written_by_trainer(path):
        raise IntegrityError(
            f"{str(path)!r} has no {RUN_JSON}: training wrote one there (the hashes of the run's tokenizer and "
            "checkpoints), so it was deleted or lost and the run's files cannot be checked. Restore it, or pass "
            "--no-verify (generate, eval) to load the run unchecked"
        )
    _choose_attention(path, config, record, attention, force_attention)
    if checkpoint is not None:
        candidates = [checkpoint_folder(path, checkpoint, record if verify else None)]
    else:
        candidates = [path / "final", *reversed(checkpoints(path))]
    candidates = [c for c in candidates if (c / WEIGHTS).is_file()]
    if not candidates:
        raise CheckpointError(f"{str(path)!r} has no checkpoint with {WEIGHTS} yet (train first)")
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
    loaded = Run(path, config, model, tokenizer, candidates[0])
    from alilama_core.runs.compiled import attach

    attach(loaded)  # decode="auto" (the default) finds the step `alilama train` built into RUN/compiled/
    return loaded


def resume_config(run: str | os.PathLike[str], overrides: list[str] | None = None) -> tuple[Any, str | None]:
    """What continuing run folder ``run`` trains with: its saved config with ``overrides`` applied
    (validated), and the prepared data folder it records (``None`` when it records none)."""

    path = Path(run)
    if not (path / "config.yaml").is_file():
        raise CheckpointError(f"cannot resume: {str(path)!r} is not a run folder (no config.yaml)")
    config = check_config(cfgmod.apply_overrides(cfgmod.load(path / "config.yaml"), overrides))
    return config, read_run_json(path).get("data")


def read_metrics(run: str | Path, missing_ok: bool = False) -> list[dict]:
    """The rows of ``RUN/metrics.jsonl`` (a last line torn by a kill is left out).

    ``missing_ok``: a run without the file (assembled by hand) has no rows, instead of an error.
    """
    path = Path(run) / METRICS
    if not path.is_file():
        if missing_ok:
            return []
        raise AlilamaError(f"{str(run)!r} has no metrics.jsonl (is it a run folder that has trained?)")
    rows = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if number == len(lines):  # torn by a kill mid-write; resuming drops it too
                    break
                raise AlilamaError(f"{str(path)!r} line {number} is not valid JSON: {exc}") from None
    return rows
