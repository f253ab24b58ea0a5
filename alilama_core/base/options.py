"""A plugin's own settings: declared defaults, checked against what a config gives.

Every plugin kind may declare ``defaults`` (a mapping of setting name to default
value). A config hands the plugin its settings (``model.positional_options``,
``model.attention_options``, ``train.trainer_options``, ``--option`` for a
tokenizer); ``check_options`` refuses a key the plugin does not declare.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alilama_core.base.errors import ConfigError


def check_options(
    kind: str, name: str, accepted: Mapping[str, Any], options: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``accepted`` (the defaults) updated with ``options``; an unknown key raises ``ConfigError`` naming it.

    Shared by every plugin kind that declares its own settings (``options``)::

        >>> check_options("positional", "rope", {"theta": 10000.0}, {"theta": 500.0})
        {'theta': 500.0}
    """

    options = dict(options or {})
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        valid = ", ".join(sorted(accepted)) or "none"
        raise ConfigError(f"{kind} {name!r} has no option(s) {', '.join(map(repr, unknown))}; its options: {valid}")
    return {**dict(accepted), **options}
