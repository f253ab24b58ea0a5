"""A hostile client beside an honest one, against a real ``alilama serve`` process.

One bad request harms no one: a client streaming 256 tokens gets them all while
another sends poisoned requests, each refused with a 400 at once. A table of
hostile requests (wrong types in every field, non-finite and out-of-range
numbers, oversized, deep and malformed bodies, wrong methods, slow and
vanishing clients) gets 0 answers of 500 and 0 hangs, and the server prints no
traceback.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from served import KEY, Served, story_run  # noqa: E402

PROMPT = "Once upon a time, there was"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return story_run(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module")
def server(run):
    served = Served(run, "--api-key", KEY, "--max-batch", "3", "--max-queue", "8", "--max-tokens", "300",
                    "--body-timeout", "2")  # fmt: skip
    yield served
    served.stop()


def raw_post(server, body: bytes, path: str = "/v1/completions", headers: dict | None = None) -> httpx.Response:
    headers = {**AUTH, "Content-Type": "application/json", **(headers or {})}
    return httpx.post(server.url + path, content=body, headers=headers, timeout=30)


POISONED = [
    # (path, raw body, a phrase of the 400's message)
    ("/v1/completions", b'{"prompt": "x", "temperature": NaN}', "temperature must be a finite number"),
    ("/v1/completions", b'{"prompt": "x", "top_p": NaN}', "top_p must be a finite number"),
    ("/v1/completions", b'{"prompt": "x", "temperature": Infinity}', "temperature must be a finite number"),
    ("/v1/completions", b'{"prompt": "x", "temperature": 1e-300}', "temperature must be 0 (greedy) or at least"),
    ("/v1/completions", b'{"prompt": "x", "seed": 1180591620717411303424}', "seed must be between 0 and"),
    ("/v1/completions", b'{"prompt": "x", "seed": -1}', "seed must be between 0 and"),
    ("/v1/completions", b'{"prompt": "x", "seed": 18446744073709551615, "n": 2}', "seed must be between 0 and"),
    ("/v1/completions", b'{"prompt": "x", "seed": 9223372036854775807, "n": 2}', "seed + n - 1"),
    ("/v1/completions", b'{"prompt": "x", "stream": true, "stream_options": "x"}', "stream_options must be an object"),
    ("/v1/completions", b'{"prompt": "x", "stream": "no"}', "stream must be true or false"),
    (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
        "messages.0.content.0.text must be a string",
    ),
    ("/v1/completions", b"[" * 100_000 + b"]" * 100_000, "nests deeper than"),
    ("/v1/completions", json.dumps({"prompt": ["x"] * 10_000, "max_tokens": 1}).encode(), "queues at most 8"),
    ("/v1/completions", b'{"prompt": "x", "n": 4, "max_tokens": 1, "best_of": 4}', "best_of"),
    ("/v1/completions", b'{"prompt": "x", "logit_bias": {"7": NaN}}', "finite"),
    ("/v1/completions", b'{"prompt": [[1, 2, 1e30]]}', "prompt must be"),
]


def test_a_victim_gets_every_token_while_an_attacker_sends_poison(server):
    """256 tokens streamed to the end, [DONE] included, while each poisoned request is refused at once: sooner
    than the server makes the victim's 256 tokens alone (both timed in this run, so a busy machine slows both)."""
    body = {"prompt": PROMPT, "max_tokens": 256, "temperature": 1.0, "seed": 3, "stream": True, "ignore_eos": True}
    texts, done, errors = [], [], []

    def victim() -> None:
        with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=AUTH, timeout=300) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done.append(True)
                elif line.startswith("data: "):
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        errors.append(chunk)
                    else:
                        texts.append(chunk["choices"][0]["text"])

    thread = threading.Thread(target=victim)
    thread.start()
    deadline = time.monotonic() + 60
    while len(texts) < 4 and time.monotonic() < deadline:  # the victim is in the batch
        time.sleep(0.02)
    answers = []
    for path, raw, phrase in POISONED:
        start = time.monotonic()
        r = raw_post(server, raw, path)
        answers.append((phrase, r.status_code, r.json()["error"]["message"], time.monotonic() - start))
    thread.join(timeout=300)
    for phrase, status, message, seconds in answers:
        assert status == 400 and phrase in message, (phrase, status, message)
    assert not errors and done == [True]
    start = time.monotonic()
    again = httpx.post(server.url + "/v1/completions", json={**body, "stream": False}, headers=AUTH, timeout=300)
    generation = time.monotonic() - start
    for phrase, _status, _message, seconds in answers:
        assert seconds < generation, (phrase, seconds, generation)
    assert again.json()["usage"]["completion_tokens"] == 256
    assert "".join(texts) == again.json()["choices"][0]["text"]  # seeded: the victim's text is its own alone
    assert "Traceback" not in server.log()


