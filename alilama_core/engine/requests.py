"""The OpenAI request bodies ``alilama serve`` takes, as typed models: every field honoured or refused.

``CompletionRequest`` (``POST /v1/completions``) and ``ChatRequest`` (``POST
/v1/chat/completions``) hold every field of OpenAI's request schemas, each of
one of three kinds (``SUPPORT``):

- ``implemented``: it does what OpenAI's API reference says (``echo``, ``logit_bias``,
  the penalties, ``seed``, ``logprobs``...);
- ``neutral only``: accepted at the values that change nothing (``best_of: 1``,
  ``suffix: ""``, ``response_format: {"type": "text"}``, ``tool_choice: "none"``),
  refused with a 400 naming the field otherwise, since this server cannot do it;
- ``extension``: not OpenAI's, as vLLM offers it (``top_k``, ``repetition_penalty``, ``ignore_eos``).

A field that is not in the schema is refused by name. Numbers are finite and in
their documented ranges, types strict (``"stream": "no"`` is not a boolean), so a
request that validates cannot fail later in the engine for its input::

    request = parse(CompletionRequest, {"prompt": "Once", "max_tokens": 8, "logit_bias": {"50": -100}})
    settings = request.sampling(default_max_tokens=256)

``field_table(CompletionRequest)`` prints the table ``docs/serving.md`` shows.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from alilama_core.base.errors import AlilamaError, ConfigError
from alilama_core.engine.generation import MAX_PENALTY, MAX_SEED, MIN_TEMPERATURE, SamplingSettings

IMPLEMENTED, NEUTRAL, EXTENSION = "implemented", "neutral only", "extension"
MAX_LOGPROBS = 20
"""The most alternatives per token a request may ask for (OpenAI: 5 for completions, 20 for chat)."""
MAX_STOPS = 4
MAX_JSON_DEPTH = 64
"""A request body nested deeper than this is refused before it is parsed."""


class RequestError(AlilamaError):
    """A request the server refuses: the client sees OpenAI's error object with ``status``, ``param`` and ``kind``
    (its ``type``: ``invalid_request_error``, or ``server_busy``, ``server_error``)."""

    def __init__(
        self, message: str, param: str | None = None, status: int = 400, kind: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.kind = message, param, status, kind


def _field(support: str, doc: str, default: Any = None, neutral: tuple = (), **bounds) -> Any:
    extra = {"support": support, "neutral": list(neutral)}
    return Field(default, description=doc, json_schema_extra=extra, **bounds)


def _implemented(doc: str, default: Any = None, **bounds) -> Any:
    return _field(IMPLEMENTED, doc, default, **bounds)


def _neutral(doc: str, *values: Any) -> Any:
    """A field accepted only at ``None`` or one of ``values`` (what changes nothing)."""
    return _field(NEUTRAL, doc, None, neutral=values)


def _extension(doc: str, default: Any = None, **bounds) -> Any:
    return _field(EXTENSION, doc, default, **bounds)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None
    """Accepted and without effect: the server's chunks carry no padding to remove."""


