"""Sampling with a KV cache: greedy, temperature, top-k, top-p, repetition penalty.

Prompts of different lengths are left-padded and masked, so a batch gives the
same tokens as generating each prompt alone. Generation stops per row at the
end-of-text token, at a stop string, or after ``max_new_tokens``::

    settings = SamplingSettings(max_new_tokens=50, temperature=0.8, top_k=40, seed=0)
    ids = generate(model, [tok.encode("Once upon a time")], settings, eot_id=tok.eot_id)

``stream_text`` yields decoded text as it is produced, never a broken character.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from alilama_core.base.errors import ConfigError
from alilama_core.engine.cache import KVCache, StaticCache, left_pad, row_positions
from alilama_core.engine.decode import capacity_for, check_choice, decode_step, step_width
from alilama_core.engine.model import GPT


MIN_TEMPERATURE = 1e-5
"""The smallest temperature that samples (0 is greedy): below it a float32 division by it is no number."""
MAX_SEED = 2**63 - 1
"""Seeds are 0..MAX_SEED (a torch generator takes 64 bits; a signed one is what every caller can hold)."""
MAX_PENALTY = 2.0
"""``presence_penalty`` and ``frequency_penalty`` lie in [-MAX_PENALTY, MAX_PENALTY] (OpenAI's range)."""
MAX_LOGIT_BIAS = 100.0
"""A ``logit_bias`` value lies in [-MAX_LOGIT_BIAS, MAX_LOGIT_BIAS]: -100 bans a token, 100 forces it."""


@dataclass
class SamplingSettings:
    max_new_tokens: int = 100
    temperature: float = 1.0
    """Logits are divided by it; 0 means greedy, otherwise at least ``MIN_TEMPERATURE``."""
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    """CTRL-style: logits of tokens already in the sequence are divided (if > 0) or multiplied by it."""
    presence_penalty: float = 0.0
    """Subtracted once from the logit of every token already generated (OpenAI's ``presence_penalty``)."""
    frequency_penalty: float = 0.0
    """Subtracted from a token's logit once per time it was already generated (OpenAI's ``frequency_penalty``)."""
    logit_bias: dict[int, float] = field(default_factory=dict)
    """Added to the logits of these token ids before sampling, greedy included (OpenAI's ``logit_bias``)."""
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    use_cache: bool = True
    decode: str = "auto"
    """How decode steps run: ``"eager"`` (``GPT.forward`` on a growing cache), ``"compiled"`` (one compiled
    step on a static cache, built once per model and batch size: ``alilama_core.engine.decode``) or ``"auto"``
    (compiled when it is ready without compiling, else eager). Every choice gives the same tokens."""

    def validate(self, vocab_size: int | None = None) -> "SamplingSettings":
        """Every setting in its range, or ``ConfigError`` naming it (``vocab_size``: also the logit_bias ids)."""
        for name in ("temperature", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value}")
        if self.max_new_tokens < 0:
            raise ConfigError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.temperature < 0 or 0 < self.temperature < MIN_TEMPERATURE:
            raise ConfigError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty is not None and self.repetition_penalty <= 0:
            raise ConfigError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -MAX_PENALTY <= getattr(self, name) <= MAX_PENALTY:
                raise ConfigError(f"{name} must be between {-MAX_PENALTY} and {MAX_PENALTY}, got {getattr(self, name)}")
        for token, bias in self.logit_bias.items():
            if token < 0 or (vocab_size is not None and token >= vocab_size):
                raise ConfigError(f"logit_bias names token {token}; this model's ids are 0..{(vocab_size or 1) - 1}")
            if not math.isfinite(bias) or abs(bias) > MAX_LOGIT_BIAS:
                raise ConfigError(f"logit_bias values must be between -100 and 100, got {bias} for token {token}")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"seed must be between 0 and 2**63-1, got {self.seed}")
        check_choice(self.decode)
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ConfigError("a stop string must not be empty (it would stop before the first token); drop --stop ''")
        return self

    @property
    def penalised(self) -> bool:
        """Whether sampling needs the tokens generated so far (presence or frequency penalty)."""
        return bool(self.presence_penalty or self.frequency_penalty)

    @property
    def plain(self) -> bool:
        """Whether nothing changes the logits before the temperature (no ``logit_bias``, no penalty): such a row's
        token depends on its own logits and settings alone."""
        return not (self.logit_bias or self.repetition_penalty or self.penalised)


