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

from alilama_core.contracts.errors import AlilamaError, ConfigError
from alilama_core.engine.batching import ContinuousBatch, Event, score_prompt
from alilama_core.engine.generation import SamplingSettings, token_bytes
from alilama_core.engine.requests import ChatRequest, CompletionRequest, Message, RequestError, parse, read_body


@dataclass
class Limits:
    """What one server accepts; the CLI's options set them."""

    max_tokens: int = 256
    """Largest ``max_tokens`` a request may ask for (and the default when it asks for none)."""
    max_prompt_tokens: int = 768
    max_batch: int = 8
    """Sequences decoded together (rows of the batch); more wait in the queue."""
    max_queue: int = 64
    """Sequences waiting for a row; beyond it, 429 (a request for more than this alone: 400)."""
    max_n: int = 8
    max_body_bytes: int = 4 << 20
    """Largest request body; beyond it, 413."""
    body_seconds: float = 30.0
    """How long a client may take to send its body; beyond it, 408 (a slow or half-open client)."""

    def check(self, model) -> None:
        """Refuse limits the model or the memory cannot hold (``AlilamaError`` naming the option)."""
        import psutil

        for name in ("max_tokens", "max_prompt_tokens", "max_batch", "max_queue"):
            if getattr(self, name) < 1:
                raise AlilamaError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        positions = model.positional.max_positions
        if positions is not None and self.max_prompt_tokens >= positions:
            raise AlilamaError(
                f"--max-prompt-tokens is {self.max_prompt_tokens}, but this model's "
                f"{model.config.positional!r} positions end at {positions}: give at most {positions - 1}"
            )
        c = model.config
        element = next(model.parameters()).element_size()
        cache = 2 * c.n_layers * self.max_batch * (self.max_prompt_tokens + self.max_tokens + 1) * c.d_model * element
        free = psutil.virtual_memory().available
        if cache > free // 2:
            raise AlilamaError(
                f"--max-batch {self.max_batch} rows of --max-prompt-tokens {self.max_prompt_tokens} + --max-tokens "
                f"{self.max_tokens} need a {cache / 2**30:.1f} GiB KV cache, more than half of the "
                f"{free / 2**30:.1f} GiB free; lower them"
            )


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
            return cls(exc.status, exc.message, exc.param)
        if isinstance(exc, ConfigError):
            return cls(400, str(exc))
        return cls(500, "the model failed on this request", kind="server_error")


class ClientGone(Exception):
    """The client went away before its request was read whole."""


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
    echo: bool = False
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
        if len(jobs) > self.limits.max_queue:
            raise ApiError(
                400, f"this request asks for {len(jobs)} sequences (prompts x n); this server queues at most "
                f"{self.limits.max_queue}: send fewer at a time", "n",
            )  # fmt: skip
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
                    self._deliver(job, Event(job.handle or -1, None, "error", error=RuntimeError("the step failed")))
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
            if not job.cancelled:
                self._admit(job)
        for event in self.batch.step():
            self._event(event)

    def _admit(self, job: Job) -> None:
        """Start ``job`` (or score its prompt alone); a failure answers ``job`` alone."""
        try:
            if job.settings.max_new_tokens == 0:  # echo of a prompt's scores, nothing generated
                scores = score_prompt(self.batch.model, job.prompt, job.logprobs or 0)
                self._deliver(job, Event(-1, None, "length", prompt=scores))
                return
            job.handle, event = self.batch.join(job.prompt, job.settings, job.logprobs, job.ignore_eos, job.echo)
        except Exception as exc:
            if not isinstance(exc, AlilamaError):
                traceback.print_exc()
            self._deliver(job, Event(-1, None, "error", error=exc))
            return
        self.jobs[job.handle] = job
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


def chat_prompt(messages: list, template: str | None = None) -> str:
    """The prompt text for OpenAI ``messages`` (dicts or ``Message``) under a chat template."""
    from alilama_core.engine.chat import DEFAULT_CHAT_TEMPLATE, render

    typed = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
    plain = [{"role": m.role, "content": m.text} | ({"name": m.name} if m.name else {}) for m in typed]
    try:
        return render(template or DEFAULT_CHAT_TEMPLATE, plain)
    except AlilamaError as exc:
        raise ApiError(500, str(exc), kind="server_error") from None


