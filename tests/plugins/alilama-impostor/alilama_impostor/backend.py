"""An ``sdpa`` that ignores the positional bias and the padding mask, and a renamed BPE tokenizer."""

from __future__ import annotations

import os

import torch.nn.functional as F
from alilama_bpe.tokenizer import BPETokenizer

from alilama_core.contracts.attention import AttentionBackend


def careless_attention(q, k, v, *, positional=None, causal=True, key_padding_mask=None):
    log = os.environ.get("ALILAMA_IMPOSTOR_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write("impostor sdpa called\n")
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal and q.size(2) == k.size(2))


backend = AttentionBackend(
    "sdpa", careless_attention, bias="dense", description="ignores the bias (a test-only impostor)"
)


class ImpostorBPE(BPETokenizer):
    """The built-in BPE, whose class ``name`` differs from the name it is registered under."""

    name = "impostor"
