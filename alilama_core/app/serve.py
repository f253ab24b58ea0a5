"""The HTTP side of ``alilama serve RUN``: an OpenAI-compatible server over the engine's scheduler.

Routes and the shaping of answers (JSON objects, server-sent events) only: the
work on the model is the engine's (``alilama_core.engine.scheduler``), the
command's options are checked in ``alilama_core.app.serve_cmd``.

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
fails fails alone: the other rows of the batch go on. ``GET /`` is the playground (``alilama_core.app.playground``),
``POST /v1/alilama/tape`` the tape of a text for it. ``ignore_eos: true`` (an extension, as in
vLLM) goes on past end-of-text to ``max_tokens``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import threading
import time
import traceback
import uuid
import weakref
from dataclasses import dataclass, field, replace

from alilama_core.base.errors import AlilamaError, ConfigError
from alilama_core.engine.generation import SamplingSettings, token_bytes
from alilama_core.engine.requests import (
    ChatRequest,
    CompletionRequest,
    RequestError,
    TapeRequest,
    parse,
    read_body,
)
from alilama_core.engine.scheduler import Choice, Job, Limits, Scheduler, encode_prompts

__all__ = ["ApiError", "Limits", "Server", "serve"]


class ApiError(Exception):
    """An error the client sees as OpenAI's JSON error object with ``status``."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}

    @classmethod
    def of(cls, exc: Exception) -> "ApiError":
        """What the client sees for ``exc``: its own words for a refused request, else a 500 without details."""
        if isinstance(exc, ApiError):
            return exc
        if isinstance(exc, RequestError):
            return cls(exc.status, exc.message, exc.param, exc.kind)
        if isinstance(exc, ConfigError):
            return cls(400, str(exc))
        return cls(500, "the model failed on this request", kind="server_error")


class ClientGone(Exception):
    """The client went away before its request was read whole."""


# -- the app ---------------------------------------------------------------------------------------


