"""``alilama serve RUN``: an OpenAI-compatible HTTP server over the engine's continuous batching.

A Starlette app on uvicorn. ``POST /v1/completions`` and ``POST
/v1/chat/completions`` take OpenAI's request bodies (``prompt`` / ``messages``,
``max_tokens``, ``temperature``, ``top_p``, ``top_k`` as an extension, ``stop``,
``seed``, ``n``, ``stream``) and answer with OpenAI's response objects, streamed
as server-sent events (``data: {...}`` chunks, then ``data: [DONE]``) when
``stream`` is true. ``GET /v1/models`` lists the one model (named after the run
folder, never its path), ``GET /health`` says it is up.

One scheduler thread owns the model: a ``ContinuousBatch``
(``alilama_core.engine.batching``) that requests join and leave between decode
steps, so concurrent clients share forward passes. Requests beyond the batch
wait in a bounded queue; a full queue answers 429. A client that disconnects
mid-stream leaves the batch at once. Errors are JSON objects (``{"error":
{"message", "type", "param", "code"}}``) with the right status, never a
traceback.

``logprobs`` (completions: the number of alternatives; chat: ``logprobs`` and
``top_logprobs``) report log-probabilities under the model itself, before
temperature, top-k and top-p. ``GET /`` is the playground (``alilama_core.app.playground``),
``POST /v1/alilama/tape`` the tape of a text for it. ``ignore_eos: true`` (an extension, as in
vLLM) goes on past end-of-text to ``max_tokens``.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import hmac
import json
import queue
import threading
import time
import traceback
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from alilama_core.contracts.errors import AlilamaError
from alilama_core.engine.batching import ContinuousBatch, Event
from alilama_core.engine.generation import SamplingSettings, token_bytes


@dataclass
class Limits:
    """What one server accepts; the CLI's options set them."""

    max_tokens: int = 256
    """Largest ``max_tokens`` a request may ask for (and the default when it asks for none)."""
    max_prompt_tokens: int = 768
    max_batch: int = 8
    """Sequences decoded together (rows of the batch); more wait in the queue."""
    max_queue: int = 64
    """Sequences waiting for a row; beyond it, 429."""
    max_n: int = 8


class ApiError(Exception):
    """An error the client sees as OpenAI's JSON error object with ``status``."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


# -- the scheduler: one thread, one batch ----------------------------------------------------------


@dataclass
class Job:
    """One sequence asked for by a request: its prompt ids and settings, and where its events go."""

    prompt: list[int]
    settings: SamplingSettings
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    logprobs: int | None = None
    ignore_eos: bool = False
    handle: int | None = None
    cancelled: bool = False


class Scheduler(threading.Thread):
    """Admits waiting jobs into free rows, steps the batch, hands each event to its job's queue."""

    def __init__(self, model, eot_id: int | None, limits: Limits, capacity: int) -> None:
        super().__init__(name="alilama-scheduler", daemon=True)
        self.batch = ContinuousBatch(model, rows=limits.max_batch, capacity=capacity, eot_id=eot_id)
        self.limits = limits
        self.inbox: queue.Queue[Job] = queue.Queue()
        self.cancels: queue.Queue[Job] = queue.Queue()
        self.waiting: deque[Job] = deque()
        self.jobs: dict[int, Job] = {}
        self.pending = 0  # jobs submitted and not yet in the batch (inbox + waiting)
        self.calls: queue.Queue = queue.Queue()  # (function, future): other work on the model, between steps
        self.lock = threading.Lock()
        self.running = True

    def submit(self, jobs: list[Job]) -> None:
        with self.lock:
            if self.pending + len(jobs) > self.limits.max_queue:
                raise ApiError(429, "the server is busy: its queue is full; retry later", kind="server_busy")
            self.pending += len(jobs)
        for job in jobs:
            self.inbox.put(job)

    def call(self, fn):
        """Run ``fn()`` in this thread between decode steps (the model is this thread's alone); a future."""
        import concurrent.futures

        future: concurrent.futures.Future = concurrent.futures.Future()
        self.calls.put((fn, future))
        return future

    def cancel(self, job: Job) -> None:
        job.cancelled = True
        self.cancels.put(job)

    def run(self) -> None:
        while self.running:
            try:
                self._tick()
            except Exception:  # never let one bad step take the server down: fail the jobs in flight
                traceback.print_exc()
                for job in list(self.jobs.values()):
                    self._deliver(job, Event(job.handle or -1, None, "error"))
                self.jobs.clear()
                self.batch.live.clear()

    def _tick(self) -> None:
        block = not len(self.batch) and not self.waiting
        try:
            while True:
                self.waiting.append(self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait())
                block = False
        except queue.Empty:
            pass
        while not self.calls.empty():
            fn, future = self.calls.get_nowait()
            try:
                future.set_result(fn())
            except Exception as exc:
                future.set_exception(exc)
        while not self.cancels.empty():
            job = self.cancels.get_nowait()
            if job.handle is not None:
                self.batch.leave(job.handle)
                self.jobs.pop(job.handle, None)
        while self.waiting and self.batch.free_rows:
            job = self.waiting.popleft()
            with self.lock:
                self.pending -= 1
            if job.cancelled:
                continue
            job.handle, event = self.batch.join(job.prompt, job.settings, job.logprobs, job.ignore_eos)
            self.jobs[job.handle] = job
            self._event(event)
        for event in self.batch.step():
            self._event(event)

    def _event(self, event: Event) -> None:
        job = self.jobs.get(event.handle)
        if job is None:
            return
        if event.finish_reason is not None:
            self.jobs.pop(event.handle, None)
        self._deliver(job, event)

    @staticmethod
    def _deliver(job: Job, event: Event) -> None:
        job.loop.call_soon_threadsafe(job.events.put_nowait, event)


