"""A third-party backend that is not exact attention (tests/plugins/alilama-window), driven through the CLI.

``window`` (sliding-window attention) declares ``exact=False``. A run trained
with it records it in ``run.json``; ``eval`` and ``generate`` then run the
window (never full attention in its place), another backend is refused unless
forced, and ``viz attention`` and ``export hf`` refuse the run by name, writing
nothing. A run whose latest training is exact is unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from alilama_testing import needs_test_plugins, ok
from alilama_testing import run_cli as cli

from alilama_core.base.errors import AlilamaWarning, ConfigError, UnsupportedError
from alilama_core.engine.validate import check_model

pytestmark = needs_test_plugins("alilama-window")

WINDOW = 4  # positions a query sees; far below the trained context, so the window matters
CONTEXT = 32


def scored(run: Path, val: Path, *extra: str) -> subprocess.CompletedProcess:
    """``alilama eval RUN`` on ``val`` at the trained context, as JSON."""
    args = ["--context-lengths", str(CONTEXT), "--max-tokens", "4096", "--json"]
    return cli("eval", str(run), "--data", str(val), *args, *extra)


def refused(result: subprocess.CompletedProcess, *phrases: str) -> str:
    """A clear refusal: exit status 1, one error line naming what was wrong, no traceback."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "error:" in result.stderr
    text = " ".join(result.stderr.split())  # the console wraps long lines
    for phrase in phrases:
        assert phrase in text, text
    return text


