"""Continuous batching on a thread of its own: sequences are submitted, admitted into free rows, and stepped.

``Scheduler`` owns the model: one thread that runs a ``ContinuousBatch``
(``alilama_core.engine.batching``) and hands every ``Event`` to the callback of
the ``Job`` it belongs to (a ``Request``, ``alilama_core.engine.request``, and
where its events go). Work submitted from other threads waits in a bounded
queue (``Limits.max_queue``; beyond it ``RequestError`` with status 429) and is
admitted between decode steps, as rows free up. A job that fails fails alone
(its callback gets an ``"error"`` event; the other rows go on), a cancelled job
(its client went away, or a stop string ended it) leaves the batch at once, and
``call(fn)`` runs other work on the model between steps. Nothing here knows of
HTTP: ``alilama serve``'s server (``alilama_core.runs.serving``) shapes the
events into OpenAI's responses, and a script can use the scheduler alone::

    events = queue.Queue()
    scheduler = Scheduler(model, tokenizer.eot_id, Limits(max_batch=4))
    scheduler.start()
    scheduler.submit([Job(Request(tokenizer.encode("Once"), SamplingSettings(max_new_tokens=8)), events.put)])
    while True:
        event = events.get()
        if event.token is not None:
            print(tokenizer.decode([event.token]), end="")
        if event.finish_reason is not None:  # "stop", "length", or "error" (event.error says why)
            break
    scheduler.stop()

``Limits`` says what one server accepts and ``Limits.check`` refuses limits the
model or the memory cannot hold; ``encode_prompts`` turns a request's prompts
into token ids within them; ``Choice`` is one sequence's text as its events
arrive (incremental UTF-8, cut before a stop string). torch is imported when a
scheduler is built, not with this module.
"""

from __future__ import annotations

import codecs
import queue
import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alilama_core.base.errors import AlilamaError
from alilama_core.engine.request import Request
from alilama_core.engine.requests import RequestError

if TYPE_CHECKING:
    from alilama_core.engine.batching import Event


@dataclass
class Limits:
    """What one server accepts; ``alilama serve``'s options set them."""

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

    @property
    def capacity(self) -> int:
        """Positions of the batch's KV cache: the longest prompt, the most new tokens, and one."""
        return self.max_prompt_tokens + self.max_tokens + 1

    def check_sequences(self, count: int) -> None:
        """``RequestError`` 400 when one request asks for more sequences (prompts x n) than the queue holds."""
        if count > self.max_queue:
            raise RequestError(
                f"this request asks for {count} sequences (prompts x n); this server queues at most "
                f"{self.max_queue}: send fewer at a time", "n",
            )  # fmt: skip

    def cache_rows(self, decode: str = "auto") -> int:
        """Rows of KV cache a server may hold: ``max_batch``, and unless ``decode`` is ``"eager"`` one more cache
        for each power of two below it (the compiled step's batch keeps a cache for each size it has stepped,
        ``ContinuousBatch._bucket``)."""
        smaller = sum(1 << i for i in range(self.max_batch.bit_length()) if 1 << i < self.max_batch)
        return self.max_batch + (0 if decode == "eager" else smaller)

    def check(self, model, decode: str = "auto") -> None:
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
        cache = 2 * c.n_layers * self.cache_rows(decode) * self.capacity * c.d_model * element
        free = psutil.virtual_memory().available
        if cache > free // 2:
            raise AlilamaError(
                f"--max-batch {self.max_batch} rows of --max-prompt-tokens {self.max_prompt_tokens} + --max-tokens "
                f"{self.max_tokens} need a {cache / 2**30:.1f} GiB KV cache ({self.cache_rows(decode)} rows with "
                f"--decode {decode}), more than half of the {free / 2**30:.1f} GiB free; lower them"
            )


def encode_prompts(
    req, tokenizer, vocab_size: int, limits: Limits, chat: bool, template: str | None = None
) -> list[tuple[list[int], str | None]]:
    """Each prompt of ``req`` (a ``CompletionRequest``, or a ``ChatRequest`` under ``template``) as token ids
    within ``limits``, with its text when it came as text; ``RequestError`` names what is refused."""
    from alilama_core.engine.chat import chat_prompt

    if chat:
        try:
            texts: list = [chat_prompt(req.messages, template)]
        except AlilamaError as exc:  # the run's template: the server's fault, not the request's
            raise RequestError(str(exc), status=500, kind="server_error") from None
    else:
        texts = req.prompts
    limits.check_sequences(len(texts) * req.choices)  # before encoding what would be refused anyway
    out = []
    for text in texts:
        if isinstance(text, list):
            if max(text) >= vocab_size:
                raise RequestError(
                    f"prompt token {max(text)} is outside this model's ids 0..{vocab_size - 1}", "prompt"
                )
            ids, text = list(text), None
        else:
            try:
                ids = tokenizer.encode(text, allowed_special="all") if text else []
            except AlilamaError as exc:
                raise RequestError(f"the prompt cannot be encoded: {exc}", "prompt") from None
            ids = ids or ([tokenizer.eot_id] if tokenizer.eot_id is not None else [])
        if not ids:
            raise RequestError("the prompt is empty and the tokenizer has no end-of-text token", "prompt")
        if len(ids) > limits.max_prompt_tokens:
            raise RequestError(
                f"the prompt has {len(ids)} tokens; this server accepts at most {limits.max_prompt_tokens}",
                "prompt",
                status=413,
            )
        out.append((ids, text))
    return out


