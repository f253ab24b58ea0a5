"""`alilama quickstart` as the README runs it, on a busy machine, at one or more revisions, one after the other.

A process that busy-loops on one core competes with each quickstart for its
whole run (a laptop with a browser open, a shared CI runner). Each revision
runs from its own source tree (a git worktree) with the installed native
extensions, as ``scripts/compare_revisions.py`` does, so the comparison is of
the Python code only. Prints, per revision: training steps, validation bits
per byte, the wall time and the samples the quickstart printed::

    git worktree add /tmp/alilama-old 46f8e12
    .venv/bin/python scripts/busy_quickstart.py /tmp/alilama-old . --minutes 3.5

On a shared machine run the revisions back to back in one call, and quote the
ratio of their steps.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_revisions import PRELUDE, extensions  # noqa: E402

QUICKSTART = (
    PRELUDE
    + r"""
from alilama_core.app.cli import main
assert sys.modules['alilama_core'].__file__.startswith(tree)
main(sys.argv[2:])
"""
)


def busy_loop() -> subprocess.Popen:
    """A CPU-bound process on the first core this process may use."""
    core = min(os.sched_getaffinity(0))
    code = f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    return subprocess.Popen([sys.executable, "-c", code])


def quickstart(tree: Path, out: Path, minutes: float, stories: int) -> dict:
    """One quickstart from ``tree`` into ``out`` beside a busy core: what it trained and printed."""
    loop = busy_loop()
    start = time.perf_counter()
    try:
        result = subprocess.run(
            [sys.executable, "-c", QUICKSTART, str(tree.resolve()), "quickstart", "--out", str(out)]
            + ["--minutes", str(minutes), "--stories", str(stories)],
            capture_output=True,
            text=True,
            cwd=tempfile.gettempdir(),
            env={**os.environ, "ALILAMA_SO": json.dumps(extensions())},
        )
    finally:
        loop.kill()
        loop.wait()
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{tree}: quickstart failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    bpb = re.search(r"val bits per byte ([\d.]+)", result.stdout)
    samples = result.stdout.split("[5/5] samples:")[-1].split("\nval loss")[0].strip().splitlines()
    return {
        "tree": str(tree),
        "steps": rows[-1]["step"],
        "evaluations": sum("val_loss" in r for r in rows),
        "val_bpb": float(bpb.group(1)) if bpb else None,
        "wall_s": round(wall, 1),
        "samples": [s.strip() for s in samples],
        "threads": re.findall(r"threads:? (\d+)", result.stdout)[:1],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", type=Path, help="source trees (git worktrees) to run, in this order")
    ap.add_argument("--minutes", type=float, default=3.5, help="the quickstart's --minutes (its default)")
    ap.add_argument("--stories", type=int, default=20000, help="the quickstart's --stories (its default)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    load = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory() as work:
        for i, tree in enumerate(args.trees):
            results.append(quickstart(tree, Path(work) / f"qs{i}", args.minutes, args.stories))
    print(f"load average before: {load[0]:.2f}; after: {os.getloadavg()[0]:.2f}; one core busy-looping throughout")
    print("| tree | steps | evaluations | val bpb | wall s | threads |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['tree']} | {r['steps']} | {r['evaluations']} | {r['val_bpb']} | {r['wall_s']} | {r['threads']} |")
    base = results[0]["steps"]
    for r in results[1:]:
        print(f"{r['tree']}: {r['steps'] / base:.2f}x the steps of {results[0]['tree']}")
    for r in results:
        print(f"samples of {r['tree']}:")
        for s in r["samples"]:
            print("  " + s)
    if args.json:
        args.json.write_text(json.dumps({"load_before": load, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
