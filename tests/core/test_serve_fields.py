"""Every OpenAI request field ``alilama serve`` takes: honoured as the API reference says, or a 400 naming it.

Each honoured field is checked by what it must do to the answer (against the
engine computing the same thing in this process); each refused one by its 400.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from served import CHAT_REFUSED, KEY, PROMPT, REFUSED, Served, story_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return story_run(tmp_path_factory.mktemp("fields"))


@pytest.fixture(scope="module")
def server(run):
    served = Served(run, "--api-key", KEY, "--max-batch", "4", "--max-prompt-tokens", "60")
    yield served
    served.stop()


@pytest.fixture(scope="module")
def loaded(run):
    from alilama_core.runs.checkpoint import load_run

    return load_run(run)


def post(server, body: dict, path: str = "/v1/completions") -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


def complete(server, **body) -> dict:
    r = post(server, {"prompt": PROMPT, "temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()


def model_logprobs(loaded, ids: list[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) for t >= 1, computed here by the model itself."""
    import torch

    with torch.no_grad():
        logits = loaded.model(torch.tensor([ids]))[0].float().log_softmax(-1)
    return [float(logits[t - 1, ids[t]]) for t in range(1, len(ids))]


# -- echo, prompt scoring, token-id prompts ----------------------------------------------------------


def test_echo_puts_the_prompt_before_the_completion(server):
    plain = complete(server, max_tokens=6)["choices"][0]["text"]
    echoed = complete(server, max_tokens=6, echo=True)["choices"][0]["text"]
    assert echoed == PROMPT + plain


def test_echo_with_max_tokens_0_scores_the_prompt_with_the_models_own_logprobs(server, loaded):
    ids = loaded.tokenizer.encode(PROMPT)
    out = complete(server, max_tokens=0, echo=True, logprobs=2)
    choice = out["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"] == PROMPT and out["usage"]["completion_tokens"] == 0
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None  # nothing comes before the first
    assert lp["token_logprobs"][1:] == pytest.approx(model_logprobs(loaded, ids), abs=1e-5)
    assert "".join(lp["tokens"]) == PROMPT and lp["text_offset"][0] == 0
    assert all(
        len(top) == 2 and max(top.values()) >= own for top, own in zip(lp["top_logprobs"][1:], lp["token_logprobs"][1:])
    )


def test_token_id_prompts_as_lm_eval_sends_them(server, loaded):
    """lm-eval's default body: ids, max_tokens 1, logprobs 1, echo: the prompt's scores, then one token."""
    ids = loaded.tokenizer.encode(PROMPT)
    body = {"prompt": [ids], "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": True}
    lp = complete(server, **body)["choices"][0]["logprobs"]
    assert len(lp["token_logprobs"]) == len(ids) + 1
    assert lp["token_logprobs"][1 : len(ids)] == pytest.approx(model_logprobs(loaded, ids), abs=1e-5)
    by_text = complete(server, max_tokens=8)["choices"][0]["text"]
    assert complete(server, prompt=ids, max_tokens=8)["choices"][0]["text"] == by_text
    both = complete(server, prompt=[ids, ids[:3]], max_tokens=4)["choices"]
    assert len(both) == 2 and both[0]["text"] == by_text[: len(both[0]["text"])]


# -- logit_bias and the penalties ------------------------------------------------------------------


def test_logit_bias_bans_and_forces_tokens(server, loaded):
    base = complete(server, max_tokens=1, logprobs=0)["choices"][0]
    greedy = loaded.tokenizer.encode(base["text"])[0]
    banned = complete(server, max_tokens=1, logit_bias={str(greedy): -100})["choices"][0]["text"]
    assert banned != base["text"] and loaded.tokenizer.encode(banned)[0] != greedy
    forced = complete(server, max_tokens=3, logit_bias={"65": 100})["choices"][0]["text"]  # byte 'A'
    assert forced == "AAA"
    chat = post(
        server,
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0, "logit_bias": {"65": 100}},
        "/v1/chat/completions",
    )
    assert chat.json()["choices"][0]["message"]["content"] == "AA"


