"""Load test of ``alilama serve``: 1, 4 and 16 concurrent streaming clients, beside transformers one at a time.

The essay preset (randomly initialised, seed 0, end-of-text off by a prompt-only
run: every request makes exactly NEW_TOKENS) is served on a loopback port with
``--max-batch 16``; for each client count, that many clients stream
``/v1/completions`` at once (``httpx``, server-sent events) and the script
measures the aggregate tokens per second (all tokens / wall time), the time
to the first token and the gaps between tokens (p50 / p95 over all requests).
No request may fail. The same weights exported with ``alilama export hf``
then generate NEW_TOKENS with transformers' ``generate()``, one request at a
time, for the comparison::

    .venv/bin/python scripts/load_test_serve.py [--threads 2] [--out docs/figures/serving.json]

``--before TREE`` adds the server of another source tree (an earlier revision,
``git worktree add /tmp/alilama-before REV``) with ``--decode eager``, loaded as
``scripts/compare_revisions.py`` loads a tree, so that the servers of two
revisions are measured in the same run, round by round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEW_TOKENS = 128
CLIENTS = (1, 4, 16)
SAMPLING = {"temperature": 0}
"""What every request asks for (``--temperature``, ``--top-p``: sampled, seeded per client)."""


def make_run(root: Path) -> Path:
    import torch
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core import build_model, preset
    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights

    from dataclasses import replace

    text = "Once upon a time there was a little dog who liked to run in the park with his friends. " * 4
    tok = BPETokenizer.train([text], vocab_size=300)  # no end-of-text token: every request makes NEW_TOKENS
    torch.manual_seed(0)
    cfg = replace(preset("essay").model, vocab_size=tok.vocab_size)
    run = root / "essay"
    save_weights(build_model(cfg).eval(), run / "final")
    save(Config(model=cfg), run / "config.yaml")
    tok.save(run / "tokenizer")
    return run


async def one_client(client, url: str, i: int) -> dict:
    body = {"prompt": f"Once upon a time {i}", "max_tokens": NEW_TOKENS, "stream": True, "seed": i, **SAMPLING}
    start = time.perf_counter()
    stamps = []
    async with client.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(chunk["error"])
                if chunk["choices"][0]["text"]:
                    stamps.append(time.perf_counter())
    return {"ttft": stamps[0] - start, "gaps": [b - a for a, b in zip(stamps, stamps[1:])], "chunks": len(stamps)}


async def round_of(url: str, clients: int) -> dict:
    import httpx

    async with httpx.AsyncClient() as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(one_client(client, url, i) for i in range(clients)), return_exceptions=True)
        wall = time.perf_counter() - start
    failed = [r for r in results if isinstance(r, BaseException)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    ttft = sorted(r["ttft"] for r in ok)
    gaps = sorted(g for r in ok for g in r["gaps"])

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else None

    return {
        "clients": clients,
        "failed": len(failed),
        "tokens_per_s": round(clients * NEW_TOKENS / wall, 1),
        "ttft_ms_p50": pct(ttft, 0.5),
        "ttft_ms_p95": pct(ttft, 0.95),
        "token_ms_p50": pct(gaps, 0.5),
        "token_ms_p95": pct(gaps, 0.95),
    }


def transformers_one_at_a_time(run: Path, root: Path, threads: int, requests: int = 3) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    from alilama_exporters.hf_folder import export

    torch.set_num_threads(threads)
    folder = export(run, root / "hf", format="remote-code")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    model.generation_config.eos_token_id = None
    ids = torch.tensor([[79, 110, 99, 101, 32, 117, 112, 111, 110]])
    with torch.no_grad():
        model.generate(ids, max_new_tokens=8, do_sample=False)  # warm-up
        start = time.perf_counter()
        for _ in range(requests):
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False)
    return round(requests * NEW_TOKENS / (time.perf_counter() - start), 1)


def start_server(run: Path, threads: int, decode: str, tree: Path | None = None):
    """``alilama serve RUN`` on a free loopback port with ``--decode`` (from source ``tree`` if given); (process,
    url) once /health answers."""
    import os

    import httpx

    from compare_revisions import PRELUDE, extensions

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-c", "from alilama_core.app.cli import main; main()", "serve", str(run)]
    env = dict(os.environ)
    if tree is not None:  # argv[1] is the tree for the prelude; the command line then starts at argv[2]
        code = PRELUDE + "\nsys.argv[1:2] = []\nfrom alilama_core.app.cli import main; main()"
        command = [sys.executable, "-c", code, str(tree.resolve()), "serve", str(run)]
        env["ALILAMA_SO"] = json.dumps(extensions())
    flags = ["--port", str(port), "--threads", str(threads), "--max-batch", "16", "--max-tokens", "128"]
    server = subprocess.Popen(
        [*command, *flags, "--decode", decode], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 600  # --decode compiled builds the 16-row step first (once per run)
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return server, url
        except httpx.HTTPError:
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit(f"the server did not start: {server.stderr.read() if server.poll() else ''}")
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved rounds per client count (medians).")
    parser.add_argument("--decode", nargs="+", default=["eager", "compiled"], help="The servers to compare.")
    parser.add_argument("--no-transformers", action="store_true", help="Skip the transformers baseline.")
    parser.add_argument("--temperature", type=float, default=0.0, help="Sample at this temperature (0: greedy).")
    parser.add_argument("--top-p", type=float, default=None, help="Sample from this nucleus.")
    parser.add_argument("--before", type=Path, help="Also serve this source tree (an earlier revision), eagerly.")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "serving.json")
    args = parser.parse_args()
    SAMPLING.update(temperature=args.temperature, **({"top_p": args.top_p} if args.top_p is not None else {}))
    import os
    import statistics

    with tempfile.TemporaryDirectory(prefix="alilama-load-") as tmp:
        run = make_run(Path(tmp))
        servers = {}
        try:
            starts = [(f"before {args.before.name}", "eager", args.before)] if args.before else []
            starts += [(decode, decode, None) for decode in args.decode]
            for label, decode, tree in starts:  # one after another: a compiled server builds its step at start-up
                started = time.perf_counter()
                servers[label] = start_server(run, args.threads, decode, tree)
                print(f"{label} server ready in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            for _, url in servers.values():
                asyncio.run(round_of(url, 1))  # warm-up
            measured = {d: {n: [] for n in CLIENTS} for d in servers}
            for n in CLIENTS:  # the servers alternate, round by round, on the same machine at the same time
                for _ in range(args.rounds):
                    for decode, (_, url) in servers.items():
                        measured[decode][n].append(asyncio.run(round_of(url, n)))
        finally:
            for server, _ in servers.values():
                server.terminate()
                server.wait(timeout=30)
        baseline = None if args.no_transformers else transformers_one_at_a_time(run, Path(tmp), args.threads)

    def median_row(samples: list[dict]) -> dict:
        row = {"clients": samples[0]["clients"], "failed": sum(s["failed"] for s in samples)}
        for key in ("tokens_per_s", "ttft_ms_p50", "ttft_ms_p95", "token_ms_p50", "token_ms_p95"):
            row[key] = statistics.median(s[key] for s in samples)
        return row

    rows = {d: [median_row(measured[d][n]) for n in CLIENTS] for d in servers}
    print(f"load average {os.getloadavg()[0]:.1f}; {args.threads} threads; medians of {args.rounds} rounds\n")
    print(
        f"| server | clients ({NEW_TOKENS} new tokens each) | tokens/s | TTFT p50 / p95 (ms) "
        "| per token p50 / p95 (ms) | failed |"
    )
    print("|---|---|---:|---|---|---:|")
    for decode, table in rows.items():
        for r in table:
            print(
                f"| {decode} | {r['clients']} | {r['tokens_per_s']:,.0f} | {r['ttft_ms_p50']:.0f} / "
                f"{r['ttft_ms_p95']:.0f} | {r['token_ms_p50']:.1f} / {r['token_ms_p95']:.1f} | {r['failed']} |"
            )
    if baseline is not None:
        print(f"| transformers generate(), one request at a time | 1 | {baseline:,.0f} | | | |")
    if {"eager", "compiled"} <= set(rows):
        ratio = rows["compiled"][-1]["tokens_per_s"] / rows["eager"][-1]["tokens_per_s"]
        ttft = rows["compiled"][-1]["ttft_ms_p95"] / rows["eager"][-1]["ttft_ms_p95"]
        print(f"\n16 clients, compiled / eager: {ratio:.2f}x tokens/s, first-token p95 {ttft:.2f}x")
    for label in (label for label in rows if label.startswith("before")):
        for decode in ("eager", "compiled"):
            if decode in rows:
                ratio = rows[decode][-1]["tokens_per_s"] / rows[label][-1]["tokens_per_s"]
                ttft = rows[decode][-1]["ttft_ms_p95"] / rows[label][-1]["ttft_ms_p95"]
                print(f"16 clients, {decode} / {label}: {ratio:.2f}x tokens/s, first-token p95 {ttft:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"threads": args.threads, "rounds": args.rounds, "load": os.getloadavg()[0], "sampling": SAMPLING}
    record["rows"] = rows
    if args.before:
        record["before"] = subprocess.run(
            ["git", "-C", str(args.before), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    args.out.write_text(json.dumps({**record, "transformers": baseline}, indent=2) + "\n")


if __name__ == "__main__":
    main()
