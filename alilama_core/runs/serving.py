"""The HTTP side of ``alilama serve RUN``: an OpenAI-compatible server over the engine's scheduler.

Routes, the reading of request bodies and keys, and the transport only: the
work on the model is the engine's (``alilama_core.engine.scheduler``), the
answers' shapes are ``alilama_core.runs.replies``, the command and its options
are ``alilama_core.app.serve_cmd``, and the playground's pages are the app's
(``alilama_core.app.serve.PlaygroundServer`` adds ``GET /`` and ``POST
/v1/alilama/tape`` to these routes).

A Starlette app on uvicorn. ``POST /v1/completions`` and ``POST
/v1/chat/completions`` take OpenAI's request bodies (``prompt`` / ``messages``,
``max_tokens``, ``temperature``, ``top_p``, ``top_k`` as an extension, ``stop``,
``seed``, ``n``, ``stream``) and answer with OpenAI's response objects, streamed
as server-sent events (``data: {...}`` chunks, then ``data: [DONE]``) when
``stream`` is true. ``GET /v1/models`` lists the one model (named after the run
folder, never its path), ``GET /health`` says it is up.

One scheduler thread owns the model (``alilama_core.engine.scheduler.Scheduler``):
a ``ContinuousBatch`` that requests join and leave between decode steps, so
concurrent clients share forward passes. Requests beyond the batch
wait in a bounded queue; a full queue answers 429. A client that disconnects
mid-stream leaves the batch at once. Errors are JSON objects (``{"error":
{"message", "type", "param", "code"}}``) with the right status, never a
traceback.

Every request body is validated whole by the engine's typed request models
(``alilama_core.engine.requests``) before any of it reaches the model: a field
is honoured or refused with a 400 that names it. ``echo`` returns the prompt
(and, with ``logprobs``, its tokens' log-probabilities, the first ``null``);
``max_tokens: 0`` with ``echo`` scores the prompt alone; a prompt may be token
ids. ``logprobs`` (completions: the number of alternatives; chat: ``logprobs``
and ``top_logprobs``) report log-probabilities under the model itself, before
``logit_bias``, the penalties, temperature, top-k and top-p. A sequence that
fails fails alone: the other rows of the batch go on. ``ignore_eos: true`` (an
extension, as in vLLM) goes on past end-of-text to ``max_tokens``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import threading
import time
import traceback
import weakref
from dataclasses import replace

from alilama_core.base.errors import AlilamaError
from alilama_core.engine.generation import SamplingSettings, token_bytes
from alilama_core.engine.request import Request
from alilama_core.engine.requests import ChatRequest, CompletionRequest, parse, read_body
from alilama_core.engine.scheduler import Job, Limits, Scheduler, encode_prompts
from alilama_core.runs.replies import ApiError, Reply

__all__ = ["ClientGone", "Server", "listen"]


class ClientGone(Exception):
    """The client went away before its request was read whole."""


class Server:
    """The model, its tokenizer, the limits and the scheduler; ``app()`` is the ASGI app of ``routes()``."""

    def __init__(
        self,
        loaded,
        model_id: str,
        limits: Limits,
        api_key: str | None = None,
        chat_template: str | None = None,
        decode: str = "auto",
    ) -> None:
        self.tokenizer, self.model = loaded.tokenizer, loaded.model
        self.model_id, self.limits, self.api_key = model_id, limits, api_key
        self.created = int(time.time())
        self.scheduler = Scheduler(loaded.model, loaded.tokenizer.eot_id, limits, decode=decode)
        self.chat_template = chat_template

    def routes(self) -> list:
        """The API's routes (a subclass adds its own before them)."""
        from starlette.routing import Route

        return [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]

    def app(self):
        from starlette.applications import Starlette

        return Starlette(
            routes=self.routes(),
            lifespan=self._lifespan,
            exception_handlers={404: self._no_route, 405: self._no_route},
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        self.scheduler.start()
        yield
        self.scheduler.stop()

    async def _no_route(self, request, exc):
        """404 and 405 as OpenAI's JSON error object."""
        from starlette.responses import JSONResponse

        if exc.status_code == 405:
            error = ApiError(405, f"{request.method} is not allowed on {request.url.path}")
            return JSONResponse(error.body(), status_code=405, headers=getattr(exc, "headers", None))
        return JSONResponse(ApiError(404, f"no route {request.url.path}").body(), status_code=404)

    async def health(self, request):
        from starlette.responses import JSONResponse

        return JSONResponse({"status": "ok"})

    async def models(self, request):
        from starlette.responses import JSONResponse

        if (denied := self._denied(request)) is not None:
            return denied
        card = {"id": self.model_id, "object": "model", "created": self.created, "owned_by": "alilama"}
        return JSONResponse({"object": "list", "data": [card]})

    async def completions(self, request):
        return await self._answer(request, chat=False)

    async def chat(self, request):
        return await self._answer(request, chat=True)

    def _denied(self, request):
        """A 401 unless the request carries ``Authorization: Bearer KEY`` (the scheme in any case, RFC 7235)."""
        from starlette.responses import JSONResponse

        if self.api_key is None:
            return None
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.api_key.encode()):
            return None
        error = ApiError(401, "a valid API key is needed: Authorization: Bearer KEY", kind="authentication_error")
        return JSONResponse(error.body(), status_code=401)

    async def _answer(self, request, chat: bool):
        from starlette.responses import JSONResponse, Response, StreamingResponse

        if (denied := self._denied(request)) is not None:
            return denied
        try:
            req = parse(ChatRequest if chat else CompletionRequest, await self._body(request))
            self._same_model(req.model)
            settings = req.sampling_within(self.limits.max_tokens, self.limits.max_n, self.model.config.vocab_size)
            prompts = encode_prompts(
                req, self.tokenizer, self.model.config.vocab_size, self.limits, chat, self.chat_template
            )
            logprobs = req.alternatives if chat else req.logprobs
            echo = bool(getattr(req, "echo", False))
            jobs, queues = self._jobs(prompts, settings, req.choices, logprobs, bool(req.ignore_eos), echo)
            self.scheduler.submit(jobs)
        except ClientGone:
            print(f"alilama serve: a client went away before its request was read ({request.url.path})", flush=True)
            return Response(status_code=400)
        except Exception as exc:  # a bug here must not show the client a traceback
            if not isinstance(exc, (ApiError, AlilamaError)):
                traceback.print_exc()
            error = ApiError.of(exc) if isinstance(exc, (ApiError, AlilamaError)) else ApiError(500, "internal error")
            return JSONResponse(error.body(), status_code=error.status)
        echoes = [self._echo(ids, text) if echo else None for ids, text in prompts for _ in range(req.choices)]
        reply = Reply(self, jobs, queues, req.stops, chat, sum(len(ids) for ids, _ in prompts), req.choices, echoes)
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return StreamingResponse(reply.stream(include_usage), media_type="text/event-stream")
        try:
            return JSONResponse(await _unless_gone(request, reply.whole()))
        except ClientGone:
            return Response(status_code=400)  # nobody reads it; the jobs were cancelled
        except ApiError as error:
            return JSONResponse(error.body(), status_code=error.status)

    async def _body(self, request) -> dict:
        """The JSON object of the request's body, read whole within the limits of size and time."""
        from starlette.requests import ClientDisconnect

        size = request.headers.get("content-length", "")
        if size.isdigit() and int(size) > self.limits.max_body_bytes:
            raise ApiError(413, f"the request body is larger than this server's {self.limits.max_body_bytes} bytes")

        async def read() -> bytes:
            chunks, total = [], 0
            async for chunk in request.stream():
                total += len(chunk)
                if total > self.limits.max_body_bytes:
                    raise ApiError(
                        413, f"the request body is larger than this server's {self.limits.max_body_bytes} bytes"
                    )
                chunks.append(chunk)
            return b"".join(chunks)

        try:
            raw = await asyncio.wait_for(read(), timeout=self.limits.body_seconds)
        except asyncio.TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {self.limits.body_seconds:g} s") from None
        except ClientDisconnect:
            raise ClientGone from None
        return read_body(raw)

    def _same_model(self, model: str | None) -> None:
        if model is not None and model != self.model_id:
            raise ApiError(404, f"model {model!r} does not exist; this server has {self.model_id!r}", "model")

    def _echo(self, ids: list[int], text: str | None) -> str:
        """The text a prompt is echoed as: its own, or its ids' bytes decoded."""
        if text is not None:
            return text
        return b"".join(token_bytes(self.tokenizer, t) for t in ids).decode("utf-8", errors="replace")

    def _jobs(
        self, prompts, settings: SamplingSettings, n: int, logprobs: int | None, ignore_eos: bool, echo: bool
    ) -> tuple[list[Job], list[asyncio.Queue]]:
        """One job per prompt and choice, and the queue on this event loop that each job's events arrive on."""
        loop = asyncio.get_running_loop()
        jobs, queues = [], []
        for ids, _ in prompts:
            for i in range(n):  # choice i of a seeded request uses seed + i, as `alilama generate --num-samples`
                seeded = replace(settings, seed=None if settings.seed is None else settings.seed + i)
                events: asyncio.Queue = asyncio.Queue()
                request = Request(ids, seeded, logprobs, ignore_eos, echo)
                jobs.append(Job(request, _on_loop(loop, events)))
                queues.append(events)
        return jobs, queues


