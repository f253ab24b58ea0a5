"""The trainer: exact resume, signals, corrupt checkpoints, run-folder rules, DDP, plot, eval."""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from alilama_testing import losses, run_cli, run_ddp
from alilama_trainers.trainer import BudgetMarks, DefaultTrainer, lr_at

from alilama_core.base.errors import AlilamaError, DataError
from alilama_core.engine import configs as cfgmod
from alilama_core.runs.checkpoint import checkpoints, load_run


def tiny(**train):
    cfg = cfgmod.preset("tiny")
    cfg.model.vocab_size = 320
    cfg.train.sample_prompts = ["Once upon a time"]
    for k, v in train.items():
        setattr(cfg.train, k, v)
    return cfg


def fit(cfg, data_dir, run, **kw):
    return DefaultTrainer(cfg, echo=lambda *a: None, show_progress=False).fit(str(data_dir), str(run), **kw)


def test_schedule_warms_up_then_decays_to_min_lr():
    cfg = tiny(lr=1.0, min_lr=0.1, warmup_steps=10, max_steps=110).train
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.55) and lr_at(110, cfg) == pytest.approx(0.1)


def test_the_cosine_is_laid_over_the_time_budget():
    cfg = tiny(lr=1.0, min_lr=0.1, warmup_steps=10, max_steps=1010, max_time=100.0).train
    assert lr_at(5, cfg, elapsed=1.0) == pytest.approx(0.6)  # early on, warm-up goes by steps
    assert lr_at(2, cfg, elapsed=8.0) == pytest.approx(0.8)  # or by time, when that is further on
    # warm-up ends by a tenth of the budget however few steps a busy machine made
    assert lr_at(5, cfg, elapsed=20.0) == pytest.approx(0.1 + 0.45 * (1 + math.cos(0.2 * math.pi)))
    assert lr_at(5, cfg, elapsed=99.0) < 0.11
    assert lr_at(20, cfg, elapsed=50.0) == pytest.approx(0.55)  # half the budget: half the cosine
    assert lr_at(20, cfg, elapsed=100.0) == pytest.approx(0.1) and lr_at(20, cfg, elapsed=500.0) == pytest.approx(0.1)
    assert lr_at(510, cfg, elapsed=1.0) == pytest.approx(0.55)  # the steps' progress when it is ahead
    assert lr_at(20, cfg) == lr_at(20, tiny(lr=1.0, min_lr=0.1, warmup_steps=10, max_steps=1010).train)
    unbounded = tiny(lr=1.0, min_lr=0.1, warmup_steps=10, max_steps=None, max_time=100.0).train
    assert lr_at(20, unbounded, elapsed=50.0) == pytest.approx(0.55) and lr_at(9, unbounded, elapsed=0.0) == 1.0


def test_budget_marks_fall_once_per_share_of_the_budget_and_survive_a_resume():
    marks = BudgetMarks(100.0, 4)
    due = [t for t in range(0, 130, 5) if marks.due(float(t))]
    assert due == [25, 50, 75, 100]
    resumed = BudgetMarks(100.0, 4, spent=60.0)  # the marks before the resume are not due again
    assert [t for t in (61, 70, 76, 99, 101) if resumed.due(float(t))] == [76, 101]
    assert not BudgetMarks(None, 4).due(1e9) and not BudgetMarks(100.0, 0).due(1e9)