# -- the scheduler: one thread, one batch ----------------------------------------------------------


@dataclass
class Job:
    """One sequence to generate: its ``request``, and ``deliver``, called with each of its events.

    ``deliver`` runs on the scheduler's thread: hand the event over and return (``queue.Queue.put``, or
    ``loop.call_soon_threadsafe`` for asyncio).
    """

    request: Request
    deliver: Callable[[Event], Any]
    handle: int | None = None
    """Its sequence in the batch, once admitted."""
    cancelled: bool = False


class Scheduler(threading.Thread):
    """Admits waiting jobs into free rows, steps the batch, hands each event to its job's ``deliver``."""

    def __init__(
        self, model, eot_id: int | None, limits: Limits, capacity: int | None = None, decode: str = "auto"
    ) -> None:
        from alilama_core.engine.batching import ContinuousBatch

        super().__init__(name="alilama-scheduler", daemon=True)
        self.batch = ContinuousBatch(
            model, rows=limits.max_batch, capacity=capacity or limits.capacity, eot_id=eot_id, decode=decode
        )
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
        """Queue ``jobs`` for the batch, all or none: ``RequestError`` 400 for more than the queue holds, 429 when full."""
        self.limits.check_sequences(len(jobs))
        with self.lock:
            if self.pending + len(jobs) > self.limits.max_queue:
                raise RequestError("the server is busy: its queue is full; retry later", status=429, kind="server_busy")
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
        """Drop ``job``: out of the queue, or out of the batch at the next step (its row is freed)."""
        job.cancelled = True
        self.cancels.put(job)

    def stop(self) -> None:
        """End the thread after the step under way."""
        self.running = False

    def run(self) -> None:
        from alilama_core.engine.batching import Event

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
        while not self.cancels.empty():  # rows of vanished clients are freed before anyone is admitted
            job = self.cancels.get_nowait()
            if job.handle is not None:
                self.batch.leave(job.handle)
                self.jobs.pop(job.handle, None)
        admitted: list[Job] = []  # prefilled together: clients that arrive at once wait for one forward pass
        while self.waiting and len(admitted) < self.batch.free_rows:
            job = self.waiting.popleft()
            with self.lock:
                self.pending -= 1
            if job.cancelled:
                continue
            if job.request.settings.max_new_tokens == 0:  # echo of a prompt's scores, nothing generated: no row
                self._score(job)
            else:
                admitted.append(job)
        if admitted:
            self._admit(admitted)
        for event in self.batch.step():
            self._event(event)

    def _score(self, job: Job) -> None:
        """Answer ``job`` with its prompt's scores alone (``max_new_tokens == 0``)."""
        from alilama_core.engine.batching import Event, score_prompt

        try:
            scores = score_prompt(self.batch.model, job.request.prompt, job.request.logprobs or 0)
        except Exception as exc:
            self._fail(job, exc)
            return
        self._deliver(job, Event(-1, None, "length", prompt=scores))

    def _admit(self, jobs: list[Job]) -> None:
        """Start ``jobs`` in the batch, together; a failure answers its own job alone."""
        for job, result in zip(jobs, self.batch.join_many([job.request for job in jobs])):
            if isinstance(result, Exception):
                self._fail(job, result)
                continue
            job.handle, event = result
            self.jobs[job.handle] = job
            self._event(event)

    def _fail(self, job: Job, exc: Exception) -> None:
        from alilama_core.engine.batching import Event

        if not isinstance(exc, AlilamaError):
            traceback.print_exception(exc)
        self._deliver(job, Event(-1, None, "error", error=exc))

    def _event(self, event: Event) -> None:
        job = self.jobs.get(event.handle)
        if job is None:
            return
        if event.finish_reason is not None:
            self.jobs.pop(event.handle, None)
        self._deliver(job, event)

    @staticmethod
    def _deliver(job: Job, event: Event) -> None:
        job.deliver(event)


# -- one sequence's text -----------------------------------------------------------------------------


class Choice:
    """One sequence's text as its events arrive: bytes decoded incrementally, cut before the first stop string."""

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
        from alilama_core.engine.generation import token_bytes

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
