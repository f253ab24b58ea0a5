"""Every input has a bound, checked before work starts (``alilama_core.base.limits``).

Each crafted input runs in a process of its own, after torch, the CLI and the
plugins are imported: the call itself must be refused in under a second of CPU
time (and well under ten of wall-clock time, however busy the machine) and
under 100 MiB of peak memory growth, with an error naming the limit. For CLI
commands the exit status is not 0 and the output holds one ``error:`` line and
no traceback. The process caps its address space at its footprint plus 2 GiB,
so a bound that stops working fails its test quickly instead of exhausting the
machine.

The imports take seconds, so one interpreter (the zygote, ``ZYGOTE``) does them
once and forks a fresh child for every case; the zygote itself never runs a
case, nor any torch operation, so no thread pool of torch's is running when it
forks (the one thread ``import torch`` starts, OpenBLAS's through numpy, stops
around a fork by itself). A forked child's peak memory starts from its own
footprint, so the growth it reports is its own (an interpreter started from
pytest would carry pytest's peak over ``exec`` and hide growth below it).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from alilama_testing import ForkServer

ROOT = Path(__file__).resolve().parents[2]
SECONDS = 1.0
"""CPU time of the refused call (the processes of a busy test machine share its cores)."""
WALL = 10.0
"""Wall-clock time of the refused call: a call that waits on nothing stays far below it."""
GROWTH = 100 * 2**20
CHILD_TIMEOUT = 120.0
"""A case still running after this long is killed (the wall-clock bound is far lower; this one ends a hang)."""

ZYGOTE = r"""
import json, os, resource, sys, time, traceback

sys.path.insert(0, sys.argv[1])
from cli_server import redirect, reply_channel, serve  # the tests' fork server

replies = reply_channel()
import torch  # noqa: F401 - the footprint every command starts from
from typer.testing import CliRunner
from alilama_core.app.cli import get_app
from alilama_core.engine.registry import get_registry

app = get_app()
get_registry().tables()  # plugins found before the clock starts


def run_case(spec):
    os.chdir(spec["cwd"])
    os.environ.clear()
    os.environ.update(spec["env"])
    ns = {}
    exec(spec.get("setup", ""), ns)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30), vm + (2 << 30)))
    try:  # the peak starts from here, not from the zygote's (where a kernel carries it over a fork)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start, cpu = time.perf_counter(), time.process_time()
    if spec["kind"] == "cli":
        result = CliRunner().invoke(app, spec["args"], catch_exceptions=True)
        exc = result.exception
        out = {
            "exit_code": result.exit_code,
            "output": result.output,
            "exception": None if exc is None or isinstance(exc, SystemExit) else repr(exc),
        }
    else:
        try:
            exec(spec["code"], ns)
            out = {"error": None}
        except Exception as exc:
            out = {"error": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    out.update(seconds=seconds, cpu=cpu, grown=grown)
    return out


def child(spec):
    code = 1
    try:
        redirect(spec)
        result = run_case(spec)
        with open(spec["result"], "w") as f:
            json.dump(result, f)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def tail(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-3000:]
    except OSError:
        return ""


def left_behind(spec, killed):  # the child's result (read, then removed for the next case), its output's ends
    answer = {"stdout": tail(spec["stdout"]), "stderr": tail(spec["stderr"])}
    if os.path.exists(spec["result"]):
        if not killed:
            with open(spec["result"]) as f:
                answer["result"] = json.load(f)
        os.remove(spec["result"])
    return answer


spec = serve(replies, left_behind)
if spec is not None:
    child(spec)
"""


def case_env(cwd: Path) -> dict[str, str]:
    """The environment a case runs with: the default limits, and remote code copied under ``cwd``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_MODULES_CACHE": str(cwd / ".hf-modules"),  # remote code is copied here, not into the home folder
    }
    for name in list(env):
        if name.startswith("ALILAMA_MAX_"):
            del env[name]  # the default limits
    return env


def start_zygote() -> ForkServer:
    """An interpreter that has imported what every case needs and forks a child for each."""
    folder = Path(tempfile.mkdtemp(prefix="alilama-zygote-"))
    return ForkServer(["-c", ZYGOTE, str(ROOT / "tests")], env=case_env(folder), cwd=ROOT, folder=folder)


_zygote: ForkServer | None = None


