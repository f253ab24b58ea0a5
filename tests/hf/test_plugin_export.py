"""Positional schemes from plugins export with their standalone module and load by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from alilama_core.contracts.hookspecs import hookimpl
from alilama_core.contracts.positional import PositionalScheme
from alilama_core.engine.registry import register_plugin, unregister_plugin

STANDALONE = Path(__file__).with_name("plugin_schemes") / "kerple_standalone.py"


class KerpleLog(PositionalScheme):
    """A learnable bias (KERPLE-log), as a third party would write it."""

    kind = "bias"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.r1 = nn.Parameter(torch.ones(self.n_heads))
        self.r2 = nn.Parameter(torch.ones(self.n_heads))

    def bias(self, q_pos, k_pos):
        distance = (q_pos[:, None] - k_pos[None, :]).clamp(min=0).float()  # (T, S)
        return -self.r1[:, None, None] * torch.log1p(self.r2[:, None, None] * distance)  # (H, T, S)

    @classmethod
    def export_source(cls) -> str:
        return str(STANDALONE)


class NoExport(KerpleLog):
    @classmethod
    def export_source(cls):
        return None


class _Schemes:
    @hookimpl
    def register_positional_schemes(self, register):
        register("kerple-export-test", KerpleLog)
        register("no-export-test", NoExport)


@pytest.fixture(scope="module")
def schemes():
    register_plugin(_Schemes(), name="hf-export-test-schemes")
    yield
    unregister_plugin("hf-export-test-schemes")


def _run(make_run, tmp_path_factory, tokenizer, positional):
    root = tmp_path_factory.mktemp(positional)
    return make_run(root, positional, tokenizer, metrics=False, d_model=32, n_heads=4, context_length=32)


def test_a_learnable_bias_scheme_round_trips(schemes, make_run, tmp_path_factory, tokenizer):
    import alilama_hf

    alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    from alilama_exporters.hf_folder import export
    from transformers import AutoModelForCausalLM

    from alilama_core.runs.checkpoint import load_run

    run = _run(make_run, tmp_path_factory, tokenizer, "kerple-export-test")
    loaded = load_run(run)
    assert not torch.equal(loaded.model.positional.r1, torch.ones(4))  # trained away from its init
    out = export(run, tmp_path_factory.mktemp("kerple-export") / "out")
    assert (out / "positional_kerple_export_test.py").read_text() == STANDALONE.read_text()
    ids = torch.tensor([tokenizer.encode("Once upon a time, Lily saw a big red ball in the park." * 3)[:40]])
    with torch.no_grad():
        expected = loaded.model(ids)
    for attn in ("eager", "sdpa"):
        model = AutoModelForCausalLM.from_pretrained(out, attn_implementation=attn).eval()
        torch.testing.assert_close(model.model.positional.r1, loaded.model.positional.r1)
        with torch.no_grad():
            torch.testing.assert_close(model(ids).logits, expected, rtol=1e-5, atol=1e-5)
    # The bias keeps learning in the exported model: gradients reach r1 and r2.
    model.train()
    model(ids, labels=ids).loss.backward()
    assert model.model.positional.r1.grad.abs().sum() > 0 and model.model.positional.r2.grad.abs().sum() > 0


def test_a_scheme_without_a_standalone_module_is_refused_clearly(schemes, make_run, tmp_path_factory, tokenizer):
    from alilama_exporters.hf_folder import export

    from alilama_core.base.errors import AlilamaError

    run = _run(make_run, tmp_path_factory, tokenizer, "no-export-test")
    with pytest.raises(AlilamaError, match=r"no-export-test.*no standalone module.*export_source\(\)"):
        export(run, tmp_path_factory.mktemp("no-export") / "out")
