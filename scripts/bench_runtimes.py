"""Greedy generation of one model in several runtimes, side by side in one run: llama.cpp, Alilama, onnxruntime, transformers.

The essay model without biases (preset ``essay-nobias``, randomly initialised,
seed 0) goes to each runtime the way a user takes it there: ``alilama export
gguf`` (f32) for llama.cpp, ``alilama export onnx`` for onnxruntime, the native
``alilama export hf`` (``MptForCausalLM``) for transformers, the run itself for
Alilama. Alilama runs twice: its default path (``decode="auto"``: the compiled
decode step, whose package is built once before the rounds and cached in the
run folder, ``alilama_core.runs.compiled``; the build time and each process's
load time are reported) and the eager engine (``decode="eager"``). Each runtime
runs in a process of its own with ``--threads`` threads (default 1), batch 1: a
16-token prompt, then NEW_TOKENS greedy tokens with end-of-text switched off
(so every runtime makes the same number), one warm-up and ``--runs`` timed
generations per process, the runtimes in turn, ``--rounds`` rounds (a busy
machine slows them alike); the figure is the median of every timed generation.
``--busy N`` keeps N busy-looping processes running through the rounds.
llama.cpp and onnxruntime run in the reader environment (``make llama-cpp``:
transformers 4.57, optimum-onnx, onnxruntime, llama-cpp-python; no Alilama)::

    .venv/bin/python scripts/bench_runtimes.py [--new-tokens 256] [--threads 1] [--busy 1] \
        [--only llama.cpp,alilama] [--run runs/quickstart/run] [--out docs/figures/runtimes.json] [--docs docs/benchmarks.md]

``--run`` measures a run folder as it is (the quickstart's, as ``alilama quickstart`` left it) instead.

It prints a Markdown table (with the machine and its load average before and
after), writes the figures as JSON and, with ``--docs``, the table into that
page between the runtimes markers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READERS = ROOT / "build" / "envs" / "readers" / "bin" / "python"
DOCS_START, DOCS_END = "<!-- {}: written by scripts/bench_runtimes.py -->", "<!-- {}: end -->"

# Every runner prints {"seconds": [...], "tokens": [...]} for `runs` greedy generations of `n` tokens.
COMMON = """
import json, sys, time
prompt, n, runs, threads, path = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
STARTED = time.perf_counter()
EXTRA = {}
def timed(generate):
    EXTRA.setdefault("load_seconds", time.perf_counter() - STARTED)  # imports aside: the model (and its package)
    seconds, tokens = [], None
    for i in range(runs + 1):
        start = time.perf_counter()
        tokens = generate()
        if i:  # the first is the warm-up
            seconds.append(time.perf_counter() - start)
    print(json.dumps({"seconds": seconds, "tokens": tokens, **EXTRA}))
