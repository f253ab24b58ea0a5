"""ALiBi: attention with linear biases (Press, Smith & Lewis, 2022, arXiv:2108.12409).

The maths (slopes and bias) lives in ``standalone_alibi``, a torch-only module
that the Hugging Face export ships as it is; this class adds Alilama's
``PositionalScheme`` contract to it.
"""

from __future__ import annotations

from pathlib import Path

from alilama_core.contracts.positional import PositionalScheme
from alilama_positional import standalone_alibi
from alilama_positional.standalone_alibi import alibi_slopes

__all__ = ["ALiBi", "alibi_slopes"]


class ALiBi(standalone_alibi.ALiBi, PositionalScheme):
    export_targets = {"gguf": "mpt", "hf": "mpt"}  # MPT's ALiBi (max_alibi_bias 8) in llama.cpp and transformers

    def __init__(self, config) -> None:
        PositionalScheme.__init__(self, config)
        self.build()

    @classmethod
    def export_source(cls) -> str:
        return str(Path(standalone_alibi.__file__))
