"""The module paths of the flat library keep working for one release, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MOVED = {
    "alilama_core.interfaces": {
        "PositionalScheme": "alilama_core.contracts.positional",
        "AttentionBackend": "alilama_core.contracts.attention",
        "AttentionBias": "alilama_core.contracts.attention",
        "Trainer": "alilama_core.contracts.trainer",
        "Task": "alilama_core.contracts.task",
        "Tokenizer": "alilama_core.contracts.tokenizer",
    },
    "alilama_core.config": {
        "ModelConfig": "alilama_core.contracts.config",
        "preset": "alilama_core.engine.configs",
        "apply_overrides": "alilama_core.engine.configs",
        "check_compatibility": "alilama_core.engine.validate",
    },
    "alilama_core.checkpoint": {
        "load_run": "alilama_core.runs.checkpoint",
        "load_tokenizer": "alilama_core.runs.tokenizers",
        "IntegrityError": "alilama_core.contracts.errors",
    },
    "alilama_core.tasks": {
        "SymbolTokenizer": "alilama_core.contracts.task",
        "TaskStream": "alilama_core.runs.tasks",
        "check_task": "alilama_core.kit.task",
    },
    "alilama_core.testing": {
        "check_positional_scheme": "alilama_core.kit.positional",
        "check_trainer": "alilama_core.kit.trainer",
        "tiny_model_config": "alilama_core.kit.common",
    },
    "alilama_core.registry": {"get_registry": "alilama_core.engine.registry"},
    "alilama_core.errors": {"ConfigError": "alilama_core.contracts.errors"},
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_gives_the_same_objects_and_says_where_they_went(old):
    # a fresh interpreter: the warning is raised once per process, at first import
    code = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        f"    import {old}\n"
        "print('|'.join(str(w.message) for w in seen if w.category is DeprecationWarning))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert f"{old} has moved to" in out
    module = importlib.import_module(old)
    for name, home in MOVED[old].items():
        assert getattr(module, name) is getattr(importlib.import_module(home), name), (old, name)


def test_the_package_names_the_new_homes():
    import alilama_core

    assert alilama_core.testing.check_trainer is importlib.import_module("alilama_core.kit").check_trainer
    assert alilama_core.Trainer is importlib.import_module("alilama_core.contracts.trainer").Trainer
    assert callable(alilama_core.generate)
