"""Greedy generation of one model in four runtimes, side by side in one run: llama.cpp, onnxruntime, Alilama, transformers.

The essay model without biases (preset ``essay-nobias``, randomly initialised,
seed 0) goes to each runtime the way a user takes it there: ``alilama export
gguf`` (f32) for llama.cpp, ``alilama export onnx`` for onnxruntime, the native
``alilama export hf`` (``MptForCausalLM``) for transformers, the run itself for
``alilama generate``'s engine. Each runtime runs in a process of its own with 2
threads, batch 1: a 16-token prompt, then NEW_TOKENS greedy tokens with
end-of-text switched off (so every runtime makes the same number), one warm-up
and one timed run per process, the runtimes in turn, REPEATS rounds (a busy
machine slows them alike); the figure is the median. llama.cpp and onnxruntime run
in the reader environment (``make llama-cpp``: transformers 4.57, optimum-onnx,
onnxruntime, llama-cpp-python; no Alilama)::

    .venv/bin/python scripts/bench_runtimes.py [--new-tokens 256] [--out docs/figures/runtimes.json]

It prints a Markdown table, writes the figures as JSON and, with ``--docs docs/sharing.md``,
the table into that page.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READERS = ROOT / "build" / "envs" / "readers" / "bin" / "python"
THREADS = 2
DOCS_START, DOCS_END = "<!-- runtimes: written by scripts/bench_runtimes.py -->", "<!-- runtimes: end -->"
REPEATS = 3

# Every runner prints {"seconds": [...], "tokens": [...]} for `runs` greedy generations of `n` tokens.
COMMON = """
import json, sys, time
prompt, n, runs, threads, path = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def timed(generate):
    seconds, tokens = [], None
    for i in range(runs + 1):
        start = time.perf_counter()
        tokens = generate()
        if i:  # the first is the warm-up
            seconds.append(time.perf_counter() - start)
    print(json.dumps({"seconds": seconds, "tokens": tokens}))
