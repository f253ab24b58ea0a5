"""A real ``alilama serve`` process on a loopback port, and the small run the serving tests share."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

KEY = "test-key-123"
PROMPT = "Once upon a time, there was"

# What the server refuses, one copy for the in-process tests (the fast tier) and the process tests.
ERRORS = [
    # (request body, expected status, a phrase of the message); the server's --max-prompt-tokens is 40
    ({"prompt": PROMPT, "max_tokens": 0}, 400, "max_tokens must be at least 1"),
    ({"prompt": PROMPT, "max_tokens": 10_000}, 400, "at most 256"),
    ({"prompt": PROMPT, "temperature": "hot"}, 400, "temperature must be a number"),
    ({"prompt": PROMPT, "top_p": 1.5}, 400, "top_p must be between 0 and 1"),
    ({"prompt": PROMPT, "stop": [""]}, 400, "stop must be"),
    ({"prompt": PROMPT, "logprobs": 99}, 400, "logprobs must be between 0 and 20"),
    ({"prompt": 42}, 400, "prompt must be a string"),
    ({"prompt": "word " * 200}, 413, "at most 40"),
    ({"prompt": PROMPT, "model": "gpt-4"}, 404, "model 'gpt-4' does not exist"),
]
REFUSED = [
    # (completion request fields, the field its 400 names): each would change the answer
    ({"best_of": 2}, "best_of"),
    ({"suffix": "The end."}, "suffix"),
    ({"n": 99}, "n"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),  # without stream
    ({"logit_bias": {"99999": -100}}, "logit_bias"),  # not an id of this model
    ({"prompt": [[5, 99999]]}, "prompt"),
    ({"temperature": 1e-300}, "temperature"),
    ({"unknown_field": 1}, "unknown_field"),
]
CHAT_REFUSED = [
    ({"response_format": {"type": "json_object"}}, "response_format"),
    (
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "tool_choice": "required"},
        "tools",
    ),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}, "image_url"),
    ({"messages": [{"role": "tool", "content": "42", "tool_call_id": "1"}]}, "tool"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"store": True}, "store"),
    ({"reasoning_effort": "high"}, "reasoning_effort"),
    ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
    ({"function_call": {"name": "f"}}, "function_call"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"prediction": {"type": "content", "content": "Hello"}}, "prediction"),
    ({"verbosity": "low"}, "verbosity"),
    ({"web_search_options": {}}, "web_search_options"),
    ({"service_tier": "flex"}, "service_tier"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_process_server(run: Path, max_batch: int = 4, max_prompt_tokens: int = 40):
    """The app ``alilama serve RUN --api-key KEY`` serves, in this process: a Starlette ``TestClient`` (an
    ``httpx.Client``, which the ``openai`` client takes as its ``http_client``); use it in a ``with`` block, which
    starts and stops the scheduler's thread as the server's lifespan does."""
    from starlette.testclient import TestClient

    from alilama_core.app.serve import PlaygroundServer
    from alilama_core.engine.chat import run_template
    from alilama_core.engine.scheduler import Limits
    from alilama_core.runs.checkpoint import load_run

    loaded = load_run(run)
    limits = Limits(max_batch=max_batch, max_prompt_tokens=max_prompt_tokens)
    server = PlaygroundServer(loaded, "story-run", limits, KEY, run_template(loaded.path))
    return TestClient(server.app(), base_url="http://testserver", headers={"Authorization": f"Bearer {KEY}"})


class Served:
    """``alilama serve RUN ARGS`` in a process of its own; what it prints goes to a file (``log()``)."""

    def __init__(self, run: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-c", "from alilama_core.app.cli import main; main()", "serve", str(run)]
        self.output = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [*command, "--port", str(self.port), "--threads", "1", *args],
            stdout=self.output,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited: {self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError("the server did not answer /health within 120 s")

    def log(self) -> str:
        """Everything the server printed so far."""
        self.output.seek(0)
        return self.output.read()

    def client(self, key: str = KEY):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=120)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def story_run(root: Path) -> Path:
    """A small ALiBi run trained for a few steps (tests/hf's ``build_run``, without transformers)."""
    import torch
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core import build_model
    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights
    from alilama_testing import tiny_config

    story = (
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
        'One day, she saw a big red ball in the park. "Can I play with you?" asked the ball. '
    ) * 8
    tok = BPETokenizer.train([story], vocab_size=320, special_tokens=["<|endoftext|>"])
    torch.manual_seed(0)
    cfg = tiny_config(positional="alibi", attention="sdpa", vocab_size=tok.vocab_size, context_length=64)
    model = build_model(cfg)
    ids = torch.tensor(tok.encode(story), dtype=torch.long)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(20):
        x, y = ids[None, :64], ids[None, 1:65]
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    root = root / "story-run"
    save_weights(model.eval(), root / "final")
    save(Config(model=cfg), root / "config.yaml")
    tok.save(root / "tokenizer")
    return root
