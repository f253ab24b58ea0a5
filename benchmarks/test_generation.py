"""Greedy generation on the essay config, batch 1: Alilama with and without its KV cache, and
transformers ``generate()`` on the same weights exported with ``alilama export hf``.

    make bench                                                          # 512 new tokens
    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_generation.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds

Each result carries ``tokens_per_s`` (new tokens over the median time) in its
extra info. Without ``ALILAMA_BENCH_FULL`` it generates 16 tokens once (CI).
The model is randomly initialised, and end-of-text is switched off, so every
run produces exactly the requested number of tokens; the three produce the
same tokens (asserted).
"""

from __future__ import annotations

import pytest
import torch

from alilama_bench import FULL
from alilama_core import build_model, preset

pytest.importorskip("transformers")

NEW_TOKENS = 512 if FULL else 16
PROMPT_TOKENS = 16
RUNNERS = ["alilama-cached", "alilama-uncached", "transformers-generate"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The essay model as a run folder, and its Hugging Face export loaded back."""
    from alilama_bpe.tokenizer import BPETokenizer
    from alilama_core.checkpoint import save_weights
    from alilama_core.config import Config, save
    from alilama_hf.export import export
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = preset("essay").model  # d=128, 8 layers, 8 heads, ALiBi, sdpa
    model = build_model(cfg).eval()
    run = tmp_path_factory.mktemp("bench-run")
    save_weights(model, run / "final")
    save(Config(model=cfg), run / "config.yaml")
    text = "Once upon a time there was a little dog who liked to run in the park with his friends. " * 4
    BPETokenizer.train([text], vocab_size=300, special_tokens=["<|endoftext|>"]).save(run / "tokenizer")
    out = export(run, tmp_path_factory.mktemp("bench-export") / "hf")
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    hf.generation_config.eos_token_id = None  # run to max_new_tokens, like Alilama with eot_id=None
    prompt = torch.randint(0, cfg.vocab_size, (PROMPT_TOKENS,), generator=torch.Generator().manual_seed(0)).tolist()
    return model, hf, prompt


def _runner(name: str, model, hf, prompt):
    from alilama_core.generate import SamplingSettings, generate

    if name.startswith("alilama"):
        settings = SamplingSettings(max_new_tokens=NEW_TOKENS, temperature=0, use_cache=name == "alilama-cached")
        return lambda: generate(model, [prompt], settings, eot_id=None)[0]
    ids = torch.tensor([prompt])
    mask = torch.ones_like(ids)

    def hf_generate():
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)
        return out[0, len(prompt) :].tolist()

    return hf_generate


@pytest.mark.parametrize("name", RUNNERS)
def test_generate_essay(benchmark, models, name):
    """Tokens per second for NEW_TOKENS greedy tokens after a 16-token prompt, batch 1."""
    model, hf, prompt = models
    run = _runner(name, model, hf, prompt)
    benchmark.group = f"generate {NEW_TOKENS} new tokens, essay config, B=1"
    benchmark.extra_info["new_tokens"] = NEW_TOKENS
    slow = name == "alilama-uncached"  # about 15x slower: one long round is already a stable figure
    rounds, warmup = (1, 0) if slow or not FULL else (3, 1)
    tokens = benchmark.pedantic(run, rounds=rounds, warmup_rounds=warmup)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["tokens_per_s"] = round(NEW_TOKENS / benchmark.stats.stats.median, 1)
    reference = _runner("alilama-cached", model, hf, prompt)() if name != "alilama-cached" else tokens
    assert len(tokens) == NEW_TOKENS and tokens == reference
