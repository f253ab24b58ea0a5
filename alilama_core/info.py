"""What ``alilama model info`` reports: parameters per module, plugins, bias memory."""

from __future__ import annotations

from typing import Any

from alilama_core.config import ModelConfig


def bias_memory(config: ModelConfig, batch_size: int = 1) -> str:
    """Memory the attention bias takes per layer call at the trained context, by backend."""
    from alilama_core.interfaces import attention_backend
    from alilama_core.registry import get_registry

    reg = get_registry()
    scheme = reg.get("positional", config.positional)
    backend = attention_backend(reg.get("attention", config.attention))
    t = config.context_length
    if scheme.kind != "bias":
        return f"none ({config.positional} adds no attention bias)"
    if backend.name in ("flash", "flex") and scheme.has_slopes:
        return f"{config.n_heads * 4} bytes of slopes ({backend.name} applies the bias in the kernel)"
    dense = config.n_heads * t * t * 4
    return (
        f"{_human(dense)} dense (1, {config.n_heads}, {t}, {t}) float32 mask at T={t}, "
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
