"""``alilama export gguf``, read by llama.cpp itself (llama-cpp-python in the reader environment, no Alilama).

``make llama-cpp`` builds llama-cpp-python into build/envs/readers (it compiles
llama.cpp: about 10 minutes on two cores the first time; pip keeps the wheel) and
unpacks llama.cpp's own converter beside it; without them the tests that need
llama.cpp skip, unless ALILAMA_REQUIRE_LLAMA_CPP=1 (CI).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("gguf")

import torch  # noqa: E402
from alilama_testing import NO_ALILAMA, ok, run_cli  # noqa: E402

from alilama_core.runs.checkpoint import load_run  # noqa: E402
from alilama_core.runs.exports import write_expected  # noqa: E402
from alilama_exporters.gguf_file import PROBE_FILE, TOLERANCE, export_gguf, llama_cpp_alibi_slopes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
READERS = Path(os.environ.get("ALILAMA_READERS_PYTHON", ROOT / "build" / "envs" / "readers" / "bin" / "python"))
CONVERTER = ROOT / "build" / "llama-cpp-src" / "convert_hf_to_gguf.py"
GREEDY_TOKENS = 64
PROMPTS = 20  # rows of random ids as long as the training context: next-token logits at every position
# The tests' runs (tests/hf/conftest.py): ALiBi with linear and norm biases (the essay's choice) and 6 heads,
# ALiBi without biases, learned positions, RoPE (theta 500), NoPE.
ARCH = {"alibi": "mpt", "alibi-nobias": "mpt", "learned": "gpt2", "rope": "gptneox", "nope": "mpt"}
F32_TOLERANCE = 2e-3
"""llama.cpp's GELU (tanh, looked up in a float16 table) moves these models' logits by up to ~1e-3."""
STRUCTURE_TOLERANCE = 2e-4
"""With Alilama's GELU replaced by llama.cpp's, what is left, relative to the largest logit: float32 arithmetic in
another order, and the float16 roundings it now and then tips the other way (an input on a half-way point). Seen on
AMD EPYC (Zen 3): 1.3e-5 (RoPE), 1.3e-5 (ALiBi), 9.7e-5 (learned); GELU alone moves the logits by up to ~1e-3."""


def llama_python() -> Path:
    """The reader environment's Python, where llama_cpp imports; skip (or fail under CI) otherwise."""
    found = (
        READERS.exists()
        and subprocess.run([str(READERS), "-c", "import llama_cpp"], capture_output=True).returncode == 0
    )
    if not found:
        if os.environ.get("ALILAMA_REQUIRE_LLAMA_CPP") == "1":
            pytest.fail(f"llama-cpp-python is not installed in {READERS}: make llama-cpp builds it")
        pytest.skip(f"llama-cpp-python is not installed in {READERS} (make llama-cpp builds it, ~10 minutes)")
    return READERS