@pytest.fixture(scope="module", autouse=True)
def _close_zygote():
    yield
    global _zygote
    if _zygote is not None:
        _zygote.discard()
        _zygote = None


def measure(spec: dict, cwd: Path, timeout: float = CHILD_TIMEOUT) -> dict:
    """Run one case in a child of the zygote (started on first use); its measured result."""
    global _zygote
    if _zygote is None or _zygote.proc.poll() is not None:
        if _zygote is not None:
            _zygote.discard()  # it died on an earlier case
        _zygote = start_zygote()
    files = {name: str(_zygote.folder / name) for name in ("stdout", "stderr", "result")}
    answer = _zygote.ask({**spec, **files, "cwd": str(cwd), "env": case_env(cwd), "timeout": timeout}, timeout + 300)
    how = f"killed after {timeout:.0f} s" if answer["killed"] else f"exit {answer['exit']}"
    assert "result" in answer, f"the case did not finish ({how}):\n{answer['stdout']}\n{answer['stderr']}"
    return answer["result"]


def bounded(spec: dict, cwd: Path) -> dict:
    """Run one case in a child of the zygote; its measured result, checked against the bounds."""
    result = measure(spec, cwd)
    assert result["cpu"] < SECONDS, f"took {result['cpu']:.2f} s of CPU time (bound: {SECONDS} s): {result}"
    assert result["seconds"] < WALL, f"took {result['seconds']:.2f} s (bound: {WALL} s): {result}"
    assert result["grown"] < GROWTH, f"grew {result['grown'] / 2**20:.0f} MiB (bound: 100 MiB): {result}"
    return result


def refused_cli(cwd: Path, args: list[str], phrase: str) -> str:
    result = bounded({"kind": "cli", "args": args}, cwd)
    output = result["output"]
    assert result["exception"] is None, f"an unexpected exception escaped: {result['exception']}\n{output}"
    assert result["exit_code"] != 0, output
    assert "Traceback" not in output, output
    assert "error:" in output, output
    assert phrase in " ".join(output.split()), f"{phrase!r} not in:\n{output}"
    return output


def refused_call(cwd: Path, code: str, error: str, phrase: str, setup: str = "") -> str:
    result = bounded({"kind": "call", "code": code, "setup": setup}, cwd)
    assert result["error"] == error, result
    assert phrase in result["message"], f"{phrase!r} not in: {result['message']}"
    return result["message"]


# -- a workspace: a text run, a task run, a tokenizer folder, an export -----------------------------

BOMB = """\
{section}:
  {field}:
    a: &a [x, x, x, x, x, x, x, x, x]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
    i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def save_run(folder: Path, cfg, tokenizer) -> Path:
    """A run folder written by the library's own savers: config.yaml, tokenizer/, final/model.safetensors."""
    from alilama_core import build_model
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights
    from alilama_core.runs.tokenizers import save_tokenizer

    save_weights(build_model(cfg.model), folder / "final")
    save(cfg, folder / "config.yaml")
    save_tokenizer(tokenizer, folder / "tokenizer")
    return folder


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core.engine.configs import apply_overrides, preset
    from alilama_core.runs.tasks import get_task

    root = tmp_path_factory.mktemp("bounds")
    words = " ".join(f"{a}{b}{c}" for a in "abcdefg" for b in "hijklmn" for c in "opqrstu")
    tok = BPETokenizer.train([f"Once upon a time {words}"] * 3, 300, special_tokens=["<|endoftext|>"])
    text = apply_overrides(preset("tiny"), [f"model.vocab_size={tok.vocab_size}", "model.attention=sdpa"])
    save_run(root / "run", text, tok)
    task = get_task("copy")
    cfg = apply_overrides(
        preset("tiny"), ["task.name=copy", "task.lengths=1-4", f"model.vocab_size={len(task.vocabulary())}"]
    )
    save_run(root / "taskrun", cfg, task.tokenizer())
    return root


# -- 1. YAML: aliases, tags, nesting ---------------------------------------------------------------