class _Request(_Strict):
    """The fields completions and chat share."""

    model: str | None = _implemented("Must be the served model's name (the run folder's), else 404.")
    temperature: float | None = _implemented(
        f"0 is greedy; otherwise at least {MIN_TEMPERATURE} (default 1).", ge=0, le=2
    )
    top_p: float | None = _implemented("Nucleus sampling: the smallest set of tokens reaching this mass.", gt=0, le=1)
    n: int | None = _implemented("Choices per prompt (choice i of a seeded request uses seed + i).", ge=1)
    stream: bool | None = _implemented("Server-sent events, ending with data: [DONE].")
    stream_options: StreamOptions | None = _implemented("include_usage: a last chunk with the usage (needs stream).")
    stop: Union[str, list[str], None] = _implemented(f"Up to {MAX_STOPS} strings; the text ends before the first.")
    seed: int | None = _implemented("Same seed, same settings, same text.", ge=0, le=MAX_SEED)
    presence_penalty: float | None = _implemented(
        "Subtracted from the logit of each token already generated.", ge=-MAX_PENALTY, le=MAX_PENALTY
    )
    frequency_penalty: float | None = _implemented(
        "Subtracted from a token's logit once per time it was generated.", ge=-MAX_PENALTY, le=MAX_PENALTY
    )
    logit_bias: dict[str, float] | None = _implemented(
        "Token id (as a string) to a bias in [-100, 100] added to its logit; -100 bans it."
    )
    user: str | None = _implemented("Accepted; it changes nothing in the answer.")
    top_k: int | None = _extension("Sample only among the k likeliest tokens.", ge=1)
    repetition_penalty: float | None = _extension("CTRL-style penalty on every token already seen (> 0).", gt=0)
    ignore_eos: bool | None = _extension("Go on past end-of-text up to max_tokens.")

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop):
        stops = [stop] if isinstance(stop, str) else stop
        if stops is not None and (not all(stops) or len(stops) > MAX_STOPS):
            raise ValueError(f"stop must be a non-empty string or a list of at most {MAX_STOPS} of them")
        return stop

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, bias):
        for key, value in (bias or {}).items():
            if not key.isdigit() or key != str(int(key)):
                raise ValueError(f'logit_bias keys are token ids written as strings, like "50256"; got {key!r}')
        return bias

    @model_validator(mode="after")
    def _checks(self):
        for name, info in type(self).model_fields.items():
            extra = info.json_schema_extra or {}
            value = getattr(self, name)
            if extra.get("support") == NEUTRAL and value is not None and value not in extra["neutral"]:
                raise RequestError(
                    f"{name}={json.dumps(_plain(value))} is not supported by this server "
                    f"(it accepts only {' or '.join(json.dumps(v) for v in extra['neutral'])}); leave it out",
                    name,
                )
        if self.stream_options is not None and not self.stream:
            raise RequestError("stream_options is only allowed with stream: true", "stream_options")
        try:  # the engine's own rules for the settings (one copy: SamplingSettings.validate)
            self.sampling(default_max_tokens=1).validate()
        except ConfigError as exc:
            name = str(exc).split(" ", 1)[0]
            raise RequestError(str(exc), name if name in type(self).model_fields else None) from None
        if self.seed is not None and self.seed + self.choices - 1 > MAX_SEED:
            raise RequestError(
                f"seed + n - 1 must be at most 2**63-1 (choice i uses seed + i), got {self.seed}", "seed"
            )
        return self

    # -- what the engine gets -------------------------------------------------------------------------

    @property
    def choices(self) -> int:
        return self.n or 1

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def new_tokens(self) -> int | None:
        """``max_tokens`` as asked (``None``: the server's default)."""
        return self.max_tokens  # type: ignore[attr-defined]

    def sampling(self, default_max_tokens: int) -> SamplingSettings:
        """The engine's settings for this request (``SamplingSettings.validate`` passes on them)."""
        asked = self.new_tokens()
        return SamplingSettings(
            max_new_tokens=default_max_tokens if asked is None else asked,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_k=self.top_k,
            top_p=None if self.top_p in (None, 1.0) else self.top_p,
            repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            logit_bias={int(k): v for k, v in (self.logit_bias or {}).items()},
            seed=self.seed,
        )

    def sampling_within(self, max_tokens: int, max_n: int, vocab_size: int) -> SamplingSettings:
        """``sampling(max_tokens)``, refused (``RequestError``) where it passes what one server allows:
        more than ``max_tokens`` new tokens, more than ``max_n`` choices, or token ids outside ``vocab_size``."""
        settings = self.sampling(max_tokens)
        if settings.max_new_tokens > max_tokens:
            raise RequestError(
                f"max_tokens is {settings.max_new_tokens}; this server allows at most {max_tokens}", "max_tokens"
            )
        if self.choices > max_n:
            raise RequestError(f"n is {self.choices}; this server allows at most {max_n}", "n")
        settings.validate(vocab_size)
        return settings


