"""What ``alilama model info`` reports: parameters per module, plugins, bias memory."""

from __future__ import annotations

from typing import Any

from alilama_core.config import ModelConfig


def resolved_backend(config: ModelConfig, device_type: str = "cpu") -> str:
    """The backend that runs for ``config`` on ``device_type`` (``auto`` resolved)."""
    from alilama_core.registry import get_registry

    if config.attention != "auto":
        return config.attention
    from alilama_attention.auto import choose

    return choose(device_type, get_registry().get("positional", config.positional))


def bias_memory(config: ModelConfig) -> str:
    """Memory the attention bias takes at the trained context, for the backend that runs on CPU."""
    from alilama_core.registry import get_registry

    scheme = get_registry().get("positional", config.positional)
    name = resolved_backend(config, "cpu")
    t, h = config.context_length, config.n_heads
    if scheme.kind != "bias":
        return f"none ({config.positional} adds no attention bias)"
    if name in ("flash", "flex") and scheme.has_slopes:
        return f"{h * 4} bytes of slopes ({name} applies the bias in the kernel)"
    if name == "tiled":
        from alilama_attention.tiled import QUERY_BLOCK

        q = min(QUERY_BLOCK, t)
        return (
            f"{_human(h * q * q * 4)} diagonal mask (1, {h}, {q}, {q}) plus a per-block key bias of "
            f"{h} x S floats; no T x S bias at any length ({name})"
        )
    dense = h * t * t * 4
    return (
        f"{_human(dense)} dense (1, {h}, {t}, {t}) float32 mask at T={t} ({name}), "
        f"cached and shared by all layers; it grows as T^2 ({_human(dense * 64)} at T={8 * t})"
    )


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def model_report(config: ModelConfig) -> dict[str, Any]:
    from alilama_core.model import build_model
    from alilama_core.registry import get_registry

    model = build_model(config)
    # One row per parameter kind; the N identical blocks are folded into "blocks.*" rows.
    rows: dict[str, dict[str, Any]] = {}
    for name, p in model.named_parameters():  # tied weights are yielded once
        parts = name.split(".")
        if parts[0] == "blocks":
            parts[1] = "*"
        key = ".".join(parts)
        row = rows.setdefault(key, {"name": key, "shape": list(p.shape), "count": 0, "numel": 0})
        row["count"] += 1
        row["numel"] += p.numel()
    table = list(rows.values())
    reg = get_registry()
    plugins = {}
    for kind, name in (("positional", config.positional), ("attention", config.attention)):
        entry = reg.entry(kind, name)
        obj = entry.resolve()
        if kind == "positional":
            detail = f"kind={obj.kind}"
        else:
            reason = obj.available()
            detail = f"bias={obj.bias}, " + (f"unavailable here: {reason}" if reason else "available")
            if name == "auto":
                detail += (
                    f"; runs {resolved_backend(config, 'cpu')} on cpu, "
                    f"{resolved_backend(config, 'cuda')} on cuda"
                )
        plugins[kind] = {
            "name": name,
            "distribution": entry.distribution,
            "version": entry.version,
            "detail": detail,
        }
    return {
        "parameters": model.num_parameters(),
        "table": table,
        "plugins": plugins,
        "bias_memory": bias_memory(config),
    }
