"""The schemes, as a third party writes them: the standalone maths plus Alilama's contract."""

from __future__ import annotations

from pathlib import Path

from alilama_alibi_twin import standalone
from alilama_core.contracts.positional import PositionalScheme


class AlibiTwin(standalone.AlibiTwin, PositionalScheme):
    export_targets = {"gguf": "mpt", "hf": "mpt"}  # what MPT computes, in llama.cpp and in transformers

    def __init__(self, config) -> None:
        PositionalScheme.__init__(
            self, config
        )  # n_heads and the options; the slopes as the standalone class makes them
        self.register_buffer("_slopes", standalone.twin_slopes(self.n_heads), persistent=False)

    @classmethod
    def export_source(cls) -> str:
        return str(Path(standalone.__file__))


class AlibiUndeclared(standalone.AlibiUndeclared, PositionalScheme):
    def __init__(self, config) -> None:
        PositionalScheme.__init__(
            self, config
        )  # n_heads and the options; the slopes as the standalone class makes them
        self.register_buffer("_slopes", standalone.twin_slopes(self.n_heads), persistent=False)

    @classmethod
    def export_source(cls) -> str:
        return str(Path(standalone.__file__))
