"""An Alilama plugin that adds the ``sinusoidal`` positional scheme.

Registered lazily by path, so ``alilama --help`` does not import torch.
"""

from alilama_core import hookimpl


@hookimpl
def register_positional_schemes(register):
    register(
        "sinusoidal",
        "alilama_sinusoidal.scheme:Sinusoidal",
        description="fixed sinusoidal absolute positions (Vaswani et al., 2017)",
    )