@pytest.mark.parametrize(
    "section, field, command",
    [
        ("model", "positional_options", ["model", "info", "--config", "bomb.yaml"]),
        ("train", "trainer_options", ["train", "--config", "bomb.yaml", "--out", "out", "--task", "copy"]),
        ("task", "options", ["train", "--config", "bomb.yaml", "--out", "out"]),
        ("model", "positional_options", ["train", "--resume", "bombrun"]),
    ],
)
def test_a_yaml_alias_bomb_is_refused_before_it_expands(work, tmp_path, section, field, command):
    bomb = BOMB.format(section=section, field=field)
    assert len(bomb.encode()) < 500  # a few hundred bytes that would expand to 387 million values
    (tmp_path / "bomb.yaml").write_text(bomb)
    (tmp_path / "bombrun").mkdir()
    (tmp_path / "bombrun" / "config.yaml").write_text(bomb)
    output = refused_cli(tmp_path, command, "expands to more than 100,000 values")
    assert "ALILAMA_MAX_YAML_NODES" in " ".join(output.split())
    assert not (tmp_path / "out").exists()


def test_an_alias_bomb_in_an_override_is_refused(work):
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    levels += [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]
    override = "model.positional_options={" + ", ".join(levels) + "}"
    refused_cli(work, ["model", "info", "--preset", "tiny", override], "expands to more than 100,000 values")


def test_yaml_that_refers_to_itself_or_nests_too_deep_is_refused(tmp_path):
    (tmp_path / "cycle.yaml").write_text("model:\n  positional_options: &a {x: *a}\n")
    refused_cli(tmp_path, ["model", "info", "--config", "cycle.yaml"], "refers to a node that contains it")
    (tmp_path / "deep.yaml").write_text("model:\n  positional_options: {a: " + "[" * 50_000 + "]" * 50_000 + "}\n")
    output = refused_cli(tmp_path, ["model", "info", "--config", "deep.yaml"], "more than 100 levels deep")
    assert "ALILAMA_MAX_NESTING_DEPTH" in " ".join(output.split())
    block = "model:\n  positional_options:\n" + "".join("  " * (i + 2) + f"k{i}:\n" for i in range(150)) + "x: 1\n"
    (tmp_path / "block.yaml").write_text(block)
    refused_cli(tmp_path, ["model", "info", "--config", "block.yaml"], "nests more than 100 levels deep (line 100)")


def test_yaml_tags_that_run_code_are_refused(tmp_path):
    (tmp_path / "tag.yaml").write_text(
        'model:\n  positional_options: !!python/object/apply:os.system ["touch pwned"]\n'
    )
    refused_cli(tmp_path, ["model", "info", "--config", "tag.yaml"], "is not allowed")
    assert not (tmp_path / "pwned").exists()


def test_aliases_within_the_budget_still_load(tmp_path):
    from alilama_core.engine import configs as cfgmod

    (tmp_path / "ok.yaml").write_text("model:\n  positional_options: &o {theta: 500000.0}\n  positional: rope\n")
    (tmp_path / "twice.yaml").write_text("train:\n  sample_prompts: &p [Once, Twice]\nmodel:\n  positional: rope\n")
    assert cfgmod.load(tmp_path / "ok.yaml").model.rope_theta == 500000.0
    assert cfgmod.load(tmp_path / "twice.yaml").train.sample_prompts == ["Once", "Twice"]


def test_a_huge_or_deeply_nested_config_file_is_refused(tmp_path):
    (tmp_path / "deep.json").write_text(
        '{"model": {"positional_options": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}}"
    )
    refused_cli(tmp_path, ["model", "info", "--config", "deep.json"], "more than 100 levels deep")
    (tmp_path / "big.yaml").write_text("# " + "x" * (2 << 20) + "\n")
    refused_cli(tmp_path, ["model", "info", "--config", "big.yaml"], "too many for a config")


# -- 2. viz positional --distance ------------------------------------------------------------------


def test_viz_positional_distance_is_bounded(work):
    output = refused_cli(
        work,
        ["viz", "positional", "--preset", "tiny", "--distance", "1000000000", "--out", "p.png"],
        "MAX_VIZ_DISTANCE",
    )
    assert "1,000,000,000" in output and not (work / "p.png").exists()


def test_viz_positional_default_distance_is_bounded_too(work):
    refused_cli(
        work,
        ["viz", "positional", "--preset", "tiny", "model.context_length=1000000", "--out", "p.png"],
        "the picture would cover 1,000,000 distances",
    )


# -- 3. and 4. task lengths and test sets ----------------------------------------------------------


