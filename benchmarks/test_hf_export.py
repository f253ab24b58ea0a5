"""Greedy generation from the two Hugging Face export formats, beside ``alilama generate``.

The essay model without biases (preset ``essay-nobias``) exports natively as
transformers' ``MptForCausalLM``; the same weights exported with
``--format remote-code`` run ``AlilamaForCausalLM``; Alilama generates with
its own sampler and KV cache. One run each, batch 1, side by side::

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_hf_export.py --benchmark-only \\
        --benchmark-columns=median,rounds

Each result carries ``tokens_per_s`` in its extra info. Without
``ALILAMA_BENCH_FULL`` it generates 16 tokens (CI). The model is randomly
initialised and end-of-text is switched off, so every runner produces exactly
the requested number of tokens; all three produce the same tokens (asserted).
"""

from __future__ import annotations

import pytest
import torch
from alilama_bench import FULL, hf_greedy_runner

from alilama_core import build_model, preset

pytest.importorskip("transformers")

NEW_TOKENS = 256 if FULL else 16
PROMPT_TOKENS = 16
RUNNERS = ["alilama-generate", "transformers-mpt-native", "transformers-remote-code"]


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    """``{name: () -> new token ids}`` for the essay-nobias model in the three forms."""
    import alilama_hf

    alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    from alilama_bpe.tokenizer import BPETokenizer
    from alilama_exporters.hf_folder import export
    from transformers import AutoModelForCausalLM

    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.engine.generation import SamplingSettings, generate
    from alilama_core.runs.checkpoint import save_weights

    torch.manual_seed(0)
    cfg = preset("essay-nobias").model  # d=128, 8 layers, 8 heads, ALiBi, no biases
    model = build_model(cfg).eval()
    run = tmp_path_factory.mktemp("bench-run")
    save_weights(model, run / "final")
    save(Config(model=cfg), run / "config.yaml")
    text = "Once upon a time there was a little dog who liked to run in the park with his friends. " * 4
    BPETokenizer.train([text], vocab_size=300, special_tokens=["<|endoftext|>"]).save(run / "tokenizer")
    folders = {
        "transformers-mpt-native": export(run, tmp_path_factory.mktemp("native") / "hf", format="native"),
        "transformers-remote-code": export(run, tmp_path_factory.mktemp("remote") / "hf", format="remote-code"),
    }
    prompt = torch.randint(0, cfg.vocab_size, (PROMPT_TOKENS,), generator=torch.Generator().manual_seed(0)).tolist()
    settings = SamplingSettings(max_new_tokens=NEW_TOKENS, temperature=0)
    out = {"alilama-generate": lambda: generate(model, [prompt], settings, eot_id=None)[0]}
    for name, folder in folders.items():
        hf = AutoModelForCausalLM.from_pretrained(folder).eval()
        hf.generation_config.eos_token_id = None  # run to max_new_tokens, like Alilama with eot_id=None
        out[name] = hf_greedy_runner(hf, prompt, NEW_TOKENS)
    assert type(AutoModelForCausalLM.from_pretrained(folders["transformers-mpt-native"])).__name__ == "MptForCausalLM"
    return out


@pytest.mark.slow  # exports and generates from each format
@pytest.mark.parametrize("name", RUNNERS)
def test_generate_from_the_export_formats(benchmark, runners, name):
    """Tokens per second for NEW_TOKENS greedy tokens after a 16-token prompt, batch 1, one run."""
    benchmark.group = f"generate {NEW_TOKENS} new tokens, essay-nobias, B=1: export formats"
    benchmark.extra_info["new_tokens"] = NEW_TOKENS
    tokens = benchmark.pedantic(runners[name], rounds=1, warmup_rounds=1 if FULL else 0)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["tokens_per_s"] = round(NEW_TOKENS / benchmark.stats.stats.median, 1)
    reference = runners["alilama-generate"]() if name != "alilama-generate" else tokens
    assert len(tokens) == NEW_TOKENS and tokens == reference