def test_the_time_budget_ends_a_run_with_a_checkpoint_and_a_last_evaluation(data_dir, tmp_path):
    from alilama_exporters.model_card import model_card

    cfg = tiny(max_steps=None, max_time=4.0, warmup_steps=1000, eval_every=100000, checkpoint_every=100000)
    cfg.train.log_every, cfg.train.eval_tokens, cfg.train.sample_tokens = 1, 1024, 8
    messages: list[str] = []
    run = tmp_path / "run"
    result = DefaultTrainer(cfg, echo=messages.append, show_progress=False).fit(str(data_dir), str(run))
    step = result["step"]
    assert 2 < step and result["stopped"] == "time budget" and "val_loss" in result
    assert messages[-1] == f"stopped by the time budget (train.max_time=4 s) at step {step}"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # the stop's evaluation is of the weights saved, and it is the only one at that step
    assert rows[-1]["step"] == step and rows[-1]["val_loss"] == result["val_loss"] and "samples" in rows[-1]
    evaluated = [r["step"] for r in rows if "val_loss" in r]
    assert 1 <= len(evaluated) <= 4 and evaluated.count(step) == 1  # one per quarter of the budget at most
    # 1,000 warm-up steps asked, far fewer made: warm-up still ended (by a tenth of the budget), and the
    # cosine ended near min_lr
    rates = [r["lr"] for r in rows]
    by_steps_only = cfg.train.lr * step / 1000  # the highest rate a warm-up by steps alone would reach
    assert max(rates) > min(0.5 * cfg.train.lr, 10 * by_steps_only)
    assert rates[-1] - cfg.train.min_lr < 0.15 * (cfg.train.lr - cfg.train.min_lr)
    final_state = json.loads((run / "final" / "state.json").read_text())
    assert final_state["step"] == step and final_state["time_s"] >= 4.0 and final_state["stopped"] == "time budget"
    record = json.loads((run / "run.json").read_text())
    assert record["final"]["step"] == step and record["final"]["stopped"] == "time budget"
    assert checkpoints(run)[-1].name == f"step-{step:08d}"
    card = model_card(run, load_run(run), parameters=1)
    assert f"{step:,} optimizer steps" in card and f"{step * 8 * 64:,} training tokens" in card
    assert "stopped by the time budget (`max_time` 4.0 s)" in card and "`max_time` 4.0" in card
    # the saved config says what ran: a budget and no step count; resuming it finds nothing left to do
    saved = cfgmod.load(run / "config.yaml")
    assert saved.train.max_steps is None and saved.train.max_time == 4.0
    again = DefaultTrainer(cfg, echo=messages.append, show_progress=False).fit(str(data_dir), str(run), resume=True)
    assert again["finished"] and again["step"] == step and "spent its time budget" in messages[-1]


def test_training_lowers_the_loss_and_writes_the_run_folder(data_dir, tmp_path):
    run = tmp_path / "run"
    result = fit(tiny(max_steps=30, lr=1e-2, eval_every=15, checkpoint_every=10, keep_last=2), data_dir, run)
    l = losses(run)
    assert l[30] < l[5] - 0.5
    assert {p.name for p in checkpoints(run)} == {"step-00000020", "step-00000030"} | (
        {f"step-{json.loads((run / 'step-00000030' / 'state.json').read_text())['best']['step']:08d}"}
    )
    assert (run / "final" / "model.safetensors").is_file() and (run / "tokenizer" / "tokenizer.model").is_file()
    assert cfgmod.load(run / "config.yaml").train.max_steps == 30
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in rows if "val_loss" in r]
    assert [r["step"] for r in evaluated] == [15, 30]
    assert all({"step", "tokens", "lr", "train_loss"} <= set(r) for r in rows)
    assert evaluated[-1]["val_bpb"] > 0 and "samples" in evaluated[-1]
    assert result["val_loss"] == pytest.approx(evaluated[-1]["val_loss"])
    loaded = load_run(run)
    assert loaded.checkpoint.name == "final" and loaded.model.config.vocab_size == 320


RECIPES = {
    "adamw-cosine": {},
    "muon-wsd": {"optimizer": "muon", "schedule": "wsd", "decay_share": 0.5, "muon_lr": 0.02},
}
FAST_MODEL = {"qk_norm": True, "activation": "relu2", "tie_embeddings": False}
"""The model settings the ``fast`` preset may use, trained with the Muon recipe in these tests."""


