"""The interactive tape in a real browser (headless Chromium), and its self-containment."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from viz.viz_helpers import VIZ_SCHEMES, need_scheme

from alilama_core.app.viz import attention_pictures

TEXT = "Max saw https://example.com/x.js </script> and barked: woof!"
# Anything that would make the page fetch or link to another resource.
OUTSIDE = re.compile(
    r"[a-z][a-z0-9+.-]*://|\b(?:src|href|action|srcset|poster)\s*=|url\s*\(|@import|<link\b|<img\b|<iframe\b"
    r"|\bfetch\s*\(|XMLHttpRequest|WebSocket|EventSource|\bimport\s*\(|sendBeacon|\bwindow\.open\b",
    re.IGNORECASE,
)


def references_outside(page: str) -> list[str]:
    """Every piece of ``page`` that refers to something outside the file."""
    return [m.group(0) for m in OUTSIDE.finditer(page)]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("headless Chromium not installed (apt-get install -y chromium)")
    return path


def browse(page: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=5000",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def pages(run_factory, tmp_path_factory):
    """One tape.html per scheme (the prompt mentions an address, which must not become a reference)."""
    out = {}
    for positional in VIZ_SCHEMES:
        try:
            need_scheme(positional)
        except pytest.skip.Exception:
            continue
        folder = tmp_path_factory.mktemp(f"page-{positional}")
        attention_pictures(str(run_factory(positional)), TEXT, folder)
        out[positional] = folder / "tape.html"
    return out


@pytest.mark.parametrize("positional", VIZ_SCHEMES)
def test_page_references_nothing_outside_itself(positional, pages):
    need_scheme(positional)
    page = pages[positional].read_text(encoding="utf-8")
    assert references_outside(page) == []
    assert page.count("</script>") == 2  # the data and the script; the prompt's "</script>" is escaped


def test_the_check_finds_outside_references():
    for bad in (
        '<script src="a.js">',
        "<a href='x'>",
        "body{background:url(x.png)}",
        "fetch('/x')",
        "@import 'y.css';",
        "see https://example.com",
    ):
        assert references_outside(f"<html>{bad}</html>"), bad


@pytest.mark.parametrize("positional", VIZ_SCHEMES)
def test_script_builds_the_tape_in_chromium(positional, pages, tokenizer):
    need_scheme(positional)
    result = browse(pages[positional], "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert 'data-ready="1"' in dom, "the page's script did not finish"
    n_tokens = len(tokenizer.encode(TEXT))
    assert n_tokens < 64  # all of it fits the context
    assert len(re.findall(r'<span class="tok[ "]', dom)) == n_tokens
    assert len(re.findall(r'class="head-cell', dom)) == 2 * 4  # layers x heads overview
    assert len(re.findall(r'class="lens-row"', dom)) == 2
    assert len(re.findall(r'class="lens-grid-row"', dom)) == 2
    assert 'class="tok query"' in dom or 'class="tok query ' in dom


def test_screenshot_is_not_blank(pages, tmp_path):
    shot = tmp_path / "shot.png"
    result = browse(pages["alibi"], f"--screenshot={shot}", "--window-size=1000,900")
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    with Image.open(shot) as im:
        pixels = np.asarray(im.convert("RGB")).reshape(-1, 3)
    colours = len(np.unique(pixels, axis=0))
    white = (pixels == 255).all(axis=1).mean()
    assert colours > 50 and white < 0.97, f"blank screenshot: {colours} colours, {white:.1%} white"
