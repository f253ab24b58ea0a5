"""RoPE: rotary position embeddings (Su et al., 2021, arXiv:2104.09864).

The maths (frequencies and rotation) lives in ``standalone_rope``, a torch-only
module that the Hugging Face export ships as it is; this class adds Alilama's
``PositionalScheme`` contract and the checks of its options to it.
"""

from __future__ import annotations

from pathlib import Path

from alilama_core.base.errors import ConfigError
from alilama_core.contracts.positional import PositionalScheme
from alilama_positional import standalone_rope


class RoPE(standalone_rope.RoPE, PositionalScheme):
    export_targets = {"gguf": "gptneox", "hf": "gpt_neox"}  # GPT-NeoX's half rotation on every dim

    @classmethod
    def check_options(cls, options, name: str = ""):
        """``defaults`` with ``options`` applied; ``theta`` must be a finite number above 1."""
        import math

        checked = super().check_options(options, name)
        theta = checked["theta"]
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 1:
            raise ConfigError(
                f"model.positional_options.theta must be a finite number above 1 (the base of RoPE's "
                f"rotation frequencies), got {theta!r}; e.g. model.positional_options.theta=10000"
            )
        return checked

    def __init__(self, config) -> None:
        PositionalScheme.__init__(self, config)
        if self.head_dim % 2:
            raise ConfigError(
                f"rope needs an even head dimension; d_model/n_heads = {self.head_dim}. "
                "Change model.d_model or model.n_heads."
            )
        self.build()

    @classmethod
    def export_source(cls) -> str:
        return str(Path(standalone_rope.__file__))
