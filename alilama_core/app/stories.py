"""``python -m alilama_core.app.stories``: write the built-in stories to a file, or print a few.

The generator itself is ``alilama_core.runs.stories``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from alilama_core.runs import stories
from alilama_core.runs.data import SEPARATOR


def main(argv: Sequence[str] | None = None) -> int:
    """Write ``--stories`` stories of ``--seed`` to ``out``, or print ``--samples`` of them without ``out``."""
    ap = argparse.ArgumentParser(prog="python -m alilama_core.app.stories", description=stories.__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="corpus file to write (omit to print samples)")
    ap.add_argument("--stories", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=3, help="stories to print when no output file is given")
    args = ap.parse_args(argv)
    if args.out is None:
        for story in stories.generate_stories(args.samples, args.seed):
            print(story, SEPARATOR, sep="\n")
        return 0
    t0 = time.perf_counter()
    nbytes = stories.write_corpus(args.out, args.stories, args.seed)
    print(f"wrote {args.stories} stories, {nbytes} bytes to {args.out} in {time.perf_counter() - t0:.2f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
