"""The registry: entry points, in-process plugins, broken plugins, ALILAMA_PLUGINS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
import torch
from alilama_testing import tiny_config

from alilama_core import ConfigError, PositionalScheme, UnknownPluginError, build_model, hookimpl
from alilama_core.engine.registry import Registry, get_positional, get_registry
from alilama_core.engine.validate import check_model

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "plugins" / "alilama-sinusoidal"


@pytest.fixture(scope="module")
def example_plugin_installed():
    """Install the example third-party plugin into this environment (if it is not yet)."""
    try:
        metadata.distribution("alilama-sinusoidal")
    except metadata.PackageNotFoundError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(EXAMPLE)], check=True)
    return "alilama-sinusoidal"


def run_cli(*args: str, env_extra: dict[str, str] | None = None, pythonpath: str | None = None):
    env = {k: v for k, v in os.environ.items() if k != "ALILAMA_PLUGINS"}
    env.update(env_extra or {})
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", "from alilama_core.app.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def make_dist(tmp_path: Path, dist: str, module: str, source: str) -> str:
    """A minimal installed distribution on a PYTHONPATH folder, with one alilama entry point."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    info = tmp_path / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[alilama]\n{module} = {module}\n")
    return str(tmp_path)


def test_example_plugin_is_used_through_its_entry_point(example_plugin_installed):
    result = run_cli("plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["registered"]
    row = next(r for r in rows if r["name"] == "sinusoidal")
    assert row["distribution"] == "alilama-sinusoidal" and row["kind"] == "positional"
    # and a model built from a plain config string uses it
    model = build_model(tiny_config(positional="sinusoidal", context_length=8))
    assert type(model.positional).__module__ == "alilama_sinusoidal.scheme"
    assert model(torch.zeros(1, 30, dtype=torch.long)).shape == (1, 30, 97)  # no table limit


def test_empty_alilama_plugins_loads_no_external_plugin(example_plugin_installed):
    result = run_cli("plugins", "--json", env_extra={"ALILAMA_PLUGINS": ""})
    names = {r["name"] for r in json.loads(result.stdout)["registered"]}
    assert "sinusoidal" not in names
    assert {"alibi", "rope", "sdpa", "eager"} <= names  # built-ins always load


def test_alilama_plugins_selects_by_distribution(example_plugin_installed, tmp_path):
    path = make_dist(
        tmp_path,
        "alilama-other",
        "other_plugin",
        """
        from alilama_core import hookimpl
        @hookimpl
        def register_positional_schemes(register):
            register("other", "alilama_positional.nope:NoPositions")
    """,
    )
    result = run_cli("plugins", "--json", env_extra={"ALILAMA_PLUGINS": "alilama_sinusoidal"}, pythonpath=path)
    names = {r["name"] for r in json.loads(result.stdout)["registered"]}
    assert "sinusoidal" in names and "other" not in names


def test_plugin_that_raises_on_import_does_not_break_the_cli(tmp_path):
    path = make_dist(
        tmp_path,
        "alilama-broken",
        "broken_plugin",
        """
        raise RuntimeError("this plugin is broken on purpose")
    """,
    )
    result = run_cli("plugins", "--json", pythonpath=path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    failed = {f["plugin"]: f for f in data["failed"]}
    assert "broken_plugin" in failed and "broken on purpose" in failed["broken_plugin"]["error"]
    assert failed["broken_plugin"]["distribution"] == "alilama-broken"
    assert {"alibi", "sdpa"} <= {r["name"] for r in data["registered"]}
    table = run_cli("plugins", pythonpath=path)
    assert table.returncode == 0 and "broken_plugin" in table.stderr and "skipped" in table.stderr
    assert run_cli("--help", pythonpath=path).returncode == 0


def test_plugin_that_raises_while_registering_is_skipped(tmp_path):
    path = make_dist(
        tmp_path,
        "alilama-badreg",
        "badreg_plugin",
        """
        from alilama_core import hookimpl
        @hookimpl
        def register_positional_schemes(register):
            register("fine", "alilama_positional.nope:NoPositions")
            raise ValueError("half-way failure")
    """,
    )
    result = run_cli("plugins", "--json", pythonpath=path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert any("half-way failure" in f["error"] for f in data["failed"])


class ConstantBias(PositionalScheme):
    """A bias scheme without slopes: every earlier key gets -1."""

    kind = "bias"

    def bias(self, q_pos, k_pos):
        return -(q_pos[:, None] > k_pos[None, :]).float().expand(self.n_heads, -1, -1)


class ThrowawayPlugin:
    @hookimpl
    def register_positional_schemes(self, register):
        register("constant-test", ConstantBias)


def test_throwaway_plugin_registered_in_process():
    registry = get_registry()
    registry.register_plugin(ThrowawayPlugin(), name="throwaway")
    try:
        assert get_positional("constant-test") is ConstantBias
        model = build_model(tiny_config(positional="constant-test", attention="sdpa"))
        ref = build_model(tiny_config(positional="constant-test", attention="eager"))
        ref.load_state_dict(model.state_dict())
        x = torch.randint(0, 97, (2, 9))
        torch.testing.assert_close(model(x), ref(x), rtol=1e-4, atol=1e-5)
        # a dense-only bias cannot go to flash, which takes only slopes
        with pytest.raises(ConfigError) as info:
            check_model(tiny_config(positional="constant-test", attention="flash"))
        message = str(info.value)
        assert "'flash'" in message and "'constant-test'" in message
        assert "eager" in message and "sdpa" in message and "flex" in message
    finally:
        registry.unregister_plugin("throwaway")
    with pytest.raises(UnknownPluginError):
        get_positional("constant-test")


def test_unknown_names_list_what_exists():
    with pytest.raises(UnknownPluginError) as info:
        get_positional("alibii")
    assert isinstance(info.value, KeyError)
    assert "alibi" in str(info.value) and "rope" in str(info.value) and "'alibii'" in str(info.value)
    with pytest.raises(UnknownPluginError, match="available: .*sdpa"):
        check_model(tiny_config(attention="sdpaa"))


def test_misspelt_hook_fails_loudly():
    class Misspelt:
        @hookimpl
        def register_positional_scheme(self, register):  # missing "s"
            pass

    registry = Registry()
    with pytest.raises(Exception, match="register_positional_scheme"):
        registry.register_plugin(Misspelt(), name="misspelt")


def test_every_hook_is_documented():
    """Each hook in hookspecs.py appears in docs/plugins.md under a heading with its signature."""
    import inspect

    from alilama_core.contracts import hookspecs

    doc = (REPO / "docs" / "plugins.md").read_text()
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("register_"):
            signature = f"{name}({', '.join(inspect.signature(fn).parameters)})"
            assert f"### {signature}" in doc, f"docs/plugins.md lacks a '### {signature}' heading"


def test_plugin_with_a_broken_command_is_rolled_back(tmp_path):
    """A command whose signature typer cannot read must not take the CLI down."""
    path = make_dist(
        tmp_path,
        "alilama-badcmd",
        "badcmd_plugin",
        """
        from __future__ import annotations
        from alilama_core import hookimpl

        @hookimpl
        def register_commands(app):
            def broken(x: UndefinedName) -> None:
                pass
            app.command("broken")(broken)
    """,
    )
    result = run_cli("plugins", "--json", pythonpath=path)
    assert result.returncode == 0, result.stderr
    failed = json.loads(result.stdout)["failed"]
    assert any(f["plugin"] == "badcmd_plugin" and "UndefinedName" in f["error"] for f in failed)
    help_text = run_cli("--help", pythonpath=path)
    assert help_text.returncode == 0 and "broken" not in help_text.stdout


CALLS: list[str] = []


class MarkedAndUnmarked:
    """One hook marked with @hookimpl, one function that merely has a hook's name."""

    @hookimpl
    def register_positional_schemes(self, register):
        CALLS.append("marked")
        register("marked-test", ConstantBias)

    def register_trainers(self, register):  # no marker: pluggy ignores it, so must the registry
        register("unmarked-test", object)


class FirstInLine:
    @hookimpl(tryfirst=True)
    def register_positional_schemes(self, register):
        CALLS.append("first")
        register("marked-test", "alilama_positional.nope:NoPositions")


def test_hooks_go_through_pluggy_markers_and_order():
    registry = get_registry()
    registry.register_plugin(MarkedAndUnmarked(), name="marked")
    try:
        assert get_positional("marked-test") is ConstantBias
        assert "unmarked-test" not in registry.names("trainer")
        registry.register_plugin(FirstInLine(), name="first")
        try:  # tryfirst is honoured in the order of the calls, but it does not take a name held
            CALLS.clear()
            assert get_positional("marked-test") is ConstantBias
            assert CALLS == ["first", "marked"]
            refused = [f for f in registry.failures() if f.refused and "'marked-test'" in f.error]
            assert [f.plugin for f in refused] == ["first"]
        finally:
            registry.unregister_plugin("first")
    finally:
        registry.unregister_plugin("marked")


def test_hook_kinds_are_one_table():
    from alilama_core.contracts import hookspecs
    from alilama_core.engine.registry import HOOKS, KINDS

    assert set(KINDS) == set(HOOKS) and {"tokenizer", "positional", "attention", "trainer"} <= set(KINDS)
    for hook in HOOKS.values():
        assert callable(getattr(hookspecs, hook)), f"{hook} has no hookspec"


def test_check_reports_a_lazy_object_that_does_not_import(tmp_path):
    path = make_dist(
        tmp_path,
        "alilama-lazybroken",
        "lazybroken_plugin",
        """
        from alilama_core import hookimpl
        @hookimpl
        def register_positional_schemes(register):
            register("ghost", "no_such_module_anywhere:Ghost")
    """,
    )
    listed = run_cli("plugins", "--json", pythonpath=path)
    assert listed.returncode == 0  # without --check, lazy objects are not imported
    checked = run_cli("plugins", "--check", "--json", pythonpath=path)
    assert checked.returncode == 1
    data = json.loads(checked.stdout)
    ghost = next(r for r in data["registered"] if r["name"] == "ghost")
    assert ghost["available"] is False and "no_such_module_anywhere" in ghost["reason"]
    assert any("ghost" in f["error"] and f["plugin"] == "lazybroken_plugin" for f in data["failed"])
    assert run_cli("plugins", "--check").returncode == 0  # the installed plugins all import


def test_unknown_name_also_names_plugins_that_failed(tmp_path):
    path = make_dist(
        tmp_path,
        "alilama-brokenscheme",
        "brokenscheme_plugin",
        """
        raise ImportError("a dependency of this plugin is missing")
    """,
    )
    result = run_cli("model", "info", "model.positional=missing-scheme", pythonpath=path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "unknown positional 'missing-scheme'" in result.stderr
    assert "brokenscheme_plugin" in result.stderr and "dependency of this plugin is missing" in result.stderr
