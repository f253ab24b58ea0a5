"""The server's answers and refusals in this process: the app ``alilama serve`` runs, driven through Starlette's
``TestClient`` (by the official ``openai`` client too). The process tests (``test_serve.py``,
``test_serve_fields.py``) check the same app behind uvicorn on a loopback port."""

from __future__ import annotations

from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")

from served import CHAT_REFUSED, ERRORS, KEY, PROMPT, REFUSED, in_process_server, story_run  # noqa: E402

from alilama_core.engine.generation import SamplingSettings, generate  # noqa: E402
from alilama_core.runs.checkpoint import load_run  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return story_run(tmp_path_factory.mktemp("in-process"))


@pytest.fixture(scope="module")
def client(run):
    with in_process_server(run) as client:
        yield client


def chat(client, **body):
    return client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], **body})


def test_greedy_completion_is_the_engines_own_text(client, run):
    loaded = load_run(run)
    ids = loaded.tokenizer.encode(PROMPT)
    (want,) = generate(loaded.model, [ids], SamplingSettings(max_new_tokens=24, temperature=0))
    r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 24, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["text"] == loaded.tokenizer.decode(want[len(ids) :] if len(want) > 24 else want)
    assert body["usage"]["completion_tokens"] == 24 and body["choices"][0]["finish_reason"] == "length"


def test_the_openai_client_streams_the_whole_text(client):
    api = openai.OpenAI(base_url="http://testserver/v1", api_key=KEY, http_client=client, max_retries=0)
    whole = api.completions.create(model="story-run", prompt=PROMPT, max_tokens=12, temperature=0)
    pieces = api.completions.create(model="story-run", prompt=PROMPT, max_tokens=12, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in pieces) == whole.choices[0].text
    with pytest.raises(openai.BadRequestError, match="top_p"):
        api.completions.create(model="story-run", prompt=PROMPT, top_p=3)


@pytest.mark.parametrize("body,status,phrase", ERRORS)
def test_bad_requests_get_json_errors_with_their_status(client, body, status, phrase):
    r = client.post("/v1/completions", json=body)
    assert r.status_code == status, r.text
    assert phrase in r.json()["error"]["message"] and "Traceback" not in r.text


@pytest.mark.parametrize("extra,name", REFUSED)
def test_completion_fields_that_would_change_the_answer_are_refused_by_name(client, extra, name):
    r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, **extra})
    assert r.status_code == 400, r.text
    assert name in r.json()["error"]["message"]


@pytest.mark.parametrize("extra,name", CHAT_REFUSED)
def test_chat_fields_that_would_change_the_answer_are_refused_by_name(client, extra, name):
    r = chat(client, max_tokens=2, **extra)
    assert r.status_code == 400, r.text
    assert name in r.json()["error"]["message"]


def test_no_key_a_wrong_key_bad_json_and_no_route_are_json_errors(client):
    assert client.post("/v1/completions", json={"prompt": "x"}, headers={"Authorization": ""}).status_code == 401
    wrong = client.post("/v1/completions", json={"prompt": "x"}, headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 401 and "error" in wrong.json()
    bad = client.post("/v1/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and "JSON" in bad.json()["error"]["message"]
    missing = client.get("/v1/nothing-here")
    assert missing.status_code == 404 and "error" in missing.json()


def test_a_chat_answer_is_seeded_per_choice(client):
    kw = dict(max_tokens=8, temperature=1.0, seed=7, n=2)
    first, again = chat(client, **kw).json(), chat(client, **kw).json()
    texts = [c["message"]["content"] for c in first["choices"]]
    assert texts == [c["message"]["content"] for c in again["choices"]] and texts[0] != texts[1]
    assert first["object"] == "chat.completion" and first["choices"][0]["message"]["role"] == "assistant"