class Choice:
    """One choice's text as it arrives: bytes decoded incrementally, cut before the first stop string."""

    def __init__(self, tokenizer, stop: list[str], echo: str | None = None) -> None:
        self.tokenizer, self.stop, self.echo = tokenizer, stop, echo
        """``echo``: the prompt's text, sent before the completion (``None``: not echoed)."""
        self.prompt_rows: list[tuple[int, float | None, list[tuple[int, float]] | None]] = []
        """The prompt's ``(token, logprob, alternatives)`` when it is echoed with log-probabilities."""
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
        if event.prompt is not None:
            self.prompt_rows = [(t.token, t.logprob, t.top if t.logprob is not None else None) for t in event.prompt]
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
        if self.echo is not None and not self.echoed:
            self.echoed = True
            return self.echo + piece
        return piece

    echoed = False

    @property
    def whole_text(self) -> str:
        return (self.echo or "") + self.text

    @property
    def rows(self) -> list:
        """Every scored token of the choice: the echoed prompt's, then the completion's."""
        return self.prompt_rows + self.scores


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
        return Starlette(
            routes=routes, lifespan=self._lifespan, exception_handlers={404: self._no_route, 405: self._no_route}
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        self.scheduler.start()
        yield
        self.scheduler.running = False

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
        except ClientGone:
            return JSONResponse({}, status_code=400)
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
            settings = req.sampling(self.limits.max_tokens)
            if settings.max_new_tokens > self.limits.max_tokens:
                raise ApiError(
                    400, f"max_tokens is {settings.max_new_tokens}; this server allows at most {self.limits.max_tokens}",
                    "max_tokens",
                )  # fmt: skip
            if req.choices > self.limits.max_n:
                raise ApiError(400, f"n is {req.choices}; this server allows at most {self.limits.max_n}", "n")
            settings.validate(self.model.config.vocab_size)
            prompts = self._prompts(req, chat)
            logprobs = req.alternatives if chat else req.logprobs
            jobs = self._jobs(prompts, settings, req.choices, logprobs)
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
        reply = _Reply(self, jobs, req.stops, chat, sum(len(ids) for ids, _ in prompts), req.choices, echoes)
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

    def _prompts(self, req, chat: bool) -> list[tuple[list[int], str | None]]:
        """Each prompt's token ids, and its text when it came as text."""
        texts = [chat_prompt(req.messages, self.chat_template)] if chat else req.prompts
        out = []
        for text in texts:
            if isinstance(text, list):
                if max(text) >= self.model.config.vocab_size:
                    raise ApiError(
                        400, f"prompt token {max(text)} is outside this model's ids 0..{self.model.config.vocab_size - 1}",
                        "prompt",
                    )  # fmt: skip
                ids, text = list(text), None
            else:
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
            out.append((ids, text))
        return out

    def _echo(self, ids: list[int], text: str | None) -> str:
        """The text a prompt is echoed as: its own, or its ids' bytes decoded."""
        if text is not None:
            return text
        return b"".join(token_bytes(self.tokenizer, t) for t in ids).decode("utf-8", errors="replace")

    def _jobs(self, prompts, settings: SamplingSettings, n: int, logprobs: int | None) -> list[Job]:
        loop = asyncio.get_running_loop()
        jobs = []
        for ids, _ in prompts:
            for i in range(n):  # choice i of a seeded request uses seed + i, as `alilama generate --num-samples`
                seeded = replace(settings, seed=None if settings.seed is None else settings.seed + i)
                jobs.append(Job(ids, seeded, loop, asyncio.Queue(), logprobs))
        return jobs


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
        event = await self.jobs[i].events.get()
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
    uvicorn.run(
        server.app(),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=1,
        http=_timed_protocol(limits.body_seconds),
    )


def _timed_protocol(seconds: float):
    """uvicorn's HTTP/1.1 protocol, closing a connection that sends no whole request head within ``seconds``.

    uvicorn times out an idle connection only between requests, and any byte resets that timer; a
    client that connects and sends nothing, or half a head a byte at a time (slowloris), would hold
    its connection for good.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        head_timer = None

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
            self.head_timer = self.loop.call_later(seconds, self._no_head)

        def _no_head(self) -> None:
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return TimedH11Protocol


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
