"""Lines covered per layer, from the coverage data of the last ``pytest --cov`` run (``make coverage``).

    python scripts/coverage_by_layer.py [DATA_FILE]

One row per layer of the library (alilama_core.base ... alilama_core.app), per plugin package and per
integration: statements, those the run executed, and the share. DATA_FILE defaults to ``.coverage``.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parents[1]


def layer(path: Path) -> str:
    """``alilama_core.engine`` for alilama_core/engine/model.py, ``alilama_bpe`` for plugins/alilama_bpe/..."""
    parts = path.relative_to(ROOT).parts
    if parts[0] == "alilama_core":
        return "alilama_core." + parts[1] if len(parts) > 2 else "alilama_core"
    return parts[1] if parts[0] in ("plugins", "integrations") else parts[0]


def table(data_file: str) -> list[tuple[str, int, int]]:
    cov = coverage.Coverage(data_file=data_file)
    cov.load()
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name in cov.get_data().measured_files():
        path = Path(name).resolve()
        if not path.is_relative_to(ROOT) or path.suffix != ".py":
            continue
        _, statements, _, missing, _ = cov.analysis2(name)
        row = totals[layer(path)]
        row[0] += len(statements)
        row[1] += len(statements) - len(missing)
    return [(name, *totals[name]) for name in sorted(totals)]


def main(argv: list[str]) -> None:
    rows = table(argv[0] if argv else ".coverage")
    all_statements = sum(r[1] for r in rows)
    all_covered = sum(r[2] for r in rows)
    print("| layer | statements | covered | share |\n|---|---:|---:|---:|")
    for name, statements, covered in rows:
        print(f"| `{name}` | {statements:,} | {covered:,} | {covered / max(statements, 1):.1%} |")
    print(f"| all | {all_statements:,} | {all_covered:,} | {all_covered / max(all_statements, 1):.1%} |")


if __name__ == "__main__":
    main(sys.argv[1:])
