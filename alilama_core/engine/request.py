"""One sequence asked of the engine: its prompt ids and how it wants its tokens, said once.

A ``Request`` is what ``ContinuousBatch.join_many`` (``alilama_core.engine.batching``)
takes and what a scheduler's ``Job`` (``alilama_core.engine.scheduler``) carries
beside its delivery and queue state: the prompt, its ``SamplingSettings`` (new
tokens, temperature, top-k and top-p, penalties, bias, seed), and what is
reported back. The HTTP bodies a server turns into requests are
``alilama_core.engine.requests``. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alilama_core.engine.generation import SamplingSettings


@dataclass
class Request:
    """A prompt's token ids and how its tokens are made and reported."""

    prompt: list[int]
    settings: SamplingSettings
    logprobs: int | None = None
    """Each event carries its token's log-probability and this many likeliest alternatives with theirs (0: the
    token's alone; ``None``: none)."""
    ignore_eos: bool = False
    """End-of-text is a token like any other: go on to ``max_new_tokens``, as load tests want."""
    echo: bool = False
    """With ``logprobs``: the first event also carries the prompt's own scores (``batching.score_tokens``),
    from the same prefill."""

    @property
    def scored(self) -> bool:
        """Whether the prompt's own tokens are scored (``echo`` with ``logprobs``)."""
        return self.echo and self.logprobs is not None
