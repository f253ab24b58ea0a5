"""Batched generation is exact: a prompt in a left-padded batch gets what it gets alone.

For every built-in scheme (and the example plugin's) on the CPU backends,
through the two batched paths of the library: ``generate`` with several
prompts, and the ``ContinuousBatch`` of ``alilama serve``, whose token
log-probabilities are compared, not only its greedy tokens. The conformance
kit checks the same calls on the model for every scheme on every backend that
takes padding, ``flex`` included (``padded batch == alone``,
tests/core/test_conformance.py); ``flex`` is left out here because each of its
CPU calls costs a tenth of a second. The two test plugins that the kit fails
are wrong here too (a bias that reads absolute positions, RoPE that takes row
0's positions for every row).
"""

from __future__ import annotations

import pytest
import torch
from alilama_testing import needs_test_plugins

from alilama_core import build_model
from alilama_core.contracts.attention import attention_backend
from alilama_core.engine.batching import ContinuousBatch
from alilama_core.engine.generation import SamplingSettings, generate
from alilama_core.engine.registry import get_attention, get_registry
from alilama_core.kit.common import KIT_CONTEXT, tiny_model_config

SCHEMES = ["alibi", "rope", "learned", "nope", "sinusoidal"]
BACKENDS = ["eager", "sdpa", "tiled"]  # tiled takes no padding mask: it hands padded calls to sdpa
GREEDY = SamplingSettings(max_new_tokens=3, temperature=0)


def model_for(scheme: str, backend: str):
    if scheme not in get_registry().names("positional"):
        pytest.skip(f"{scheme} is not installed (make install adds the example plugin)")
    if (reason := attention_backend(get_attention(backend)).available()) is not None:
        pytest.skip(f"{backend}: {reason}")
    torch.manual_seed(0)
    config = tiny_model_config(positional=scheme, attention=backend, context_length=KIT_CONTEXT, tie_embeddings=False)
    return build_model(config).eval()


def prompts() -> list[list[int]]:
    """Two prompts of different lengths, the shorter first (so row 0 is padded), far past a dozen positions."""
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 61, (n,), generator=generator).tolist() for n in (40, 120)]


def served(model, batch_of: list[list[int]]) -> list[list[float]]:
    """Each prompt's token log-probabilities when they all join one running batch (greedy), as the server runs them."""
    batch = ContinuousBatch(model, rows=len(batch_of), capacity=KIT_CONTEXT)
    out: dict[int, list[float]] = {}
    for prompt in batch_of:  # the longer one joins second: the first row moves right, behind padding
        handle, event = batch.join(prompt, GREEDY, logprobs=0)
        out[handle] = [event.logprob]
    while len(batch):
        for event in batch.step():
            out[event.handle].append(event.logprob)
    return list(out.values())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_padded_batch_gives_each_prompt_what_it_gets_alone(scheme, backend):
    model = model_for(scheme, backend)
    batch = prompts()
    together = served(model, batch)
    for prompt, got in zip(batch, together):
        assert got == pytest.approx(served(model, [prompt])[0], abs=1e-4)
    assert generate(model, batch, GREEDY) == [generate(model, [prompt], GREEDY)[0] for prompt in batch]


@needs_test_plugins("alilama-fire", "alilama-firstrow")
@pytest.mark.parametrize("scheme", ["fire", "rope-first-row"])
def test_a_scheme_that_the_kit_fails_is_wrong_in_a_served_batch(scheme):
    model = model_for(scheme, "sdpa")
    batch = prompts()
    together = served(model, batch)
    alone = [served(model, [prompt])[0] for prompt in batch]
    assert any(got != pytest.approx(want, abs=1e-3) for got, want in zip(together, alone))