"""
RUNNERS = {
    "llama.cpp (llama-cpp-python, GGUF f32)": (
        "readers",
        """
        import llama_cpp
        STARTED = time.perf_counter()
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
    "alilama generate (default: decode auto, compiled step)": (
        "alilama",
        """
        import torch
        from alilama_core.engine.decode import decode_plan
        from alilama_core.engine.generation import SamplingSettings, generate as alilama_generate
        from alilama_core.runs.checkpoint import load_run
        torch.set_num_threads(threads)
        STARTED = time.perf_counter()
        run = load_run(path)  # finds the run's compiled step in RUN/compiled, if it has one
        plan = decode_plan(run.model, "auto")  # loads the cached package
        EXTRA["path"] = plan.path if plan.reason is None else f"{plan.path} ({plan.reason})"
        settings = SamplingSettings(max_new_tokens=n, temperature=0)
        timed(lambda: alilama_generate(run.model, [prompt], settings, eot_id=None)[0])
        """,
    ),
    "alilama generate (decode eager: engine, growing KV cache)": (
        "alilama",
        """
        import torch
        from alilama_core.runs.checkpoint import load_run
        from alilama_core.engine.generation import SamplingSettings, generate as alilama_generate
        torch.set_num_threads(threads)
        STARTED = time.perf_counter()
        model = load_run(path).model.eval()
        settings = SamplingSettings(max_new_tokens=n, temperature=0, decode="eager")
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


def exports(run: Path, root: Path, needed: set[str]) -> dict[str, Path]:
    """The exports of ``run`` that are ``needed``: ``{"alilama": run, "gguf": file, "onnx": folder, "hf": folder}``."""
    from alilama_exporters.gguf_file import export_gguf
    from alilama_exporters.hf_folder import export
    from alilama_exporters.onnx_export import export_onnx

    paths = {"alilama": run}
    if "gguf" in needed:
        export_gguf(run, root / "model.gguf")
        paths["gguf"] = root / "model.gguf"
    if "onnx" in needed:
        export_onnx(run, root / "onnx", python=str(READERS))
        paths["onnx"] = root / "onnx"
    if "hf" in needed:
        paths["hf"] = export(run, root / "hf")
    return paths


def build(root: Path, needed: set[str]) -> dict[str, Path]:
    """A run of the essay model without biases (random weights, seed 0) and its exports ``needed``."""
    import torch
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core import build_model, preset
    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights

    torch.manual_seed(0)
    cfg = preset("essay-nobias").model
    run = root / "run"
    save_weights(build_model(cfg).eval(), run / "final")
    save(Config(model=cfg), run / "config.yaml")
    text = "Once upon a time there was a little dog who liked to run in the park with his friends. " * 4
    BPETokenizer.train([text], vocab_size=300, special_tokens=["<|endoftext|>"]).save(run / "tokenizer")
    return exports(run, root, needed)


def compile_step(run: Path, threads: int) -> dict:
    """Build the run's compiled decode step once (``alilama_core.runs.compiled.prepare``), timed, in a process of its own."""
    script = textwrap.dedent(
        """
        import json, sys, torch
        from alilama_core.runs.checkpoint import load_run
        from alilama_core.runs.compiled import prepare
        torch.set_num_threads(int(sys.argv[2]))
        seconds, reason = prepare(load_run(sys.argv[1]))
        print(json.dumps({"compile_seconds": seconds, "reason": reason}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, str(run), str(threads)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"compiling the decode step failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "cpu": cpu, "cores": os.cpu_count()}


def gguf_agreement(run: Path, root: Path) -> dict[str, dict]:
    """The same model at f32, f16 and q8_0 in llama.cpp, against Alilama (``probe_gguf.py``, KV cache in f32)."""
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.exports import write_expected
    from alilama_exporters.gguf_file import PROBE_FILE, export_gguf

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


WHERE = {"llama.cpp": "gguf", "onnxruntime": "onnx", "alilama": "alilama", "transformers": "hf"}
DEFAULT = "alilama generate (default: decode auto, compiled step)"
LLAMA = "llama.cpp (llama-cpp-python, GGUF f32)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3, help="timed generations per process (after one warm-up)")
    parser.add_argument("--busy", type=int, default=0, help="busy-looping processes to run beside the rounds")
    parser.add_argument(
        "--only", default="", help="comma-separated runtimes (llama.cpp, alilama, onnxruntime, transformers)"
    )
    parser.add_argument(
        "--run",
        type=Path,
        default=None,
        help="a run folder to measure as it is (e.g. the quickstart's, runs/quickstart/run): its compiled step is "
        "used only if it has one, never built here (default: a fresh essay-nobias model, its step built first)",
    )
    parser.add_argument("--no-agreement", action="store_true", help="skip the GGUF f32/f16/q8_0 agreement table")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "runtimes.json")
    parser.add_argument("--docs", type=Path, default=None, help="write the table into this page (docs/benchmarks.md)")
    parser.add_argument(
        "--docs-key", default="runtimes", help="the page's markers: <!-- KEY: written by ... --> .. <!-- KEY: end -->"
    )
    args = parser.parse_args()
    if not READERS.exists():
        sys.exit(f"no reader environment at {READERS}: run `make llama-cpp` first")
    import torch

    wanted = [w.strip() for w in args.only.split(",") if w.strip()] or list(WHERE)
    runners = {name: spec for name, spec in RUNNERS.items() if name.split(" ")[0] in wanted}
    prompt = torch.randint(0, 300, (16,), generator=torch.Generator().manual_seed(0)).tolist()
    rows: dict[str, dict] = {}
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    busy = []
    with tempfile.TemporaryDirectory(prefix="alilama-runtimes-") as tmp:
        needed = {WHERE[name.split(" ")[0]] for name in runners}
        if args.run is not None:  # as the user has it: nothing is built for Alilama here
            paths, compiled = exports(args.run.resolve(), Path(tmp), needed), None
        else:
            paths = build(Path(tmp), needed)
            compiled = compile_step(paths["alilama"], args.threads) if DEFAULT in runners else None
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        try:
            for _ in range(args.rounds):  # round-robin, one process per runtime per round: a busy spell slows all alike
                for name, (env, body) in runners.items():
                    python = str(READERS) if env == "readers" else sys.executable
                    path = paths[WHERE[name.split(" ")[0]]]
                    argv = [json.dumps(prompt), str(args.new_tokens), str(args.runs), str(args.threads), str(path)]
                    script = COMMON + textwrap.dedent(body)
                    proc = subprocess.run([python, "-c", script, *argv], capture_output=True, text=True, timeout=1800)
                    if proc.returncode != 0:
                        sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
                    result = json.loads(proc.stdout.strip().splitlines()[-1])
                    row = rows.setdefault(name, {"seconds": [], "load_seconds": [], "tokens": result["tokens"]})
                    row["seconds"] += result["seconds"]
                    row["load_seconds"].append(result["load_seconds"])
                    if "path" in result:
                        row["path"] = result["path"]
        finally:
            for process in busy:
                process.kill()
                process.wait()
        load_after = os.getloadavg()
        for row in rows.values():
            row["tokens_per_s"] = round(args.new_tokens / median(row["seconds"]), 1)
            row["median_load_seconds"] = round(median(row["load_seconds"]), 3)
        agreement = {} if args.no_agreement or "gguf" not in paths else gguf_agreement(paths["alilama"], Path(tmp))
    alilama_rows = [name for name in rows if name.startswith("alilama")]
    reference = rows[alilama_rows[0]]["tokens"] if alilama_rows else None
    fastest = rows[LLAMA]["tokens_per_s"] if LLAMA in rows else max(r["tokens_per_s"] for r in rows.values())
    info = machine()
    when = started.strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"{when}: {info['cpu']}, {info['cores']} cores, torch {info['torch']}; {args.threads} thread(s) per runtime, "
        f"{args.busy} busy-looping process(es) beside; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; {args.rounds} rounds x {args.runs} timed runs, medians; the model: "
        f"{'the run ' + str(args.run) + ', as it is' if args.run else 'essay-nobias, random weights'}.",
        "",
        f"| runtime ({args.new_tokens} greedy tokens, batch 1, {args.threads} thread(s)) | tokens/s | × llama.cpp "
        "| same ids as Alilama | load s |",
        "|---|---:|---:|---|---:|",
    ]
    for name, row in rows.items():
        row["same_tokens_as_alilama"] = row.pop("tokens") == reference
        ratio = row["tokens_per_s"] / fastest
        same = "yes" if row["same_tokens_as_alilama"] else "no"
        label = f"{name} [{row['path']}]" if "path" in row else name
        lines.append(
            f"| {label} | {row['tokens_per_s']:,.0f} | {ratio:.2f} | {same} | {row['median_load_seconds']:.2f} |"
        )
    if compiled is not None:
        why = "" if compiled["reason"] is None else f" (not compiled: {compiled['reason']})"
        lines += [
            "",
            f"Building the compiled decode step once (cached in the run folder): {compiled['compile_seconds']:.0f} s{why}.",
        ]
    if agreement:
        lines += [
            "",
            "| GGUF dtype | largest logit difference from Alilama | greedy 32 tokens equal |",
            "|---|---|---|",
        ]
        for dtype, result in agreement.items():
            lines.append(f"| {dtype} | {result['max_logit_diff']:.1e} | {'yes' if result['greedy_equal'] else 'no'} |")
    if DEFAULT in rows and LLAMA in rows:
        ratio = rows[DEFAULT]["tokens_per_s"] / fastest
        lines += [
            "",
            f"Alilama's default path / llama.cpp: {ratio:.2f}× (target 1.0×: {'met' if ratio >= 1 else 'not met'}).",
        ]
    table = "\n".join(lines)
    print(table)
    if args.docs is not None:
        text = args.docs.read_text(encoding="utf-8")
        opening, closing = DOCS_START.format(args.docs_key), DOCS_END.format(args.docs_key)
        start, end = text.index(opening) + len(opening), text.index(closing)
        args.docs.write_text(text[:start] + "\n" + table + "\n" + text[end:], encoding="utf-8")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "new_tokens": args.new_tokens,
        "threads": args.threads,
        "busy": args.busy,
        "started": when,
        "load_average": {"before": load_before, "after": load_after},
        "machine": info,
        "compile": compiled,
        "rows": rows,
        "gguf": agreement,
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


if __name__ == "__main__":
    main()