# -- requests --------------------------------------------------------------------------------------


def _number(body: dict, name: str, kind: type, default: Any, low: float | None = None, high: float | None = None):
    value = body.get(name, default)
    if value is None:
        return default
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ApiError(400, f"{name} must be an integer, got {value!r}", name)
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ApiError(400, f"{name} must be a number, got {value!r}", name)
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise ApiError(400, f"{name} must be {bounds}, got {value!r}", name)
    return kind(value)


MAX_LOGPROBS = 20


def logprobs_asked(body: dict, chat: bool) -> int | None:
    """How many alternatives per token a request asks for (``None``: no log-probabilities).

    Completions: ``logprobs`` is that number (0-5 in OpenAI's API; up to 20 here). Chat: ``logprobs: true``
    asks for the tokens' own, and ``top_logprobs`` for that many alternatives.
    """
    if chat:
        if body.get("logprobs") not in (None, False, True):
            raise ApiError(400, f"logprobs must be true or false, got {body['logprobs']!r}", "logprobs")
        top = _number(body, "top_logprobs", int, None, 0, MAX_LOGPROBS)
        if top is not None and not body.get("logprobs"):
            raise ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs")
        return (top or 0) if body.get("logprobs") else None
    return _number(body, "logprobs", int, None, 0, MAX_LOGPROBS)


def sampling(body: dict, limits: Limits) -> tuple[SamplingSettings, int, list[str]]:
    """``(settings, n, stop strings)`` from an OpenAI request body, or ``ApiError(400)``."""
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = _number({"max_tokens": max_tokens}, "max_tokens", int, limits.max_tokens, 1, None)
    if max_tokens > limits.max_tokens:
        raise ApiError(400, f"max_tokens is {max_tokens}; this server allows at most {limits.max_tokens}", "max_tokens")
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)):
        raise ApiError(400, "stop must be a non-empty string or a list of them", "stop")
    if stop is not None and len(stop) > 4:
        raise ApiError(400, f"stop holds at most 4 strings, got {len(stop)}", "stop")
    top_k = _number(body, "top_k", int, None, 1, None)
    top_p = _number(body, "top_p", float, None, 0, 1)
    settings = SamplingSettings(
        max_new_tokens=max_tokens,
        temperature=_number(body, "temperature", float, 1.0, 0, 2),
        top_k=top_k,
        top_p=None if top_p in (None, 1.0) else top_p,
        seed=_number(body, "seed", int, None),
    )
    if settings.top_p == 0:
        raise ApiError(400, "top_p must be greater than 0", "top_p")
    n = _number(body, "n", int, 1, 1, limits.max_n)
    return settings, n, list(stop or [])


