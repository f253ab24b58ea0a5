"""The kit in scikit-learn's ``parametrize_with_checks`` shape: one test case per named check,
declared skips with their reason, known gaps as strict expected failures."""

from __future__ import annotations

import pytest
import torch

from alilama_core.contracts.positional import PositionalScheme
from alilama_core.kit import (
    Check,
    attention_checks,
    check_positional_scheme,
    parametrize_with_checks,
    positional_checks,
    run_checks,
    task_checks,
    tokenizer_checks,
)


class NoOffset(PositionalScheme):
    """A bias that forgets where the queries are (as if no KV cache came before them): its ``shapes``,
    ``cached == uncached`` and ``padded batch == alone`` (which decodes with a KV cache) checks fail, the others pass."""

    kind = "bias"

    def bias(self, q_pos, k_pos):
        q = torch.arange(len(q_pos))  # should be q_pos
        return -0.5 * (q[:, None] - k_pos[None, :]).abs().float().expand(self.n_heads, -1, -1)


GAPS = {
    "shapes": "the bias ignores the cache offset",
    "cached == uncached": "the bias ignores the cache offset",
    "padded batch == alone (eager)": "the bias ignores the cache offset",
}


@parametrize_with_checks(
    positional_checks("alibi", backends=["sdpa"]),
    attention_checks("sdpa", schemes=("rope",)),
    tokenizer_checks("bpe"),
    task_checks("reverse", lengths=(1, 3)),
    positional_checks(NoOffset, backends=[], known_gaps=GAPS),
)
def test_every_check_is_a_case(check):
    check()


def test_the_plan_names_each_check_once_and_says_why_one_is_skipped():
    checks = positional_checks("alibi")
    assert [c.name for c in checks][:4] == [
        "kind",
        "shapes",
        "cached == uncached",
        "gradients reach parameters; bias follows them",
    ]
    assert len({c.id for c in checks}) == len(checks)
    grads = next(c for c in checks if c.name.startswith("gradients"))
    assert grads.skip == "the scheme has no parameter that trains"  # alibi's slopes are fixed
    assert all(isinstance(c, Check) and c.id.startswith("positional:alibi:") for c in checks)
    hf = next(c for c in tokenizer_checks("symbols") if c.name == "save_hf")
    assert hf.skip == "it does not declare hf_export"
    importer = next(c for c in tokenizer_checks("symbols") if c.name == "importer")
    assert importer.skip == "it registers no importer"
    assert next(c for c in tokenizer_checks("bpe") if c.name == "importer").skip is None


def test_a_known_gap_must_fail_and_a_closed_gap_is_an_error():
    done = check_positional_scheme(NoOffset, backends=[], known_gaps=GAPS)
    assert "shapes (known gap: the bias ignores the cache offset)" in done and "save and load" in done
    with pytest.raises(AssertionError, match="cache offset"):
        check_positional_scheme(NoOffset, backends=[])  # undeclared, the gap fails the check
    with pytest.raises(AssertionError, match="declared as a known gap .* but it passes"):
        run_checks(positional_checks("nope", backends=[]), known_gaps={"shapes": "no such gap"})


def test_a_failing_check_says_what_failed_on_its_own():
    cached = next(c for c in positional_checks(NoOffset, backends=[]) if c.name == "cached == uncached")
    with pytest.raises(AssertionError, match="cached and uncached logits differ"):
        cached()


def _ignores_padding(q, k, v, *, positional=None, causal=True, key_padding_mask=None):
    from alilama_attention.eager import eager_attention

    return eager_attention(q, k, v, positional=positional, causal=causal)  # the padding mask dropped


def test_a_backend_that_sees_padding_fails_the_padded_batch_and_says_so():
    from alilama_core.contracts.attention import AttentionBackend
    from alilama_core.kit import check_attention_backend, registered

    with registered("attention", "sees-padding", AttentionBackend("sees-padding", _ignores_padding)):
        with pytest.raises(
            AssertionError, match=r"left-padded batch .* differs from eager on each prompt alone: row 0 "
        ):
            check_attention_backend("sees-padding", schemes=("rope",))


def _accepts_anything(source, *, pattern=None, special_tokens=None):
    """An importer that never refuses a source: it hands back an empty vocabulary."""
    from alilama_bpe.tokenizer import BPETokenizer

    return BPETokenizer([], {"<|endoftext|>": 256}), f"anything {source}"


def _drops_a_merge(source, *, pattern=None, special_tokens=None):
    """An importer that loses the vocabulary's last merge (other ids than the tokenizer it read)."""
    from alilama_bpe.importers import import_tokenizer
    from alilama_bpe.tokenizer import BPETokenizer

    tok, where = import_tokenizer(source, pattern=pattern, special_tokens=special_tokens)
    return BPETokenizer(tok.merges[:-1], tok.special_tokens, tok.pattern), where


@pytest.mark.parametrize(
    "importer, message",
    [(_accepts_anything, "accepted a source that does not exist"), (_drops_a_merge, "imports back with other ids")],
)
def test_an_importer_that_breaks_its_contract_fails_the_kit(importer, message):
    from alilama_bpe.tokenizer import BPETokenizer
    from alilama_core import hookimpl
    from alilama_core.engine.registry import get_registry
    from alilama_core.kit import check_tokenizer

    class Plugin:
        @hookimpl
        def register_tokenizers(self, register):
            register("careless-bpe", BPETokenizer, importer=importer)

    registry = get_registry()
    registry.register_plugin(Plugin(), name="careless")
    try:
        with pytest.raises(AssertionError, match=message):
            check_tokenizer("careless-bpe")
    finally:
        registry.unregister_plugin("careless")