def test_task_lengths_are_bounded(work):
    output = refused_cli(
        work,
        ["train", "--preset", "tiny", "--task", "copy", "task.lengths=1-1000000", "--out", "t", "--no-progress"],
        "asks for examples of length 1,000,000",
    )
    assert "MAX_TASK_LENGTH=8,192" in output and not (work / "t").exists()


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["--lengths", "1000000"], "MAX_TASK_LENGTH"),
        (["--lengths", ",".join(["4"] * 10_000)], "gives 10,000 lengths"),
        (["--lengths", "4", "--examples", "100000000"], "MAX_TASK_EXAMPLES"),
        (["--lengths", "8192,8192", "--examples", "60000"], "MAX_EVAL_TOKENS"),
    ],
)
def test_task_eval_lengths_and_examples_are_bounded(work, args, phrase):
    refused_cli(work, ["eval", "taskrun", *args], phrase)


def test_task_val_examples_are_bounded(work):
    refused_cli(
        work,
        ["train", "--preset", "tiny", "--task", "copy", "task.val_examples=1000000000", "--out", "t2"],
        "MAX_TASK_EXAMPLES",
    )


# -- 5. safetensors headers ---------------------------------------------------------------------------


def craft_safetensors(path: Path, header: dict, data: bytes = b"\0" * 64, length: int | None = None) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)


@pytest.mark.parametrize(
    "header, length, phrase",
    [
        (
            {"tok_emb.weight": {"dtype": "F32", "shape": [65536, 65536], "data_offsets": [0, 17179869184]}},
            None,
            "ends at byte 17,179,869,184 of the data but the file holds 64 bytes",
        ),
        (
            {"tok_emb.weight": {"dtype": "F32", "shape": [65536, 65536], "data_offsets": [0, 64]}},
            None,
            "declares shape [65536, 65536] of F32 (17,179,869,184 bytes)",
        ),
        ({"__metadata__": {"format": "pt"}}, 16 << 30, "header declares 17,179,869,184 bytes"),
    ],
)
def test_a_safetensors_header_is_checked_against_the_file(work, tmp_path, header, length, phrase):
    run = tmp_path / "run"
    shutil.copytree(work / "run", run)
    craft_safetensors(run / "final" / "model.safetensors", header, length=length)
    refused_cli(tmp_path, ["generate", "run", "--no-verify", "--prompt", "Once", "-n", "1"], phrase)
    message = refused_call(
        tmp_path,
        "load_weights(build_model(preset('tiny').model), 'run/final')",
        "CheckpointError",
        phrase,
        setup="from alilama_core import build_model\nfrom alilama_core.runs.checkpoint import load_weights\n"
        "from alilama_core.engine.configs import preset",
    )
    assert "is corrupt" in message


def test_a_sound_safetensors_file_passes_the_header_check(work):
    from alilama_core.base.limits import safetensors_problem

    assert safetensors_problem(work / "run" / "final" / "model.safetensors") is None


# -- 6. model dimensions: a run's config.yaml, overrides, an exported config.json --------------------


def test_model_dimensions_have_documented_limits(work):
    output = refused_cli(
        work, ["model", "info", "--preset", "tiny", "model.n_layers=5000", "model.d_model=4"], "MAX_N_LAYERS"
    )
    assert "model.n_layers=5,000" in output and "ALILAMA_MAX_N_LAYERS" in " ".join(output.split())


def test_a_run_whose_config_yaml_claims_a_billion_layers_is_refused(work, tmp_path):
    import yaml

    run = tmp_path / "run"
    shutil.copytree(work / "run", run)
    data = yaml.safe_load((run / "config.yaml").read_text())
    data["model"]["n_layers"] = 1_000_000_000
    (run / "config.yaml").write_text(yaml.safe_dump(data))
    refused_cli(
        tmp_path,
        ["generate", "run", "--no-verify", "--prompt", "Once"],
        "model.n_layers=1,000,000,000 is over its limit",
    )


def test_an_exported_config_json_with_a_billion_layers_is_refused(work, tmp_path):
    from alilama_exporters.hf_folder import export

    out = export(work / "run", tmp_path / "export", format="remote-code")
    config = json.loads((out / "config.json").read_text())
    config["n_layers"] = 1_000_000_000
    (out / "config.json").write_text(json.dumps(config))
    refused_call(
        tmp_path,
        "AutoModelForCausalLM.from_pretrained('export', trust_remote_code=True)",
        "ValueError",
        "n_layers must be an integer from 1 to 1,024",
        setup="from transformers import AutoModelForCausalLM",
    )