@pytest.mark.slow  # trains each recipe twice
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_resume_gives_exactly_the_uninterrupted_losses(data_dir, tmp_path, recipe):
    cfg = tiny(
        max_steps=12, checkpoint_every=100, eval_every=100, device="cpu", **RECIPES[recipe]
    )  # CUDA kernels may not be deterministic
    if recipe == "muon-wsd":
        for k, v in FAST_MODEL.items():
            setattr(cfg.model, k, v)
    fit(cfg, data_dir, tmp_path / "straight")
    fit(cfg, data_dir, tmp_path / "split", stop_at=5)
    assert max(losses(tmp_path / "split")) == 5
    fit(cfg, data_dir, tmp_path / "split", resume=True)
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")  # bit-for-bit on CPU
    a = load_run(tmp_path / "straight").model.state_dict()
    b = load_run(tmp_path / "split").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_corrupt_checkpoint_falls_back_to_the_previous_one(data_dir, tmp_path, capsys):
    cfg = tiny(max_steps=12, checkpoint_every=3, keep_last=3, eval_every=100)
    fit(cfg, data_dir, tmp_path / "run", stop_at=9)
    latest = checkpoints(tmp_path / "run")[-1]
    assert latest.name == "step-00000009"
    weights = latest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    messages = []
    DefaultTrainer(cfg, echo=messages.append, show_progress=False).fit(
        str(data_dir), str(tmp_path / "run"), resume=True
    )
    text = "\n".join(map(str, messages))
    assert "skipped corrupt checkpoints: step-00000009" in text and "resuming from step-00000006" in text
    assert max(losses(tmp_path / "run")) == 12


def test_run_folder_rules(data_dir, tmp_path):
    run = tmp_path / "run"
    fit(tiny(max_steps=2), data_dir, run)
    with pytest.raises(AlilamaError, match="already holds a run.*--resume.*--overwrite"):
        fit(tiny(max_steps=2), data_dir, run)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(AlilamaError, match="already exists and holds other files"):
        fit(tiny(max_steps=2), data_dir, other)
    with pytest.raises(AlilamaError, match="replaces only a run that Alilama wrote.*nothing was deleted"):
        fit(tiny(max_steps=2), data_dir, other, overwrite=True)
    assert (other / "notes.txt").read_text() == "mine"
    (run / "notes.txt").write_text("mine too")  # a user's file inside a run is not Alilama's to delete
    with pytest.raises(AlilamaError, match=r"files Alilama did not write \(notes.txt\)"):
        fit(tiny(max_steps=3), data_dir, run, overwrite=True)
    (run / "notes.txt").unlink()
    with pytest.raises(AlilamaError, match="cannot resume"):
        fit(tiny(max_steps=2), data_dir, tmp_path / "nothing", resume=True)
    fit(tiny(max_steps=3), data_dir, run, overwrite=True)
    assert max(losses(run)) == 3


def test_corpus_shorter_than_a_window(data_dir, tmp_path):
    cfg = tiny(max_steps=2)
    cfg.model.context_length = 100_000
    with pytest.raises(DataError, match="fewer than one window"):
        fit(cfg, data_dir, tmp_path / "run")


