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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