class CompletionRequest(_Request):
    """``POST /v1/completions``."""

    prompt: Any = _implemented(
        "A string, a list of strings, a list of token ids, or a list of such lists (one choice set each).", ""
    )
    max_tokens: int | None = _implemented("New tokens at most (0: with echo, score the prompt only).", ge=0)
    echo: bool | None = _implemented("The prompt before the completion; with logprobs, the prompt's too.")
    logprobs: int | None = _implemented(
        f"Each token's log-probability and this many likeliest alternatives (0 to {MAX_LOGPROBS}).",
        ge=0,
        le=MAX_LOGPROBS,
    )
    best_of: int | None = _neutral("Best of several completions on the server: not offered.", 1)
    suffix: str | None = _neutral("Insertion (text after the completion): not offered.", "")

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, prompt):
        """A list of prompts, each a string or a list of token ids."""
        if isinstance(prompt, str) or _ids(prompt):
            return [prompt]
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) or _ids(p) for p in prompt):
            return prompt
        raise ValueError(
            "prompt must be a string, a non-empty list of strings, a non-empty list of token ids (integers >= 0), "
            "or a list of such lists"
        )

    @model_validator(mode="after")
    def _zero(self):
        if self.max_tokens == 0 and not self.echo:
            raise RequestError(
                "max_tokens must be at least 1 (0 is allowed with echo, to score the prompt)", "max_tokens"
            )
        return self

    @property
    def prompts(self) -> list[str | list[int]]:
        return self.prompt


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class Message(_Strict):
    """One message of a chat: its role and its text (text parts only)."""

    role: Literal["system", "developer", "user", "assistant"]
    content: Union[str, list[TextPart], None] = None
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[Any] | None = None
    function_call: Any = None
    audio: Any = None
    annotations: list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _parts(cls, message):
        if not isinstance(message, dict):
            raise ValueError("a message must be an object with a role and a content")
        if message.get("role") in ("tool", "function"):
            raise RequestError(
                f"role {message['role']!r} needs tool calls, which this server does not make", "messages"
            )
        for j, part in enumerate(message.get("content") if isinstance(message.get("content"), list) else []):
            if isinstance(part, dict) and part.get("type") not in (None, "text"):
                raise RequestError(
                    f"content part {j} is of type {part['type']!r}; this model reads text parts only", "messages"
                )
        for name in ("tool_calls", "function_call", "audio"):
            if message.get(name):
                raise RequestError(f"a message with {name} is not supported by this server", "messages")
        return message

    @model_validator(mode="after")
    def _content(self):
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs a content")
        return self

    @property
    def text(self) -> str:
        content = self.content or ""
        return content if isinstance(content, str) else "".join(part.text for part in content)


class ChatRequest(_Request):
    """``POST /v1/chat/completions``."""

    messages: list[Message] = _implemented("The conversation, rendered by the run's chat template.", min_length=1)
    max_tokens: int | None = _implemented("New tokens at most (deprecated name of max_completion_tokens).", ge=1)
    max_completion_tokens: int | None = _implemented("New tokens at most.", ge=1)
    logprobs: bool | None = _implemented("Each generated token's log-probability.")
    top_logprobs: int | None = _implemented(
        f"With logprobs: this many likeliest alternatives (0 to {MAX_LOGPROBS}).", ge=0, le=MAX_LOGPROBS
    )
    response_format: dict[str, Any] | None = _neutral("Only plain text is made.", {"type": "text"})
    tools: list[Any] | None = _neutral("This model calls no tools.", [])
    tool_choice: Union[str, dict[str, Any], None] = _neutral("This model calls no tools.", "none", "auto")
    parallel_tool_calls: bool | None = _implemented("Accepted; no tools are called.")
    functions: list[Any] | None = _neutral("This model calls no functions.", [])
    function_call: Union[str, dict[str, Any], None] = _neutral("This model calls no functions.", "none", "auto")
    modalities: list[str] | None = _neutral("Only text is made.", ["text"])
    audio: dict[str, Any] | None = _neutral("No audio is made.")
    prediction: dict[str, Any] | None = _neutral("Predicted outputs are not used.")
    reasoning_effort: str | None = _neutral("This model does not reason apart from its answer.")
    verbosity: str | None = _neutral("Not offered.")
    web_search_options: dict[str, Any] | None = _neutral("This server does not search.")
    store: bool | None = _neutral("This server stores nothing.", False)
    metadata: dict[str, str] | None = _implemented("Accepted; it changes nothing in the answer.")
    service_tier: str | None = _neutral("One tier only.", "auto", "default")
    safety_identifier: str | None = _implemented("Accepted; it changes nothing in the answer.")
    prompt_cache_key: str | None = _implemented("Accepted; it changes nothing in the answer.")

    @model_validator(mode="after")
    def _chat(self):
        if self.top_logprobs is not None and not self.logprobs:
            raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")
        both = (self.max_tokens, self.max_completion_tokens)
        if None not in both and both[0] != both[1]:
            raise RequestError("give max_completion_tokens or max_tokens, not two different values", "max_tokens")
        return self

    def new_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def alternatives(self) -> int | None:
        """How many alternatives per token (``None``: no log-probabilities)."""
        return (self.top_logprobs or 0) if self.logprobs else None


class TapeRequest(_Strict):
    """``POST /v1/alilama/tape`` (the playground's): the text whose tape is drawn."""

    text: Any = Field(None, validate_default=True, description="The text to read: a non-empty string.")

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, text):
        if not isinstance(text, str) or not text:
            raise ValueError("text must be a non-empty string")
        return text


def _ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    )


