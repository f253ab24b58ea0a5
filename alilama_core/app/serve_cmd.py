"""``alilama serve RUN``: the options, checked, then the HTTP server of ``alilama_core.app.serve``.

This module stays light (no torch, no starlette) so that the command table can
import it for ``alilama --help``; the server and the engine are imported when
the command runs.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from alilama_core.app.common import CheckpointOpt, RunArg, err_console, examples, plain_line
from alilama_core.app.run_options import (
    DecodeOpt,
    DeviceOpt,
    ThreadsOpt,
    check_decode,
    load_to_sample,
    setup_decode,
)
from alilama_core.base.errors import AlilamaError


@examples(
    "alilama serve runs/essay",
    "alilama serve runs/essay --port 8080 --api-key $KEY --max-batch 16",
)
def serve_cmd(
    run: RunArg,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (127.0.0.1: this machine only).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8000,
    api_key: Annotated[
        Optional[str],
        typer.Option("--api-key", envvar="ALILAMA_API_KEY", help="Require Authorization: Bearer KEY on every request."),
    ] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Sequences decoded together.")] = 8,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Largest max_tokens a request may ask for.")] = 256,
    max_prompt_tokens: Annotated[
        Optional[int], typer.Option("--max-prompt-tokens", help="Longest prompt accepted (default 768).")
    ] = None,
    max_queue: Annotated[int, typer.Option("--max-queue", help="Sequences that may wait for the batch.")] = 64,
    body_timeout: Annotated[
        float, typer.Option("--body-timeout", help="Seconds a client may take to send its request body (then 408).")
    ] = 30.0,
    checkpoint: CheckpointOpt = None,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
    decode: DecodeOpt = "auto",
) -> None:
    """Serve a run over the OpenAI HTTP API (completions and chat, streamed), batching concurrent requests."""
    import importlib.util
    from pathlib import Path

    missing = [m for m in ("starlette", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise AlilamaError(f"serving needs {' and '.join(missing)}: pip install 'alilama[serve]'")

    check_decode(decode)
    for name, value in (("--max-batch", max_batch), ("--max-tokens", max_tokens), ("--max-queue", max_queue)):
        if value < 1:
            raise AlilamaError(f"{name} must be at least 1, got {value}")
    if max_prompt_tokens is not None and max_prompt_tokens < 1:
        raise AlilamaError(f"--max-prompt-tokens must be at least 1, got {max_prompt_tokens}")
    if not 0 < body_timeout <= 3600:
        raise AlilamaError(f"--body-timeout must be between 0 and 3600 seconds, got {body_timeout}")
    if not 0 < port < 65536:
        raise AlilamaError(f"--port must be between 1 and 65535, got {port}")

    from alilama_core.app.serve import serve
    from alilama_core.engine.scheduler import Limits

    loaded = load_to_sample(run, checkpoint, device, threads)
    limit = loaded.model.positional.max_positions
    prompt_limit = max_prompt_tokens or (768 if limit is None else max(1, min(768, limit - 1)))
    limits = Limits(
        max_tokens=max_tokens,
        max_prompt_tokens=prompt_limit,
        max_batch=max_batch,
        max_queue=max_queue,
        body_seconds=body_timeout,
    )
    limits.check(loaded.model, decode)
    setup_decode(loaded, decode)
    model_id = Path(run).resolve().name
    if api_key is None and not _loopback(host):
        err_console.print(
            f"warning: --host {host} without --api-key: anyone who reaches this port can use the model and "
            "its compute; give --api-key KEY (or ALILAMA_API_KEY) or serve on 127.0.0.1",
            highlight=False,
        )
    plain_line(f"serving {model_id} on http://{host}:{port}/v1 (batch {max_batch}, queue {max_queue})")
    serve(loaded, model_id, host, port, limits, api_key, decode)


def _loopback(host: str) -> bool:
    """Whether ``host`` is this machine alone (a loopback address or ``localhost``)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
