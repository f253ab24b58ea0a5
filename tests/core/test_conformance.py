"""Every built-in plugin passes the conformance kit that third-party plugins run (``alilama_core.kit``)."""

from __future__ import annotations

import pytest
import torch

from alilama_core import PositionalScheme
from alilama_core.kit.attention import check_attention_backend
from alilama_core.kit.common import registered
from alilama_core.kit.positional import check_positional_scheme
from alilama_core.kit.tokenizer import check_tokenizer

BACKENDS = ["eager", "sdpa", "tiled", "flex", "auto"]


# "flex": every registered backend, as a third party's kit run sees them (flex compiles per shape: slow tier);
# "no-flex": the same checks on the backends that run without a compile (fast tier).
ON = {"flex": None, "no-flex": [b for b in BACKENDS if b not in ("flex", "auto")]}


@pytest.mark.parametrize("on", ON)
@pytest.mark.parametrize("scheme", ["alibi", "rope", "learned", "nope"])
def test_builtin_schemes_conform(scheme, on):
    done = check_positional_scheme(scheme, backends=ON[on])
    assert "cached == uncached" in done and "save and load" in done
    assert any(d.endswith("== eager") for d in done)
    assert ("padded batch == alone (flex)" in done) == (on == "flex")


@pytest.mark.parametrize("on", ON)
def test_rope_theta_is_an_option(on):
    assert "unknown option refused" in check_positional_scheme("rope", options={"theta": 500.0}, backends=ON[on])


@pytest.mark.parametrize("backend", BACKENDS)
def test_builtin_backends_conform(backend):
    done = check_attention_backend(backend)
    assert done and all(d.endswith("== eager") or d.startswith("skipped") for d in done)


def test_bpe_tokenizer_conforms():
    done = check_tokenizer("bpe")
    assert {"round trips", "encode_file", "save and load", "save_hf", "importer", "bad input"} <= set(done)


class FrozenBias(PositionalScheme):
    """A learnable bias that opts into caching although it trains: the kit must catch the stale bias."""

    kind = "bias"
    bias_is_static = True

    def __init__(self, config):
        super().__init__(config)
        self.scale = torch.nn.Parameter(torch.ones(self.n_heads))

    def bias(self, q_pos, k_pos):
        dist = (q_pos[:, None] - k_pos[None, :]).clamp(min=0).float()  # (T, S)
        return -self.scale[:, None, None] * torch.log1p(dist)  # (H, T, S)


class WrongSlopes(PositionalScheme):
    """Declares slopes that do not describe its bias."""

    kind = "bias"
    has_slopes = True

    def bias(self, q_pos, k_pos):
        return -0.5 * (q_pos[:, None] - k_pos[None, :]).float().expand(self.n_heads, -1, -1)

    def slopes(self):
        return torch.ones(self.n_heads)


@pytest.mark.parametrize("cls, message", [(FrozenBias, "stale bias"), (WrongSlopes, "slopes")])
def test_the_kit_catches_a_broken_scheme(cls, message):
    with pytest.raises((AssertionError, Exception), match=message + "|gradient"):
        check_positional_scheme(cls)


def test_registered_is_temporary():
    from alilama_core.engine.registry import get_registry

    with registered("positional", "frozen-test", FrozenBias):
        assert "frozen-test" in get_registry().names("positional")
    assert "frozen-test" not in get_registry().names("positional")


def test_default_trainer_conforms(tmp_path):
    from alilama_core.app.prepare import prepare
    from alilama_core.runs.stories import write_corpus
    from alilama_core.engine.registry import get_tokenizer
    from alilama_core.kit.trainer import check_trainer
    from alilama_core.runs.tokenizers import save_tokenizer

    write_corpus(tmp_path / "stories.txt", 120, seed=3)
    tok = get_tokenizer("bpe").train([(tmp_path / "stories.txt").read_text()], 300, special_tokens=["<|endoftext|>"])
    save_tokenizer(tok, tmp_path / "tok")
    prepare([str(tmp_path / "stories.txt")], tmp_path / "tok", tmp_path / "data", val_fraction=0.1)
    done = check_trainer("default", tmp_path / "data")
    assert done == ["fit", "stop and resume", "trains a task", "bad input", "settings"]