def in_llama_cpp(gguf: Path, expected: Path, texts: list[str] | None = None, tmp: Path | None = None) -> dict:
    """``probe_gguf.py`` in a process of the reader environment that cannot import Alilama."""
    args = [str(PROBE_FILE), str(gguf), str(expected)]
    if texts is not None:
        (tmp / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
        args.append(str(tmp / "texts.json"))
    runner = NO_ALILAMA + "import runpy\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    proc = subprocess.run(
        [str(llama_python()), "-c", runner, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def gguf_runs(runs, native_runs) -> dict[str, Path]:
    return {**{k: runs[k] for k in ("alibi", "learned", "rope", "nope")}, "alibi-nobias": native_runs["alibi-nobias"]}


@pytest.fixture(scope="module")
def ggufs(gguf_runs, tmp_path_factory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("gguf")
    out = {}
    for name, run in gguf_runs.items():
        for dtype in ("f32", "f16", "q8_0"):
            out[name, dtype] = root / f"{name}-{dtype}.gguf"
            info = export_gguf(run, out[name, dtype], dtype=dtype)
            assert info["architecture"] == ARCH[name]
    return out


def expected_files(runs: dict[str, Path], root: Path, **kw) -> dict[str, Path]:
    """Each run's expected logits, greedy ids and tokens (``write_expected``), by name under ``root``."""
    out = {}
    for name, run in runs.items():
        out[name] = root / f"{name}.safetensors"
        write_expected(load_run(run), out[name], **kw)
    return out


@pytest.fixture(scope="module")
def expected(gguf_runs, tmp_path_factory) -> dict[str, Path]:
    return expected_files(
        gguf_runs, tmp_path_factory.mktemp("gguf-expected"), max_new_tokens=GREEDY_TOKENS, rows=PROMPTS
    )


EXACT_GELU = torch.nn.functional.gelu


def llama_cpp_gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """ggml's CPU GELU: the tanh approximation of the input rounded to float16, the result stored as float16."""
    return EXACT_GELU(x.half().float(), approximate="tanh").half().float()


@pytest.mark.parametrize("name", list(ARCH))
def test_llama_cpp_runs_the_export_as_alilama_computes_it(name, ggufs, expected):
    result = in_llama_cpp(ggufs[name, "f32"], expected[name])
    assert result["max_logit_diff"] <= F32_TOLERANCE, result
    assert result["greedy_equal"], result  # 64 new tokens (the learned model: up to its table's end)
    assert result["tokenizer_equal"] and len(result["greedy"]) > 20


@pytest.mark.parametrize("name", ["alibi", "learned", "rope"])
def test_what_differs_is_llama_cpps_gelu_alone(name, gguf_runs, ggufs, tmp_path, monkeypatch):
    """With Alilama's exact GELU replaced by ggml's, logits agree to float32 rounding: the mapping is exact."""
    from alilama_core.engine.model import ACTIVATION

    monkeypatch.setitem(ACTIVATION, "gelu", llama_cpp_gelu)  # the models load_run builds take it
    write_expected(load_run(gguf_runs[name]), tmp_path / "ggml-gelu.safetensors", max_new_tokens=8)
    result = in_llama_cpp(ggufs[name, "f32"], tmp_path / "ggml-gelu.safetensors")
    assert result["max_logit_diff"] <= STRUCTURE_TOLERANCE * result["logit_scale"], result


@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
@pytest.mark.parametrize("name", ["alibi", "rope"])
def test_f16_and_q8_0_stay_within_their_tolerance(name, dtype, ggufs, expected):
    result = in_llama_cpp(ggufs[name, dtype], expected[name])
    assert result["max_logit_diff"] <= TOLERANCE[dtype], result
    assert result["tokenizer_equal"]


def test_llama_cpps_tokenizer_gives_alilamas_ids_on_a_thousand_stories_lines(shared_data, make_run, tmp_path):
    """A 2,048-token vocabulary trained on train.txt; 1,000 lines of valid.txt and hard cases of the split."""
    from alilama_bpe.tokenizer import BPETokenizer

    with open(shared_data / "tinystories" / "train.txt", encoding="utf-8") as f:
        sample = f.read(2_000_000)
    tok = BPETokenizer.train([sample], vocab_size=2048, special_tokens=["<|endoftext|>"])
    with open(shared_data / "tinystories" / "valid.txt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for _, line in zip(range(1000), f)]
    hard = [
        "She said: \"I'm here, you're there, they'd've LL'S 'Re\"\n\n\n  \n\t x",
        "1234567 3.14159 ½ ٣٤ 🙂🙂 naïve Ünïcödé — “quotes” ...!!! ???\r\n\r\nend   ",
        "  leading spaces,\ttabs\t\tand trailing \n",
    ]
    run = make_run(tmp_path, "alibi", tok, name="tok2048", d_model=32, n_heads=4, context_length=32)
    export_gguf(run, tmp_path / "tok.gguf")
    write_expected(load_run(run), tmp_path / "expected.safetensors", max_new_tokens=1)
    result = in_llama_cpp(tmp_path / "tok.gguf", tmp_path / "expected.safetensors", lines + hard, tmp_path)
    # as plain text on both sides: some lines hold "<|endoftext|>", which llama.cpp reads as text without special=True
    mismatches = [t for t, ids in zip(lines + hard, result["ids"]) if ids != tok.encode(t, allowed_special="none")]
    assert mismatches == []
    assert sum(len(ids) for ids in result["ids"]) > 10_000


def test_the_file_says_what_llama_cpp_needs(ggufs, runs, native_runs):
    import gguf

    def fields(path: Path) -> dict:
        reader = gguf.GGUFReader(path)
        out = {}
        for key, field in reader.fields.items():
            if field.types and field.types[0] == gguf.GGUFValueType.STRING:
                out[key] = bytes(field.parts[field.data[0]]).decode()
            elif field.types and field.types[0] != gguf.GGUFValueType.ARRAY:
                out[key] = field.parts[field.data[0]].tolist()[0]
            else:
                out[key] = len(field.data)
        return out | {"tensors": {t.name for t in reader.tensors}}

    mpt = fields(ggufs["alibi", "f32"])
    m = load_run(runs["alibi"]).config.model
    assert mpt["general.architecture"] == "mpt" and mpt["mpt.attention.max_alibi_bias"] == 8.0
    assert mpt["mpt.context_length"] == m.context_length and mpt["mpt.block_count"] == m.n_layers
    assert mpt["tokenizer.ggml.model"] == "gpt2" and mpt["tokenizer.ggml.pre"] == "dbrx"
    eot = load_run(runs["alibi"]).tokenizer.eot_id
    assert mpt["tokenizer.ggml.tokens"] == m.vocab_size and mpt["tokenizer.ggml.eos_token_id"] == eot
    assert "blk.0.attn_qkv.bias" in mpt["tensors"] and "output.weight" not in mpt["tensors"]  # tied
    assert fields(ggufs["nope", "f32"])["mpt.attention.max_alibi_bias"] == 0.0
    neox = fields(ggufs["rope", "f32"])
    assert neox["gptneox.rope.freq_base"] == 500.0 and neox["gptneox.rope.dimension_count"] == 8
    assert neox["gptneox.use_parallel_residual"] is False and "output.weight" in neox["tensors"]
    assert "position_embd.weight" in fields(ggufs["learned", "f32"])["tensors"]
    # ALiBi slopes: llama.cpp's formula for max_alibi_bias 8 gives Alilama's, for every head count
    from alilama_positional.standalone_alibi import alibi_slopes

    for heads in (1, 2, 3, 4, 6, 8, 12, 16, 24):
        assert torch.equal(llama_cpp_alibi_slopes(heads).float(), alibi_slopes(heads)), heads


# -- the command, and the mistakes users make ---------------------------------------------------------


def test_cli_writes_the_file_and_an_ollama_modelfile(runs, tmp_path):
    result = run_cli(
        "export", "gguf", str(runs["alibi"]), str(tmp_path / "essay.gguf"), "--dtype", "f16", "--modelfile"
    )
    assert "(mpt, f16) for llama.cpp" in ok(result)
    assert "export 4/4: not run in llama.cpp" in result.stderr
    modelfile = (tmp_path / "Modelfile").read_text()
    assert modelfile.splitlines()[1] == "FROM ./essay.gguf"
    assert 'PARAMETER stop "<|endoftext|>"' in modelfile and "PARAMETER num_ctx 32" in modelfile
    assert 'TEMPLATE """{{ .Prompt }}"""' in modelfile
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Modelfile", "essay.gguf"]  # nothing left beside


def test_cli_check_with_runs_it_in_llama_cpp(runs, tmp_path):
    python = str(llama_python())
    result = run_cli("export", "gguf", str(runs["rope"]), str(tmp_path / "rope.gguf"), "--check-with", python)
    assert "ran it in llama.cpp: llama-cpp-python 0.3" in result.stderr and "greedy ids equal" in result.stderr
    ok(result)


BAD = [
    # (arguments after RUN, exit code, a phrase of the error, what must survive)
    (["{out}", "--dtype", "q4_k"], 1, "--dtype must be one of f32, f16, q8_0", "old"),
    (["{out}"], 1, "exists; pass --overwrite", "old"),
    (["{dir}"], 1, "is a folder; give the path of the file to write", "old"),
    (["{out}", "--force", "--check-with", "/nonexistent/python"], 1, "could not run it", "old"),
    (["{out}", "--force", "--checkpoint", "step-99999999"], 1, "step-99999999", "old"),
]


@pytest.mark.parametrize("args,code,phrase,survives", BAD)
def test_bad_inputs_fail_clearly_and_keep_the_old_file(args, code, phrase, survives, runs, tmp_path):
    out, folder = tmp_path / "old.gguf", tmp_path / "folder"
    out.write_bytes(b"GGUF, an older export")  # what --force may replace: a GGUF file
    folder.mkdir()
    args = [a.format(out=out, dir=folder) for a in args]
    result = run_cli("export", "gguf", str(runs["alibi"]), *args)
    assert result.returncode == code, result.stdout + result.stderr
    assert phrase in result.stderr and "Traceback" not in result.stderr
    assert out.read_bytes() == b"GGUF, an older export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "old.gguf"]  # no temporary file left


def test_a_scheme_llama_cpp_has_no_architecture_for_is_refused_by_name(kerple_run, tmp_path):
    result = run_cli("export", "gguf", str(kerple_run), str(tmp_path / "k.gguf"))
    assert result.returncode != 0
    assert "positional scheme 'kerple-log' has no llama.cpp architecture" in result.stderr
    assert "alibi (mpt)" in result.stderr and not (tmp_path / "k.gguf").exists()


def test_a_tokenizer_with_another_split_pattern_is_refused_naming_it(make_run, tmp_path):
    from alilama_bpe.tokenizer import BPETokenizer

    text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. " * 20
    words = r"\S+|\s+"
    tok = BPETokenizer.train([text], vocab_size=300, special_tokens=["<|endoftext|>"], pattern=words)
    run = make_run(tmp_path, "alibi", tok, name="words", d_model=32, n_heads=4, context_length=32)
    result = run_cli("export", "gguf", str(run), str(tmp_path / "w.gguf"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    message = " ".join(result.stderr.split())
    assert f"splits text with the pattern {words!r}" in message
    assert "llama.cpp has no pre-tokenizer known to split it the same way" in message
    assert "'dbrx'" in message and "'gpt-2'" in message and not (tmp_path / "w.gguf").exists()


HARD_TEXTS = [
    "She said: \"I'm here, you're there, they'd've LL'S 'Re\"\n\n\n  \n\t x",
    "1234567 3.14159 ½ ٣٤ 🙂🙂 naïve Ünïcödé — “quotes” ...!!! ???\r\n\r\nend   ",
    "  leading spaces,\ttabs\t\tand trailing \n",
]


def test_gpt2s_split_is_the_one_the_tokenizers_library_uses():
    """GPT-2's as the tokenizers library's ByteLevel splits."""
    import regex
    from tokenizers.pre_tokenizers import ByteLevel

    from alilama_core.contracts.splits import GPT2 as GPT2_SPLIT

    byte_level = ByteLevel(add_prefix_space=False, use_regex=True)
    no_regex = ByteLevel(add_prefix_space=False, use_regex=False)
    for text in HARD_TEXTS:
        pieces = [no_regex.pre_tokenize_str(p)[0][0] for p in regex.findall(GPT2_SPLIT, text)]
        assert [p for p, _ in byte_level.pre_tokenize_str(text)] == pieces


@pytest.fixture(scope="module")
def gpt2_style_run(make_run, tmp_path_factory) -> Path:
    """A run whose tokenizer is the test plugin ``hf-bpe``: a GPT-2-style byte-level BPE of the tokenizers library."""
    pytest.importorskip("alilama_hftok", reason="the test plugin tests/plugins/alilama-hftok is not installed")
    from alilama_hftok.tokenizer import HFByteBPE

    from alilama_core.runs.tokenizers import save_tokenizer

    # numbers and contractions that GPT-2's split keeps whole and GPT-4's cuts: merges across those cuts
    text = "Once upon a time, in 1234567, there was a girl. She said: I'M HERE, YOU'RE there.\n\n\n  x " * 20
    tok = HFByteBPE.train([text, *HARD_TEXTS], vocab_size=320, special_tokens=["<|endoftext|>"])
    root = tmp_path_factory.mktemp("gpt2-style")
    run = make_run(root, "learned", tok, name="hf-bpe", metrics=False, d_model=32, n_heads=4, context_length=64)
    save_tokenizer(tok, run / "tokenizer", kind="hf-bpe")  # the folder names its plugin
    return run


def test_a_gpt2_style_tokenizer_exports_with_llama_cpps_gpt2_split(gpt2_style_run, tmp_path):
    import gguf

    info = export_gguf(gpt2_style_run, tmp_path / "gpt2.gguf")
    assert info["pre"] == "gpt-2"
    field = gguf.GGUFReader(tmp_path / "gpt2.gguf").fields["tokenizer.ggml.pre"]
    assert bytes(field.parts[field.data[0]]).decode() == "gpt-2"


def test_llama_cpp_splits_a_gpt2_style_tokenizer_as_the_run_does(gpt2_style_run, tmp_path):
    python = llama_python()  # before the export: skipped at once where llama.cpp is missing
    assert python.exists()
    export_gguf(gpt2_style_run, tmp_path / "gpt2.gguf")
    loaded = load_run(gpt2_style_run)
    write_expected(loaded, tmp_path / "expected.safetensors", max_new_tokens=1)
    texts = [*HARD_TEXTS, "Once upon a time, in 1234567, there was a girl. She said: I'M HERE, YOU'RE there.\n\n\n  x"]
    result = in_llama_cpp(tmp_path / "gpt2.gguf", tmp_path / "expected.safetensors", texts, tmp_path)
    assert result["ids"] == [loaded.tokenizer.encode(t, allowed_special="none") for t in texts]
    assert result["tokenizer_equal"]


# -- llama.cpp's own converter on the native Hugging Face exports ------------------------------------


@pytest.mark.parametrize("name", ["alibi-nobias", "learned", "rope"])
def test_llama_cpps_converter_knows_the_native_exports_and_stops_at_the_new_vocabulary(name, native_exports, tmp_path):
    """It takes each architecture now, then refuses any tokenizer it has no hash for (a newly trained one)."""
    if not CONVERTER.is_file():
        llama_python()  # fails under CI, skips elsewhere
        pytest.skip(f"llama.cpp's converter is not unpacked at {CONVERTER} (make llama-cpp)")
    proc = subprocess.run(
        [str(READERS), str(CONVERTER), str(native_exports[name]), "--outfile", str(tmp_path / "x.gguf")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode != 0
    assert "is not supported" not in proc.stderr and "KeyError" not in proc.stderr
    assert "BPE pre-tokenizer was not recognized" in proc.stderr
