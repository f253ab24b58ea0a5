"""Run folders of small models "trained for a few steps", one per positional scheme, and their exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402
from alilama_testing import tiny_config  # noqa: E402

STORY = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    'One day, she saw a big red ball in the park. "Can I play with you?" asked the ball. '
    'Lily laughed and said, "Balls can\'t talk!" Her dog, Max, barked: woof, woof! '
    "They played until the stars came out, and then they went home to sleep. Ünïcödé 🙂 ok.\n"
)
# Non-power-of-two heads for ALiBi (the interleaved slopes); context 32 so generation runs past it.
SHAPES = {
    "alibi": dict(d_model=48, n_heads=6, context_length=32),
    "rope": dict(d_model=32, n_heads=4, context_length=32, positional_options={"theta": 500.0}),
    "learned": dict(d_model=32, n_heads=4, context_length=64),
    "nope": dict(d_model=32, n_heads=4, context_length=32),
}
SCHEMES = list(SHAPES)  # the same four as alilama_testing.SCHEMES
# Runs that export as transformers' own architectures (format "auto" picks native for them).
NATIVE_SHAPES = {
    "alibi-nobias": dict(
        positional="alibi", d_model=48, n_heads=6, d_mlp=192, context_length=32, bias=False, norm_bias=False
    ),
    "learned": dict(positional="learned", **SHAPES["learned"]),
    "rope": dict(positional="rope", **SHAPES["rope"]),
}


@pytest.fixture(scope="session")
def tokenizer():
    from alilama_bpe.tokenizer import BPETokenizer

    return BPETokenizer.train([STORY * 3], vocab_size=320, special_tokens=["<|endoftext|>"])


def build_run(root: Path, positional: str, tokenizer, metrics: bool = True, name: str | None = None, **shape) -> Path:
    """A run folder: config.yaml, tokenizer/, final/model.safetensors, metrics.jsonl."""
    from alilama_core import build_model
    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights

    torch.manual_seed(0)
    shape = shape or SHAPES[positional]
    cfg = tiny_config(positional=positional, attention="sdpa", vocab_size=tokenizer.vocab_size, **shape)
    model = build_model(cfg)
    # A few AdamW steps on the story, so biases and norms move away from their initial values.
    ids = torch.tensor(tokenizer.encode(STORY), dtype=torch.long)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    n = cfg.context_length
    for step in range(4):
        x = torch.stack([ids[i : i + n] for i in (0, 7, 13)])
        y = torch.stack([ids[i + 1 : i + n + 1] for i in (0, 7, 13)])
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    run = root / f"run-{name or positional}"
    save_weights(model, run / "final")
    save(Config(model=cfg), run / "config.yaml")
    tokenizer.save(run / "tokenizer")
    if metrics:
        rows = [
            {"step": 2, "tokens": 192, "lr": 0.01, "train_loss": 5.1, "elapsed_s": 0.5},
            {
                "step": 4,
                "tokens": 384,
                "lr": 0.01,
                "train_loss": 4.2,
                "val_loss": 4.4,
                "val_bpb": 2.9,
                "elapsed_s": 1.0,
            },
        ]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return run


@pytest.fixture(scope="session")
def runs(tmp_path_factory, tokenizer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {p: build_run(root, p, tokenizer, metrics=(p != "nope")) for p in SCHEMES}


@pytest.fixture(scope="session")
def exports(tmp_path_factory, runs) -> dict[str, Path]:
    """Remote-code exports of the four built-in schemes."""
    from alilama_exporters.hf_folder import export

    root = tmp_path_factory.mktemp("exports")
    return {
        p: export(run, root / p, repo_id=f"alilama-test/{p}", license="mit", format="remote-code")
        for p, run in runs.items()
    }


@pytest.fixture(scope="session")
def native_runs(tmp_path_factory, tokenizer, runs) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("native-runs")
    shape = {k: v for k, v in NATIVE_SHAPES["alibi-nobias"].items() if k != "positional"}
    out = {"alibi-nobias": build_run(root, "alibi", tokenizer, name="alibi-nobias", **shape)}
    out.update(learned=runs["learned"], rope=runs["rope"])
    return out


@pytest.fixture(scope="session")
def native_exports(tmp_path_factory, native_runs) -> dict[str, Path]:
    """Exports with the default format (auto): all three are transformers architectures."""
    from alilama_exporters.hf_folder import export

    root = tmp_path_factory.mktemp("native-exports")
    return {name: export(run, root / name, repo_id=f"alilama-test/{name}") for name, run in native_runs.items()}


@pytest.fixture(scope="session")
def plugin_run(tmp_path_factory, tokenizer) -> Path:
    """A run with the example plugin's ``sinusoidal`` scheme (skipped where the plugin is not installed)."""
    pytest.importorskip(
        "alilama_sinusoidal", reason="the example plugin docs/plugins/alilama-sinusoidal is not installed"
    )
    root = tmp_path_factory.mktemp("plugin-run")
    shape = dict(d_model=32, n_heads=4, context_length=32)
    return build_run(root, "sinusoidal", tokenizer, metrics=False, **shape)


@pytest.fixture(scope="session")
def plugin_export(tmp_path_factory, plugin_run) -> Path:
    from alilama_exporters.hf_folder import export

    return export(plugin_run, tmp_path_factory.mktemp("plugin-export") / "sinusoidal", repo_id="alilama-test/sin")


@pytest.fixture(scope="session")
def kerple_run(tmp_path_factory, tokenizer) -> Path:
    """A run with the learnable-bias test plugin ``kerple-log`` (tests/plugins/alilama-kerple), r1 != r2."""
    pytest.importorskip("alilama_kerple", reason="the test plugin tests/plugins/alilama-kerple is not installed")
    root = tmp_path_factory.mktemp("kerple-run")
    shape = dict(d_model=32, n_heads=4, context_length=32, positional_options={"r1": 0.7, "r2": 1.6})
    return build_run(root, "kerple-log", tokenizer, metrics=False, **shape)


@pytest.fixture(scope="session")
def kerple_export(tmp_path_factory, kerple_run) -> Path:
    from alilama_exporters.hf_folder import export

    return export(kerple_run, tmp_path_factory.mktemp("kerple-export") / "kerple", repo_id="alilama-test/kerple")


@pytest.fixture(scope="session")
def make_run():
    """``build_run`` for tests that need a run of their own."""
    return build_run