def next_token(
    logits: Tensor, settings: SamplingSettings, history: Tensor | None, generator, generated: Tensor | None = None
) -> Tensor:
    """Pick one token per row from ``(B, V)`` logits.

    ``history`` (``(B, S)``, prompt and output) feeds the repetition penalty; ``generated`` (``(B, G)``,
    the output alone) the presence and frequency penalties, as vLLM applies OpenAI's. In order:
    ``logit_bias``, the penalties, then greedy, or temperature, top-k, top-p and a draw.
    """
    logits = logits.float()
    if settings.logit_bias:
        ids = torch.tensor(list(settings.logit_bias), dtype=torch.long, device=logits.device)
        bias = torch.tensor(list(settings.logit_bias.values()), dtype=logits.dtype, device=logits.device)
        logits = logits.index_add(1, ids, bias.expand(logits.size(0), -1))
    if settings.repetition_penalty and history is not None and history.numel():
        seen = torch.gather(logits, 1, history)  # (B, S)
        penalised = torch.where(seen > 0, seen / settings.repetition_penalty, seen * settings.repetition_penalty)
        logits = logits.scatter(1, history, penalised)
    if settings.penalised and generated is not None and generated.numel():
        counts = torch.zeros_like(logits).scatter_add_(1, generated, torch.ones_like(generated, dtype=logits.dtype))
        logits = logits - counts * settings.frequency_penalty - (counts > 0) * settings.presence_penalty  # (B, V)
    if settings.temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    probs = sampling_probs(logits, settings)  # (B, V)
    return draw(probs, torch.rand(probs.size(0), 1, generator=generator, device=probs.device))  # (B,)


def draw(probs: Tensor, uniform: Tensor) -> Tensor:
    """One token per row of ``probs`` ``(B, V)`` by inverse transform sampling with ``uniform`` ``(B, 1)`` in [0, 1).

    The first id whose cumulative probability exceeds ``uniform`` (scaled to the row's total), so an id of
    probability 0 is never drawn. One uniform number per row is all a draw takes from a generator, so rows
    that sample with generators of their own (a server's sequences) draw them one by one and share the rest
    (``torch.multinomial`` would draw a number per id of the vocabulary, row by row). ``RuntimeError`` for a
    row whose probabilities are not finite and positive.
    """
    tokens, fine = draw_rows(probs, uniform)
    if not bool(fine.all()):
        raise RuntimeError(NOT_PROBABILITIES)
    return tokens


NOT_PROBABILITIES = "the sampling probabilities are not finite and positive (a NaN or inf in the logits)"


def draw_rows(probs: Tensor, uniform: Tensor) -> tuple[Tensor, Tensor]:
    """``draw`` without the check: each row's token ``(B,)`` and whether its probabilities were finite and
    positive ``(B,)`` (a row that was not gets an arbitrary id). Each row's token is the one it draws alone."""
    cdf = probs.cumsum(dim=-1)  # (B, V)
    total = cdf[:, -1:]  # (B, 1)
    fine = ((total > 0) & torch.isfinite(total))[:, 0] & ~(probs < 0).any(dim=-1)  # (B,)
    tokens = torch.searchsorted(cdf, uniform.to(cdf.dtype) * total, right=True).clamp_(max=probs.size(-1) - 1)
    return tokens[:, 0], fine


def sampling_probs(logits: Tensor, settings: SamplingSettings) -> Tensor:
    """The probabilities ``(B, V)`` that ``next_token`` draws from: float ``logits`` (after the bias and the
    penalties) under ``settings``' temperature (> 0), top-k and top-p, each row on its own."""
    # the largest logit becomes 0 first, so a small temperature sends the rest to -inf, never to a NaN
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / settings.temperature
    if settings.top_k is not None and settings.top_k < logits.size(-1):
        kth = torch.topk(logits, settings.top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if settings.top_p is not None and settings.top_p < 1:
        logits = nucleus(logits, settings.top_p)
    return logits.softmax(dim=-1)  # (B, V)


NUCLEUS_FIRST = 64
"""How many of the likeliest ids ``nucleus`` looks at first (four times as many each time the cut lies beyond)."""


def nucleus(logits: Tensor, top_p: float) -> Tensor:
    """``logits`` ``(B, V)`` at ``-inf`` outside each row's nucleus: the smallest set of likeliest ids whose
    probability reaches ``top_p`` (an id is kept when the ids likelier than it hold at most ``top_p``).

    The cut lies among the first few likeliest ids for any distribution a model samples from, so they are
    found with ``topk`` rather than by sorting the whole vocabulary, and more are taken only while the cut
    of some row lies beyond them: the kept set is the one a full sort keeps (an id whose preceding mass equals
    ``top_p`` to the last bit may fall either side, as the sums' rounding goes).
    """
    probs = logits.softmax(dim=-1)  # (B, V)
    vocab = logits.size(-1)
    k = min(vocab, NUCLEUS_FIRST)
    while True:
        top, order = probs.topk(k, dim=-1)  # (B, k), likeliest first
        drop = top.cumsum(dim=-1) - top > top_p  # (B, k)
        if k == vocab or bool(drop[:, -1].all()):  # every row's cut is inside: the ids after k are dropped too
            break
        k = min(vocab, 4 * k)
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, order, ~drop)
    return logits.masked_fill(~keep, float("-inf"))