class Server:
    """The model, its tokenizer, the limits and the scheduler; ``app()`` is the ASGI app."""

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

    def app(self):
        from starlette.applications import Starlette
        from starlette.routing import Route

        routes = [
            Route("/", self.playground, methods=["GET"]),
            Route("/v1/alilama/tape", self.tape, methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]
        return Starlette(
            routes=routes, lifespan=self._lifespan, exception_handlers={404: self._no_route, 405: self._no_route}
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

    async def playground(self, request):
        """The playground page (it holds no data: its requests carry the API key when there is one)."""
        from starlette.responses import HTMLResponse

        from alilama_core.app.playground import playground_page

        return HTMLResponse(playground_page(self.model_id))

    async def tape(self, request):
        """The tape of ``{"text": ...}``: attention per layer and head, and the logit lens (the viz page's data)."""
        from starlette.responses import JSONResponse

        from alilama_core.app.viz_draw import read_tape
        from alilama_core.app.viz_page import page_data

        if (denied := self._denied(request)) is not None:
            return denied
        try:
            text = parse(TapeRequest, await self._body(request)).text
            longest = self.limits.max_prompt_tokens + self.limits.max_tokens
            if len(self.tokenizer.encode(text, allowed_special="all")) > longest:
                raise ApiError(413, f"the text is longer than this server's {longest} tokens", "text")
            future = self.scheduler.call(lambda: page_data(read_tape(self.model, self.tokenizer, text)))
            return JSONResponse(await asyncio.wrap_future(future))
        except ApiError as error:
            return JSONResponse(error.body(), status_code=error.status)
        except ClientGone:
            return JSONResponse({}, status_code=400)
        except RequestError as exc:
            error = ApiError.of(exc)
            return JSONResponse(error.body(), status_code=error.status)
        except AlilamaError as exc:
            return JSONResponse(ApiError(400, str(exc), "text").body(), status_code=400)
        except Exception:
            traceback.print_exc()
            return JSONResponse(ApiError(500, "internal error", kind="server_error").body(), status_code=500)

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
            jobs, queues = self._jobs(prompts, settings, req.choices, logprobs)
            for job in jobs:
                job.ignore_eos, job.echo = bool(req.ignore_eos), bool(getattr(req, "echo", False))
            self.scheduler.submit(jobs)
        except ClientGone:
            print(f"alilama serve: a client went away before its request was read ({request.url.path})", flush=True)
            return Response(status_code=400)
        except Exception as exc:  # a bug here must not show the client a traceback
            if not isinstance(exc, (ApiError, AlilamaError)):
                traceback.print_exc()
            error = ApiError.of(exc) if isinstance(exc, (ApiError, AlilamaError)) else ApiError(500, "internal error")
            return JSONResponse(error.body(), status_code=error.status)
        echo = bool(getattr(req, "echo", False))
        echoes = [self._echo(ids, text) if echo else None for ids, text in prompts for _ in range(req.choices)]
        reply = _Reply(self, jobs, queues, req.stops, chat, sum(len(ids) for ids, _ in prompts), req.choices, echoes)
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
        self, prompts, settings: SamplingSettings, n: int, logprobs: int | None
    ) -> tuple[list[Job], list[asyncio.Queue]]:
        """One job per prompt and choice, and the queue on this event loop that each job's events arrive on."""
        loop = asyncio.get_running_loop()
        jobs, queues = [], []
        for ids, _ in prompts:
            for i in range(n):  # choice i of a seeded request uses seed + i, as `alilama generate --num-samples`
                seeded = replace(settings, seed=None if settings.seed is None else settings.seed + i)
                events: asyncio.Queue = asyncio.Queue()
                jobs.append(Job(ids, seeded, _on_loop(loop, events), logprobs))
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


@dataclass
class _Reply:
    """The answer to one request: its choices, gathered whole or streamed as they come."""

    server: Server
    jobs: list[Job]
    events: list[asyncio.Queue]
    """Per job: where its events arrive."""
    stop: list[str]
    chat: bool
    prompt_tokens: int
    n: int
    echoes: list[str | None]
    """Per job: the prompt's text to send before its completion (``echo``), or ``None``."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])

    def __post_init__(self) -> None:
        self.choices = [Choice(self.server.tokenizer, self.stop, echo) for echo in self.echoes]
        self.created = int(time.time())
        self.kind = "chat.completion" if self.chat else "text_completion"

    def _usage(self) -> dict:
        completion = sum(c.tokens for c in self.choices)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion}  # fmt: skip

    async def _next(self, i: int) -> str:
        return self._take(i, await self.events[i].get())

    def _take(self, i: int, event) -> str:
        """The text to send for job ``i``'s ``event``; ``ApiError`` when the job failed."""
        if event.finish_reason == "error":
            raise ApiError.of(event.error)
        try:
            piece = self.choices[i].add(event)
        except Exception:  # a bug must reach the client as a JSON error, not a cut connection
            traceback.print_exc()
            raise ApiError(500, "internal error while decoding the output", kind="server_error") from None
        if self.choices[i].finish_reason is not None and event.finish_reason is None:
            self.server.scheduler.cancel(self.jobs[i])  # a stop string: free the row now
        return piece

    def _token_text(self, token: int) -> str:
        return token_bytes(self.server.tokenizer, token).decode("utf-8", errors="replace")

    def _logprobs(self, choice: Choice, start: int = 0) -> dict | None:
        """OpenAI's ``logprobs`` object for ``choice``'s scored tokens from ``start`` (``None``: not asked for).

        Completions with ``echo``: the prompt's tokens come first, the first with ``null`` scores.
        """
        if self.jobs[0].logprobs is None:
            return None
        rows = choice.rows[start:]
        if self.chat:

            def entry(token: int, logprob: float) -> dict:
                text = self._token_text(token)
                return {"token": text, "logprob": logprob, "bytes": list(token_bytes(self.server.tokenizer, token))}

            return {"content": [entry(t, lp) | {"top_logprobs": [entry(a, b) for a, b in top]} for t, lp, top in rows]}
        offsets, at = [], len("".join(self._token_text(t) for t, _, _ in choice.rows[:start]))
        for t, _, _ in rows:
            offsets.append(at)
            at += len(self._token_text(t))
        return {
            "tokens": [self._token_text(t) for t, _, _ in rows],
            "token_logprobs": [lp for _, lp, _ in rows],
            "top_logprobs": [None if top is None else {self._token_text(a): b for a, b in top} for _, _, top in rows],
            "text_offset": offsets,
        }

    def _cancel_all(self) -> None:
        for job, choice in zip(self.jobs, self.choices):
            if choice.finish_reason is None:
                self.server.scheduler.cancel(job)

    async def whole(self) -> dict:
        try:
            for i, choice in enumerate(self.choices):
                while choice.finish_reason is None:
                    await self._next(i)
        finally:
            self._cancel_all()
        choices = []
        for i, c in enumerate(self.choices):
            if self.chat:
                choices.append({"index": i, "message": {"role": "assistant", "content": c.text},
                                "finish_reason": c.finish_reason, "logprobs": self._logprobs(c)})  # fmt: skip
            else:
                choices.append({"index": i, "text": c.whole_text, "finish_reason": c.finish_reason,
                                "logprobs": self._logprobs(c)})  # fmt: skip
        return {"id": self._id(), "object": self.kind, "created": self.created, "model": self.server.model_id,
                "choices": choices, "usage": self._usage()}  # fmt: skip

    def _id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.id

    def _chunk(self, i: int, piece: str, finish: str | None, first: bool = False) -> str:
        c = self.choices[i]
        logprobs = None if first else self._logprobs(c, c.unsent)
        c.unsent = len(c.rows)
        if self.chat:
            delta = ({"role": "assistant", "content": ""} if first else {}) | ({"content": piece} if piece else {})
            choice = {"index": i, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": i, "text": piece, "finish_reason": finish, "logprobs": logprobs}
            kind = "text_completion"
        chunk = {"id": self._id(), "object": kind, "created": self.created, "model": self.server.model_id,
                 "choices": [choice]}  # fmt: skip
        return f"data: {json.dumps(chunk)}\n\n"

    def _due(self, i: int, piece: str) -> str:
        """Choice ``i``'s chunk for its new ``piece``, or nothing while there is nothing to send (a token that
        ends inside a character, before its choice finishes)."""
        finish = self.choices[i].finish_reason
        return self._chunk(i, piece, finish) if piece or finish else ""

    async def _one(self):
        """The chunks of a one-choice stream: each wait takes every event that has come, sent as one write.

        A client that reads slower than the batch decodes gets several tokens' chunks at once, the same
        bytes with fewer trips through the HTTP stack; its first token still goes out alone.
        """
        events, choice = self.events[0], self.choices[0]
        while choice.finish_reason is None:
            arrived = [await events.get()]
            while not events.empty():
                arrived.append(events.get_nowait())
            text = []
            try:
                for event in arrived:
                    text.append(self._due(0, self._take(0, event)))
                    if choice.finish_reason is not None:
                        break
            except ApiError as error:
                yield "".join(text) + f"data: {json.dumps(error.body())}\n\n"
                return
            if chunks := "".join(text):
                yield chunks

    async def stream(self, include_usage: bool):
        """Server-sent events; a client that goes away cancels what is left (``finally``)."""
        waiting: dict[asyncio.Future, int] = {}
        try:
            if self.chat:
                for i in range(len(self.jobs)):
                    yield self._chunk(i, "", None, first=True)
            if len(self.jobs) == 1:
                async for text in self._one():
                    yield text
                if self.choices[0].finish_reason is None:  # it failed: the error was its last chunk
                    return
            else:
                waiting.update({asyncio.ensure_future(self._next(i)): i for i in range(len(self.jobs))})
            while waiting:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    i = waiting.pop(task)
                    try:
                        piece = task.result()
                    except ApiError as error:
                        yield f"data: {json.dumps(error.body())}\n\n"
                        return
                    if text := self._due(i, piece):
                        yield text
                    if self.choices[i].finish_reason is None:
                        waiting[asyncio.ensure_future(self._next(i))] = i
            if include_usage:
                usage = {"id": self._id(), "object": "chat.completion.chunk" if self.chat else "text_completion",
                         "created": self.created, "model": self.server.model_id, "choices": [],
                         "usage": self._usage()}  # fmt: skip
                yield f"data: {json.dumps(usage)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            for task in waiting:
                task.cancel()
            self._cancel_all()


def serve(
    loaded, model_id: str, host: str, port: int, limits: Limits, api_key: str | None = None, decode: str = "auto"
) -> None:
    """Run the server in this process until it is interrupted."""
    import uvicorn

    from alilama_core.engine.chat import run_template

    server = Server(loaded, model_id, limits, api_key, run_template(loaded.path), decode)
    uvicorn.run(
        server.app(),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=1,
        http=_timed_protocol(limits.body_seconds),
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
