"""Greedy generation as users run it: the default ``attention: auto`` beside every explicit
backend and transformers ``generate()`` on the same weights exported with remote code.

Two models, each with its own settings: the quickstart's (4 layers, vocab 2048,
``attention: auto``) and the essay preset's (8 layers, vocab 4096). Batch 1, a
16-token prompt, 512 new tokens, the torch thread count as set (``make bench``
uses 2).

    make bench
    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_generation.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds

The runners are timed round-robin in one test per model (so a busy machine
slows them alike), medians over the rounds; ``tokens_per_s`` of each runner and
the ratios are in the result's extra info. With ``ALILAMA_BENCH_FULL`` the test
fails unless ``auto`` reaches 0.95x the fastest explicit backend and 1.3x
transformers. Without it, 16 tokens once (CI). All runners produce the same
tokens (asserted); the models are randomly initialised and end-of-text is off.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch
from alilama_bench import FULL, hf_greedy_runner

from alilama_core import build_model
from alilama_core.contracts.config import Config
from alilama_core.engine.configs import preset

pytest.importorskip("transformers")

NEW_TOKENS = 512 if FULL else 16
PROMPT_TOKENS = 16
ROUNDS = 3 if FULL else 1


def _model_config(name: str):
    if name == "quickstart":
        from alilama_core.app.quickstart import quickstart_config

        return quickstart_config(2048).model
    return preset("essay").model


def _cpu_backends() -> list[str]:
    """Registered backends that run and train on CPU and declare exact attention, routers excepted.

    (FlexAttention runs on CPU without its compiled kernel, for checks only: no one decodes with it there.)
    """
    from alilama_core.contracts.attention import attention_backend
    from alilama_core.engine.registry import get_registry

    reg = get_registry()
    names = []
    for name in reg.names("attention"):
        backend = attention_backend(reg.get("attention", name))
        if backend.resolve is None and backend.exact and backend.available() is None and "cpu" in backend.trains_on:
            names.append(name)
    return names


@pytest.fixture(scope="module", params=["quickstart", "essay"])
def models(request, tmp_path_factory):
    """One model per runner, sharing the weights, and the remote-code export loaded back."""
    from alilama_bpe.tokenizer import BPETokenizer
    from alilama_exporters.hf_folder import export
    from transformers import AutoModelForCausalLM

    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights

    cfg = _model_config(request.param)
    torch.manual_seed(0)
    default = build_model(cfg).eval()
    run = tmp_path_factory.mktemp(f"bench-{request.param}")
    save_weights(default, run / "final")
    save(Config(model=cfg), run / "config.yaml")
    text = "Once upon a time there was a little dog who liked to run in the park with his friends. " * 4
    BPETokenizer.train([text], vocab_size=300, special_tokens=["<|endoftext|>"]).save(run / "tokenizer")
    out = export(run, tmp_path_factory.mktemp("bench-export") / "hf", format="remote-code")
    hf = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    hf.generation_config.eos_token_id = None  # run to max_new_tokens, like Alilama with eot_id=None
    models = {}
    for name in ["auto", *_cpu_backends()]:
        model = build_model(cfg.__class__(**{**cfg.__dict__, "attention": name})).eval()
        model.load_state_dict(default.state_dict())
        models[name] = model
    prompt = torch.randint(0, cfg.vocab_size, (PROMPT_TOKENS,), generator=torch.Generator().manual_seed(0)).tolist()
    return request.param, cfg, models, hf, prompt


def _alilama(model, prompt):
    from alilama_core.engine.generation import SamplingSettings, generate

    settings = SamplingSettings(max_new_tokens=NEW_TOKENS, temperature=0)
    return lambda: generate(model, [prompt], settings, eot_id=None)[0]


@pytest.mark.slow  # generates with every backend and transformers
def test_generate_default_beside_backends_and_transformers(benchmark, models):
    """Tokens per second of every runner, round-robin; ``auto`` is the benchmarked one."""
    name, cfg, alilama_models, hf, prompt = models
    runners = {backend: _alilama(model, prompt) for backend, model in alilama_models.items()}
    runners["transformers-generate"] = hf_greedy_runner(hf, prompt, NEW_TOKENS)
    outputs = {runner: fn() for runner, fn in runners.items()}  # warm-up, and the tokens to compare
    reference = outputs["auto"]
    for runner, tokens in outputs.items():
        assert tokens == reference, f"{runner} generated other tokens than auto"
    times: dict[str, list[float]] = {runner: [] for runner in runners}
    for _ in range(ROUNDS):
        for runner, fn in runners.items():
            start = time.perf_counter()
            fn()
            times[runner].append(time.perf_counter() - start)
    speed = {runner: NEW_TOKENS / statistics.median(t) for runner, t in times.items()}
    explicit = {r: s for r, s in speed.items() if r not in ("auto", "transformers-generate")}
    fastest = max(explicit, key=explicit.get)
    benchmark.group = f"generate {NEW_TOKENS} greedy tokens, B=1, {name} model (attention: {cfg.attention})"
    benchmark.extra_info.update(
        {f"tokens_per_s[{r}]": round(s, 1) for r, s in speed.items()}
        | {
            "auto_vs_fastest_explicit": round(speed["auto"] / explicit[fastest], 3),
            "fastest_explicit": fastest,
            "auto_vs_transformers": round(speed["auto"] / speed["transformers-generate"], 3),
        }
    )
    benchmark.pedantic(runners["auto"], rounds=1, warmup_rounds=0)
    if FULL:
        assert speed["auto"] >= 0.95 * explicit[fastest], benchmark.extra_info
        assert speed["auto"] >= 1.3 * speed["transformers-generate"], benchmark.extra_info
