"""Chooses the native module or the pure-Python fallback."""

from __future__ import annotations

import os

NATIVE_DISABLED = os.environ.get("ALILAMA_BPE_PUREPYTHON", "") not in ("", "0")
IMPORT_ERROR: str | None = None

native = None
if NATIVE_DISABLED:
    IMPORT_ERROR = "disabled by ALILAMA_BPE_PUREPYTHON=1"
else:
    try:
        from alilama_bpe import _native as native  # type: ignore[no-redef]
    except ImportError as e:  # not built: fall back to pure Python
        IMPORT_ERROR = f"native module not available ({e})"

if native is not None:
    import regex

    if getattr(native, "unicode_source", None) != f"regex {regex.__version__}":
        import warnings

        from alilama_core.base.errors import AlilamaWarning

        warnings.warn(
            f"the native tokenizer's Unicode tables come from {getattr(native, 'unicode_source', 'an older build')}, "
            f"but regex {regex.__version__} is installed: the two backends may split rare characters differently; "
            f"install the pinned regex release or rebuild (pip install -e .)",
            AlilamaWarning,
            stacklevel=2,
        )


def resolve(backend: str | None) -> str:
    """``"native"`` or ``"python"`` for a requested backend (None: native when available)."""
    if backend is None:
        return "native" if native is not None else "python"
    if backend not in ("native", "python"):
        raise ValueError(f"backend must be 'native' or 'python', not {backend!r}")
    if backend == "native" and native is None:
        from alilama_core.base.errors import TokenizerError

        raise TokenizerError(f"the native BPE backend is unavailable: {IMPORT_ERROR}")
    return backend