def test_sigint_writes_a_checkpoint_and_resume_continues(data_dir, tmp_path):
    run = tmp_path / "run"
    args = [
        "train",
        "--preset",
        "tiny",
        "--data",
        str(data_dir),
        "--out",
        str(run),
        "--no-progress",
        "train.max_steps=100000",
        "train.checkpoint_every=100000",
        "train.eval_every=100000",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from alilama_core.app.cli import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (
        (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 2
    ):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "SIGINT: checkpoint written at step" in out + err
    [ckpt] = checkpoints(run)
    step = json.loads((ckpt / "state.json").read_text())["step"]
    assert step >= 10  # two metric lines (every 5 steps) were written before the signal
    resumed = run_cli("train", "--resume", str(run), "--no-progress", f"train.max_steps={step + 3}")
    assert resumed.returncode == 0, resumed.stderr
    assert max(losses(run)) == step + 3


@pytest.mark.parametrize("recipe", ["adamw", "muon"])
def test_ddp_two_processes_match_one_process(data_dir, tmp_path, recipe):
    common = [
        "--preset",
        "tiny",
        "--data",
        str(data_dir),
        "--no-progress",
        "train.max_steps=4",
        "train.eval_every=100",
        "train.batch_size=8",
        "train.warmup_steps=1",
        "train.device=cpu",
        f"train.optimizer={recipe}",
        *([f"model.{k}={str(v).lower()}" for k, v in FAST_MODEL.items()] if recipe == "muon" else []),
    ]  # two processes on CPU (gloo), also on a machine with one GPU
    single = run_cli("train", "--out", str(tmp_path / "one"), *common)
    assert single.returncode == 0, single.stderr
    ddp = run_ddp(tmp_path / "two", common, port=29517 if recipe == "adamw" else 29519)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert one.keys() == two.keys()
    for step in one:
        assert two[step] == pytest.approx(one[step], rel=1e-4)
    a = load_run(tmp_path / "one").model.state_dict()
    b = load_run(tmp_path / "two").model.state_dict()
    # Adam divides by sqrt(v): parameters whose gradients are ~0 (float noise from a different
    # reduction order) still move by up to ~lr, so weights agree only to about lr per step.
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-3, atol=4 * 3e-3)


def test_plot_writes_a_png(data_dir, tmp_path):
    fit(tiny(max_steps=10, eval_every=5, log_every=2), data_dir, tmp_path / "a")
    fit(tiny(max_steps=10, eval_every=5, log_every=2, lr=1e-2), data_dir, tmp_path / "b")
    result = run_cli("plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "loss.png"))
    assert result.returncode == 0, result.stderr
    png = (tmp_path / "loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.parametrize("positional", ["alibi", "learned"])
def test_eval_at_several_context_lengths(data_dir, corpus, tmp_path, positional):
    cfg = tiny(max_steps=5)
    cfg.model.positional = positional
    cfg.model.context_length = 32
    fit(cfg, data_dir, tmp_path / "run")
    result = run_cli("eval", str(tmp_path / "run"), "--data", str(corpus), "--context-lengths", "32,64,256", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["context_length"] for r in rows] == [32, 64, 256]
    assert rows[0]["bpb"] > 0 and rows[0]["tokens"] > 1000
    if positional == "alibi":
        assert all(r["bpb"] is not None for r in rows)
        assert rows[2]["attention"] == "auto"
    else:
        assert rows[1]["bpb"] is None and "covers 32 positions" in rows[1]["note"]


def test_quickstart_end_to_end(tmp_path):
    result = run_cli("quickstart", "--out", str(tmp_path / "qs"), "--stories", "300", "--steps", "12")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "val bits per byte" in result.stdout and "loss curve" in result.stdout
    assert (tmp_path / "qs" / "run" / "loss.png").is_file()
    assert (tmp_path / "qs" / "run" / "final" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "qs" / "tokenizer" / "alilama_tokenizer.json").read_text()) == {"kind": "bpe"}


def test_gradient_accumulation_matches_the_full_batch(data_dir, tmp_path):
    fit(tiny(max_steps=4, batch_size=8, eval_every=100), data_dir, tmp_path / "full")
    fit(tiny(max_steps=4, batch_size=8, micro_batch_size=2, eval_every=100), data_dir, tmp_path / "accum")
    full, accum = losses(tmp_path / "full"), losses(tmp_path / "accum")
    assert full.keys() == accum.keys()
    for step in full:
        assert accum[step] == pytest.approx(full[step], rel=1e-4)


def test_bf16_autocast_trains(data_dir, tmp_path):
    result = fit(tiny(max_steps=6, dtype="bfloat16", lr=1e-2, eval_every=6), data_dir, tmp_path / "bf16")
    import math

    l = losses(tmp_path / "bf16")
    assert all(math.isfinite(v) for v in l.values())
    assert math.isfinite(result["val_loss"]) and result["val_loss"] < math.log(320)  # below uniform guessing


def test_a_run_killed_before_its_first_checkpoint_starts_again(data_dir, tmp_path):
    cfg = tiny(max_steps=3, checkpoint_every=100, eval_every=100)
    fit(cfg, data_dir, tmp_path / "straight")
    run = tmp_path / "run"
    fit(cfg, data_dir, run)
    for path in [*checkpoints(run), run / "final"]:
        shutil.rmtree(path)
    (run / "metrics.jsonl").write_text('{"step": 1, "tokens": 512, "lr": 0.001, "train_loss": 6.0}\n{"step": 2, "to')
    messages = []
    DefaultTrainer(cfg, echo=messages.append, show_progress=False).fit(str(data_dir), str(run), resume=True)
    assert "the run has no checkpoint yet: starting from step 0" in messages
    assert any("dropped 1 unreadable line" in m for m in messages)
    assert losses(run) == losses(tmp_path / "straight")
    record = json.loads((run / "run.json").read_text())
    assert record["data"] == str(data_dir.resolve()) and set(record["checkpoints"]) == {"step-00000003", "final"}
    assert [h["action"] for h in record["history"]] == ["start", "resume"]


def test_each_sample_prompt_has_its_own_seed(tokenizer_dir):
    """An untrained model ignores its prompt: with one seed for all, every early sample would be the same text."""
    from alilama_core.engine.model import build_model
    from alilama_core.runs.tokenizers import load_tokenizer

    cfg = tiny(sample_tokens=12)
    cfg.train.sample_prompts = ["Once", "Once"]
    torch.manual_seed(0)
    model = build_model(cfg.model)
    first, second = DefaultTrainer(cfg, echo=lambda *a: None).samples(model, load_tokenizer(tokenizer_dir), step=10)
    assert first != second
    again = DefaultTrainer(cfg, echo=lambda *a: None).samples(model, load_tokenizer(tokenizer_dir), step=10)
    assert again == [first, second]  # still seeded: the same step gives the same samples


def test_the_wsd_schedule_warms_up_holds_then_decays_in_a_straight_line():
    cfg = cfgmod.preset("tiny").train
    cfg.max_steps, cfg.warmup_steps, cfg.lr, cfg.min_lr, cfg.schedule, cfg.decay_share = 100, 10, 1.0, 0.1, "wsd", 0.2
    lrs = [lr_at(step, cfg) for step in range(101)]
    assert lrs[4] == pytest.approx(0.5) and all(x == 1.0 for x in lrs[10:82])  # warm-up, then stable
    assert lrs[100] == pytest.approx(0.1) and lrs[91] == pytest.approx(1.0 - 0.9 * (0.9 - 0.8) / 0.2)
    decay = [a - b for a, b in zip(lrs[83:100], lrs[84:101])]
    assert max(decay) == pytest.approx(min(decay))  # linear
    cfg.max_steps, cfg.max_time = None, 100.0  # under a time budget the decay follows the time
    assert lr_at(50, cfg, elapsed=50.0) == 1.0 and lr_at(50, cfg, elapsed=90.0) == pytest.approx(0.55)


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest(data_dir):
    from alilama_trainers.optimizers import TwoOptimizers

    from alilama_core import build_model
    from alilama_core.engine.registry import build_optimizer

    cfg = tiny(optimizer="muon", muon_lr=0.02, lr=0.004)
    model = build_model(cfg.model)
    opt = build_optimizer(model, cfg.train)  # train.optimizer=muon, from the registry
    assert isinstance(opt, TwoOptimizers) and isinstance(opt.muon, torch.optim.Muon)
    muon = {id(p) for g in opt.muon.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        assert (id(p) in muon) == (name.startswith("blocks.") and p.dim() == 2), name
    assert {g.get("lr_scale", 1.0) for g in opt.param_groups} == {5.0, 1.0}


def test_resume_refuses_another_optimiser(data_dir, tmp_path):
    fit(tiny(max_steps=4, checkpoint_every=2, eval_every=100), data_dir, tmp_path / "run", stop_at=2)
    with pytest.raises(AlilamaError, match="cannot resume with another optimiser .train.optimizer 'adamw' -> 'muon'"):
        fit(tiny(max_steps=4, optimizer="muon"), data_dir, tmp_path / "run", resume=True)
