"""``alilama serve``: a real server process on a loopback port, driven by the official ``openai`` client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from alilama_testing import ok, run_cli  # noqa: E402
from served import KEY, PROMPT, Served, story_run  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return story_run(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(run):
    served = Served(run, "--api-key", KEY, "--max-batch", "4", "--max-prompt-tokens", "40")
    yield served
    served.stop()


def test_greedy_completion_equals_alilama_generate(server, run):
    out = server.client().completions.create(model="story-run", prompt=PROMPT, max_tokens=24, temperature=0)
    generated = ok(run_cli("generate", str(run), "--prompt", PROMPT, "-t", "0", "-n", "24"))
    assert PROMPT + out.choices[0].text == generated.removesuffix("\n")
    assert out.usage.completion_tokens == 24 and out.choices[0].finish_reason == "length"
    assert out.model == "story-run" and out.object == "text_completion"


def test_streamed_pieces_make_the_same_text(server):
    client = server.client()
    whole = client.completions.create(model="story-run", prompt=PROMPT, max_tokens=20, temperature=0)
    chunks = list(
        client.completions.create(model="story-run", prompt=PROMPT, max_tokens=20, temperature=0, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length" and len(chunks) > 5


def test_chat_streamed_and_whole_with_n_and_seed(server):
    client = server.client()
    messages = [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "A girl and a ball."}]
    kw = dict(model="story-run", messages=messages, max_tokens=16, temperature=1.0, seed=7, n=2)
    first, again = client.chat.completions.create(**kw), client.chat.completions.create(**kw)
    texts = [c.message.content for c in first.choices]
    assert texts == [c.message.content for c in again.choices]  # seeded: the same text every time
    assert texts[0] != texts[1]  # choice i uses seed + i
    assert first.choices[0].message.role == "assistant" and first.object == "chat.completion"
    streamed = {0: "", 1: ""}
    for chunk in client.chat.completions.create(**kw, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
    assert [streamed[0], streamed[1]] == texts
    other = client.chat.completions.create(**{**kw, "seed": 8})
    assert [c.message.content for c in other.choices] != texts


def test_stop_strings_cut_the_text_before_them(server):
    client = server.client()
    full = client.completions.create(model="story-run", prompt=PROMPT, max_tokens=30, temperature=0).choices[0].text
    stop = full[5:8]
    cut = client.completions.create(model="story-run", prompt=PROMPT, max_tokens=30, temperature=0, stop=[stop])
    assert cut.choices[0].text == full[: full.index(stop)] and cut.choices[0].finish_reason == "stop"
    pieces = client.completions.create(
        model="story-run", prompt=PROMPT, max_tokens=30, temperature=0, stop=stop, stream=True
    )
    assert "".join(c.choices[0].text for c in pieces) == full[: full.index(stop)]


def test_models_and_health_expose_no_path(server, run):
    models = server.client().models.list()
    assert [m.id for m in models.data] == ["story-run"]
    for path in ("/health", "/v1/models"):
        body = httpx.get(server.url + path, headers={"Authorization": f"Bearer {KEY}"}).text
        assert str(run) not in body and str(run.parent) not in body


def test_the_openai_client_sees_the_same_statuses(server):
    with pytest.raises(openai.AuthenticationError):
        server.client(key="wrong").completions.create(model="story-run", prompt=PROMPT, max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="top_p"):
        server.client().completions.create(model="story-run", prompt=PROMPT, top_p=3)
    with pytest.raises(openai.NotFoundError):
        server.client().completions.create(model="nope", prompt=PROMPT, max_tokens=2)
    r = httpx.post(server.url + "/v1/completions", content=b"{not json", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    assert httpx.post(server.url + "/v1/completions", json={"prompt": "x"}).status_code == 401  # no key


def test_a_client_that_disconnects_frees_its_row_at_once(run):
    """One row; a stream that could run for minutes is dropped after two chunks; the next request is served."""
    served = Served(run, "--max-batch", "1", "--max-tokens", "200000", "--max-queue", "4")
    try:
        body = {"prompt": PROMPT, "max_tokens": 200000, "temperature": 1.0, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", served.url + "/v1/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            assert [next(lines) for _ in range(3)]
        start = time.monotonic()
        out = served.client().completions.create(model="story-run", prompt=PROMPT, max_tokens=5, temperature=0)
        assert out.usage.completion_tokens == 5
        assert time.monotonic() - start < 60  # the dropped stream alone would hold the row for minutes
    finally:
        served.stop()


def test_a_full_queue_answers_429_and_the_queue_drains(run):
    """One row and one waiting place: a long stream holds the row, one request waits, the next is refused."""
    import concurrent.futures

    served = Served(run, "--max-batch", "1", "--max-queue", "1", "--max-tokens", "200000")
    try:
        body = {"prompt": PROMPT, "max_tokens": 200000, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", served.url + "/v1/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()  # kept: a dropped iterator closes the response (httpx), which frees the row
            next(lines)  # the row is taken
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(
                    httpx.post, served.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 3}, timeout=120
                )
                time.sleep(1.0)  # let it reach the queue
                refused = httpx.post(
                    served.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 3}, timeout=60
                )
                assert refused.status_code == 429 and "queue is full" in refused.json()["error"]["message"]
                r.close()  # the stream goes away: its row frees, the waiting request runs
                assert waiting.result().status_code == 200
        again = httpx.post(served.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 3}, timeout=60)
        assert again.status_code == 200
    finally:
        served.stop()


def test_concurrent_clients_share_the_batch_and_none_is_lost(server):
    """Eight clients at once on four rows: every request answered whole, each as it would be alone."""
    import concurrent.futures

    client = server.client()

    def one(i: int) -> str:
        return client.completions.create(model="story-run", prompt=PROMPT[: 10 + i], max_tokens=12, temperature=0)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(8)))
    for i, answer in enumerate(answers):
        alone = one(i)
        assert answer.choices[0].text == alone.choices[0].text, i


def test_serve_refuses_bad_options(run):
    bad = run_cli("serve", str(run), "--port", "70000")
    assert bad.returncode == 1 and "--port must be between 1 and 65535" in bad.stderr
    bad = run_cli("serve", str(run), "--max-batch", "0")
    assert bad.returncode == 1 and "--max-batch must be at least 1" in bad.stderr
    missing = run_cli("serve", str(run.parent / "no-such-run"))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


def test_default_chat_template_is_plain_text():
    from alilama_core.engine.chat import chat_prompt

    messages = [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": [{"type": "text", "text": "More"}]},
    ]
    assert chat_prompt(messages) == "Be kind.\n\nUser: Hi\nAssistant: Hello\nUser: More\nAssistant:"
    assert json.dumps(chat_prompt([{"role": "user", "content": "x"}])) == json.dumps("User: x\nAssistant:")
    assert os.sep not in chat_prompt([{"role": "user", "content": "y"}])


def test_completion_logprobs_are_the_models_own(server):
    out = server.client().completions.create(model="story-run", prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert "".join(lp.tokens) == out.choices[0].text and lp.text_offset[0] == 0
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 3 and logprob <= 0
        assert max(top.values()) == pytest.approx(logprob) and top[token] == pytest.approx(logprob)  # greedy: the top
    streamed = server.client().completions.create(
        model="story-run", prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3, stream=True
    )
    assert [
        t for c in streamed if c.choices[0].logprobs for t in c.choices[0].logprobs.token_logprobs
    ] == pytest.approx(lp.token_logprobs)


def test_chat_logprobs_and_top_logprobs(server):
    out = server.client().chat.completions.create(
        model="story-run", messages=[{"role": "user", "content": "Hi"}], max_tokens=6, logprobs=True, top_logprobs=2
    )
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens and all(len(c.top_logprobs) == 2 for c in content)
    assert "".join(c.token for c in content) == out.choices[0].message.content
    assert all(bytes(c.bytes).decode("utf-8", "replace") == c.token for c in content)


def test_the_hf_export_carries_the_same_chat_template(run, tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from alilama_core.engine.chat import chat_prompt
    from alilama_exporters.hf_folder import export

    messages = [
        {"role": "system", "content": "Tell stories."},
        {"role": "user", "content": "A dog?"},
        {"role": "assistant", "content": "Max ran."},
        {"role": "user", "content": "More!"},
    ]
    tok = AutoTokenizer.from_pretrained(export(run, tmp_path / "hf"))
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == chat_prompt(messages)
    own = run.parent / "own-template"
    import shutil

    shutil.copytree(run, own)
    (own / "chat_template.jinja").write_text("{% for m in messages %}<{{ m['content'] }}>{% endfor %}")
    tok = AutoTokenizer.from_pretrained(export(own, tmp_path / "own"))
    assert tok.apply_chat_template(messages, tokenize=False) == "<Tell stories.><A dog?><Max ran.><More!>"


def test_alilama_chat_keeps_the_history_resets_and_streams_the_engines_text(run):
    """Outside a terminal: one reply line per turn, each the greedy continuation of the templated history."""
    from alilama_core.engine.chat import CHAT_STOPS, chat_prompt
    from alilama_core.engine.generation import SamplingSettings, generate
    from alilama_core.runs.checkpoint import load_run

    command = [sys.executable, "-c", "from alilama_core.app.cli import main; main()", "chat", str(run)]
    proc = subprocess.run(
        [*command, "-t", "0", "-n", "10", "--threads", "1"],
        input="Hello there\nA ball?\n/reset\nHello there\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2] == "(history cleared)" and lines[3] == lines[0]  # after /reset: the first turn again
    loaded = load_run(run)
    tok = loaded.tokenizer

    def reply(messages):
        ids = tok.encode(chat_prompt(messages), allowed_special="all")
        text = tok.decode(
            generate(loaded.model, [ids], SamplingSettings(max_new_tokens=10, temperature=0), tok.eot_id)[0]
        )
        cut = min([text.find(s) for s in CHAT_STOPS if s in text], default=len(text))
        return text[:cut]

    first = reply([{"role": "user", "content": "Hello there"}])
    assert lines[0] == first
    history = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": first.strip()}]
    assert lines[1] == reply([*history, {"role": "user", "content": "A ball?"}])


# -- the playground, in headless Chromium ------------------------------------------------------------


class Browser:
    """Headless Chromium driven over the DevTools protocol (``--remote-debugging-pipe``): open, wait, read."""

    def __init__(self, net_log: Path | None = None) -> None:
        import shutil

        path = shutil.which("chromium") or shutil.which("chromium-browser")
        if path is None:
            pytest.skip("headless Chromium not installed (apt-get install -y chromium)")
        commands_r, self.commands = os.pipe()
        self.replies, replies_w = os.pipe()

        def pipes() -> None:  # the protocol's file descriptors: 3 for commands, 4 for replies
            os.dup2(commands_r, 3)
            os.dup2(replies_w, 4)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1100,1400"]
        flags += ["--remote-debugging-pipe", "--disable-background-networking", "--no-first-run"]
        flags += [f"--log-net-log={net_log}"] if net_log else []
        self.proc = subprocess.Popen(
            [path, *flags, "about:blank"],
            close_fds=False,  # fds 3 and 4 (made by dup2, inheritable) stay open; the rest close on exec
            preexec_fn=pipes,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_r)
        os.close(replies_w)
        self.buffer, self.next_id, self.session = b"", 0, None

    def send(self, method: str, **params):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.replies, 1 << 16)
                assert chunk, "Chromium closed the protocol pipe"
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, reply
                return reply["result"]

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", url=url)["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def evaluate(self, expression: str):
        return self.send("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def wait_for(self, expression: str, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while not self.evaluate(expression):
            assert time.monotonic() < deadline, f"the page never got to {expression!r}"
            time.sleep(0.1)

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        self.session = None
        try:
            self.send("Browser.close")
        except (AssertionError, OSError):
            pass
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def open_server(run):
    served = Served(run, "--max-batch", "2")
    yield served
    served.stop()


def test_the_playground_streams_text_and_draws_its_tape_in_chromium(open_server, tmp_path):
    """A prompt submitted in the page streams into the DOM; the tape of the text renders; a click chooses a token."""

    import numpy as np
    from PIL import Image

    net = tmp_path / "net.json"
    browser = Browser(net_log=net)
    try:
        browser.open(open_server.url + "/")
        browser.wait_for("document.body && document.body.dataset.model === 'story-run'")
        browser.evaluate(
            "document.getElementById('prompt').value = 'Once upon a time';"
            "document.getElementById('max_tokens').value = '12'; document.getElementById('temperature').value = '0';"
            "document.getElementById('go').click(); true"
        )
        browser.wait_for("document.body.dataset.tape === '1'")
        pieces = browser.evaluate("Array.from(document.querySelectorAll('#generated .piece')).map(s => s.textContent)")
        browser.evaluate("document.querySelectorAll('#tape .tok')[2].click(); true")
        tape = browser.evaluate("Array.from(document.querySelectorAll('#tape .tok')).map(s => s.className)")
        reads = browser.evaluate("document.getElementById('reads').textContent")
        browser.screenshot(tmp_path / "shot.png")
    finally:
        browser.close()
    greedy = open_server.client().completions.create(
        model="story-run", prompt="Once upon a time", max_tokens=12, temperature=0
    )
    assert len(pieces) > 3 and "".join(pieces) == greedy.choices[0].text  # streamed into the DOM, piece by piece
    assert len(tape) > len(pieces) and "query" in tape[2] and all("later" in c for c in tape[3:])
    assert reads.startswith("reads most: ")
    with Image.open(tmp_path / "shot.png") as im:
        pixels = np.asarray(im.convert("RGB")).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 50 and (pixels == 255).all(axis=1).mean() < 0.97, "a blank screenshot"

    # every request the page made went to its own server (the browser's own, such as autofill, are not the page's)
    log = json.loads(net.read_text())
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    starts = [e.get("params") or {} for e in log["events"] if names.get(e["type"]) == "URL_REQUEST_START_JOB"]
    page = [p["url"] for p in starts if p.get("initiator") == open_server.url]  # what the page asked for
    assert {u.split("?")[0] for u in page} >= {
        open_server.url + "/v1/completions",
        open_server.url + "/v1/alilama/tape",
    }
    assert all(u.startswith(open_server.url + "/") for u in page), page


def test_the_playground_page_names_no_address_of_its_own(open_server):
    import re

    page = httpx.get(open_server.url + "/").text
    assert not re.search(r"[a-z][a-z0-9+.-]*://|\b(?:src|href|srcset)\s*=|url\s*\(|@import|<link\b|<img\b", page)
    assert sorted(set(re.findall(r'fetch\("([^"]+)"', page))) == ["/v1/alilama/tape", "/v1/completions"]


def test_the_tape_endpoint_refuses_what_it_cannot_draw(open_server):
    r = httpx.post(open_server.url + "/v1/alilama/tape", json={"text": ""})
    assert r.status_code == 400 and "text must be a non-empty string" in r.json()["error"]["message"]
    r = httpx.post(open_server.url + "/v1/alilama/tape", json={"text": "word " * 5000})
    assert r.status_code == 413
    r = httpx.post(open_server.url + "/v1/alilama/tape", json={"text": "Once upon a time"})
    data = r.json()
    assert r.status_code == 200 and data["layers"] == 2 and len(data["tokens"]) == len(data["att"][0][0])


def test_a_step_s_events_reach_the_event_loop_in_order_with_one_wake_up():
    """The scheduler's thread hands a burst of events to the loop with one ``call_soon_threadsafe``, not one per
    event, and each queue gets its own events in the order they were made."""
    import asyncio
    import threading

    from alilama_core.runs.serving import _on_loop

    async def main() -> tuple[list, list, int]:
        loop = asyncio.get_running_loop()
        wakes = []
        plain = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: (wakes.append(a), plain(*a))[1]
        first, second = asyncio.Queue(), asyncio.Queue()
        deliver_first, deliver_second = _on_loop(loop, first), _on_loop(loop, second)
        busy = threading.Event()
        loop.call_soon(busy.wait, 10)  # the loop is busy while a step's events are handed over

        def step() -> None:
            for i in range(16):
                (deliver_first if i % 2 else deliver_second)(i)
            busy.set()

        thread = threading.Thread(target=step)
        thread.start()
        await asyncio.sleep(0)
        thread.join()
        got = ([await first.get() for _ in range(8)], [await second.get() for _ in range(8)])
        return *got, len(wakes)

    odd, even, wakes = asyncio.run(main())
    assert odd == [1, 3, 5, 7, 9, 11, 13, 15] and even == [0, 2, 4, 6, 8, 10, 12, 14]
    assert wakes == 1
