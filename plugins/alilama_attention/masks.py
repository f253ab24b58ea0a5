"""The bias and masks of one call: the model's shared ``AttentionBias``, or one built here."""

from __future__ import annotations

from torch import Tensor

from alilama_core.contracts.attention import AttentionBias
from alilama_core.contracts.positional import PositionalScheme


def attention_bias(
    bias: AttentionBias | None,
    positional: PositionalScheme | None,
    q: Tensor,
    k: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
) -> AttentionBias:
    """The ``AttentionBias`` the model passed, or one for this call alone (direct calls)."""
    if bias is not None:
        return bias
    return AttentionBias(positional, q.size(-2), k.size(-2), q.device, key_padding_mask, causal)
