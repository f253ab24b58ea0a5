"""Moved to ``alilama_core.contracts.config``, ``alilama_core.engine.configs``, ``alilama_core.engine.validate``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.config import *  # noqa: F403
from alilama_core.engine.configs import *  # noqa: F403
from alilama_core.engine.validate import *  # noqa: F403

warnings.warn(
    "alilama_core.config has moved to alilama_core.contracts.config, alilama_core.engine.configs, alilama_core.engine.validate; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
