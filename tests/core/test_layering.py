"""The layering contracts in pyproject.toml: the library imports no plugin, integration or app module,
its layers import only downwards, the app imports no plugin or integration (it reaches them through the
registry), and plugins and integrations import nothing from the app.

The contract runs on the real tree, and on a copy of it with one offending
import added, to prove it fails when the layering is broken.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "alilama_core": "alilama_core",
    "alilama_positional": "plugins/alilama_positional",
    "alilama_attention": "plugins/alilama_attention",
    "alilama_bpe": "plugins/alilama_bpe",
    "alilama_trainers": "plugins/alilama_trainers",
    "alilama_tasks": "plugins/alilama_tasks",
    "alilama_loggers": "plugins/alilama_loggers",
    "alilama_exporters": "plugins/alilama_exporters",
    "alilama_hf": "integrations/alilama_hf",
}

pytest.importorskip("importlinter", reason="import-linter is a dev dependency (pip install -e '.[dev]')")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """Run import-linter on the packages under ``root`` (the editable install's finder set aside)."""
    paths = sorted({str(root / Path(rel).parent) for rel in PACKAGES.values()})
    code = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith('_editable')]\n"
        f"sys.path[:0] = {paths!r}\n"
        "from importlinter.cli import lint_imports\n"
        f"sys.exit(lint_imports(config_filename={str(root / 'pyproject.toml')!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)


def copy_tree(dest: Path) -> Path:
    for rel in PACKAGES.values():
        shutil.copytree(REPO / rel, dest / rel, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_library_imports_no_plugin(tmp_path):
    result = lint_imports(copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 broken" in result.stdout and "kept" in result.stdout


@pytest.mark.parametrize(
    "module, offending",
    [
        ("alilama_core/base/errors.py", "from alilama_attention import eager"),
        ("alilama_core/contracts/config.py", "import alilama_hf"),
        ("alilama_core/engine/registry.py", "from alilama_core.app import common"),
        ("alilama_core/runs/tasks.py", "import alilama_tasks"),
        # the layers: each imports only those below it
        ("alilama_core/contracts/config.py", "from alilama_core.engine import registry"),
        ("alilama_core/contracts/attention.py", "import alilama_core.runs.checkpoint"),
        ("alilama_core/engine/model.py", "from alilama_core.runs import data"),
        ("alilama_core/runs/evaluate.py", "from alilama_core.kit import common"),
        # the base layer stands under everything
        ("alilama_core/base/files.py", "from alilama_core.contracts import tokenizer"),
        # the app reaches plugins and integrations through the registry, never by importing them
        ("alilama_core/app/tokenizer.py", "from alilama_bpe import importers"),
        ("alilama_core/app/export.py", "import alilama_hf.push"),
        ("alilama_core/app/commands.py", "from alilama_trainers import default"),
        # plugins and integrations use the library, never the command line's modules
        ("plugins/alilama_positional/alibi.py", "from alilama_core.app import common"),
    ],
)
def test_the_contract_fails_on_a_violation(tmp_path, module, offending):
    root = copy_tree(tmp_path)
    with open(root / module, "a", encoding="utf-8") as f:
        f.write(f"\n{offending}  # a layering violation\n")
    result = lint_imports(root)
    assert result.returncode != 0
    assert "broken" in result.stdout and ", 0 broken" not in result.stdout
    assert module.removesuffix(".py").removeprefix("plugins/").replace("/", ".") in result.stdout


def test_every_plugin_package_is_in_the_contracts():
    """A new built-in plugin or integration package must be added to each contract (and to PACKAGES above)."""
    import re
    import tomllib

    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    shipped = set(re.findall(r'"(?:plugins|integrations)/(alilama_\w+)"', text))
    contracts = {c["name"]: c for c in tomllib.loads(text)["tool"]["importlinter"]["contracts"]}
    library, app, plugins = (
        next(c for name, c in contracts.items() if name.startswith(start))
        for start in ("The library imports no plugin", "The application imports no plugin", "Plugins and integrations")
    )
    assert shipped, "no plugin packages found in pyproject.toml"
    for contract, field in ((library, "forbidden_modules"), (app, "forbidden_modules"), (plugins, "source_modules")):
        missing = shipped - set(contract[field])
        assert not missing, f"not in {contract['name']!r} ({field}): {sorted(missing)}"
    assert shipped <= set(PACKAGES)