def _on_loop(loop: asyncio.AbstractEventLoop, events: asyncio.Queue):
    """A job's ``deliver``: the scheduler's thread hands each event to ``events`` on ``loop``."""
    handoff = _HANDOFFS.get(loop)
    if handoff is None:
        handoff = _HANDOFFS.setdefault(loop, _Handoff(loop))
    return lambda event: handoff.put(events, event)


class _Handoff:
    """Events from the scheduler's thread to one event loop, with one wake-up of the loop per burst.

    A decode step makes an event for every sequence in the batch; waking the loop
    for each (``call_soon_threadsafe`` writes to its self-pipe) costs the
    scheduler's thread a system call per event. Here the first event of a burst
    schedules the hand-over and the others join it; each queue still gets its
    events in order.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lock = threading.Lock()
        self.items: list[tuple[asyncio.Queue, object]] = []

    def put(self, events: asyncio.Queue, event) -> None:
        with self.lock:
            self.items.append((events, event))
            if len(self.items) > 1:  # a hand-over is already scheduled and has not run yet
                return
        try:
            self.loop.call_soon_threadsafe(self._hand_over)
        except RuntimeError:  # the loop is closed: nobody is left to hand anything to
            with self.lock:
                self.items.clear()
            raise

    def _hand_over(self) -> None:
        with self.lock:
            items, self.items = self.items, []
        for events, event in items:
            events.put_nowait(event)


_HANDOFFS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Handoff] = weakref.WeakKeyDictionary()


async def _unless_gone(request, work):
    """The result of ``work``, or ``ClientGone`` as soon as the client disconnects (``work`` is cancelled)."""
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientGone


def listen(server: Server, host: str, port: int) -> None:
    """Run ``server`` on uvicorn in this process until it is interrupted."""
    import uvicorn

    uvicorn.run(
        server.app(),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=1,
        http=_timed_protocol(server.limits.body_seconds),
    )


def _timed_protocol(seconds: float, parser: str = "auto"):
    """uvicorn's HTTP/1.1 protocol, closing a connection that sends no whole request head within ``seconds``.

    uvicorn times out an idle connection only between requests, and any byte resets that timer; a
    client that connects and sends nothing, or half a head a byte at a time (slowloris), would hold
    its connection for good. The protocol is uvicorn's httptools one where httptools is installed (a C
    parser: measured 1.15x the tokens per second of the pure-Python h11 one with 16 streaming clients,
    ``scripts/load_test_serve.py``), else its h11 one; ``parser`` (``"httptools"``, ``"h11"``) chooses.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadTimer:
        head_timer = None
        head_seen = False

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()  # the next request's head has the same time

        def connection_lost(self, exc) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_seen = False
            self.head_timer = self.loop.call_later(seconds, self._no_head)

        def _no_head(self) -> None:
            if self._waiting_for_head() and not self.transport.is_closing():
                self.transport.close()

    class TimedH11Protocol(HeadTimer, H11Protocol):
        def _waiting_for_head(self) -> bool:
            return self.conn.their_state is h11.IDLE

    if parser == "h11":
        return TimedH11Protocol
    try:
        import httptools  # noqa: F401
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        if parser == "httptools":
            raise
        return TimedH11Protocol

    class TimedHttpToolsProtocol(HeadTimer, HttpToolsProtocol):
        def on_headers_complete(self) -> None:
            self.head_seen = True
            super().on_headers_complete()

        def _waiting_for_head(self) -> bool:
            busy = self.cycle is not None and not self.cycle.response_complete
            return not self.head_seen and not busy and not self.pipeline

    return TimedHttpToolsProtocol
