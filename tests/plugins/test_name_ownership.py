"""Who owns a name: a plugin registering a name another holds is refused unless it declares ``replaces=``.

Through the CLI with the test-only package ``alilama-impostor`` (tests/plugins/alilama-impostor),
which registers its own ``sdpa`` only when ``ALILAMA_IMPOSTOR`` is set: ``plain`` (no declaration,
refused) or ``declared`` (``replaces="alilama"``, it replaces the built-in and every command says so).
In-process with two local plugins that clash, and a plugin with a misspelt hook that must not take
the plugins loaded after it down with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from alilama_testing import needs_test_plugins

from alilama_core import PositionalScheme, TokenizerError, hookimpl
from alilama_core.engine.registry import Registry, get_positional, get_registry

IMPOSTOR = "alilama-impostor"


needs_impostor = needs_test_plugins(IMPOSTOR)


def cli(*args: str, mode: str | None, extra: dict[str, str] | None = None, pythonpath: str | None = None):
    env = {k: v for k, v in os.environ.items() if k not in ("ALILAMA_PLUGINS", "ALILAMA_IMPOSTOR")}
    if mode is not None:
        env["ALILAMA_IMPOSTOR"] = mode
    env.update(extra or {})
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-m", "alilama_core", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def sdpa_row(stdout: str) -> dict:
    return next(r for r in json.loads(stdout)["registered"] if (r["kind"], r["name"]) == ("attention", "sdpa"))


REPLACED = "the built-in attention 'sdpa' of alilama is replaced by plugin 'impostor' of alilama-impostor"


# -- through the CLI, with an installed third-party package ---------------------------------------


@needs_impostor
def test_an_undeclared_registration_of_a_builtin_name_is_refused():
    listed = cli("plugins", "--json", mode="plain")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    row = sdpa_row(listed.stdout)
    assert row["distribution"] == "alilama" and row["replaces"] is None  # the built-in keeps it
    (refusal,) = [f for f in data["failed"] if f["plugin"] == "impostor"]
    assert refusal["refused"] is True and refusal["distribution"] == IMPOSTOR
    message = refusal["error"]
    assert "attention 'sdpa'" in message and "alilama-impostor" in message and "of alilama " in message
    assert "replaces='alilama'" in message  # how to declare it
    # the impostor's other registration stands
    assert "impostor-bpe" in {r["name"] for r in data["registered"] if r["kind"] == "tokenizer"}

    table = cli("plugins", mode="plain")
    assert table.returncode == 0
    assert "registered a name another plugin holds" in table.stderr and "alilama-impostor" in table.stderr
    assert "replaced by" not in table.stderr
    assert cli("plugins", "--check", mode="plain").returncode == 1  # a refusal is a problem to fix

    info = cli("model", "info", "--preset", "essay", mode="plain")
    assert info.returncode == 0, info.stderr
    assert "attention: sdpa (alilama 0" in info.stdout and "REPLACES" not in info.stdout
    assert "replaced by" not in info.stderr


@needs_impostor
def test_a_declared_replacement_wins_and_every_command_says_so():
    listed = cli("plugins", "--json", mode="declared")
    assert listed.returncode == 0, listed.stderr
    row = sdpa_row(listed.stdout)
    assert row["distribution"] == IMPOSTOR and row["plugin"] == "impostor"
    assert row["replaces"]["distribution"] == "alilama" and row["replaces"]["plugin"] == "attention"
    assert not [f for f in json.loads(listed.stdout)["failed"] if f["plugin"] == "impostor"]
    assert REPLACED in listed.stderr  # said on stderr even beside --json

    table = cli("plugins", mode="declared")
    assert table.returncode == 0 and REPLACED in table.stderr
    assert "replaces" in table.stdout and "alilama's" in table.stdout
    checked = cli("plugins", "--check", mode="declared")
    assert checked.returncode == 0, checked.stderr  # declared: not a failure, but loud
    assert REPLACED in checked.stderr

    info = cli("model", "info", "--preset", "essay", mode="declared")
    assert info.returncode == 0, info.stderr
    assert "attention: sdpa (alilama-impostor 0.1.0; REPLACES alilama's 'sdpa'" in info.stdout
    assert REPLACED in info.stderr
    report = json.loads(cli("model", "info", "--preset", "essay", "--json", mode="declared").stdout)
    assert report["plugins"]["attention"]["distribution"] == IMPOSTOR
    assert report["plugins"]["attention"]["replaces"] == "alilama"


@needs_impostor
@pytest.mark.parametrize("mode", ["plain", "declared"])
def test_train_runs_the_backend_that_holds_the_name_and_says_so(mode, tmp_path):
    log = tmp_path / "impostor.log"
    args = ["train", "--preset", "tiny", "--task", "copy", "--out", str(tmp_path / "run"), "--no-progress"]
    overrides = ["model.attention=sdpa", "train.max_steps=1", "train.eval_every=1", "train.sample_tokens=0"]
    result = cli(*args, *overrides, mode=mode, extra={"ALILAMA_IMPOSTOR_LOG": str(log)})
    assert result.returncode == 0, result.stdout + result.stderr
    if mode == "plain":
        assert not log.exists(), "the refused impostor sdpa ran"
        assert "replaced by" not in result.stderr
    else:
        assert log.is_file() and "impostor sdpa called" in log.read_text()
        warning = result.stderr.index(REPLACED)
        assert "done: step 1" in result.stdout and warning >= 0


@needs_impostor
def test_a_tokenizer_records_the_name_it_was_trained_as(tmp_path):
    """``impostor-bpe``'s class says ``name = "impostor"``: the folder must record ``impostor-bpe``."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world, hello there; the cat sat on the mat.\n" * 40, encoding="utf-8")
    tok = tmp_path / "tok"
    trained = cli(
        "tokenizer", "train", "-i", str(corpus), "-v", "270", "-o", str(tok), "-k", "impostor-bpe", mode="plain"
    )
    assert trained.returncode == 0, trained.stderr
    assert json.loads((tok / "alilama_tokenizer.json").read_text()) == {"kind": "impostor-bpe"}
    prepared = cli(
        "data", "prepare", "-i", str(corpus), "--tokenizer", str(tok), "-o", str(tmp_path / "data"), mode="plain"
    )
    assert prepared.returncode == 0, prepared.stderr  # the next command loads it back
    assert (tmp_path / "data").is_dir()

    unknown = cli("tokenizer", "info", "-t", str(tok), mode=None)  # the plugin registers nothing now
    assert unknown.returncode == 1
    assert "records kind 'impostor-bpe', which no installed plugin registers" in unknown.stderr
    assert "Install the plugin" in unknown.stderr and "bpe" in unknown.stderr