@pytest.fixture(scope="module")
def window_run(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny run trained with ``window`` through the CLI, and a held-out text file."""
    from alilama_core.runs.stories import write_corpus

    root = tmp_path_factory.mktemp("window")
    train, val = root / "train.txt", root / "val.txt"
    write_corpus(train, 200, seed=1)
    write_corpus(val, 20, seed=2)
    ok(cli("tokenizer", "train", "-i", str(train), "-v", "320", "-o", str(root / "tok")))
    ok(cli("data", "prepare", "-i", str(train), "--tokenizer", str(root / "tok"), "-o", str(root / "data")))
    run = root / "run"
    ok(
        cli(
            "train",
            "--preset",
            "tiny",
            "--data",
            str(root / "data"),
            "--out",
            str(run),
            "--no-progress",
            "model.attention=window",
            f"model.attention_options.window={WINDOW}",
            f"model.context_length={CONTEXT}",
            "train.max_steps=30",
            "train.eval_every=1000",
            "train.checkpoint_every=1000",
            "train.device=cpu",
        )
    )
    return run, val


def _loss(model, tokenizer, val: Path, context: int) -> float:
    from alilama_core.runs.evaluate import encode_file, evaluate_tokens, token_byte_lengths

    tokens = encode_file(tokenizer, val)[: 4096 + 1]
    return evaluate_tokens(model, tokens, token_byte_lengths(tokenizer), context)[0]


# -- the declaration and the conformance kit ----------------------------------------------


def test_window_conforms_without_an_eager_comparison():
    from alilama_core.kit.attention import check_attention_backend

    done = check_attention_backend("window", options={"window": WINDOW})
    assert len(done) == 5 and all("not compared with eager: exact=False" in line for line in done)
    assert done[0].startswith("alibi: causal, cached == uncached, padding hidden")
    assert done[4].startswith("alibi with qk_norm, relu2, untied head: causal")  # the model's settings too


def test_the_kit_fails_a_window_that_claims_to_be_exact():
    from alilama_core.engine.registry import get_attention
    from alilama_core.kit.attention import check_attention_backend
    from alilama_core.kit.common import registered

    liar = dataclasses.replace(get_attention("window"), name="window-exact", exact=True)
    with registered("attention", "window-exact", liar):
        with pytest.raises(AssertionError, match="differ from eager"):
            check_attention_backend("window-exact", schemes=("alibi",), options={"window": WINDOW})


def test_the_kit_fails_a_non_exact_backend_that_is_not_causal():
    from alilama_window.backend import window_attention

    from alilama_core.contracts.attention import AttentionBackend
    from alilama_core.kit.attention import check_attention_backend
    from alilama_core.kit.common import registered

    def peeking(q, k, v, *, positional=None, causal=True, key_padding_mask=None):
        return window_attention(q, k, v, positional=positional, causal=False, key_padding_mask=key_padding_mask)

    with registered("attention", "peeking", AttentionBackend("peeking", peeking, exact=False)):
        with pytest.raises(AssertionError, match="not causal"):
            check_attention_backend("peeking", schemes=("alibi",))


def test_auto_never_routes_to_a_non_exact_backend():
    from alilama_attention.auto import candidates, choose

    from alilama_core.contracts.attention import AttentionCase
    from alilama_core.engine.registry import get_attention

    assert get_attention("window").exact is False and get_attention("eager").exact is True
    case = AttentionCase("cpu", torch.float32, 8, "short", "bias", True)
    assert get_attention("window").rank(case) > get_attention("sdpa").rank(case)  # it would win on priority
    assert choose(case).name != "window" and choose(case).exact
    reasons = {name: reason for name, _, reason in candidates(case)}
    assert "not exact attention" in reasons["window"]


def test_a_bad_window_is_refused_when_the_config_is_checked():
    from alilama_core.kit.common import tiny_model_config

    with pytest.raises(ConfigError, match="window must be a positive integer"):
        check_model(tiny_model_config(attention="window", attention_options={"window": 0}))


def test_the_window_changes_the_attention():
    """What the declaration says: shorter than the input, the window differs from eager; covering it, it agrees."""
    from alilama_core.engine.model import build_model
    from alilama_core.kit.common import tiny_model_config

    torch.manual_seed(0)
    full = build_model(tiny_model_config()).eval()
    x = torch.randint(0, 61, (2, 12))
    for window, same in ((WINDOW, False), (12, True)):
        other = build_model(tiny_model_config(attention="window", attention_options={"window": window})).eval()
        other.load_state_dict(full.state_dict())
        with torch.no_grad():
            assert torch.allclose(other(x), full(x), atol=1e-5) is same
            # The first positions see no further back than the window, so there they agree.
            assert torch.allclose(other(x)[:, :WINDOW], full(x)[:, :WINDOW], atol=1e-5)


def test_capture_draws_a_window_that_declares_its_probabilities():
    """Without ``probabilities`` a non-exact backend cannot be captured; with them, capture shows the window."""
    from alilama_window.backend import window_probabilities

    from alilama_core.engine.capture import attention_probabilities, capture
    from alilama_core.engine.model import build_model
    from alilama_core.engine.registry import get_attention
    from alilama_core.kit.common import registered, tiny_model_config

    drawn = dataclasses.replace(get_attention("window"), name="window-drawn", probabilities=window_probabilities)
    x = torch.randint(0, 61, (1, 12))
    with registered("attention", "window-drawn", drawn):
        for scheme in ("alibi", "rope"):
            torch.manual_seed(0)
            config = tiny_model_config(positional=scheme, attention="window-drawn", attention_options={"window": 3})
            model = build_model(config).eval()
            with torch.no_grad():
                want = model(x)
            result = capture(model, x)
            assert torch.equal(result.logits, want)
            distance = torch.arange(12)[:, None] - torch.arange(12)[None, :]  # (T, S)
            for att in result.attentions:  # (1, H, T, T)
                assert torch.allclose(att.sum(-1), torch.ones(1, 4, 12))
                assert (att[..., distance >= 3] == 0).all() and (att[..., distance < 0] == 0).all()
                assert (att[..., (distance >= 0) & (distance < 3)] > 0).all()
            # The eager path would have drawn full attention: keys the window never reads.
            q, k = torch.randn(1, 4, 12, 8), torch.randn(1, 4, 12, 8)
            assert (attention_probabilities(q, k)[..., distance >= 3] > 0).all()


# -- a run trained with it --------------------------------------------------------------------


def test_the_run_records_its_backend(window_run, tmp_path):
    from alilama_core.runs.checkpoint import load_run

    run, _ = window_run
    record = json.loads((run / "run.json").read_text())
    assert record["attention"] == {"name": "window", "options": {"window": WINDOW}, "exact": False}
    # The record outweighs a config.yaml edited to name full attention ...
    edited = tmp_path / "edited"
    shutil.copytree(run, edited)
    config = (edited / "config.yaml").read_text()
    assert "attention: window" in config
    (edited / "config.yaml").write_text(config.replace("attention: window", "attention: sdpa"))
    with pytest.raises(ConfigError, match="trained with attention 'window'"):
        load_run(edited)
    # ... and a recorded backend that is not installed is named, never replaced.
    record["attention"]["name"] = "window-elsewhere"
    (edited / "run.json").write_text(json.dumps(record))
    (edited / "config.yaml").write_text(config.replace("attention: window", "attention: window-elsewhere"))
    for attention in (None, "auto"):
        with pytest.raises(ConfigError, match="'window-elsewhere', which is not exact attention and is not installed"):
            load_run(edited, attention=attention, verify=False)


def test_eval_scores_with_the_window_not_full_attention(window_run):
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.evaluate import evaluate_run

    run, val = window_run
    own = load_run(run)
    assert own.model.backend.name == "window" and own.config.model.attention_options == {"window": WINDOW}
    with pytest.warns(AlilamaWarning, match="non-exact attention 'window'"):
        full = load_run(run, attention="eager", force_attention=True)
    window_loss = _loss(own.model, own.tokenizer, val, CONTEXT)
    full_loss = _loss(full.model, full.tokenizer, val, CONTEXT)
    assert abs(window_loss - full_loss) > 1e-3  # the two computations really differ on this model

    rows = json.loads(ok(scored(run, val)))
    assert [r["attention"] for r in rows] == ["window"]
    assert rows[0]["loss"] == pytest.approx(window_loss, abs=1e-5)
    # The library's default (attention="auto") does the same.
    (row,) = evaluate_run(run, [str(val)], [CONTEXT], max_tokens=4096)
    assert row.attention == "window" and row.loss == pytest.approx(window_loss, abs=1e-5)

    # Another backend is refused, naming the run's; forced, it runs with a loud warning and full attention's loss.
    refused(
        cli("eval", str(run), "--data", str(val), "--attention", "sdpa"),
        "trained with attention 'window'",
        "not exact attention",
        "--force-attention",
    )
    with pytest.raises(ConfigError, match="'window'"):
        evaluate_run(run, [str(val)], [CONTEXT], attention="sdpa")
    forced = scored(run, val, "--attention", "eager", "--force-attention")
    rows = json.loads(ok(forced))
    assert "warning:" in forced.stderr and "not the model's own" in " ".join(forced.stderr.split())
    assert rows[0]["attention"] == "eager" and rows[0]["loss"] == pytest.approx(full_loss, abs=1e-5)


def test_generate_samples_with_the_window(window_run):
    from alilama_core.engine.generation import SamplingSettings, generate_text
    from alilama_core.runs.checkpoint import load_run

    run, _ = window_run
    loaded = load_run(run)
    prompt = "Once upon a time there was a little girl who"
    text = ok(cli("generate", str(run), "--prompt", prompt, "-n", "24", "--temperature", "0"))
    want = generate_text(loaded, prompt, SamplingSettings(max_new_tokens=24, temperature=0))
    assert text == prompt + want + "\n" and len(want) > 0
    assert ok(cli("generate", str(run), "--prompt", prompt, "-n", "24", "-t", "0", "--attention", "auto")) == text
    refused(
        cli("generate", str(run), "--prompt", prompt, "--attention", "sdpa"),
        "trained with attention 'window'",
        "--force-attention",
    )
    # The prompt is longer than the window, so the window decides the next token's logits.
    with pytest.warns(AlilamaWarning):
        full = load_run(run, attention="eager", force_attention=True)
    ids = torch.tensor([loaded.tokenizer.encode(prompt)])
    assert ids.size(1) > WINDOW
    with torch.no_grad():
        assert not torch.allclose(loaded.model(ids)[:, -1], full.model(ids)[:, -1], atol=1e-3)


def test_viz_attention_refuses_and_writes_nothing(window_run):
    from alilama_core.app.viz import attention_pictures
    from alilama_core.engine.capture import capture
    from alilama_core.runs.checkpoint import load_run

    run, _ = window_run
    out = run.parent / "viz"
    refused(
        cli("viz", "attention", str(run), "--prompt", "Once upon a time", "--out", str(out)),
        "'window'",
        "not exact attention",
    )
    assert not out.exists()
    with pytest.raises(UnsupportedError, match="'window'"):
        attention_pictures(str(run), "Once upon a time", out)
    with pytest.raises(UnsupportedError, match="'window' is not exact"):
        capture(load_run(run).model, torch.tensor([[1, 2, 3]]))
    assert not out.exists()


def test_export_hf_refuses_and_writes_nothing(window_run):
    pytest.importorskip("transformers")
    run, _ = window_run
    out = run.parent / "hf"
    refused(cli("export", "hf", str(run), str(out)), "attention backend 'window'", "not exact attention")
    assert not out.exists()


def test_a_run_whose_latest_training_is_exact_is_unchanged(window_run, tmp_path):
    """Resumed with an exact backend, the record goes: eval uses ``auto``, viz draws, a window is refused."""
    from alilama_core.runs.checkpoint import load_run

    run, val = window_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    resume = ["--no-progress", "train.max_steps=34", "model.attention=eager", "model.attention_options={}"]
    ok(cli("train", "--resume", str(copy), *resume))
    assert "attention" not in json.loads((copy / "run.json").read_text())
    rows = json.loads(ok(scored(copy, val)))
    loaded = load_run(copy)
    assert rows[0]["attention"] == "auto"
    assert rows[0]["loss"] == pytest.approx(_loss(loaded.model, loaded.tokenizer, val, CONTEXT), abs=1e-4)
    out = tmp_path / "viz"
    ok(cli("viz", "attention", str(copy), "--prompt", "Once upon a time", "--out", str(out), "--no-html"))
    assert (out / "attention.png").is_file()
    # A non-exact backend for an exact run is refused too.
    refused(cli("eval", str(copy), "--data", str(val), "--attention", "window"), "'window' is not exact attention")
