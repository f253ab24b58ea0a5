"""What ``alilama model info`` reports: parameters per module, plugins, bias memory."""

from __future__ import annotations

from typing import Any

from alilama_core.contracts.config import ModelConfig

SHAPES = ("decode", "short", "long")


def _case(config: ModelConfig, device_type: str, shape: str, training: bool = False):
    import torch

    from alilama_core.contracts.attention import AttentionCase
    from alilama_core.engine.registry import get_registry

    scheme = get_registry().get("positional", config.positional)
    return AttentionCase(
        device_type,
        torch.float32,
        config.d_model // config.n_heads,
        shape,
        scheme.kind,
        scheme.has_slopes,
        training=training,
    )


def resolved_backend(config: ModelConfig, device_type: str = "cpu", shape: str = "short", training: bool = False):
    """The backend that runs ``config``'s attention on ``device_type`` for a shape class (a router resolved)."""
    from alilama_core.contracts.attention import attention_backend
    from alilama_core.engine.registry import get_registry

    backend = attention_backend(get_registry().get("attention", config.attention))
    if backend.resolve is None:
        return backend
    return backend.resolve(_case(config, device_type, shape, training))


def route_table(config: ModelConfig, device_type: str) -> str:
    """``decode: sdpa, short: sdpa, long: tiled, training: sdpa`` for a router on ``device_type``."""
    parts = []
    for shape in SHAPES:
        try:
            parts.append(f"{shape}: {resolved_backend(config, device_type, shape).name}")
        except Exception as exc:  # no eligible backend: say why instead of failing the report
            parts.append(f"{shape}: none ({exc})")
    try:
        parts.append(f"training: {resolved_backend(config, device_type, 'short', training=True).name}")
    except Exception:
        parts.append("training: none")
    return ", ".join(parts)


def bias_memory(config: ModelConfig) -> str:
    """Memory the attention bias takes at the trained context, for the backend that runs on CPU."""
    from alilama_core.contracts.attention import human_bytes
    from alilama_core.engine.registry import get_registry

    scheme = get_registry().get("positional", config.positional)
    if scheme.kind != "bias":
        return f"none ({config.positional} adds no attention bias)"
    backend = resolved_backend(config, "cpu", "long" if config.context_length >= 1024 else "short", training=True)
    t, h = config.context_length, config.n_heads
    if backend.memory is not None:
        return f"{backend.memory(h, t)} ({backend.name})"
    if backend.bias == "slopes":
        return f"{h * 4} bytes of slopes ({backend.name} applies the bias in the kernel)"
    dense = h * t * t * 4
    return (
        f"{human_bytes(dense)} dense (1, {h}, {t}, {t}) float32 bias at T={t} ({backend.name}), "
        f"computed once per forward pass and shared by all layers; it grows as T^2"
    )


def model_report(config: ModelConfig) -> dict[str, Any]:
    from alilama_core.engine.model import build_model
    from alilama_core.engine.registry import get_registry

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
            if obj.resolve is not None:  # a router: what it runs per shape class on this machine
                import torch

                devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
                detail += "; runs " + "; ".join(f"on {d}: {route_table(config, d)}" for d in devices)
        plugins[kind] = {
            "name": name,
            "distribution": entry.distribution,
            "version": entry.version,
            "replaces": entry.replaced.distribution if entry.replaced is not None else None,
            "detail": detail,
        }
    return {
        "parameters": model.num_parameters(),
        "table": table,
        "plugins": plugins,
        "bias_memory": bias_memory(config),
    }
