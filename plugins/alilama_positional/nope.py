"""NoPE: no positional information; the causal mask alone orders the tokens
(Kazemnejad et al., 2023, arXiv:2305.19466)."""

from alilama_core.interfaces import PositionalScheme


class NoPositions(PositionalScheme):
    kind = "none"
