"""The TensorBoard screenshot of docs/training.md, from a real run, rendered in headless Chromium.

Trains a small model (the ``tiny`` preset on a generated corpus, a minute or
less on two CPU cores) with ``train.loggers=[tensorboard]``, starts
``tensorboard --logdir`` on a loopback port, renders the scalars dashboard
with ``chromium --headless --screenshot``, checks that the picture is not
blank (enough non-background pixels, the curves' colours present), and writes
it to ``docs/img/tensorboard.png``. Needs ``alilama[tensorboard]`` and a
Chromium on the PATH (``chromium`` or ``chromium-browser``).

    .venv/bin/python scripts/tensorboard_screenshot.py [--steps 300] [--out docs/img/tensorboard.png]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img" / "tensorboard.png"
WIDTH, HEIGHT = 1400, 900


def train(root: Path, steps: int) -> Path:
    """A small run trained with the tensorboard logger, ``root/essay-tiny``; its TensorBoard folder."""
    from alilama_core.app.prepare import iter_documents, prepare
    from alilama_core.runs.stories import write_corpus
    from alilama_core.engine import configs as cfgmod
    from alilama_core.engine.registry import get_tokenizer, get_trainer
    from alilama_core.engine.validate import check_config

    write_corpus(root / "stories.txt", 2000, seed=1)
    tokenizer = get_tokenizer("bpe").train(
        iter_documents([str(root / "stories.txt")]), 512, special_tokens=["<|endoftext|>"]
    )
    tokenizer.save(root / "tok")
    prepare([str(root / "stories.txt")], root / "tok", root / "data", val_fraction=0.05)
    overrides = [
        "model.vocab_size=512",
        f"train.max_steps={steps}",
        "train.warmup_steps=20",
        "train.log_every=5",
        f"train.eval_every={max(1, steps // 10)}",
        f"train.checkpoint_every={steps}",
        "train.sample_prompts=[Once upon a time]",
        "train.loggers=[tensorboard]",
        "train.device=cpu",
    ]
    cfg = check_config(cfgmod.apply_overrides(cfgmod.preset("tiny"), overrides))
    run = root / "essay-tiny"
    get_trainer("default")(cfg, echo=print, show_progress=False).fit(str(root / "data"), str(run))
    return run / "trackers" / "tensorboard"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(logdir: Path, port: int) -> subprocess.Popen:
    """``tensorboard --logdir`` on 127.0.0.1:port, once it answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tensorboard exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=2) as r:
                r.read()
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("tensorboard did not answer within 60 s")


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("no chromium on the PATH (apt-get install chromium)")


def screenshot(url: str, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={WIDTH},{HEIGHT}",
                "--virtual-time-budget=20000",
                f"--screenshot={out}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )


CURVE = (255, 112, 67)  # TensorBoard's colour for the first run (#ff7043)
HEADER = 64  # pixels of the orange title bar, left out of the checks


def check_not_blank(path: Path) -> str:
    """Refuse a blank or half-drawn page: a description of what the picture holds."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    if image.size != (WIDTH, HEIGHT):
        raise SystemExit(f"{path}: {image.size}, expected {(WIDTH, HEIGHT)}")
    page = image.crop((0, HEADER, WIDTH, HEIGHT))
    pixels = list(page.get_flattened_data() if hasattr(page, "get_flattened_data") else page.getdata())
    background = max(set(pixels), key=pixels.count)
    busy = sum(1 for p in pixels if sum(abs(a - b) for a, b in zip(p, background)) > 60) / len(pixels)
    curve = sum(1 for p in pixels if sum(abs(a - b) for a, b in zip(p, CURVE)) < 60)
    if busy < 0.02 or curve < 300:
        raise SystemExit(
            f"{path} looks blank or unfinished ({busy:.1%} non-background pixels, {curve} pixels of the "
            "curves' colour below the title bar); not written into the docs"
        )
    return f"{busy:.1%} non-background pixels, {curve} pixels of the curves' colour"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        train(root, args.steps)
        port = free_port()
        proc = serve(root, port)  # as `tensorboard --logdir runs/`: the run is named by its folder
        try:
            shot = root / "tensorboard.png"
            screenshot(f"http://127.0.0.1:{port}/?darkMode=false#scalars&tagFilter=loss&_smoothingWeight=0", shot)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        print(f"{args.out}: {check_not_blank(shot)}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, args.out)


if __name__ == "__main__":
    main()
