"""Every Python snippet of docs/tape.md and docs/tasks.md compiles and imports or defines every name it uses.

A reader copies a snippet into a file and runs it: a name it uses but never
imports (``torch`` without ``import torch``) is a NameError there. The check is
static (nothing runs): Python's own symbol tables give each name the snippet
reads at module level, or as a global inside its functions, and each must be
bound in the snippet (imported, assigned, defined) or be a builtin.
"""

from __future__ import annotations

import builtins
import re
import symtable
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ["tape.md", "tasks.md"]
FENCE = re.compile(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)


def snippets(page: str) -> list[tuple[int, str]]:
    """(line number, source) of each ```python block of ``page``, dedented by its fence's indent."""
    text = (DOCS / page).read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        indent = len(m.group(1))
        source = "".join(line[indent:] for line in m.group(2).splitlines(keepends=True))
        found.append((text[: m.start()].count("\n") + 1, source))
    return found


def unbound_names(source: str) -> set[str]:
    """Names the code reads that it never binds at module level and that are no builtin."""
    top = symtable.symtable(source, "<snippet>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    used: set[str] = set()

    def walk(table, module: bool) -> None:
        for sym in table.get_symbols():
            if not sym.is_referenced():
                continue
            if module or sym.is_global():
                used.add(sym.get_name())
        for child in table.get_children():
            walk(child, False)

    walk(top, True)
    return {name for name in used - bound if not hasattr(builtins, name)}


CASES = [(page, line, source) for page in PAGES for line, source in snippets(page)]


def test_the_pages_have_snippets():
    assert {page for page, _, _ in CASES} == set(PAGES)


@pytest.mark.parametrize(("page", "line", "source"), CASES, ids=[f"{p}:{n}" for p, n, _ in CASES])
def test_snippet_compiles_and_binds_every_name(page, line, source):
    compile(source, f"{page}:{line}", "exec")
    missing = unbound_names(source)
    assert not missing, f"{page}, the snippet at line {line} uses {sorted(missing)} without importing or defining them"


def test_the_check_catches_a_missing_import_and_an_undefined_name():
    assert unbound_names("ids = torch.tensor([1])\n") == {"torch"}
    assert unbound_names("import torch\nids = torch.tensor([1])\nprint(ids[layer])\n") == {"layer"}
    assert unbound_names("def f():\n    return np.zeros(3)\n") == {"np"}
    assert unbound_names("import numpy as np\ndef f(x):\n    return np.zeros(x), len(x)\n") == set()
    assert (
        unbound_names("from a import b\n@b\nclass C:\n    y = 1\n    def m(self):\n        return C, self.y\n") == set()
    )
    assert unbound_names("[x for x in range(3)]\n") == set()
