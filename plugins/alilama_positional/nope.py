"""NoPE: no positional information; the causal mask alone orders the tokens
(Kazemnejad et al., 2023, arXiv:2305.19466)."""

from __future__ import annotations

from pathlib import Path

from alilama_core.contracts.positional import PositionalScheme
from alilama_positional import standalone_nope


class NoPositions(standalone_nope.NoPositions, PositionalScheme):
    export_targets = {"gguf": "mpt"}  # llama.cpp's mpt with max_alibi_bias 0; transformers has none

    def __init__(self, config) -> None:
        PositionalScheme.__init__(self, config)

    @classmethod
    def export_source(cls) -> str:
        return str(Path(standalone_nope.__file__))