# -- the recorded kind, in-process ----------------------------------------------------------------


def test_an_empty_recorded_kind_says_so_rather_than_missing(tmp_path):
    from alilama_core.contracts.tokenizer import KIND_FILE
    from alilama_core.engine.registry import get_tokenizer
    from alilama_core.runs.tokenizers import load_tokenizer, save_tokenizer

    tok = get_tokenizer("bpe").train(["hello hello world"], vocab_size=259)
    folder = save_tokenizer(tok, tmp_path / "tok")
    assert json.loads((folder / KIND_FILE).read_text()) == {"kind": "bpe"}
    (folder / KIND_FILE).write_text('{"kind": ""}\n')
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(folder)
    message = str(info.value)
    assert "exists but records no tokenizer kind" in message and "missing" not in message
    assert '{"kind": "bpe"}' in message
    with pytest.raises(TokenizerError, match="a folder recording 'symbols' would not load it back"):
        save_tokenizer(tok, tmp_path / "other", kind="symbols")  # a registered kind of another class
    assert not (tmp_path / "other").exists()


# -- in-process: two local plugins clash ----------------------------------------------------------


class Flat(PositionalScheme):
    kind = "none"


class Holder:
    @hookimpl
    def register_positional_schemes(self, register):
        register("owned-test", Flat, description="the first")


class Taker:
    @hookimpl
    def register_positional_schemes(self, register):
        register("owned-test", "alilama_positional.nope:NoPositions")


class DeclaredTaker:
    @hookimpl
    def register_positional_schemes(self, register):
        register("owned-test", "alilama_positional.nope:NoPositions", replaces="holder")


class WrongDeclaration:
    @hookimpl
    def register_positional_schemes(self, register):
        register("owned-test", "alilama_positional.nope:NoPositions", replaces="someone-else")


@pytest.fixture
def holder():
    registry = get_registry()
    registry.register_plugin(Holder(), name="holder", distribution="holder-dist", version="1.0")
    yield registry
    registry.unregister_plugin("holder")


