"""Continuous batching: sequences join and leave a running batch between decode steps.

One forward pass per decode step serves every sequence in the batch, so many
clients cost little more than one. A sequence that joins is prefilled (its
prompt through the model into a cache of its own; sequences that join together,
``join_many``, in one left-padded forward pass), its first token is sampled,
and its keys and values are placed in a free row of the batch's
``KVCache`` so that they end where the other rows' end: rows are left-padded,
the padding masked (``key_padding_mask``), and each row carries its own
position ids, as ``generate_stream`` does for a padded batch. A sequence that
ends (end-of-text, its ``max_new_tokens``, the end of a bounded position
table) or is dropped by its caller (``leave``: a client went away) frees its
row at once; the next ``join`` takes it.

With the compiled decode step (``decode``, ``alilama_core.engine.decode``) the
batch's static cache holds as many rows as the next power of two above the
sequences in it (at most ``rows``): a step computes those rows alone, so one
client costs a one-row step, not a ``rows``-row one. The cache moves to more
rows when a sequence joins a full one and to fewer when sequences leave, the
live rows packed first (``StaticCache.move_rows``; each size's cache is kept for
the next time); one package serves every size.

The batch's cache is ``capacity`` positions wide. Each step adds one column
for every row; when the columns run out, the ones no live row still uses are
dropped from the left. A sequence longer than ``capacity`` ends with
``"length"``.

Each sequence samples with its own ``SamplingSettings`` and its own seeded
generator, through the one ``next_token`` of ``generate``, so a sequence's
tokens do not depend on who else is in the batch: greedy and seeded sampling
give what ``generate`` gives for that prompt alone (the tests hold both).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from alilama_core.base.errors import ConfigError
from alilama_core.engine.cache import KVCache, StaticCache, left_pad, row_positions
from alilama_core.engine.decode import capacity_for, check_choice, decode_step, step_width
from alilama_core.engine.generation import (
    NOT_PROBABILITIES,
    SamplingSettings,
    draw_rows,
    next_token,
    position_room,
    sampling_probs,
)
from alilama_core.engine.model import GPT
from alilama_core.engine.request import Request


@dataclass
class Sequence:
    """One sequence in the batch: its row, its request and what it has made so far."""

    handle: int
    row: int
    request: Request
    generator: torch.Generator
    limit: int
    """How many new tokens it may make: ``max_new_tokens``, or fewer where the position table ends."""
    new: list[int] = field(default_factory=list)
    pending: int | None = None
    """The token sampled last, fed to the model at the next step."""


def prefill_groups(requests: list[Request], indices: list[int]) -> list[list[int]]:
    """Which of ``requests`` (by index) are prefilled together: by length, a group's padding never more than its
    tokens; a request that scores its prompt alone (all its positions' logits are kept)."""
    groups: list[list[int]] = [[i] for i in indices if requests[i].scored]
    group: list[int] = []
    tokens = 0
    for i in sorted((i for i in indices if not requests[i].scored), key=lambda i: len(requests[i].prompt)):
        n = len(requests[i].prompt)  # the longest so far: the group's width
        if group and n * (len(group) + 1) > 2 * (tokens + n):
            groups.append(group)
            group, tokens = [], 0
        group.append(i)
        tokens += n
    return groups + ([group] if group else [])


@dataclass
class Event:
    """What one sequence did at a step: a new ``token`` (``None`` at end-of-text) and, when it ended, why."""

    handle: int
    token: int | None
    finish_reason: str | None = None
    """``None`` while it goes on; ``"stop"`` at end-of-text; ``"length"`` at its token limit."""
    logprob: float | None = None
    """The token's log-probability under the model (before temperature, top-k and top-p), if asked for."""
    top: list[tuple[int, float]] | None = None
    """The likeliest tokens and their log-probabilities, if asked for."""
    prompt: list[TokenScore] | None = None
    """On a sequence's first event, when ``join`` was asked to ``echo``: the prompt's own scores."""
    error: Exception | None = None
    """Why a sequence failed (``finish_reason == "error"``); the other sequences go on."""


@dataclass
class TokenScore:
    """One token of a text and its log-probability under the model given what came before it."""

    token: int
    logprob: float | None
    """``None`` for a text's first token: nothing came before it."""
    top: list[tuple[int, float]]
    """The ``k`` likeliest tokens at that place and their log-probabilities (empty for the first token)."""


def score_tokens(logits: Tensor, ids: list[int], top: int) -> list[TokenScore]:
    """Each of ``ids`` scored by ``(T, V)`` logits of the same text (row ``t`` predicts ``ids[t + 1]``).

    >>> [s.logprob for s in score_tokens(torch.zeros(3, 4), [1, 2, 3], 0)]   # a uniform model over 4 ids
    [None, -1.3862943649291992, -1.3862943649291992]
    """
    logp = logits[: len(ids) - 1].float().log_softmax(-1)  # (T-1, V): what each token saw before it
    after = torch.tensor(ids[1:], dtype=torch.long, device=logp.device)
    own = logp.gather(1, after[:, None])[:, 0].tolist()  # (T-1,)
    values, indices = logp.topk(top, dim=-1) if top else (logp[:, :0], logp[:, :0].long())  # (T-1, top)
    best = [list(zip(i, v)) for i, v in zip(indices.tolist(), values.tolist())]
    return [TokenScore(ids[0], None, [])] + [TokenScore(t, lp, b) for t, lp, b in zip(ids[1:], own, best)]


@torch.no_grad()
def score_prompt(model: GPT, ids: list[int], top: int) -> list[TokenScore]:
    """The log-probability of each token of ``ids`` after the ones before it (one forward pass)."""
    device = next(model.parameters()).device
    return score_tokens(model(torch.tensor([ids], dtype=torch.long, device=device))[0], ids, top)


def _plain_greedy(settings: SamplingSettings) -> bool:
    """Greedy, and nothing changes the logits first: the token is the row's ``argmax``."""
    return settings.temperature == 0 and settings.plain


class ContinuousBatch:
    """A running batch of up to ``rows`` sequences over one model (see the module doc)."""

    def __init__(
        self, model: GPT, rows: int = 8, capacity: int = 1024, eot_id: int | None = None, decode: str = "auto"
    ) -> None:
        if rows < 1 or capacity < 2:
            raise ConfigError(f"a batch needs rows >= 1 and capacity >= 2, got rows={rows}, capacity={capacity}")
        self.model, self.rows, self.capacity, self.eot_id = model, rows, capacity, eot_id
        self.device = next(model.parameters()).device
        self.cache = KVCache()
        self.reserved = False
        self.compiled = decode_step(model, check_choice(decode))
        """The compiled step (``engine.decode``) over the static cache's rows, or ``None``: ``GPT.forward`` over
        the rows in use."""
        self.static: StaticCache | None = None
        if self.compiled is not None:  # every column allocated once; rows as the sequences need (``_regroup``)
            self.static = StaticCache.for_model(model, 1, capacity_for(model, capacity))
            self._statics = {1: self.static}  # a cache per number of rows, allocated at its first use
            self.cache = self.static.kv_cache()
            self.reserved = True
        self.mask = torch.zeros(rows, capacity, dtype=torch.bool, device=self.device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.length = 0
        """Columns of the cache in use (the same for every row)."""
        self.live: dict[int, Sequence] = {}
        self._next_handle = 0

    def __len__(self) -> int:
        return len(self.live)

    @property
    def free_rows(self) -> int:
        return self.rows - len(self.live)

    def join(
        self,
        prompt: list[int],
        settings: SamplingSettings,
        logprobs: int | None = None,
        ignore_eos: bool = False,
        echo: bool = False,
    ) -> tuple[int, Event]:
        """Add a sequence: prefill ``prompt``, sample its first token; ``(handle, that first event)``.

        ``join_many`` of one ``Request`` (``alilama_core.engine.request``: what ``logprobs``, ``ignore_eos`` and
        ``echo`` ask for), its refusal raised. Nothing is changed when it fails.
        """
        (result,) = self.join_many([Request(list(prompt), settings, logprobs, ignore_eos, echo)])
        if isinstance(result, Exception):
            raise result
        return result

    @torch.no_grad()
    def join_many(self, requests: list[Request]) -> list[tuple[int, Event] | Exception]:
        """Add a sequence for each of ``requests`` at once, their prompts prefilled together (``prefill_groups``).

        One result per request, in order: ``(handle, first event)``, or the exception that refused that request
        alone (a bad prompt or settings, no free row), the others joining all the same. Many clients that
        arrive together wait for one forward pass over their prompts, not one each.
        """
        results: list[tuple[int, Event] | Exception | None] = [None] * len(requests)
        rooms: dict[int, int | None] = {}
        for i, request in enumerate(requests):
            try:
                if len(rooms) == self.free_rows:
                    raise ConfigError(f"the batch is full ({self.rows} rows); wait for a sequence to end")
                rooms[i] = self._room(request)
            except Exception as exc:
                results[i] = exc
        for group in prefill_groups(requests, list(rooms)):
            try:
                own, logits = self._prefill([requests[i] for i in group])
            except Exception as exc:
                if len(group) == 1:
                    results[group[0]] = exc
                    continue
                for i in group:  # each alone: a failure is its own request's
                    results[i] = self.join_many([requests[i]])[0]
                continue
            for r, i in enumerate(group):
                results[i] = self._start(requests[i], rooms[i], own, r, logits[r])
        return results  # type: ignore[return-value]

    def _room(self, request: Request) -> int | None:
        """Refuse a request this batch cannot take; the room its positional scheme leaves after the prompt."""
        prompt, settings = request.prompt, request.settings
        settings.validate(self.model.config.vocab_size)
        if any(not 0 <= t < self.model.config.vocab_size for t in prompt):
            raise ConfigError(f"a prompt token id is outside this model's 0..{self.model.config.vocab_size - 1}")
        if not prompt:
            raise ConfigError("a prompt needs at least one token (encode an empty prompt as the EOT token)")
        if settings.max_new_tokens < 1:
            raise ConfigError("a sequence joins a batch to make at least one token (max_new_tokens >= 1)")
        if len(prompt) >= self.capacity:
            raise ConfigError(f"the prompt has {len(prompt)} tokens; this batch holds at most {self.capacity - 1}")
        room = position_room(self.model, len(prompt))
        if room is not None and room < 1:
            raise ConfigError(
                f"the prompt has {len(prompt)} tokens but positional scheme {self.model.config.positional!r} "
                f"covers {self.model.positional.max_positions} positions; shorten the prompt"
            )
        return room

    def _prefill(self, requests: list[Request]) -> tuple[KVCache, Tensor]:
        """The prompts' forward pass, left-padded into one batch as ``generate`` pads: their cache and logits,
        ``(G, V)``, or ``(G, T, V)`` for a request that scores its prompt (it is prefilled alone)."""
        ids, mask = left_pad([request.prompt for request in requests], 0, self.device)
        padded = not bool(mask.all())
        own = KVCache(capacity=ids.size(1), chunk=ids.size(1))  # the prompts' columns, not a chunk's
        scored = requests[0].scored
        logits = self.model(
            ids,
            cache=own,
            key_padding_mask=mask if padded else None,
            position_ids=row_positions(mask) if padded else None,
            logits_to_keep=0 if scored else 1,
        )  # (G, W or 1, V)
        return own, logits if scored else logits[:, -1]

    def _start(
        self, request: Request, room: int | None, own: KVCache, source_row: int, logits: Tensor
    ) -> tuple[int, Event]:
        """Place a prefilled request in a free row and sample its first token from its ``logits``."""
        settings = request.settings
        generator = torch.Generator(device=self.device)
        generator.manual_seed(settings.seed) if settings.seed is not None else generator.seed()
        prompt_scores = None
        if request.scored:  # (T, V): the prompt's own scores, then the last position's logits
            prompt_scores = score_tokens(logits, request.prompt, request.logprobs or 0)
            logits = logits[-1]
        if self.static is not None and len(self.live) == self.static.batch:  # every row of the cache is taken
            self._regroup(self._bucket(len(self.live) + 1))
        row = min(set(range(self.rows)) - {s.row for s in self.live.values()})
        limit = settings.max_new_tokens if room is None else min(settings.max_new_tokens, room)
        seq = Sequence(self._next_handle, row, request, generator, limit)
        self._next_handle += 1
        self._place(seq, own, source_row, len(request.prompt))
        self.live[seq.handle] = seq
        event = self._sampled(seq, logits[None])
        event.prompt = prompt_scores
        return seq.handle, event

    def leave(self, handle: int) -> None:
        """Drop a sequence (its caller stopped listening); its row is free at once. Unknown handles are ignored."""
        self.live.pop(handle, None)

    @torch.no_grad()
    def step(self) -> list[Event]:
        """One decode step for every live sequence: one forward pass, one event each."""
        if not self.live:
            return []
        if self.length + 1 > self.capacity:
            self._compact()
        if self.static is not None:
            if (bucket := self._bucket(len(self.live))) < self.static.batch:
                self._regroup(bucket)  # sequences left: step fewer rows
            return self._compiled_step()
        used = 1 + max(seq.row for seq in self.live.values())  # rows above the last live one are not computed
        inputs = torch.zeros(used, 1, dtype=torch.long, device=self.device)
        for seq in self.live.values():
            inputs[seq.row, 0] = seq.pending
        # Free rows attend to this step's column alone: finite numbers everywhere, never a row with nothing to see.
        self.mask[:, self.length] = True
        self.cache.set_length(self.length)
        logits = self.model(
            inputs,
            cache=self.cache,
            key_padding_mask=self.mask[:used, : self.length + 1],
            position_ids=self.positions[:used, None],
            logits_to_keep=1,
        )[:, -1]  # (used, V)
        self.length += 1
        self.positions += 1  # rows not computed this step are free: their positions are reset when one joins
        return self._events(logits)

    # -- inside -------------------------------------------------------------------------------------

    def _bucket(self, sequences: int) -> int:
        """The rows of the compiled step's cache for ``sequences`` live ones: the next power of two, at most ``rows``."""
        return min(self.rows, 1 << max(sequences - 1, 0).bit_length())

    def _regroup(self, bucket: int) -> None:
        """Move the live sequences to the first rows of a static cache of ``bucket`` rows, in their order."""
        sequences = sorted(self.live.values(), key=lambda seq: seq.row)
        rows = [seq.row for seq in sequences]
        target = self._statics.get(bucket)
        if target is None:
            target = self._statics[bucket] = StaticCache.for_model(self.model, bucket, self.static.capacity)
        self.static.move_rows(rows, target, self.length)
        self.static = target
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.mask[: len(rows)] = self.mask[index]  # a copy first: rows only move down or stay
        self.positions[: len(rows)] = self.positions[index]
        for row, seq in enumerate(sequences):
            seq.row = row
        self.cache = self.static.kv_cache(self.length)

    def _compiled_step(self) -> list[Event]:
        """``step`` through the compiled step: the static cache's rows; free ones compute and are ignored."""
        rows = self.static.batch
        pending, live = [0] * rows, [0] * rows
        for seq in self.live.values():
            pending[seq.row], live[seq.row] = seq.pending, 1
        inputs = torch.tensor(pending, dtype=torch.long, device=self.device)[:, None]  # (rows, 1): two tensors a step,
        alive = torch.tensor(live, dtype=torch.long, device=self.device)[:, None]  # not two writes per row
        self.mask[:, self.length] = True  # as the eager step: every row sees this step's own column
        column = torch.tensor([self.length], device=self.device)
        width = step_width(self.model, self.length, self.static.capacity)  # the columns in use
        visible = torch.zeros(rows, width, dtype=torch.bool, device=self.device)  # (rows, W), contiguous
        filled = min(width, self.capacity)  # CUDA reads its whole bucket: the columns past ours stay hidden
        visible[:, :filled] = self.mask[:rows, :filled]
        positions = self.positions[:rows, None] * alive  # a free row's position stays inside any position table
        logits, keys, values = self.compiled(inputs, column, positions, visible, *self.static.buffers())
        self.static.write(column, keys, values)
        self.length += 1
        self.positions += 1
        return self._events(logits)

    def _events(self, logits: Tensor) -> list[Event]:
        """One event per live sequence from the step's ``(rows, V)`` logits.

        Greedy rows without penalties or a bias take one ``argmax`` over the whole batch (what ``next_token``
        gives them); rows that sample with the same temperature, top-k and top-p and nothing else draw
        together (``_shared_draws``), each with its own generator; the others run ``next_token`` each, with
        their own settings and generator.
        """
        sequences = list(self.live.values())
        best = logits.argmax(dim=-1).tolist() if any(_plain_greedy(s.request.settings) for s in sequences) else None
        drawn = self._shared_draws(sequences, logits)
        return [
            self._sampled(
                seq,
                logits[seq.row : seq.row + 1],
                best[seq.row] if _plain_greedy(seq.request.settings) else drawn.get(seq.handle),
            )
            for seq in sequences
        ]

    @staticmethod
    def _shared_draws(sequences: list[Sequence], logits: Tensor) -> dict[int, int | Exception]:
        """The next token per handle of the sequences that sample with temperature, top-k and top-p alone,
        drawn together for each group of two or more with equal settings: one computation of the group's
        probabilities and one draw, with a uniform number from each sequence's own generator. Each row's token
        is the one ``next_token`` draws for the row alone (``sampling_probs`` and ``draw_rows`` work row by
        row); a row whose probabilities are not numbers gets the error ``draw`` raises, the others go on."""
        groups: dict[tuple, list[Sequence]] = {}
        for seq in sequences:
            s = seq.request.settings
            if s.temperature and s.plain:
                groups.setdefault((s.temperature, s.top_k, s.top_p), []).append(seq)
        drawn: dict[int, int | Exception] = {}
        for group in groups.values():
            if len(group) > 1:
                rows = torch.tensor([seq.row for seq in group], dtype=torch.long, device=logits.device)
                probs = sampling_probs(logits[rows].float(), group[0].request.settings)  # (G, V)
                uniform = torch.cat([torch.rand(1, 1, generator=s.generator, device=probs.device) for s in group])
                tokens, fine = draw_rows(probs, uniform)  # (G,) each
                for seq, token, ok in zip(group, tokens.tolist(), fine.tolist()):
                    drawn[seq.handle] = token if ok else RuntimeError(NOT_PROBABILITIES)
        return drawn

    def _sampled(self, seq: Sequence, logits: Tensor, token: int | Exception | None = None) -> Event:
        """Sample ``seq``'s next token from ``(1, V)`` logits (or take ``token``, or fail with it); end it where
        it is done.

        A failure here (a model that gives no numbers, say) ends ``seq`` alone, with an ``"error"`` event.
        """
        try:
            if isinstance(token, Exception):
                raise token
            return self._sample(seq, logits, token)
        except Exception as exc:  # one sequence's failure is its own: the batch goes on
            self.live.pop(seq.handle, None)
            return Event(seq.handle, None, "error", error=exc)

    def _sample(self, seq: Sequence, logits: Tensor, token: int | None = None) -> Event:
        request = seq.request
        if token is None:
            history = generated = None
            if request.settings.repetition_penalty:
                history = torch.tensor([request.prompt + seq.new], dtype=torch.long, device=self.device)
            if request.settings.penalised:
                generated = torch.tensor([seq.new], dtype=torch.long, device=self.device)
            token = int(next_token(logits, request.settings, history, seq.generator, generated)[0])
        scores: dict = {}
        if request.logprobs is not None:
            logp = logits[0].float().log_softmax(-1)
            scores["logprob"] = float(logp[token])
            top = logp.topk(request.logprobs) if request.logprobs else None
            scores["top"] = [] if top is None else [(int(i), float(v)) for v, i in zip(top.values, top.indices)]
        if self.eot_id is not None and token == self.eot_id and not request.ignore_eos:
            self.live.pop(seq.handle, None)
            return Event(seq.handle, None, "stop")
        seq.new.append(token)
        seq.pending = token
        if len(seq.new) >= seq.limit or len(request.prompt) + len(seq.new) >= self.capacity:
            self.live.pop(seq.handle, None)
            return Event(seq.handle, token, "length", **scores)
        return Event(seq.handle, token, **scores)

    def _place(self, seq: Sequence, own: KVCache, source_row: int, n: int) -> None:
        """Put ``seq``'s ``n`` prefilled positions, the last of ``own``'s row ``source_row``, in ``seq``'s row so
        that they end at the batch's current column."""
        if not self.reserved:
            self.cache.reserve(own, self.rows, self.capacity)
            self.reserved = True
        if not self.live:  # an empty batch starts again at column 0
            self.length = 0
            self.mask.zero_()
        if n > self.length:  # everyone moves right to make room for the longer prompt
            if self.length:
                self._shift(n - self.length)
            self.length = n
        self.cache.set_length(self.length)
        self.cache.place(seq.row, own, self.length, source_row, n)
        self.mask[seq.row] = False
        self.mask[seq.row, self.length - n : self.length] = True
        self.positions[seq.row] = n

    def _compact(self) -> None:
        """Drop the leftmost columns that no live row uses; a sequence that fills the cache alone has ended."""
        first = min(int(self.mask[s.row, : self.length].float().argmax()) for s in self.live.values())
        self._shift(-first)

    def _shift(self, by: int) -> None:
        self.cache.set_length(self.length)
        self.cache.shift(by)
        self.mask = torch.roll(self.mask, by, dims=1)
        if by > 0:
            self.mask[:, :by] = False
        else:
            self.mask[:, by:] = False
        self.length += by
