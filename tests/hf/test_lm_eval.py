"""lm-eval scores a served model as it scores the exported one: ``local-completions`` against ``alilama serve``
equals ``hf`` on the same run's ``export hf`` folder.

lm-eval runs in an environment of its own without Alilama (``make lmeval``: build/envs/lmeval), on two local
tasks: rolling log-likelihood (bits per byte) and a last-word task (accuracy: is the last word the greedy
continuation), over stories the project writes and the memorised story of the served run, plus TinyStories
lines where the shared data is present. Both the default token-id requests and text requests are checked.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("uvicorn")

from served import Served, story_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LMEVAL = ROOT / "build" / "envs" / "lmeval" / "bin" / "lm_eval"
DATA = Path(os.environ.get("ALILAMA_DATA", ROOT.parent / "shared" / "data"))

ROLLING = """task: stories_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/rolling.jsonl
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: bits_per_byte
  - metric: word_perplexity
"""
LASTWORD = """task: stories_lastword
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/lastword.jsonl
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{target}}}}"
metric_list:
  - metric: acc
  - metric: perplexity
"""


@pytest.fixture(scope="module")
def lm_eval():
    if not LMEVAL.exists():
        if os.environ.get("ALILAMA_REQUIRE_LMEVAL") == "1":
            pytest.fail(f"{LMEVAL} is missing: run `make lmeval`")
        pytest.skip(f"lm-eval's environment is missing ({LMEVAL}): run `make lmeval`")
    return LMEVAL


def texts() -> list[str]:
    """Stories to score: the served run's own story, stories the project writes, TinyStories lines if present."""
    import random

    from alilama_core.runs.stories import generate_stories

    own = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun."
    out = [own, own.replace("Lily", "Mia"), *[s.strip() for s in generate_stories(10, seed=5)]]
    valid = DATA / "tinystories" / "valid.txt"
    if valid.is_file():
        lines = [line.strip() for line in valid.read_text(encoding="utf-8").splitlines()[:2000] if 80 < len(line) < 600]
        out += random.Random(0).sample(lines, 8)
    return out


def write_tasks(folder: Path) -> Path:
    folder.mkdir(parents=True)
    stories = texts()
    with open(folder / "rolling.jsonl", "w") as f:
        for text in stories:
            f.write(json.dumps({"text": text[:300]}) + "\n")
    with open(folder / "lastword.jsonl", "w") as f:
        for text in stories:
            for sentence in [s for s in text.split(". ") if len(s.split()) > 4][:3]:
                context, word = sentence.rsplit(" ", 1)
                f.write(json.dumps({"context": context, "target": " " + word.rstrip(".")}) + "\n")
    (folder / "stories_rolling.yaml").write_text(ROLLING.format(data=folder))
    (folder / "stories_lastword.yaml").write_text(LASTWORD.format(data=folder))
    return folder


def evaluate(lm_eval: Path, model: str, model_args: str, tasks: Path, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_CACHE=str(out / "ds"))
    command = [str(lm_eval), "--model", model, "--model_args", model_args, "--tasks", "stories_rolling,stories_lastword",
               "--include_path", str(tasks), "--output_path", str(out), "--batch_size", "1"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, cwd=out.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    return {
        "bpb": result["stories_rolling"]["bits_per_byte,none"],
        "acc": result["stories_lastword"]["acc,none"],
        "ppl": result["stories_lastword"]["perplexity,none"],
    }


def test_local_completions_against_alilama_serve_equals_hf_on_the_export(lm_eval, tmp_path):
    from alilama_exporters.hf_folder import export

    run = story_run(tmp_path)
    folder = export(run, tmp_path / "export")
    tasks = write_tasks(tmp_path / "tasks")
    # max_length 512, longer than every request: past it lm-eval's hf model keeps max_length + 1 tokens and
    # local-completions max_length, so a truncated request differs by one token of context in lm-eval itself.
    hf = evaluate(
        lm_eval,
        "hf",
        f"pretrained={folder},max_length=512,dtype=float32,trust_remote_code=True",
        tasks,
        tmp_path / "hf",
    )
    served = Served(run, "--max-batch", "2")
    try:
        url = f"{served.url}/v1/completions"
        common = f"model=story-run,base_url={url},tokenizer={folder},tokenizer_backend=huggingface,max_length=512"
        tokenized = evaluate(lm_eval, "local-completions", common + ",num_concurrent=1", tasks, tmp_path / "ids")
        text = evaluate(
            lm_eval, "local-completions", common + ",num_concurrent=1,tokenized_requests=False", tasks, tmp_path / "txt"
        )
    finally:
        served.stop()
    assert 0 < hf["acc"] < 1 and hf["bpb"] > 0.1  # a real score, neither perfect nor nothing
    for got in (tokenized, text):
        assert got["bpb"] == pytest.approx(hf["bpb"], abs=1e-3)
        assert got["acc"] == hf["acc"]
        assert got["ppl"] == pytest.approx(hf["ppl"], rel=1e-3)
