"""OpenAI's answers, built from the scheduler's events: response objects, server-sent events, error objects.

``Reply`` is the answer to one completions or chat request (``alilama_core.runs.serving``
routes it): each job's events become a ``Choice``'s text (``alilama_core.engine.scheduler``),
gathered into one ``text_completion`` or ``chat.completion`` object, or sent as
``data: {...}`` chunks ending with ``data: [DONE]``, with ``usage`` and, when
asked for, ``logprobs`` in OpenAI's two shapes (completions: ``tokens``,
``token_logprobs``, ``top_logprobs``, ``text_offset``; chat: ``content``
entries with ``bytes``). ``ApiError`` is what a client sees of any failure:
OpenAI's ``{"error": {"message", "type", "param", "code"}}`` with its status,
never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from alilama_core.base.errors import ConfigError
from alilama_core.engine.generation import token_bytes
from alilama_core.engine.requests import RequestError
from alilama_core.engine.scheduler import Choice, Job, Scheduler


class Answering(Protocol):
    """What a reply needs of the server it answers for (``runs.serving.Server``)."""

    model_id: str
    scheduler: Scheduler
    tokenizer: Any


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


@dataclass
class Reply:
    """The answer to one request: its choices, gathered whole or streamed as they come.

    ``server`` gives the tokenizer, the scheduler (a choice that ends at a stop string, or whose client went
    away, is cancelled there) and the model's name.
    """

    server: Answering
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
        if self.jobs[0].request.logprobs is None:
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