def chat_prompt(messages: Any, template: str | None = None) -> str:
    """The prompt text for OpenAI ``messages`` under a chat template (``alilama_core.engine.chat``)."""
    from alilama_core.engine.chat import DEFAULT_CHAT_TEMPLATE, render

    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects", "messages")
    plain = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "developer"):
            raise ApiError(400, f"messages[{i}] needs a role of system, user or assistant", "messages")
        content = m.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be text", "messages")
        plain.append({"role": m["role"], "content": content})
    try:
        return render(template or DEFAULT_CHAT_TEMPLATE, plain)
    except AlilamaError as exc:
        raise ApiError(500, str(exc), kind="server_error") from None


class Choice:
    """One choice's text as it arrives: bytes decoded incrementally, cut before the first stop string."""

    def __init__(self, tokenizer, stop: list[str]) -> None:
        self.tokenizer, self.stop = tokenizer, stop
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self.sent = 0
        self.tokens = 0
        self.finish_reason: str | None = None
        self.scores: list[tuple[int, float, list[tuple[int, float]]]] = []
        """``(token, logprob, alternatives)`` per token, when the request asked for log-probabilities."""
        self.unsent = 0

    def add(self, event: Event) -> str:
        """The new text to send for ``event`` ('' while a character or a possible stop string is incomplete)."""
        if event.token is not None and event.logprob is not None and self.finish_reason is None:
            self.scores.append((event.token, event.logprob, event.top or []))
        if event.token is not None:
            self.tokens += 1
            self.text += self.decoder.decode(token_bytes(self.tokenizer, event.token))
        if event.finish_reason is not None:
            self.text += self.decoder.decode(b"", final=True)
            self.finish_reason = "length" if event.finish_reason == "length" else "stop"
        hits = [self.text.find(s) for s in self.stop if s in self.text]
        if hits:
            self.text = self.text[: min(hits)]
            self.finish_reason = "stop"
        # hold back what could still become a stop string
        hold = 0 if self.finish_reason else max((_overlap(self.text, s) for s in self.stop), default=0)
        piece = self.text[self.sent : len(self.text) - hold]
        self.sent += len(piece)
        return piece


def _overlap(text: str, stop: str) -> int:
    """Length of the longest end of ``text`` that begins ``stop``."""
    for k in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:k]):
            return k
    return 0


# -- the app ---------------------------------------------------------------------------------------


