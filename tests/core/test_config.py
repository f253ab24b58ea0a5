from __future__ import annotations

import json
from pathlib import Path

import pytest

from alilama_core import Config, ConfigError, ModelConfig, apply_overrides, preset
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.validate import check_config, check_model

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_essay_preset_matches_the_essay():
    m = preset("essay").model
    assert (m.vocab_size, m.d_model, m.n_layers, m.n_heads, m.d_mlp, m.context_length) == (
        4096,
        128,
        8,
        8,
        512,
        128,
    )
    assert (m.positional, m.attention) == ("alibi", "sdpa")


def test_tiny_preset_is_valid_and_small():
    cfg = preset("tiny").validate()
    assert cfg.model.d_model <= 64


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(tmp_path, suffix):
    cfg = apply_overrides(preset("essay"), ["model.n_layers=3", "model.positional=rope", "model.dropout=0.1"])
    path = tmp_path / f"config{suffix}"
    cfgmod.save(cfg, path)
    assert cfgmod.load(path) == cfg
    if suffix == ".json":
        assert json.loads(path.read_text())["model"]["n_layers"] == 3


def test_overrides_parse_values_by_field_type():
    cfg = apply_overrides(Config(), ["model.d_model=64", "--model.bias=false", "model.init_std=0.02"])
    assert cfg.model.d_model == 64 and cfg.model.bias is False and cfg.model.init_std == 0.02
    cfg = apply_overrides(cfg, ["model.init_std=null"])
    assert cfg.model.init_std is None


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.n_layer=3", "no field 'n_layer'; valid: .*n_layers"),
        ("model.n_layers=three", "model.n_layers must be an integer"),
        ("model.n_layers", "must look like section.field=value"),
        ("modle.n_layers=3", "'modle' is not a config section; sections: model"),
        ("model.positional=3", "model.positional must be a string"),
    ],
)
def test_bad_overrides_say_what_is_wrong(override, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(Config(), [override])


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(n_heads=7), "divisible by model.n_heads"),
        (dict(n_layers=0), "model.n_layers must be a positive integer"),
        (dict(dropout=1.5), "model.dropout"),
        (dict(positional="alibbi"), "unknown positional 'alibbi'"),
    ],
)
def test_invalid_configs_are_rejected(changes, message):
    with pytest.raises(ConfigError, match=message):
        check_model(ModelConfig(**changes))


def test_validate_checks_values_only(monkeypatch):
    """``ModelConfig.validate()`` is plain data: no registry, no memory probe; ``check_model`` does those."""
    from alilama_core.engine import validate as validation

    def refuse(*args, **kwargs):
        raise AssertionError("validate() must not reach the registry or the machine")

    monkeypatch.setattr(validation, "check_compatibility", refuse)
    monkeypatch.setattr(validation, "available_memory", refuse)
    ModelConfig(positional="no-such-scheme").validate()  # a name is data until a model is built
    with pytest.raises(AssertionError, match="must not reach"):
        check_model(ModelConfig())


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        cfgmod.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed")
    with pytest.raises(ConfigError, match="not valid yaml"):
        cfgmod.load(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("model:\n  n_layerz: 2\n")
    with pytest.raises(ConfigError, match="unknown field.*n_layerz"):
        cfgmod.load(wrong)
    with pytest.raises(ConfigError, match="unknown preset 'big'; available: essay.*tiny"):
        preset("big")


def test_save_is_atomic_and_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    cfgmod.save(preset("tiny"), path)
    before = path.read_text()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(cfgmod.os, "replace", boom)
    with pytest.raises(OSError):
        cfgmod.save(preset("essay"), path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]  # no temporary left behind


def test_essay_yaml_is_written_from_the_preset():
    """configs/essay.yaml and the `essay` preset are one definition (`make essay-config` rewrites the file)."""
    path = REPO_ROOT / "configs" / "essay.yaml"
    assert path.read_text(encoding="utf-8") == cfgmod.preset_yaml("essay", cfgmod.ESSAY_YAML_HEADER)
    assert cfgmod.to_dict(cfgmod.load(path)) == cfgmod.to_dict(cfgmod.preset("essay"))


def test_rope_theta_moved_to_positional_options_and_old_configs_load(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("model:\n  positional: rope\n  rope_theta: 500.0\n  n_layers: 2\n")
    cfg = cfgmod.load(old)
    assert cfg.model.positional_options == {"theta": 500.0} and cfg.model.rope_theta == 500.0
    alibi = tmp_path / "alibi.yaml"
    alibi.write_text("model:\n  positional: alibi\n  rope_theta: 10000.0\n")
    assert cfgmod.load(alibi).model.positional_options == {}
    from alilama_core.engine.model import build_model

    model = build_model(cfgmod.apply_overrides(cfg, ["model.positional_options.theta=20"]).model.validate())
    assert model.positional.theta == 20.0


@pytest.mark.parametrize(
    "override, words",
    [
        ("model.positional_options.thta=1", ["'thta'", "theta"]),
        ("model.attention_options.block=4", ["'block'", "sdpa"]),
        ("train.trainer_options.speed=2", ["'speed'", "default"]),
    ],
)
def test_unknown_plugin_settings_name_the_key(override, words):
    cfg = cfgmod.apply_overrides(cfgmod.preset("tiny"), ["model.positional=rope", "model.attention=sdpa", override])
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_plugin_settings_must_be_a_mapping():
    with pytest.raises(ConfigError, match="positional_options must be a mapping"):
        cfgmod.from_dict(cfgmod.Config, {"model": {"positional_options": [1, 2]}})


def test_the_fast_preset_is_the_essays_model_with_another_recipe():
    """``fast`` changes the training recipe only: the essay's model, so it exports wherever the essay's does."""
    essay, fast = cfgmod.flat(cfgmod.preset("essay")), cfgmod.flat(cfgmod.preset("fast"))
    changed = {k for k, v in fast.items() if essay[k] != v}
    assert changed == {"train.optimizer", "train.schedule", "train.lr", "train.min_lr"}
    assert fast["train.optimizer"] == "muon" and fast["train.schedule"] == "wsd"