def _type_name(part: str) -> bool:
    """Whether a part of a pydantic error location names a type (a union's branch), not a field."""
    return part in ("str", "int", "float", "bool", "none") or "[" in part or part[:1].isupper()


def _plain(value: Any) -> Any:
    return value.model_dump(exclude_none=True) if isinstance(value, BaseModel) else value


# -- parsing ---------------------------------------------------------------------------------------


def json_depth_ok(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``raw`` nests arrays and objects at most ``limit`` deep (strings are skipped).

    A body with no more than ``limit`` opening brackets in all cannot nest deeper, so most bodies are
    answered by two byte counts; only the others are walked byte by byte.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return True
    depth, inside, escaped = 0, False, False
    for byte in raw:
        if inside:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                inside = False
        elif byte == 0x22:
            inside = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True


def read_body(raw: bytes) -> dict:
    """A request body as a JSON object, or ``RequestError``: not JSON, too deep, not an object."""
    if not json_depth_ok(raw):
        raise RequestError(f"the request body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise RequestError("the request body must be a JSON object") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


def parse(kind: type[BaseModel], body: dict) -> Any:
    """``kind`` validated from ``body``, or ``RequestError`` saying what is wrong with which field."""
    try:
        return kind.model_validate(body)
    except RequestError:
        raise
    except ValidationError as exc:
        raise _explained(kind, exc) from None


_MUST = {
    "finite_number": "a finite number",
    "float_type": "a number",
    "float_parsing": "a number",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "bool_type": "true or false",
    "string_type": "a string",
    "model_type": "an object",
    "dict_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "a list",
}
"""What a value must be, by pydantic's error type."""


def _explained(kind: type[BaseModel], exc: ValidationError) -> RequestError:
    error = max(exc.errors(include_url=False), key=lambda e: len(e["loc"]))  # a union's deepest branch
    loc = [str(part) for part in error["loc"] if not _type_name(str(part))]
    name = loc[0] if loc else None
    where = ".".join(loc) or "the body"
    value, kind_of = error.get("input"), error["type"]
    info = kind.model_fields.get(name) if name else None
    bounds = {}
    for meta in info.metadata if info is not None and len(loc) == 1 else []:
        for key in ("ge", "gt", "le", "lt"):
            if getattr(meta, key, None) is not None:
                bounds[key] = getattr(meta, key)
    shown = json.dumps(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
    if kind_of == "extra_forbidden":
        return RequestError(f"{where} is not a field of this request; remove it (see docs/serving.md)", name)
    if kind_of == "missing":
        return RequestError(f"{where} is required", name)
    if kind_of in _MUST:
        return RequestError(f"{where} must be {_MUST[kind_of]}, got {shown}", name)
    if kind_of in ("greater_than_equal", "greater_than", "less_than_equal", "less_than") and bounds:
        low = bounds.get("ge", bounds.get("gt"))
        high = bounds.get("le", bounds.get("lt"))
        if low is not None and high is not None:
            return RequestError(f"{where} must be between {low} and {high}, got {shown}", name)
        if low is not None:
            return RequestError(
                f"{where} must be {'greater than' if 'gt' in bounds else 'at least'} {low}, got {shown}", name
            )
        return RequestError(f"{where} must be at most {high}, got {shown}", name)
    if kind_of == "too_short":
        return RequestError(f"{where} must not be empty", name)
    if kind_of == "literal_error":
        return RequestError(f"{where} must be one of {error['ctx']['expected']}, got {shown}", name)
    if kind_of == "value_error":
        message = error["msg"].removeprefix("Value error, ")
        return RequestError(message if message.startswith(where) else f"{where}: {message}", name)
    return RequestError(f"{where}: {error['msg']}", name)


# -- the table in docs/serving.md ------------------------------------------------------------------


def field_table(kind: type[_Request]) -> str:
    """A Markdown table of ``kind``'s fields: name, what the server does with it, and how."""
    rows = ["| field | support | what it does here |", "|---|---|---|"]
    for name, info in sorted(kind.model_fields.items(), key=lambda item: (_order(item[1]), item[0])):
        extra = info.json_schema_extra or {}
        support = extra["support"]
        if support == NEUTRAL:
            values = ", ".join(f"`{json.dumps(v)}`" for v in extra["neutral"])
            support = f"neutral only ({values or '`null`'}); else 400"
        rows.append(f"| `{name}` | {support} | {info.description} |")
    return "\n".join(rows)


def _order(info) -> int:
    return [IMPLEMENTED, EXTENSION, NEUTRAL].index((info.json_schema_extra or {})["support"])
