"""``auto``: chosen once per shape class, from declared capabilities, among every registered backend."""

from __future__ import annotations

import ast
import itertools
import pathlib

import alilama_attention.auto as auto
import pytest
import torch
from alilama_attention.flash import refusal
from alilama_attention.sdpa import sdpa_attention
from alilama_testing import tiny_config

from alilama_core import KVCache, build_model
from alilama_core.contracts.attention import AttentionBackend, AttentionCase, attention_backend, shape_class
from alilama_core.contracts.hookspecs import hookimpl
from alilama_core.engine.registry import get_attention, get_registry


def _case(device="cpu", shape="short", kind="bias", slopes=True, **kw):
    return AttentionCase(device, kw.pop("dtype", torch.float32), kw.pop("head_dim", 8), shape, kind, slopes, **kw)


def test_shape_classes():
    assert shape_class(1, 50) == "decode" and shape_class(16, 500) == "decode"
    assert shape_class(128, 128) == "short" and shape_class(40, 40) == "short"
    assert shape_class(2048, 2048) == "long" and shape_class(100, 5000) == "long"


def test_cpu_choices_with_the_built_in_priorities():
    assert auto.choose(_case(shape="long")).name == "tiled"
    assert auto.choose(_case(shape="decode")).name == "sdpa"
    assert auto.choose(_case(shape="short")).name == "sdpa"
    assert auto.choose(_case(shape="long", padded=True)).name == "sdpa"
    assert auto.choose(_case(shape="long", kind="rotary", slopes=False)).name == "sdpa"
    assert auto.choose(_case(shape="long", bias_trainable=True, training=True)).name == "sdpa"


def _all_cases():
    for device, dtype, head_dim, shape, (kind, slopes), padded, training in itertools.product(
        ["cpu", "cuda"],
        [torch.float32, torch.float16, torch.bfloat16],
        [8, 16],
        ["decode", "short", "long"],
        [("bias", True), ("bias", False), ("rotary", False), ("none", False)],
        [False, True],
        [False, True],
    ):
        yield AttentionCase(device, dtype, head_dim, shape, kind, slopes, padded, training)


def test_auto_never_picks_a_refused_or_unavailable_backend_or_another_dtype():
    for case in _all_cases():
        chosen = auto.choose(case)
        assert chosen.resolve is None
        assert chosen.available() is None, (case, chosen.name)
        assert chosen.refuses(case) is None, (case, chosen.name)
        assert chosen.dtypes is None or case.dtype in chosen.dtypes, (case, chosen.name)


def test_flash_availability_refuses_old_gpus_and_old_flash_attn():
    assert "not installed" in refusal(None, True, (9, 0))
    assert "2.4 or later" in refusal("2.3.6", True, (9, 0))
    assert "capability 7.5" in refusal("2.6.3", True, (7, 5))
    assert "no CUDA" in refusal("2.6.3", False, None)
    assert refusal("2.6.3", True, (8, 0)) is None and refusal("2.7.4.post1", True, (9, 0)) is None


def test_flash_is_refused_for_fp32_and_without_cuda():
    flash = attention_backend(get_attention("flash"))
    assert "float16" in flash.refuses(_case(device="cuda")) or flash.available() is not None
    assert flash.refuses(_case(device="cpu", dtype=torch.bfloat16)) is not None


calls: list[str] = []


def _counting_attention(q, k, v, *, positional=None, causal=True, key_padding_mask=None):
    calls.append("mine")
    return sdpa_attention(q, k, v, positional=positional, causal=causal, key_padding_mask=key_padding_mask)


class _ThirdParty:
    @hookimpl
    def register_attention_backends(self, register):
        register(
            "zz-third-party",
            AttentionBackend(
                "zz-third-party",
                _counting_attention,
                priority={"cpu:decode": 99},
                devices=("cpu",),
            ),
        )
        register(
            "zz-unavailable",
            AttentionBackend(
                "zz-unavailable",
                _counting_attention,
                priority={"cpu": 1000},
                check=lambda: "never here",
            ),
        )
        register(
            "zz-bf16-only",
            AttentionBackend(
                "zz-bf16-only",
                _counting_attention,
                priority={"cpu": 999},
                dtypes=(torch.bfloat16,),
            ),
        )


@pytest.fixture
def third_party():
    registry = get_registry()
    registry.register_plugin(_ThirdParty(), name="zz-third-party-plugin")
    calls.clear()
    yield
    registry.unregister_plugin("zz-third-party-plugin")


def test_an_installed_third_party_backend_wins_where_it_declares_the_highest_priority(third_party):
    from alilama_core.app.info import model_report

    assert auto.choose(_case(shape="decode")).name == "zz-third-party"
    assert auto.choose(_case(shape="short")).name == "sdpa"  # unavailable and bf16-only ones never win
    assert auto.choose(_case(shape="short", dtype=torch.bfloat16)).name == "zz-bf16-only"
    model = build_model(tiny_config(attention="auto")).eval()
    with torch.no_grad():
        cache = KVCache()
        model(torch.randint(0, 97, (1, 6)), cache=cache)
        assert calls == []
        model(torch.randint(0, 97, (1, 1)), cache=cache)
    assert calls == ["mine"] * model.config.n_layers
    assert "decode: zz-third-party" in model_report(tiny_config(attention="auto"))["plugins"]["attention"]["detail"]


def test_a_router_is_resolved_once_per_shape_class_not_per_call_or_layer():
    from alilama_core.engine.registry import register_plugin, unregister_plugin

    resolved = []

    def resolve(case):
        resolved.append(case.shape)
        return attention_backend(get_attention("sdpa"))

    class Router:
        @hookimpl
        def register_attention_backends(self, register):
            register("zz-router", AttentionBackend("zz-router", sdpa_attention, resolve=resolve))

    register_plugin(Router(), name="zz-router-plugin")
    try:
        model = build_model(tiny_config(attention="zz-router", n_layers=3)).eval()
        with torch.no_grad():
            cache = KVCache()
            model(torch.randint(0, 97, (2, 8)), cache=cache)
            for _ in range(5):
                model(torch.randint(0, 97, (2, 1)), cache=cache)
            model(torch.randint(0, 97, (2, 8)))
    finally:
        unregister_plugin("zz-router-plugin")
    assert resolved == ["short", "decode"]


def test_auto_names_no_backend_and_calls_no_sibling():
    tree = ast.parse(pathlib.Path(auto.__file__).read_text())
    builtins = {"eager", "sdpa", "tiled", "flex", "flash"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert node.value not in builtins
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            names = [a.name for a in node.names]
            assert not module.startswith("alilama_attention") and not any(
                n.startswith("alilama_attention") for n in names
            )
