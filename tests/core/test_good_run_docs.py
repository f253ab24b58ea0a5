"""The "what good looks like" blocks of README.md and docs/training.md come from good_run.json.

``scripts/what_good_looks_like.py`` measures the runs and writes the JSON; these
tests check that the docs hold exactly what ``render`` makes of it, that
``render`` shows its numbers, and that rewriting a page touches only its block.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "what_good_looks_like.py"


def load_script():
    spec = importlib.util.spec_from_file_location("what_good_looks_like", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


good = load_script()


def run_results(steps: int, minutes: float, loss: float, bpb: float, text: str) -> dict:
    return {
        "model": {"parameters": 1_234_567, "n_layers": 4},
        "training": {"steps": steps, "tokens": steps * 4096, "minutes": minutes},
        "valid": {"loss": loss, "bpb": bpb},
        "samples": [
            {"prompt": "Once upon a time", "seed": 0, "text": text},
            {"prompt": "One day, a little", "seed": 1, "text": " girl *ran* <fast>."},
        ],
    }


def hand_made() -> dict:
    return {
        "date": "2001-02-03T04:05:06+00:00",
        "torch": "9.9.9",
        "cpu_count": 7,
        "loadavg": {"start": [1.25, 1.0, 0.5], "end": [3.75, 2.0, 1.0]},
        "script_minutes": 41.0,
        "command": ".venv/bin/python scripts/what_good_looks_like.py --long-minutes 17",
        "settings": {
            "vocab_size": 2048,
            "quick_minutes": 2.5,
            "long_minutes": 17,
            "eval_context": 128,
            "val_fraction": 0.05,
            "sampling": {"max_new_tokens": 60, "temperature": 0.8, "top_k": 40},
        },
        "runs": {
            "quickstart": run_results(321, 2.46, 2.345, 1.234, " there was a cat."),
            "long": run_results(6543, 16.9, 1.876, 0.987, " there was a dog named Rex."),
        },
    }


def test_docs_blocks_are_rendered_from_the_json():
    path = REPO / "docs" / "figures" / good.JSON_NAME
    if not path.is_file():
        pytest.skip(f"{path.relative_to(REPO)} does not exist yet: run {good.SCRIPT} to measure the runs")
    results = json.loads(path.read_text(encoding="utf-8"))
    for target, page in good.DOCS.items():
        text = (REPO / page).read_text(encoding="utf-8")
        assert good.read_block(text) == good.render(results, target), (
            f"the good-run block of {page} is not what {good.SCRIPT} renders from {path.name}; "
            f"run {good.SCRIPT} --report-only"
        )
    assert (REPO / "docs" / "figures" / good.IMAGE_NAME).is_file()


@pytest.mark.parametrize("target", ["readme", "training"])
def test_render_shows_the_numbers_of_its_results(target):
    block = good.render(hand_made(), target)
    for number in ("321", "6,543", "2.5", "16.9", "2.345", "1.234", "1.876", "0.987"):
        assert number in block, number
    assert "--long-minutes 17" in block
    assert f"]({good.IMAGE[target]})" in block
    assert "there was a cat." in block and "there was a dog named Rex." in block
    assert good.BEGIN not in block and good.END not in block


def test_training_block_has_all_samples_and_the_machine():
    block = good.render(hand_made(), "training")
    assert "girl \\*ran\\* \\<fast\\>." in block  # Markdown in a sample is shown, not interpreted
    assert block.count("> **") == 4
    assert "7 CPUs" in block and "1.2" in block and "3.8" in block
    assert "9.9.9" in block and "2001-02-03" in block
    assert "bits per byte" in block and "Lower is better" in block
    readme = good.render(hand_made(), "readme")
    assert readme.count("> **") == 2 and len(readme) < len(block)


def test_render_refuses_an_unknown_target():
    with pytest.raises(ValueError):
        good.render(hand_made(), "index")


def test_writing_the_docs_touches_only_the_blocks(tmp_path):
    pages = {}
    for target, page in good.DOCS.items():
        before = f"# Title of {target}\n\nintro text\n\n{good.BEGIN}\nold stuff 0.5\n{good.END}\n\n## After\n\nmore\n"
        path = tmp_path / page
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(before, encoding="utf-8")
        pages[target] = (path, before)
    results = hand_made()
    good.write_docs(results, tmp_path)
    for target, (path, before) in pages.items():
        after = path.read_text(encoding="utf-8")
        head, tail = before.split(good.BEGIN)[0], before.split(good.END)[1]
        assert after.startswith(head + good.BEGIN + "\n") and after.endswith(good.END + tail)
        assert good.read_block(after) == good.render(results, target)
        assert "old stuff" not in after
    good.write_docs(results, tmp_path)  # a second write changes nothing
    for target, (path, before) in pages.items():
        assert path.read_text(encoding="utf-8") == good.replace_block(before, good.render(results, target))


def test_a_page_without_both_markers_is_refused():
    with pytest.raises(ValueError):
        good.replace_block("no markers here\n", "block\n")
    with pytest.raises(ValueError):
        good.replace_block(f"{good.BEGIN}\n{good.END}\n{good.BEGIN}\n", "block\n")


def test_the_quickstart_budget_is_the_quickstarts():
    from alilama_core.app import quickstart

    minutes = inspect.signature(quickstart.run_quickstart).parameters["minutes"].default
    assert good.quickstart_budget_minutes() * 60 == pytest.approx(quickstart.training_seconds(minutes))