@torch.no_grad()
def generate_stream(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    settings: SamplingSettings,
    eot_id: int | None = None,
) -> Iterator[Tensor]:
    """Yield the next token of every row, ``(B,)``, until all rows are finished.

    Rows that have finished keep yielding ``eot_id`` (or their last token);
    ``generate`` trims them.
    """
    settings.validate(model.config.vocab_size)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ConfigError("every prompt needs at least one token (encode an empty prompt as the EOT token)")
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, eot_id if eot_id is not None else 0, device)
    padded = not bool(mask.all())
    generator = torch.Generator(device=device)
    if settings.seed is not None:
        generator.manual_seed(settings.seed)
    else:
        generator.seed()
    B, width = ids.shape
    steps = settings.max_new_tokens
    room = position_room(model, width)
    if room is not None:  # a bounded position table (learned): stop at its end
        if room < 1:
            raise ConfigError(
                f"the prompt has {width} tokens but positional scheme {model.config.positional!r} covers "
                f"{model.positional.max_positions} positions; shorten the prompt"
            )
        steps = min(steps, room)
    total = width + steps
    # Everything that grows is preallocated: tokens, key mask, cache; each step writes in place.
    seq = torch.empty(B, total, dtype=torch.long, device=device)
    seq[:, :width] = ids
    seq_mask = torch.ones(B, total, dtype=torch.bool, device=device)
    seq_mask[:, :width] = mask
    positions = row_positions(mask) if padded else None  # (B, W)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    step = decode_step(model, settings.decode) if settings.use_cache and steps > 1 else None
    if step is not None:
        yield from _compiled_stream(model, step, seq, seq_mask, positions, width, steps, settings, generator, eot_id)
        return
    cache = KVCache(capacity=total) if settings.use_cache else None
    step_input = ids
    length = width
    for _ in range(steps):
        if cache is None:
            step_input = seq[:, :length]
            if padded:
                positions = row_positions(seq_mask[:, :length])
        logits = model(
            step_input,
            cache=cache,
            key_padding_mask=seq_mask[:, :length] if padded else None,
            position_ids=positions,
            logits_to_keep=1,
        )[:, -1]  # (B, V)
        history = seq[:, :length] if settings.repetition_penalty else None
        generated = seq[:, width:length] if settings.penalised else None
        token = next_token(logits, settings, history, generator, generated)  # (B,)
        if eot_id is not None:
            token = torch.where(done, torch.full_like(token, eot_id), token)
            done |= token == eot_id
        yield token
        if eot_id is not None and bool(done.all()):
            return
        seq[:, length] = token
        length += 1
        step_input = seq[:, length - 1 : length]  # (B, 1)
        if padded and cache is not None:
            positions = positions[:, -1:] + 1  # (B, 1) the next position of each row