@pytest.mark.parametrize("field", ["presence_penalty", "frequency_penalty"])
def test_penalties_give_what_the_engine_gives(server, loaded, field):
    from alilama_core.engine.generation import SamplingSettings, generate

    ids = loaded.tokenizer.encode(PROMPT)
    settings = SamplingSettings(max_new_tokens=90, temperature=0, **{field: 2.0})
    expected = loaded.tokenizer.decode(generate(loaded.model, [ids], settings, loaded.tokenizer.eot_id)[0])
    served = complete(server, max_tokens=90, **{field: 2.0})["choices"][0]["text"]
    assert served == expected
    assert served != complete(server, max_tokens=90)["choices"][0]["text"]  # the penalty changed the text


def test_penalties_reach_generate_and_chat_on_the_command_line(run, loaded):
    from alilama_testing import ok, run_cli

    plain = ok(run_cli("generate", str(run), "--prompt", PROMPT, "-t", "0", "-n", "60"))
    biased = ok(run_cli("generate", str(run), "--prompt", PROMPT, "-t", "0", "-n", "3", "--logit-bias", "65=100"))
    assert biased.rstrip("\n") == PROMPT + "AAA"
    penalised = ok(run_cli("generate", str(run), "--prompt", PROMPT, "-t", "0", "-n", "60", "--frequency-penalty", "2"))
    assert penalised != plain
    chat = subprocess.run(
        [sys.executable, "-c", "from alilama_core.app.cli import main; main()", "chat", str(run), "-t", "0", "-n", "2",
         "--logit-bias", "65=100", "--threads", "1"],
        input="Hello\n", capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert chat.returncode == 0 and chat.stdout.splitlines()[0] == "AA", chat.stderr
    bad = run_cli("generate", str(run), "--prompt", PROMPT, "--logit-bias", "65")
    assert bad.returncode == 1 and "--logit-bias takes ID=BIAS" in bad.stderr


# -- refused, and neutral values accepted ----------------------------------------------------------


def test_the_neutral_values_clients_send_by_default_are_accepted(server):
    """LangChain's OpenAI LLM and ChatOpenAI defaults, and an assistant message echoed back whole."""
    langchain = {"frequency_penalty": 0, "presence_penalty": 0, "n": 1, "top_p": 1, "logprobs": None, "seed": None}
    assert (
        post(server, {"prompt": PROMPT, "max_tokens": 2, "best_of": 1, "suffix": None, **langchain}).status_code == 200
    )
    history = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "refusal": None, "tool_calls": None, "annotations": []},
        {"role": "user", "content": [{"type": "text", "text": "More"}], "name": "ann"},
    ]
    body = {"messages": history, "model": "story-run", "max_completion_tokens": 2, "response_format": {"type": "text"},
            "tool_choice": "none", "parallel_tool_calls": True, "user": "u1", "store": False, "stream": False}  # fmt: skip
    r = post(server, body, "/v1/chat/completions")
    assert r.status_code == 200, r.text


def test_the_field_tables_in_the_docs_are_the_request_models():
    from alilama_core.engine.requests import ChatRequest, CompletionRequest, field_table

    docs = (ROOT / "docs" / "serving.md").read_text()
    for kind in (CompletionRequest, ChatRequest):
        assert field_table(kind) in docs, (
            f"docs/serving.md lacks {kind.__name__}'s table: run scripts/serving_fields.py"
        )


def test_every_field_of_the_table_is_exercised_somewhere():
    """Each neutral-only field has a refused case here; the rest are honoured by a test of this file or test_serve."""
    from alilama_core.engine.requests import NEUTRAL, ChatRequest, CompletionRequest

    covered = {key for extra, _ in REFUSED + CHAT_REFUSED for key in extra}
    for kind in (CompletionRequest, ChatRequest):
        neutral = {n for n, f in kind.model_fields.items() if (f.json_schema_extra or {})["support"] == NEUTRAL}
        assert neutral <= covered, f"no refused case for {sorted(neutral - covered)}"