def _reply(sock: socket.socket) -> str:
    """An HTTP reply read whole from ``sock`` (its head, then as many body bytes as it says)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next((h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0))
    while len(body) < length:
        body += sock.recv(65536)
    return (head + b"\r\n\r\n" + body).decode("utf-8", "replace")


def _wrong_values() -> list[bytes]:
    return [b'{"a": 1}', b"[1, 2]", b'"text"', b"true", b"NaN", b"1e400", b"-1e400", b"-5", b"1e30", b"null"]


def _table() -> list[tuple[str, bytes]]:
    """Every field of both request models, with every wrong value, in a body that is otherwise right."""
    from alilama_core.engine.requests import ChatRequest, CompletionRequest

    cases = []
    for path, kind, base in (
        ("/v1/completions", CompletionRequest, {"prompt": "Once", "max_tokens": 2}),
        ("/v1/chat/completions", ChatRequest, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    ):
        for name in kind.model_fields:
            rest = json.dumps({k: v for k, v in base.items() if k != name})[1:-1]
            for value in _wrong_values():
                cases.append((path, b"{" + rest.encode() + b', "' + name.encode() + b'": ' + value + b"}"))
    return cases


def test_wrong_values_in_every_field_get_clear_errors_and_never_a_500(server):
    statuses: dict[int, int] = {}
    for path, raw in _table():
        r = raw_post(server, raw, path)
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        assert r.status_code in (200, 400, 404, 413), (raw, r.status_code, r.text)
        if r.status_code != 200:
            error = r.json()["error"]
            assert error["message"] and "Traceback" not in r.text and error["code"] == r.status_code
    assert statuses[400] > 300 and 500 not in statuses
    assert "Traceback" not in server.log()


MALFORMED = [
    # (method, path, raw body, extra headers, expected status, a phrase)
    ("POST", "/v1/completions", b"{not json", {}, 400, "JSON object"),
    ("POST", "/v1/completions", b"", {}, 400, "JSON object"),
    ("POST", "/v1/completions", b"null", {}, 400, "JSON object"),
    ("POST", "/v1/completions", b'{"prompt": "\xff\xfe"}', {}, 400, "JSON object"),
    ("POST", "/v1/completions", b'{"prompt": "' + b"x" * (5 << 20) + b'"}', {}, 413, "larger than"),
    ("POST", "/v1/completions", b'{"prompt": "x"}', {"Content-Length": "999999999"}, 413, "larger than"),
    ("GET", "/v1/completions", b"", {}, 405, "GET is not allowed"),
    ("PUT", "/v1/chat/completions", b"{}", {}, 405, "PUT is not allowed"),
    ("POST", "/v1/nothing", b"{}", {}, 404, "no route"),
    ("POST", "/v1/completions", b'{"prompt": "x"}', {"Authorization": "Basic abc"}, 401, "API key"),
]


@pytest.mark.parametrize("method,path,raw,headers,status,phrase", MALFORMED)
def test_malformed_requests_get_json_errors(server, method, path, raw, headers, status, phrase):
    if "Content-Length" in headers:  # a length the body never reaches: refused before it is read
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                      f"Content-Type: application/json\r\nContent-Length: 999999999\r\n\r\n".encode() + raw)  # fmt: skip
            reply = _reply(s)
        assert f" {status} " in reply.split("\r\n")[0] and phrase in reply
        return
    r = httpx.request(method, server.url + path, content=raw, headers={**AUTH, **headers}, timeout=30)
    assert r.status_code == status and phrase in r.json()["error"]["message"], r.text


def test_the_auth_scheme_is_case_insensitive(server):
    for scheme in ("bearer", "BEARER", "Bearer"):
        r = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1},
                       headers={"Authorization": f"{scheme} {KEY}"}, timeout=30)  # fmt: skip
        assert r.status_code == 200, (scheme, r.text)
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "x"}, headers={"Authorization": f"bearer {KEY}x"})
    assert r.status_code == 401


def test_slow_and_vanishing_clients_are_one_log_line_each(server):
    """A client that stops mid-body gets a 408 after --body-timeout; one that leaves mid-body is no traceback."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"".encode())  # fmt: skip
        start = time.monotonic()
        reply = _reply(s)
        assert " 408 " in reply.split("\r\n")[0] and "did not arrive within 2 s" in reply
        assert time.monotonic() - start < 10
    for head in (b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"):  # nothing, or half a head: closed
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(head)
            start = time.monotonic()
            assert s.recv(65536) == b"" and time.monotonic() - start < 10
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                      "Content-Length: 100\r\n\r\n{\"pro".encode())  # fmt: skip
    time.sleep(1.0)
    assert (
        httpx.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers=AUTH).status_code
        == 200
    )
    assert "Traceback" not in server.log()


