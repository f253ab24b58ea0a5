"""No import circle in the tree: the library's, the plugins' and the integrations' modules import one another
one way only.

The graph is grimp's (import-linter's), over the root packages of ``[tool.importlinter]``
in pyproject.toml; an import inside a function or under ``TYPE_CHECKING`` counts as
much as one at the top of a module. A circle is a strongly connected component of
more than one module (or a module that imports itself), and the test names one
circle through each, with the line of every import in it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter, a dev dependency")

REPO = Path(__file__).resolve().parents[2]


def root_packages() -> list[str]:
    """The packages import-linter checks: every import package the distribution ships."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["importlinter"]["root_packages"]


def import_circles(graph) -> list[list[str]]:
    """The strongly connected components of ``graph`` that hold a circle, each sorted, in sorted order.

    Tarjan's algorithm, without recursion: ``index`` is the order a module is
    reached in, ``low`` the lowest index reachable from it along the stack.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imports = work[-1]
            step = next(imports, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.find_modules_directly_imported_by(step)))))
                elif step in on_stack:
                    low[module] = min(low[module], index[step])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1 or graph.direct_import_exists(importer=module, imported=module):
                    found.append(sorted(component))
    return sorted(found)


def describe(graph, component: list[str]) -> str:
    """One circle through ``component``, ``a -> b (line 12) -> a (line 40)``: its shortest, from its first module."""
    first = component[0]
    members = set(component)
    following = sorted(m for m in graph.find_modules_directly_imported_by(first) if m in members)[0]
    back = graph.find_shortest_chain(importer=following, imported=first) if following != first else (first,)
    path = [first, *back]
    parts = [first]
    for importer, imported in zip(path, path[1:]):
        lines = sorted(d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported))
        parts.append(f"{imported} (line {', '.join(map(str, lines))} of {importer})")
    return f"{len(component)} modules: " + " -> ".join(parts)


def test_the_tree_has_no_import_circle():
    graph = grimp.build_graph(*root_packages(), include_external_packages=False, cache_dir=None)
    assert "alilama_bpe.tokenizer" in graph.modules and "alilama_hf.schemes" in graph.modules
    circles = import_circles(graph)
    assert not circles, "import circles:\n" + "\n".join(describe(graph, c) for c in circles)


def test_a_circle_is_found_and_named():
    graph = grimp.ImportGraph()
    for importer, imported, line in [
        ("pkg.a", "pkg.b", 3),
        ("pkg.b", "pkg.c", 5),
        ("pkg.c", "pkg.a", 7),  # a -> b -> c -> a
        ("pkg.d", "pkg.a", 1),  # outside the circle
        ("pkg.e", "pkg.e", 2),  # a module that imports itself
        ("pkg.f", "pkg.g", 4),
    ]:
        graph.add_import(importer=importer, imported=imported, line_number=line, line_contents="import")
    circles = import_circles(graph)
    assert circles == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.e"]]
    assert describe(graph, circles[0]) == (
        "3 modules: pkg.a -> pkg.b (line 3 of pkg.a) -> pkg.c (line 5 of pkg.b) -> pkg.a (line 7 of pkg.c)"
    )
