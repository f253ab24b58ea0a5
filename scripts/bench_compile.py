"""``torch.compile`` (Inductor) against eager for the essay model's training step, on this machine's CPU.

The essay preset (B=32, T=128, AdamW), random token windows, ``--threads`` torch
threads. For each mode: the first step (for compiled: compilation included),
then the median of ``--steps`` steps after ``--warmup`` more. The two modes
alternate in rounds in one process, so a busy machine slows both alike::

    .venv/bin/python scripts/bench_compile.py [--threads 2] [--steps 20] [--rounds 3] [--generation]

With ``--generation``, greedy decoding too: ``generate`` (batch 1, an 8-token
prompt, ``--new-tokens`` new ones) eager (a growing KV cache) and on the static
cache's decode step compiled by ``torch.compile`` (fullgraph, the filled
width dynamic, the C++ wrapper) and as the AOTInductor package of ``decode="compiled"``: the
first call (compilation included) and the median of ``--rounds`` alternating
calls, same tokens checked. (``torch.compile(model, dynamic=True)`` on the
growing cache, measured here before, recompiled every few steps: 0.72x eager.)

It prints Markdown tables (for docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import statistics
import time


def step_fn(model, opt, batch):
    import torch.nn.functional as F

    x, y = batch
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--generation", action="store_true", help="Also compare compiled greedy decoding.")
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    import torch

    from alilama_core import build_model, preset

    torch.set_num_threads(args.threads)
    cfg = preset("essay")
    g = torch.Generator().manual_seed(0)
    batches = [
        (
            torch.randint(0, cfg.model.vocab_size, (cfg.train.batch_size, cfg.model.context_length), generator=g),
            torch.randint(0, cfg.model.vocab_size, (cfg.train.batch_size, cfg.model.context_length), generator=g),
        )
        for _ in range(4)
    ]
    runs = {}
    for mode in ("eager", "compiled"):
        torch.manual_seed(0)
        model = build_model(cfg.model).train()
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
        runs[mode] = (torch.compile(model) if mode == "compiled" else model, opt)
    first, times = {}, {m: [] for m in runs}
    for mode, (model, opt) in runs.items():
        start = time.perf_counter()
        step_fn(model, opt, batches[0])
        first[mode] = time.perf_counter() - start
        for i in range(args.warmup):
            step_fn(model, opt, batches[i % 4])
    for _ in range(args.rounds):
        for mode, (model, opt) in runs.items():
            for i in range(args.steps):
                start = time.perf_counter()
                step_fn(model, opt, batches[i % 4])
                times[mode].append(time.perf_counter() - start)
    eager, compiled = statistics.median(times["eager"]), statistics.median(times["compiled"])
    tokens = cfg.train.batch_size * cfg.model.context_length
    print(
        f"| essay training step, B=32, T=128, {args.threads} threads | first step (s) | median step (ms) | tokens/s |"
    )
    print("|---|---:|---:|---:|")
    print(f"| eager | {first['eager']:.2f} | {eager * 1000:.1f} | {tokens / eager:,.0f} |")
    print(f"| torch.compile (Inductor) | {first['compiled']:.1f} | {compiled * 1000:.1f} | {tokens / compiled:,.0f} |")
    pays_after = first["compiled"] / max(1e-9, eager - compiled) if compiled < eager else None
    print(
        f"\ncompiled / eager step time: {compiled / eager:.2f}; "
        + (f"compilation pays for itself after about {pays_after:,.0f} steps" if pays_after else "it does not pay")
    )
    if args.generation:
        generation(args.new_tokens, args.rounds)


def generation(new_tokens: int, rounds: int) -> None:
    """Greedy decoding, batch 1: the eager engine against the static-cache decode step compiled two ways; one table.

    ``torch.compile`` of the step (fullgraph, the width of the filled cache dynamic, Inductor's C++ wrapper) and the AOTInductor
    package that ``decode="compiled"`` builds (``alilama_core.engine.decode``), alternating calls.
    """
    import torch
    import torch._inductor.config

    from alilama_core import build_model, preset
    from alilama_core.engine import decode as dec
    from alilama_core.engine.generation import SamplingSettings, generate

    torch.manual_seed(0)
    model = build_model(preset("essay").model).eval()
    prompt = [[1, 2, 3, 4, 5, 6, 7, 8]]
    torch._inductor.config.cpp_wrapper = True
    wrapped = torch.compile(dec.DecodeStep(model), fullgraph=True, dynamic=True)  # the filled width grows each step
    key = dec.package_key(model)

    def with_torch_compile(settings):
        dec._LOADED[key] = wrapped  # the step decode="compiled" runs, for this call
        try:
            return generate(model, prompt, settings)
        finally:
            dec._LOADED.pop(key, None)

    def with_package(settings):
        dec._LOADED[key] = package
        return generate(model, prompt, settings)

    eager = SamplingSettings(max_new_tokens=new_tokens, temperature=0.0, decode="eager")
    compiled = SamplingSettings(max_new_tokens=new_tokens, temperature=0.0, decode="compiled")
    start = time.perf_counter()
    package, reason = dec.compiled_step(model)
    if package is None:
        raise SystemExit(f"the decode step did not compile: {reason}")
    built = time.perf_counter() - start
    modes = {
        "eager (decode='eager': growing KV cache)": lambda: generate(model, prompt, eager),
        "static step, torch.compile (fullgraph, dynamic width, cpp_wrapper)": lambda: with_torch_compile(compiled),
        "static step, AOTInductor package (decode='compiled')": lambda: with_package(compiled),
    }

    def run(fn):
        start = time.perf_counter()
        out = fn()
        return time.perf_counter() - start, out

    first, outputs = {}, {}
    for mode, fn in modes.items():
        first[mode], outputs[mode] = run(fn)
    first["static step, AOTInductor package (decode='compiled')"] += built
    times = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode, fn in modes.items():
            times[mode].append(run(fn)[0])
    reference = outputs["eager (decode='eager': growing KV cache)"]
    print(f"\n| greedy decoding, batch 1, {new_tokens} new tokens | first call (s) | tokens/s | same tokens as eager |")
    print("|---|---:|---:|---|")
    for mode in modes:
        rate = new_tokens / statistics.median(times[mode])
        print(f"| {mode} | {first[mode]:.1f} | {rate:,.0f} | {'yes' if outputs[mode] == reference else 'no'} |")


if __name__ == "__main__":
    main()