def _compiled_stream(
    model: GPT,
    step,
    seq: Tensor,
    seq_mask: Tensor,
    positions: Tensor | None,
    width: int,
    steps: int,
    settings: SamplingSettings,
    generator,
    eot_id: int | None,
) -> Iterator[Tensor]:
    """``generate_stream``'s loop with the prompt prefilled into a ``StaticCache`` and a compiled step after it."""
    B, total = seq.shape
    device = seq.device
    padded = positions is not None
    cache = StaticCache.for_model(model, B, capacity_for(model, total))
    visible = torch.ones(B, cache.capacity, dtype=torch.bool, device=device)  # (B, N): False on padding
    visible[:, :total] = seq_mask
    logits = model(
        seq[:, :width],
        cache=cache.kv_cache(),
        key_padding_mask=seq_mask[:, :width] if padded else None,
        position_ids=positions,
        logits_to_keep=1,
    )[:, -1]  # (B, V): the prompt in one call
    column = torch.tensor([width], device=device)  # (1,) where the next token's keys go
    position = positions[:, -1:] + 1 if padded else torch.full((B, 1), width, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    greedy = settings.temperature == 0 and settings.plain
    for length in range(width, width + steps):
        if greedy:
            token = logits.argmax(dim=-1)  # (B,) what next_token gives for these settings, without its checks
        else:
            history = seq[:, :length] if settings.repetition_penalty else None
            generated = seq[:, width:length] if settings.penalised else None
            token = next_token(logits, settings, history, generator, generated)  # (B,)
        if eot_id is not None:
            token = torch.where(done, torch.full_like(token, eot_id), token)
            done |= token == eot_id
        yield token
        if length + 1 == width + steps or (eot_id is not None and bool(done.all())):
            return
        seq[:, length] = token
        w = step_width(model, length, cache.capacity)  # the filled columns: what the eager path attends to
        logits, keys, values = step(token[:, None], column, position, visible[:, :w].contiguous(), *cache.buffers())
        cache.write(column, keys, values)
        column += 1
        position += 1


def position_room(model: GPT, prompt_tokens: int) -> int | None:
    """New tokens that still get a position after a prompt of ``prompt_tokens`` (``None``: no limit).

    A scheme with a bounded table (learned positions) covers ``max_positions``;
    generation stops at its end rather than failing.
    """
    limit = model.positional.max_positions
    return None if limit is None else limit - prompt_tokens + 1


def generate(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    settings: SamplingSettings | None = None,
    eot_id: int | None = None,
    decode: Callable[[list[int]], str] | None = None,
) -> list[list[int]]:
    """New token ids per prompt, without the prompt, cut at EOT (kept out) or a stop string."""
    settings = settings or SamplingSettings()
    rows: list[list[int]] = [[] for _ in prompts]
    finished = [False] * len(prompts)
    for tokens in generate_stream(model, prompts, settings, eot_id):
        for row, token in enumerate(tokens.tolist()):
            if finished[row]:
                continue
            if token == eot_id:
                finished[row] = True
                continue
            rows[row].append(token)
            if settings.stop and decode is not None and _hit_stop(decode(rows[row]), settings.stop):
                finished[row] = True
        if all(finished):
            break
    if settings.stop and decode is not None:
        rows = [_trim_to_stop(row, decode, settings.stop) for row in rows]
    return rows


def _hit_stop(text: str, stops: list[str]) -> bool:
    return any(s in text for s in stops)


def _trim_to_stop(row: list[int], decode: Callable[[list[int]], str], stops: list[str]) -> list[int]:
    """Shortest prefix of ``row`` whose text contains a stop string (the whole row if none)."""
    for n in range(1, len(row) + 1):
        if _hit_stop(decode(row[:n]), stops):
            return row[:n]
    return row


UNSPELLABLE = "\ufffd".encode()
"""What an id the tokenizer cannot spell shows as (U+FFFD): a model wider than its tokenizer can sample one."""


def token_bytes(tokenizer, token: int) -> bytes:
    """The bytes of ``token``, or ``UNSPELLABLE`` for an id past the tokenizer's vocabulary."""
    return tokenizer.decode_bytes([token]) if token < tokenizer.vocab_size else UNSPELLABLE


def decode_stream(tokenizer, ids: Iterator[int]) -> Iterator[str]:
    """Text pieces for a stream of ids; a character split over tokens waits for its last byte.

    >>> list(decode_stream(tok, iter(tok.encode("héllo"))))   # doctest: +SKIP
    ['h', 'é', 'llo']
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for token in ids:
        piece = decoder.decode(token_bytes(tokenizer, token))
        if piece:
            yield piece
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail


def stream_text(
    model: GPT,
    tokenizer,
    prompt: str,
    settings: SamplingSettings | None = None,
) -> Iterator[str]:
    """Yield text pieces as tokens are sampled; multi-byte characters are never split.

    Stops at the end-of-text token or when a stop string appears; the text
    yielded then ends right after the stop string.
    """
    settings = settings or SamplingSettings()
    eot = tokenizer.eot_id
    prompt_ids = tokenizer.encode(prompt, allowed_special="all") if prompt else []
    if not prompt_ids:
        if eot is None:
            raise ConfigError("an empty prompt needs a tokenizer with an <|endoftext|> token")
        prompt_ids = [eot]

    def tokens() -> Iterator[int]:
        for step in generate_stream(model, [prompt_ids], settings, eot):
            token = int(step[0])
            if token == eot:
                return
            yield token

    text = ""
    for piece in decode_stream(tokenizer, tokens()):
        if settings.stop:
            combined = text + piece
            ends = [combined.find(s) + len(s) for s in settings.stop if s in combined]
            if ends:
                yield combined[len(text) : min(ends)]
                return
            text = combined
        yield piece


def generate_text(run, prompt: str, settings: SamplingSettings | None = None) -> str:
    """The continuation of ``prompt`` by a loaded ``Run`` (``alilama_core.load_run``), as text."""
    return "".join(stream_text(run.model, run.tokenizer, prompt, settings))