"""
RUNNERS = {
    "llama.cpp (llama-cpp-python, GGUF f32)": (
        "readers",
        """
        import llama_cpp
        llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=threads, n_threads_batch=threads, verbose=False)
        def generate():
            llm.reset()
            out = []
            for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
                out.append(token)
                if len(out) == n:
                    return out
        timed(generate)
        """,
    ),
    "onnxruntime (optimum, past key values)": (
        "readers",
        """
        import onnxruntime, torch
        from optimum.onnxruntime import ORTModelForCausalLM
        torch.set_num_threads(threads)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        model = ORTModelForCausalLM.from_pretrained(path, use_cache=True, session_options=options)
        ids = torch.tensor([prompt])
        def generate():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                                 min_new_tokens=n, eos_token_id=None, pad_token_id=0)
            return out[0, len(prompt):].tolist()
        timed(generate)
        """,
    ),
    "alilama generate (engine, KV cache)": (
        "alilama",
        """
        import torch
        from alilama_core.runs.checkpoint import load_run
        from alilama_core.engine.generation import SamplingSettings, generate as alilama_generate
        torch.set_num_threads(threads)
        model = load_run(path).model.eval()
        settings = SamplingSettings(max_new_tokens=n, temperature=0)
        timed(lambda: alilama_generate(model, [prompt], settings, eot_id=None)[0])
        """,
    ),
    "transformers generate (MptForCausalLM)": (
        "alilama",
        """
        import torch
        from transformers import AutoModelForCausalLM
        torch.set_num_threads(threads)
        model = AutoModelForCausalLM.from_pretrained(path).eval()
        model.generation_config.eos_token_id = None
        ids = torch.tensor([prompt])
        def generate():
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n)
            return out[0, len(prompt):].tolist()
        timed(generate)
        """,
    ),
}


def build(root: Path) -> dict[str, Path]:
    """The run and its three exports: ``{"alilama": run, "gguf": file, "onnx": folder, "hf": folder}``."""
    import torch
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core import build_model, preset
    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights
    from alilama_hf.export import export
    from alilama_hf.gguf_file import export_gguf
    from alilama_hf.onnx_export import export_onnx

    torch.manual_seed(0)
    cfg = preset("essay-nobias").model
    run = root / "run"
    save_weights(build_model(cfg).eval(), run / "final")
    save(Config(model=cfg), run / "config.yaml")
    text = "Once upon a time there was a little dog who liked to run in the park with his friends. " * 4
    BPETokenizer.train([text], vocab_size=300, special_tokens=["<|endoftext|>"]).save(run / "tokenizer")
    export_gguf(run, root / "model.gguf")
    export_onnx(run, root / "onnx", python=str(READERS))
    return {"alilama": run, "gguf": root / "model.gguf", "onnx": root / "onnx", "hf": export(run, root / "hf")}


def gguf_agreement(run: Path, root: Path) -> dict[str, dict]:
    """The same model at f32, f16 and q8_0 in llama.cpp, against Alilama (``probe_gguf.py``, KV cache in f32)."""
    from alilama_core.runs.checkpoint import load_run
    from alilama_hf.export import write_expected
    from alilama_hf.gguf_file import PROBE_FILE, export_gguf

    write_expected(load_run(run), root / "expected.safetensors")
    out = {}
    for dtype in ("f32", "f16", "q8_0"):
        export_gguf(run, root / f"agree-{dtype}.gguf", dtype=dtype)
        proc = subprocess.run(
            [str(READERS), str(PROBE_FILE), str(root / f"agree-{dtype}.gguf"), str(root / "expected.safetensors")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            sys.exit(f"llama.cpp on {dtype} failed:\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        out[dtype] = {k: result[k] for k in ("max_logit_diff", "greedy_equal", "tokenizer_equal")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "runtimes.json")
    parser.add_argument("--docs", type=Path, default=None, help="write the table into this page (docs/sharing.md)")
    args = parser.parse_args()
    if not READERS.exists():
        sys.exit(f"no reader environment at {READERS}: run `make llama-cpp` first")
    import torch

    prompt = torch.randint(0, 300, (16,), generator=torch.Generator().manual_seed(0)).tolist()
    where = {"llama.cpp": "gguf", "onnxruntime": "onnx", "alilama": "alilama", "transformers": "hf"}
    rows = {}
    with tempfile.TemporaryDirectory(prefix="alilama-runtimes-") as tmp:
        paths = build(Path(tmp))
        for _ in range(REPEATS):  # round-robin, one timed run per process, so a busy machine slows all alike
            for name, (env, body) in RUNNERS.items():
                python = str(READERS) if env == "readers" else sys.executable
                path = paths[where[name.split(" ")[0]]]
                argv = [json.dumps(prompt), str(args.new_tokens), "1", str(THREADS), str(path)]
                script = COMMON + textwrap.dedent(body)
                proc = subprocess.run([python, "-c", script, *argv], capture_output=True, text=True, timeout=1800)
                if proc.returncode != 0:
                    sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                row = rows.setdefault(name, {"seconds": [], "tokens": result["tokens"]})
                row["seconds"] += result["seconds"]
        for row in rows.values():
            median = sorted(row["seconds"])[len(row["seconds"]) // 2]
            row["tokens_per_s"] = round(args.new_tokens / median, 1)
        agreement = gguf_agreement(paths["alilama"], Path(tmp))
    reference = rows["alilama generate (engine, KV cache)"]["tokens"]
    fastest = rows["llama.cpp (llama-cpp-python, GGUF f32)"]["tokens_per_s"]
    lines = [
        f"| runtime ({args.new_tokens} greedy tokens, batch 1, {THREADS} threads) | tokens/s | × llama.cpp | same ids as Alilama |",
        "|---|---:|---:|---|",
    ]
    for name, row in rows.items():
        row["same_tokens_as_alilama"] = row.pop("tokens") == reference
        ratio = row["tokens_per_s"] / fastest
        same = "yes" if row["same_tokens_as_alilama"] else "no"
        lines.append(f"| {name} | {row['tokens_per_s']:,.0f} | {ratio:.2f} | {same} |")
    lines += ["", "| GGUF dtype | largest logit difference from Alilama | greedy 32 tokens equal |", "|---|---|---|"]
    for dtype, result in agreement.items():
        lines.append(f"| {dtype} | {result['max_logit_diff']:.1e} | {'yes' if result['greedy_equal'] else 'no'} |")
    ratio = rows["alilama generate (engine, KV cache)"]["tokens_per_s"] / fastest
    lines += ["", f"Alilama / llama.cpp: {ratio:.2f}× ({'met' if ratio >= 0.5 else 'not met'})."]
    table = "\n".join(lines)
    print(table)
    if args.docs is not None:
        text = args.docs.read_text(encoding="utf-8")
        start, end = text.index(DOCS_START) + len(DOCS_START), text.index(DOCS_END)
        args.docs.write_text(text[:start] + "\n" + table + "\n" + text[end:], encoding="utf-8")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()}
    args.out.write_text(
        json.dumps({"new_tokens": args.new_tokens, "machine": machine, "rows": rows, "gguf": agreement}, indent=2)
        + "\n"
    )


if __name__ == "__main__":
    main()