def test_a_non_streaming_client_that_goes_away_frees_its_row_at_once(run):
    served = Served(run, "--max-batch", "1", "--max-tokens", "200000", "--max-queue", "4")
    try:
        body = {"prompt": PROMPT, "max_tokens": 200000, "temperature": 1.0, "ignore_eos": True}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(served.url + "/v1/completions", json=body, timeout=2)  # gives up and closes the connection
        start = time.monotonic()
        out = httpx.post(served.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 5}, timeout=120)
        assert out.status_code == 200 and out.json()["usage"]["completion_tokens"] == 5
        assert time.monotonic() - start < 30  # the abandoned request alone would hold the row for many minutes
    finally:
        served.stop()


def test_serve_options_are_bounded(run):
    from alilama_testing import run_cli

    for args, phrase in (
        (["--max-tokens", "1000000000"], "KV cache"),
        (["--max-batch", "1000000"], "KV cache"),
        (["--max-prompt-tokens", "0"], "--max-prompt-tokens must be at least 1"),
        (["--body-timeout", "0"], "--body-timeout must be between"),
    ):
        bad = run_cli("serve", str(run), "--port", "1", *args, timeout=120)
        assert bad.returncode == 1 and phrase in bad.stderr and "Traceback" not in bad.stderr, (args, bad.stderr)


def test_a_server_open_to_the_network_without_a_key_warns(run):
    served = Served(run, "--host", "0.0.0.0")
    try:
        time.sleep(0.5)
        assert "without --api-key" in served.log()
    finally:
        served.stop()


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_both_http_parsers_close_a_connection_without_a_whole_head(parser):
    """The server's protocol (httptools where installed, else h11) closes a silent or half-sent head in time, and
    answers a keep-alive client's second request; the h11 fallback is held to the same."""
    import asyncio

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from alilama_core.runs.serving import _timed_protocol

    protocol = _timed_protocol(1.0, parser)
    assert parser.lower() in protocol.__mro__[2].__name__.lower()  # the parser asked for, timed
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", http=protocol, loop="asyncio")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        for head in (b"", b"GET / HTTP/1.1\r\nHost: x\r\n"):  # nothing, or half a head
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(head)
                start = time.monotonic()
                assert s.recv(65536) == b"" and time.monotonic() - start < 5
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # a client that keeps its connection
        try:
            sockets = []
            for _ in range(2):
                client.request("GET", "/")
                response = client.getresponse()  # reads the head and the body, however many writes they came in
                assert (response.status, response.read()) == (200, b"ok")
                sockets.append(client.sock)
                time.sleep(0.6)  # within the time, twice: the timer restarts with each request
            assert sockets[0] is sockets[1]  # one connection kept
        finally:
            client.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
