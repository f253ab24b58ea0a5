"""Learned absolute positions (as in GPT-2): a table of ``context_length`` vectors.

The table lives in ``standalone_learned``, a torch-only module that the Hugging
Face export ships as it is; this class adds Alilama's ``PositionalScheme``
contract to it.
"""

from __future__ import annotations

from pathlib import Path

from alilama_core.contracts.positional import PositionalScheme
from alilama_positional import standalone_learned


class LearnedPositions(standalone_learned.LearnedPositions, PositionalScheme):
    export_targets = {"gguf": "gpt2", "hf": "gpt2"}  # GPT-2's position table

    def __init__(self, config) -> None:
        PositionalScheme.__init__(self, config)
        self.build(config)

    @classmethod
    def export_source(cls) -> str:
        return str(Path(standalone_learned.__file__))
