"""RoPE that takes row 0's positions for every row of a batch: a bug the conformance kit must catch.

With ``(T,)`` positions, or rows that are all the same, it is the built-in
``rope``, so a kit whose per-row probe used identical rows passed it. In a
left-padded batch (``generate`` with several prompts, ``alilama serve``) the
rows' positions differ and every row but the first is turned wrongly; the
kit's ``positions per row`` and ``padded batch == alone`` checks fail it
(tests/plugins/test_batched_positions.py).
"""

from __future__ import annotations

from torch import Tensor

from alilama_positional.rope import RoPE


class FirstRowRoPE(RoPE):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        if positions.dim() == 2:
            positions = positions[0]  # the bug: one row's positions for the whole batch
        return super().rotate(x, positions)