def test_the_remote_code_config_repeats_alilamas_limits():
    from alilama_hf.configuration_alilama import DIMENSION_LIMITS

    from alilama_core.base.limits import DEFAULTS, MODEL_FIELDS

    assert DIMENSION_LIMITS == {name: DEFAULTS[key] for name, key in MODEL_FIELDS.items()}


# -- 7. deeply nested tokenizer JSON ------------------------------------------------------------------


@pytest.mark.parametrize("file", ["alilama_tokenizer.json", "tokenizer_config.json"])
@pytest.mark.parametrize("run", ["run", "taskrun"])  # a BPE tokenizer and a task's symbol tokenizer
def test_deeply_nested_tokenizer_json_is_refused(work, tmp_path, file, run):
    shutil.copytree(work / run / "tokenizer", tmp_path / "tok")
    (tmp_path / "tok" / file).write_text("[" * 200_000 + "]" * 200_000)
    output = refused_cli(
        tmp_path, ["tokenizer", "info", "--tokenizer", "tok"], "nests arrays or objects more than 100 levels deep"
    )
    assert file in output


def test_brackets_inside_strings_do_not_count_as_nesting():
    from alilama_core.base.limits import json_depth

    assert json_depth('{"a": "[[[[[[", "b": [["\\"]]]]"]]}') == 3
    assert json_depth("[" * 500 + "]" * 500, stop=100) == 101


# -- the limits themselves ---------------------------------------------------------------------------


def test_a_limit_is_raised_through_its_environment_variable(monkeypatch):
    from alilama_core.base.errors import ConfigError
    from alilama_core.contracts.task import parse_lengths

    with pytest.raises(ConfigError, match="ALILAMA_MAX_TASK_LENGTH"):
        parse_lengths("1-10000")
    monkeypatch.setenv("ALILAMA_MAX_TASK_LENGTH", "10000")
    assert parse_lengths("1-10000") == (1, 10000)
    monkeypatch.setenv("ALILAMA_MAX_TASK_LENGTH", "many")
    with pytest.raises(ConfigError, match="ALILAMA_MAX_TASK_LENGTH must be a positive integer"):
        parse_lengths("1-4")


def test_every_limit_is_documented():
    from alilama_core.base.limits import DEFAULTS

    doc = (ROOT / "docs" / "what-happens-when.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Limits") :]
    for name, value in DEFAULTS.items():
        assert f"`{name}`" in section and f"{value:,}" in section, f"{name} ({value:,}) is not in the limits table"


# -- the harness itself ------------------------------------------------------------------------------


def test_the_harness_catches_growth_cpu_time_a_crash_and_a_hang(tmp_path):
    with pytest.raises(AssertionError, match=r"grew 3\d\d MiB"):
        bounded({"kind": "call", "code": "x = b'x' * (300 << 20)"}, tmp_path)
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2:\n    pass"
    with pytest.raises(AssertionError, match=r"took 1\.\d\d s of CPU time"):
        bounded({"kind": "call", "code": spin}, tmp_path)
    with pytest.raises(AssertionError, match=r"did not finish \(exit 3\):\s+before"):
        bounded({"kind": "call", "code": "import os\nprint('before', flush=True)\nos._exit(3)"}, tmp_path)
    with pytest.raises(AssertionError, match=r"did not finish \(exit -11\)"):
        bounded({"kind": "call", "code": "import ctypes\nctypes.string_at(0)"}, tmp_path)
    with pytest.raises(AssertionError, match=r"did not finish \(killed after 1 s\)"):
        measure({"kind": "call", "code": "import time\ntime.sleep(60)"}, tmp_path, timeout=1)
    assert measure({"kind": "call", "code": "x = b'x' * (3 << 30)"}, tmp_path)["error"] == "MemoryError"


def test_each_case_runs_in_its_folder_with_its_own_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ALILAMA_MAX_N_LAYERS", "5")
    monkeypatch.setenv("ALILAMA_BOUNDS_MARK", str(tmp_path))
    code = (
        "import os\n"
        "assert os.getcwd() == os.environ['ALILAMA_BOUNDS_MARK'], os.getcwd()\n"
        "assert os.environ['HF_MODULES_CACHE'] == os.path.join(os.getcwd(), '.hf-modules')\n"
        "assert 'ALILAMA_MAX_N_LAYERS' not in os.environ"
    )
    assert bounded({"kind": "call", "code": code}, tmp_path)["error"] is None
