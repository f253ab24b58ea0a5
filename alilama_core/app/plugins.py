"""``alilama plugins``: every installed plugin, what it registers, and whether it loads."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from alilama_core.app.common import JsonOpt, console, err_console, examples, warn_replacements


@examples("alilama plugins", "alilama plugins --check --json")
def plugins_cmd(
    as_json: JsonOpt = False,
    check: Annotated[
        bool, typer.Option("--check", help="Import every registered object; exit 1 if any plugin fails.")
    ] = False,
) -> None:
    """List installed plugins: distribution, version, what each registers, and availability."""
    from alilama_core.contracts.attention import AttentionBackend
    from alilama_core.engine.registry import get_registry

    reg = get_registry()
    rows = []
    for kind, table in reg.tables().items():
        for name, entry in sorted(table.items()):
            status, reason = "ok", ""
            if check or kind in ("attention", "logger"):
                try:
                    obj = entry.resolve()
                    if isinstance(obj, AttentionBackend):
                        reason = obj.available() or ""
                    elif kind == "logger" and hasattr(obj, "check_available"):
                        obj.check_available()  # a missing library: the extra that installs it
                except Exception as exc:  # an import error is shown, not raised
                    reason = f"{type(exc).__name__}: {exc}"
                status = "unavailable" if reason else "ok"
            rows.append(
                dict(
                    kind=kind,
                    name=name,
                    plugin=entry.plugin,
                    distribution=entry.distribution,
                    version=entry.version,
                    available=status == "ok",
                    reason=reason,
                    description=entry.meta.get("description", ""),
                    replaces=None
                    if entry.replaced is None
                    else dict(
                        plugin=entry.replaced.plugin,
                        distribution=entry.replaced.distribution,
                        version=entry.replaced.version,
                    ),
                )
            )
    failures = [vars(f) for f in (reg.check() if check else reg.failures())]
    if as_json:
        print(json.dumps({"registered": rows, "failed": failures}, indent=2))
    else:
        _print_plugins(rows, failures)
    warn_replacements()  # on stderr, also beside --json
    if check and failures:
        raise typer.Exit(1)


def _print_plugins(rows: list[dict], failures: list[dict]) -> None:
    table = Table(title="Alilama plugins")
    for col in ("kind", "name", "plugin", "distribution", "version", "status"):
        table.add_column(col)
    notes = []
    for r in rows:
        status = "[green]ok[/]"
        if not r["available"]:
            notes.append(f"[{len(notes) + 1}] {r['kind']} {r['name']}: {r['reason']}")
            status = f"[yellow]unavailable [{len(notes)}][/]"
        if r["replaces"]:
            status += f" [bold yellow]replaces {r['replaces']['distribution']}'s[/]"
        table.add_row(r["kind"], r["name"], r["plugin"], r["distribution"], r["version"], status)
    console.print(table)
    for note in notes:
        console.print(note, markup=False, highlight=False)
    for f in failures:
        what = "registered a name another plugin holds" if f.get("refused") else "failed to load and was skipped"
        err_console.print(
            f"[yellow]warning:[/] plugin {f['plugin']!r} ({f['distribution']}) {what}: {escape(f['error'])}",
            highlight=False,
            soft_wrap=True,
        )
