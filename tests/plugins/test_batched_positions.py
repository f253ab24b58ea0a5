"""Two schemes that are wrong only in a batch, installed as third-party packages (tests/plugins/alilama-*).

``fire`` (alilama-fire) is a bias that reads the query's absolute position, as
FIRE does; ``rope-first-row`` (alilama-firstrow) turns every row of a batch by
row 0's positions. Both pass every check that probes one prompt of a dozen
tokens; the conformance kit's ``positions per row`` and ``padded batch ==
alone`` checks fail them, saying what is wrong and what to do.
tests/core/test_batched_generation.py shows the kit is right: in the server's
running batch both give a prompt other log-probabilities than it gets alone.
"""

from __future__ import annotations

import pytest
from alilama_testing import needs_test_plugins

from alilama_core.kit import positional_checks, run_checks

pytestmark = needs_test_plugins("alilama-fire", "alilama-firstrow")

WHY = {
    "fire": "its bias reads the query's absolute position",
    "rope-first-row": "it turns every row by row 0's positions",
}
MESSAGES = {
    "fire": (
        r"the bias depends on more than q - k: bias\(q_pos=\d+, k_pos=\d+\).*"
        r"Make bias\(\) a function of q_pos - k_pos alone",
        r"under 'eager', a left-padded batch of prompts of 64 and 200 tokens .* differs from each prompt alone: "
        r"row 0 \(64-token prompt after 136 padding tokens\).*its bias must be a function of q - k alone",
    ),
    "rope-first-row": (
        r"rotate\(x, positions\) with \(B, T\) positions whose rows differ .* never one row's positions for all",
        r"under 'eager', a left-padded batch .* differs from each prompt alone: row \d.*"
        r"rotate\(\) must turn each row by its own \(B, T\) positions",
    ),
}


def batch_checks(checks) -> list[str]:
    """The names of the kit's checks of a scheme in a batch."""
    return [c.name for c in checks if c.name == "positions per row" or c.name.startswith("padded batch == alone")]


@pytest.mark.slow  # the whole kit, on every scheme
@pytest.mark.parametrize("scheme", sorted(WHY))
def test_the_kit_fails_a_scheme_that_is_wrong_in_a_batch_and_passes_the_rest(scheme):
    checks = positional_checks(scheme)
    gaps = batch_checks(checks)
    assert {"positions per row", "padded batch == alone (eager)", "padded batch == alone (sdpa)"} <= set(gaps)
    # every batch check must fail (a declared gap that passes is an error), every other check must pass
    done = run_checks(checks, known_gaps={name: WHY[scheme] for name in gaps})
    assert "cached == uncached" in done and "sdpa == eager" in done and "save and load" in done
    per_row, padded = MESSAGES[scheme]
    by_name = {c.name: c for c in checks}
    with pytest.raises(AssertionError, match=per_row):
        by_name["positions per row"]()
    with pytest.raises(AssertionError, match=padded):
        by_name["padded batch == alone (eager)"]()
