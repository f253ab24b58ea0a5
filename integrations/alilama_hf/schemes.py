"""The standalone module of an installed positional scheme, which the modeling code runs in-process.

Every scheme, the built-in ones included, ships a torch-only module
(``PositionalScheme.export_source()``); a remote-code export copies it beside the
modeling code, and in-process (Alilama installed, no remote code) the modeling
code builds the scheme from the installed plugin's module, never from a file of
the model's folder. The modeling code imports this module (by name, in-process
only); this module imports nothing of it.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from alilama_core.base.errors import AlilamaError


def module_name(positional: str) -> str:
    """The name of a scheme's standalone module in an export: ``positional_`` and the scheme's name."""
    return "positional_" + re.sub(r"\W", "_", positional).lower()


def plugin_module(positional: str) -> tuple[str, str, Path]:
    """``(module name, class name, source file)`` of a scheme's standalone module (``export_source()``)."""
    name, standalone, source = standalone_class(positional)
    return name, standalone.__name__, source


def standalone_class(positional: str) -> tuple[str, type, Path]:
    """``(module name, class, source file)``: the class of a scheme's standalone module, loaded from its file.

    The module is loaded as ``alilama_hf._exported.<module name>``; the modeling
    code registers the class under the module name (``register_positional_class``).
    """
    from alilama_core.engine.registry import get_positional

    cls = get_positional(positional)
    source = cls.export_source()  # declared on PositionalScheme: None when the scheme cannot be exported
    if not source:
        raise AlilamaError(
            f"positional scheme {positional!r} ({cls.__module__}.{cls.__name__}) gives no standalone module "
            "to export: its class must define the classmethod export_source() (see docs/plugins.md)"
        )
    source = Path(source)
    if not source.is_file() or source.suffix != ".py":
        raise AlilamaError(f"{cls.__name__}.export_source() must name a .py file; {str(source)!r} is not one")
    name = module_name(positional)
    spec = importlib.util.spec_from_file_location(f"alilama_hf._exported.{name}", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    standalone = getattr(module, cls.__name__, None)
    if standalone is None:
        raise AlilamaError(f"{source} defines no class {cls.__name__!r} (the name of the scheme's class)")
    return name, standalone, source
