"""``alilama viz attention``, ``alilama viz positional`` and ``alilama plot`` of eval results."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner
from viz.viz_helpers import PROMPT, VIZ_SCHEMES, need_scheme

from alilama_core.app.cli import get_app


def invoke(*args: str):
    return CliRunner().invoke(get_app(), list(args))


def assert_picture(path, min_size=(200, 150)):
    """A real PNG of at least ``min_size`` pixels with more than one colour."""
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.size[0] >= min_size[0] and im.size[1] >= min_size[1]
        pixels = np.asarray(im.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 8, f"{path} is blank"


@pytest.mark.parametrize("positional", VIZ_SCHEMES)
def test_attention_grid_and_page_for_every_scheme(positional, run_factory, tokenizer, tmp_path):
    run = run_factory(positional)
    result = invoke("viz", "attention", str(run), "--prompt", PROMPT, "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert_picture(tmp_path / "attention.png", (500, 250))
    page = (tmp_path / "tape.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="tape-data">(.*?)</script>', page, re.DOTALL).group(1))
    ids = tokenizer.encode(PROMPT)
    assert data["ids"] == ids
    assert data["tokens"][0] == tokenizer.decode([ids[0]]).replace(" ", "·")
    assert (data["layers"], data["heads"]) == (2, 4)
    assert [len(r) for r in data["att"][1][3]] == list(range(1, len(ids) + 1))  # causal rows
    assert data["positional"] == positional
    assert (data["slopes"] is not None) == (positional == "alibi")


def test_one_large_map(run_factory, tmp_path):
    result = invoke(
        "viz",
        "attention",
        str(run_factory("alibi")),
        "--prompt",
        PROMPT,
        "--out",
        str(tmp_path),
        "--layer",
        "1",
        "--head",
        "2",
        "--no-html",
    )
    assert result.exit_code == 0, result.output
    assert_picture(tmp_path / "attention_l1_h2.png", (400, 400))
    assert not (tmp_path / "tape.html").exists() and not (tmp_path / "attention.png").exists()


def test_long_prompt_keeps_the_context(run_factory, tmp_path):
    """A prompt past the context length is cut to it (64 here), with a note."""
    result = invoke(
        "viz",
        "attention",
        str(run_factory("learned")),
        "--prompt",
        PROMPT * 8,
        "--out",
        str(tmp_path),
    )
    assert result.exit_code == 0, result.output
    assert "showing the first 64" in result.output
    page = (tmp_path / "tape.html").read_text(encoding="utf-8")
    assert len(json.loads(re.search(r'id="tape-data">(.*?)</script>', page, re.DOTALL).group(1))["tokens"]) == 64


@pytest.mark.parametrize(
    "args, message",
    [
        (["--layer", "5", "--head", "0"], "--layer 5 is out of range"),
        (["--layer", "0", "--head", "9"], "--head 9 is out of range"),
        (["--head", "1"], "--head needs --layer"),
    ],
)
def test_user_mistakes_are_one_line(args, message, run_factory, tmp_path):
    result = invoke(
        "viz",
        "attention",
        str(run_factory("alibi")),
        "--prompt",
        PROMPT,
        "--out",
        str(tmp_path),
        *args,
    )
    assert result.exit_code == 1
    assert "error:" in result.output and message in result.output
    assert "Traceback" not in result.output


def test_missing_prompt_and_run(tmp_path):
    result = invoke("viz", "attention", str(tmp_path), "--out", str(tmp_path))
    assert result.exit_code == 1 and "--prompt" in result.output
    result = invoke("viz", "attention", str(tmp_path), "--prompt", "hi", "--out", str(tmp_path))
    assert result.exit_code == 1 and "not an Alilama run folder" in result.output


@pytest.mark.parametrize("positional", VIZ_SCHEMES)
def test_positional_picture_for_every_scheme(positional, tmp_path):
    need_scheme(positional)
    out = tmp_path / "pos.png"
    result = invoke(
        "viz",
        "positional",
        "--preset",
        "essay",
        f"model.positional={positional}",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert_picture(out, (300, 200))


def test_positional_terms_follow_each_scheme():
    from alilama_core.app.viz_draw import positional_profile
    from alilama_core.engine import configs as cfgmod

    def model(positional):
        return cfgmod.apply_overrides(cfgmod.preset("essay"), [f"model.positional={positional}"]).model

    _, terms, kind, _ = positional_profile(model("alibi"), 32)
    slopes = torch.tensor([2.0**-k for k in range(1, 9)])
    assert kind == "bias" and terms.shape == (8, 33)
    np.testing.assert_allclose(terms, (-slopes[:, None] * torch.arange(33)).numpy(), atol=1e-5)
    _, terms, kind, _ = positional_profile(model("rope"), 64)
    assert kind == "rotary" and terms.shape == (1, 65)
    assert terms[0, 0] == pytest.approx(16**0.5, rel=1e-5)  # q.q / sqrt(D) with q = ones, D = 16
    assert terms[0, 1:].max() < terms[0, 0] and terms[0].min() < terms[0, 0] / 2  # it oscillates down
    _, terms, kind, _ = positional_profile(model("nope"))
    assert kind == "none" and not terms.any()
    _d, terms, kind, _ = positional_profile(model("learned"))
    assert kind == "embedding" and terms[0, 0] == pytest.approx(1.0, abs=1e-5)  # cosine with itself


@pytest.mark.slow  # trains and evaluates a run, then draws it
def test_plot_draws_eval_results(run_factory, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(PROMPT * 40, encoding="utf-8")
    results = []
    for positional in ("alibi", "nope"):
        out = invoke(
            "eval",
            str(run_factory(positional)),
            "--data",
            str(text),
            "--context-lengths",
            "16,32,64",
            "--attention",
            "eager",
            "--json",
        )
        assert out.exit_code == 0, out.output
        path = tmp_path / f"{positional}.json"
        path.write_text(out.stdout, encoding="utf-8")
        results.append(str(path))
    result = invoke("plot", *results, "--out", str(tmp_path / "bpb.png"))
    assert result.exit_code == 0, result.output
    assert_picture(tmp_path / "bpb.png", (400, 300))
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    result = invoke("plot", str(tmp_path / "bad.json"))
    assert result.exit_code == 1 and "alilama eval --json" in result.output


def test_task_run_with_a_symbol_vocabulary(tmp_path):
    """Token labels come from the tokenizer's decode of each id: a task's symbols work as well as BPE."""
    from viz.viz_helpers import scheme_model

    from alilama_core.contracts.config import Config
    from alilama_core.contracts.task import SymbolTokenizer
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights

    tokenizer = SymbolTokenizer(["<pad>", "<eos>", "=", *"0123456789"])
    model = scheme_model("alibi", "sdpa", vocab_size=tokenizer.vocab_size)
    run = tmp_path / "task-run"
    save_weights(model, run / "final")
    save(Config(model=model.config), run / "config.yaml")
    tokenizer.save(run / "tokenizer")
    result = invoke("viz", "attention", str(run), "--prompt", "8652=2568", "--out", str(tmp_path / "viz"))
    assert result.exit_code == 0, result.output
    page = (tmp_path / "viz" / "tape.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="tape-data">(.*?)</script>', page, re.S).group(1))
    assert data["tokens"] == list("8652=2568")
    assert {g[0] for layer in data["lens"] for pos in layer for g in pos} <= set(tokenizer.symbols)
    result = invoke("viz", "attention", str(run), "--prompt", "86x", "--out", str(tmp_path / "viz"))
    assert result.exit_code == 1 and "error:" in result.output and "'x'" in result.output
