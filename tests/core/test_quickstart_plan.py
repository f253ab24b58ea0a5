"""The quickstart spends its whole time budget: the step plan follows the measured speed."""

from __future__ import annotations

import json
from types import SimpleNamespace

from alilama_core.app.quickstart import StepPlanner, replan
from alilama_trainers.trainer import lr_at


def test_a_busy_start_does_not_halve_the_run():
    # planned at 0.75 s a step for a 200 s budget; the loop then runs at 0.33 s a step
    assert replan(step=20, elapsed=6.6, budget=200.0, max_steps=266, warmup=30) == 606


def test_after_warm_up_the_plan_only_shrinks():
    assert replan(step=100, elapsed=20.0, budget=200.0, max_steps=300, warmup=30) == 300
    assert replan(step=100, elapsed=150.0, budget=200.0, max_steps=300, warmup=30) == 133
    assert replan(step=100, elapsed=250.0, budget=200.0, max_steps=300, warmup=30) == 101  # past the budget


def test_learning_rate_stays_well_formed_under_re_planning():
    cfg = SimpleNamespace(lr=3e-3, min_lr=3e-4, warmup_steps=30, max_steps=100)
    rates, step, elapsed = [], 0, 0.0
    while step < cfg.max_steps:
        rates.append(lr_at(step, cfg))
        step += 1
        elapsed += 0.5 if step < 60 else 1.5  # fast at first, then the machine gets busy
        if step % 10 == 0:
            cfg.max_steps = replan(step, elapsed, 150.0, cfg.max_steps, cfg.warmup_steps)
    peak = rates.index(max(rates))
    assert peak == cfg.warmup_steps - 1
    assert all(a < b for a, b in zip(rates[:peak], rates[1 : peak + 1]))  # warm-up rises
    assert all(a >= b for a, b in zip(rates[peak:], rates[peak + 1 :]))  # then never rises again
    assert abs(rates[-1] - cfg.min_lr) < 0.05 * cfg.lr  # and ends near min_lr


def test_the_planner_reads_the_runs_metrics(tmp_path):
    cfg = SimpleNamespace(max_steps=100, warmup_steps=30, eval_every=25)
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 10, "elapsed_s": 2.0}) + "\n" + '{"step": 20, "elap')
    planner = StepPlanner(cfg, metrics, budget=100.0)
    planner.update()
    assert cfg.max_steps == 500 and planner.plans == [100, 500] and cfg.eval_every == 125