def test_a_local_plugin_cannot_silently_take_a_name_another_holds(holder):
    holder.register_plugin(Taker(), name="taker", distribution="taker-dist", version="2.0")
    try:
        assert get_positional("owned-test") is Flat  # the first keeps it
        (refused,) = [f for f in holder.failures() if f.refused and "'owned-test'" in f.error]
        assert (refused.plugin, refused.distribution) == ("taker", "taker-dist")
        assert "holder-dist" in refused.error and "taker-dist" in refused.error
        assert "replaces='holder-dist'" in refused.error
        assert holder.replacements() == []
    finally:
        holder.unregister_plugin("taker")
    assert not [f for f in holder.failures() if "'owned-test'" in f.error]


def test_a_declared_replacement_takes_the_name_and_keeps_what_it_replaced(holder):
    holder.register_plugin(DeclaredTaker(), name="declared", distribution="local")  # by the holder's plugin name
    try:
        assert get_positional("owned-test").__name__ == "NoPositions"
        entry = holder.entry("positional", "owned-test")
        assert entry.plugin == "declared" and entry.replaces == "holder"
        assert entry.replaced is not None and entry.replaced.distribution == "holder-dist"
        assert entry.replaced.target is Flat and entry.replaced.meta == {"description": "the first"}
        assert entry in holder.replacements()
        note = entry.replacement_note()
        assert "positional 'owned-test' of holder-dist is replaced by plugin 'declared'" in note
        assert not [f for f in holder.failures() if "'owned-test'" in f.error]
    finally:
        holder.unregister_plugin("declared")
    assert get_positional("owned-test") is Flat  # back with its holder


def test_a_declaration_naming_someone_else_is_refused(holder):
    holder.register_plugin(WrongDeclaration(), name="wrong", distribution="wrong-dist")
    try:
        assert get_positional("owned-test") is Flat
        (refused,) = [f for f in holder.failures() if f.refused and "'owned-test'" in f.error]
        assert "declares replaces='someone-else'" in refused.error and "holder-dist" in refused.error
        assert "declare replaces='holder-dist'" in refused.error
    finally:
        holder.unregister_plugin("wrong")


def test_a_bad_replaces_value_is_a_clear_failure():
    class BadValue:
        @hookimpl
        def register_positional_schemes(self, register):
            register("bad-replaces-test", Flat, replaces=3)

    registry = Registry()
    registry.register_plugin(BadValue(), name="badvalue")
    assert "bad-replaces-test" not in registry.names("positional")
    (failure,) = [f for f in registry.failures() if f.plugin == "badvalue"]
    assert "replaces must name the distribution" in failure.error and "replaces='alilama'" in failure.error


# -- a misspelt hook name is isolated -------------------------------------------------------------


class Misspelt:
    @hookimpl
    def register_positional_scheme(self, register):  # missing "s"
        register("never-test", Flat)


class Good:
    @hookimpl
    def register_positional_schemes(self, register):
        register("good-test", Flat)


def test_a_plugin_with_a_misspelt_hook_does_not_break_the_ones_after_it():
    registry = Registry()
    with pytest.raises(Exception, match="register_positional_scheme"):
        registry.register_plugin(Misspelt(), name="misspelt")
    assert not registry.pm.has_plugin("misspelt")  # taken out again
    registry.register_plugin(Good(), name="good")  # would raise the misspelt plugin's error otherwise
    assert "good-test" in registry.names("positional") and "never-test" not in registry.names("positional")
    assert not [f for f in registry.failures() if f.plugin in ("misspelt", "good")]


def _dist(root: Path, dist: str, module: str, source: str) -> None:
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[alilama]\n{module} = {module}\n")


def test_a_misspelt_hook_in_an_installed_plugin_fails_alone(tmp_path):
    _dist(
        tmp_path,
        "alilama-misspelt",
        "aa_misspelt",
        """
        from alilama_core import hookimpl
        @hookimpl
        def register_attention_backend(register):  # missing "s"
            pass
        """,
    )
    _dist(  # loaded after it (entry points load by name)
        tmp_path,
        "alilama-fine",
        "bb_fine",
        """
        from alilama_core import hookimpl
        @hookimpl
        def register_positional_schemes(register):
            register("fine-test", "alilama_positional.nope:NoPositions")
        """,
    )
    result = cli("plugins", "--json", mode=None, pythonpath=str(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    ours = [f for f in data["failed"] if f["plugin"] in ("aa_misspelt", "bb_fine")]
    assert [f["plugin"] for f in ours] == ["aa_misspelt"]
    assert "register_attention_backend" in ours[0]["error"] and ours[0]["distribution"] == "alilama-misspelt"
    fine = next(r for r in data["registered"] if r["name"] == "fine-test")
    assert fine["distribution"] == "alilama-fine"