class Server:
    """The model, its tokenizer, the limits and the scheduler; ``app()`` is the ASGI app."""

    def __init__(
        self, loaded, model_id: str, limits: Limits, api_key: str | None = None, chat_template: str | None = None
    ) -> None:
        self.tokenizer, self.model = loaded.tokenizer, loaded.model
        self.model_id, self.limits, self.api_key = model_id, limits, api_key
        self.created = int(time.time())
        capacity = limits.max_prompt_tokens + limits.max_tokens + 1
        self.scheduler = Scheduler(loaded.model, loaded.tokenizer.eot_id, limits, capacity)
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
        return Starlette(routes=routes, lifespan=self._lifespan, exception_handlers={404: self._not_found})

    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        self.scheduler.start()
        yield
        self.scheduler.running = False

    async def _not_found(self, request, exc):
        from starlette.responses import JSONResponse

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
            body = await self._body(request)
            text = body.get("text")
            if not isinstance(text, str) or not text:
                raise ApiError(400, "text must be a non-empty string", "text")
            longest = self.limits.max_prompt_tokens + self.limits.max_tokens
            if len(self.tokenizer.encode(text, allowed_special="all")) > longest:
                raise ApiError(413, f"the text is longer than this server's {longest} tokens", "text")
            future = self.scheduler.call(lambda: page_data(read_tape(self.model, self.tokenizer, text)))
            return JSONResponse(await asyncio.wrap_future(future))
        except ApiError as error:
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
        from starlette.responses import JSONResponse

        if self.api_key is None:
            return None
        given = request.headers.get("authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            return None
        error = ApiError(401, "a valid API key is needed: Authorization: Bearer KEY", kind="authentication_error")
        return JSONResponse(error.body(), status_code=401)

    async def _answer(self, request, chat: bool):
        from starlette.responses import JSONResponse, StreamingResponse

        if (denied := self._denied(request)) is not None:
            return denied
        try:
            body = await self._body(request)
            prompts = self._prompts(body, chat)
            settings, n, stop = sampling(body, self.limits)
            if not isinstance(body.get("ignore_eos", False), bool):
                raise ApiError(400, "ignore_eos must be true or false", "ignore_eos")
            jobs = self._jobs(prompts, settings, n, logprobs_asked(body, chat))
            for job in jobs:
                job.ignore_eos = body.get("ignore_eos", False)
            self.scheduler.submit(jobs)
        except ApiError as error:
            return JSONResponse(error.body(), status_code=error.status)
        except Exception:  # a bug here must not show the client a traceback
            traceback.print_exc()
            return JSONResponse(ApiError(500, "internal error", kind="server_error").body(), status_code=500)
        reply = _Reply(self, jobs, stop, chat, prompt_tokens=sum(len(j.prompt) for j in jobs[::n]), n=n)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(reply.stream(include_usage), media_type="text/event-stream")
        try:
            return JSONResponse(await reply.whole())
        except ApiError as error:
            return JSONResponse(error.body(), status_code=error.status)

    async def _body(self, request) -> dict:
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "the request body must be a JSON object") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.model_id:
            raise ApiError(404, f"model {model!r} does not exist; this server has {self.model_id!r}", "model")
        return body

    def _prompts(self, body: dict, chat: bool) -> list[list[int]]:
        if chat:
            texts = [chat_prompt(body.get("messages"), self.chat_template)]
        else:
            prompt = body.get("prompt", "")
            texts = [prompt] if isinstance(prompt, str) else prompt
            if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
                raise ApiError(400, "prompt must be a string or a non-empty list of strings", "prompt")
        out = []
        for text in texts:
            try:
                ids = self.tokenizer.encode(text, allowed_special="all") if text else []
            except AlilamaError as exc:
                raise ApiError(400, f"the prompt cannot be encoded: {exc}", "prompt") from None
            ids = ids or ([self.tokenizer.eot_id] if self.tokenizer.eot_id is not None else [])
            if not ids:
                raise ApiError(400, "the prompt is empty and the tokenizer has no end-of-text token", "prompt")
            if len(ids) > self.limits.max_prompt_tokens:
                raise ApiError(
                    413,
                    f"the prompt has {len(ids)} tokens; this server accepts at most {self.limits.max_prompt_tokens}",
                    "prompt",
                )
            out.append(ids)
        return out

    def _jobs(self, prompts: list[list[int]], settings: SamplingSettings, n: int, logprobs: int | None) -> list[Job]:
        loop = asyncio.get_running_loop()
        jobs = []
        for ids in prompts:
            for i in range(n):  # choice i of a seeded request uses seed + i, as `alilama generate --num-samples`
                seeded = replace(settings, seed=None if settings.seed is None else settings.seed + i)
                jobs.append(Job(ids, seeded, loop, asyncio.Queue(), logprobs))
        return jobs


