"""The threads setting: its default follows the CPU affinity, bad values are refused."""

from __future__ import annotations

import os

import pytest
import torch

from alilama_core.base.errors import ConfigError
from alilama_core.engine import configs as cfgmod
from alilama_core.engine import threads


def test_the_default_counts_the_cpus_of_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.setattr(threads, "physical_cores", lambda cpus: len(cpus))  # no hyper-threads
    assert threads.usable_cpus() == {0, 1, 2}
    assert threads.default_threads() == 3 and threads.choose_threads(None) == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5}, raising=False)
    assert threads.default_threads() == 1


def test_hyper_threads_of_one_core_count_once(monkeypatch, tmp_path):
    topology = {0: ("0", "0"), 1: ("0", "0"), 2: ("0", "1"), 3: ("0", "1")}  # two cores, two threads each
    real = threads.Path

    def fake_path(text):
        for cpu, (package, core) in topology.items():
            base = tmp_path / f"cpu{cpu}" / "topology"
            base.mkdir(parents=True, exist_ok=True)
            (base / "physical_package_id").write_text(package)
            (base / "core_id").write_text(core)
        return real(str(text).replace("/sys/devices/system/cpu", str(tmp_path)))

    monkeypatch.setattr(threads, "Path", fake_path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(topology), raising=False)
    assert threads.default_threads() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert threads.default_threads() == 1


def test_without_an_affinity_call_every_cpu_counts(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert threads.usable_cpus() == set(range(6))


def test_a_requested_count_is_taken_as_given():
    assert threads.choose_threads(1) == 1 and threads.choose_threads(64) == 64


@pytest.mark.parametrize("bad", [0, -2, 1.5, "4", True])
def test_bad_values_are_refused(bad):
    with pytest.raises(ConfigError, match="threads must be a positive integer"):
        threads.choose_threads(bad)
    cfg = cfgmod.preset("tiny")
    cfg.train.threads = bad
    with pytest.raises(ConfigError, match="train.threads must be a positive integer"):
        cfg.train.validate()


def test_the_config_takes_threads_from_an_override():
    cfg = cfgmod.apply_overrides(cfgmod.preset("tiny"), ["train.threads=3"])
    assert cfg.train.threads == 3 and cfg.validate().train.threads == 3
    assert cfgmod.preset("tiny").train.threads is None


def test_apply_threads_sets_torch(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert threads.apply_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_ranks_of_one_machine_share_its_cores(monkeypatch):
    from alilama_trainers.trainer import process_threads

    monkeypatch.setattr(threads, "default_threads", lambda: 8)
    monkeypatch.setattr("alilama_trainers.trainer.default_threads", lambda: 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert process_threads(None) == 2 and process_threads(5) == 5
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert process_threads(None) == 1
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert process_threads(None) == 8