@dataclass
class _Reply:
    """The answer to one request: its choices, gathered whole or streamed as they come."""

    server: Server
    jobs: list[Job]
    stop: list[str]
    chat: bool
    prompt_tokens: int
    n: int
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])

    def __post_init__(self) -> None:
        self.choices = [Choice(self.server.tokenizer, self.stop) for _ in self.jobs]
        self.created = int(time.time())
        self.kind = "chat.completion" if self.chat else "text_completion"

    def _usage(self) -> dict:
        completion = sum(c.tokens for c in self.choices)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion}  # fmt: skip

    async def _next(self, i: int) -> str:
        event = await self.jobs[i].events.get()
        if event.finish_reason == "error":
            raise ApiError(500, "the model failed on this request", kind="server_error")
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
        """OpenAI's ``logprobs`` object for ``choice``'s tokens from ``start`` (``None``: not asked for)."""
        if self.jobs[0].logprobs is None:
            return None
        rows = choice.scores[start:]
        if self.chat:

            def entry(token: int, logprob: float) -> dict:
                text = self._token_text(token)
                return {"token": text, "logprob": logprob, "bytes": list(token_bytes(self.server.tokenizer, token))}

            return {"content": [entry(t, lp) | {"top_logprobs": [entry(a, b) for a, b in top]} for t, lp, top in rows]}
        offsets, at = [], len("".join(self._token_text(t) for t, _, _ in choice.scores[:start]))
        for t, _, _ in rows:
            offsets.append(at)
            at += len(self._token_text(t))
        return {
            "tokens": [self._token_text(t) for t, _, _ in rows],
            "token_logprobs": [lp for _, lp, _ in rows],
            "top_logprobs": [{self._token_text(a): b for a, b in top} for _, _, top in rows],
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
                choices.append({"index": i, "text": c.text, "finish_reason": c.finish_reason,
                                "logprobs": self._logprobs(c)})  # fmt: skip
        return {"id": self._id(), "object": self.kind, "created": self.created, "model": self.server.model_id,
                "choices": choices, "usage": self._usage()}  # fmt: skip

    def _id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.id

    def _chunk(self, i: int, piece: str, finish: str | None, first: bool = False) -> str:
        c = self.choices[i]
        logprobs = None if first else self._logprobs(c, c.unsent)
        c.unsent = len(c.scores)
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

    async def stream(self, include_usage: bool):
        """Server-sent events; a client that goes away cancels what is left (``finally``)."""
        waiting: dict[asyncio.Future, int] = {}
        try:
            if self.chat:
                for i in range(len(self.jobs)):
                    yield self._chunk(i, "", None, first=True)
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
                    finish = self.choices[i].finish_reason
                    if piece or finish:
                        yield self._chunk(i, piece, finish)
                    if finish is None:
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


def serve(loaded, model_id: str, host: str, port: int, limits: Limits, api_key: str | None = None) -> None:
    """Run the server in this process until it is interrupted."""
    import uvicorn

    from alilama_core.engine.chat import run_template

    server = Server(loaded, model_id, limits, api_key, run_template(loaded.path))
    uvicorn.run(server.app(), host=host, port=port, log_level="warning", timeout_graceful_shutdown=1)


# -- alilama chat: the same engine in a terminal ----------------------------------------------------

CHAT_STOPS = ["\nUser:", "\nAssistant:"]
"""Where an assistant turn ends under the default template: the model starting the next turn itself."""


def chat_turns(loaded, settings: SamplingSettings, template: str, read, write) -> None:
    """A chat loop: ``read()`` gives each user line (``None``: the end), ``write(text)`` shows the reply as it streams.

    The history is kept and sent whole each turn (under the chat template); ``/reset`` clears it,
    ``/quit`` (or the end of input) leaves.
    """
    batch = ContinuousBatch(loaded.model, rows=1, capacity=loaded.model.positional.max_positions or 4096,
                            eot_id=loaded.tokenizer.eot_id)  # fmt: skip
    messages: list[dict] = []
    while (line := read()) is not None:
        line = line.strip()
        if line in ("/quit", "/exit"):
            return
        if line == "/reset":
            messages.clear()
            write("(history cleared)\n")
            continue
        if not line:
            continue
        messages.append({"role": "user", "content": line})
        ids = loaded.tokenizer.encode(chat_prompt(messages, template), allowed_special="all")
        room = batch.capacity - 1 - settings.max_new_tokens
        if len(ids) > room:  # the oldest turns go first when the history no longer fits
            ids = ids[-room:]
        choice = Choice(loaded.tokenizer, CHAT_STOPS)
        handle, event = batch.join(ids, settings)
        while True:
            write(choice.add(event))
            if choice.finish_reason is not None:
                batch.leave(handle)
                break
            events = batch.step()
            event = events[0] if events else Event(handle, None, "stop")
        write("\n")
        messages.append({"role": "assistant", "content": choice.text.strip()})
