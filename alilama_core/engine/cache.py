"""The KV caches a model decodes on, and the left-padded batch they are filled from.

``KVCache`` is the eager path's: a preallocated buffer per layer that grows in
whole chunks as tokens come (``GPT.forward(..., cache=)``), with the row moves a
running batch needs (``alilama_core.engine.batching``). ``StaticCache`` is the
compiled step's (``alilama_core.engine.decode``): every layer's keys and values
allocated once at their capacity, one shape for a sequence's whole life; its
``kv_cache()`` is a ``KVCache`` over the same buffers for the eager prefill.
``left_pad`` and ``row_positions`` are the one copy of a padded batch's ids,
mask and positions, as ``generate`` and the batch prefill them.
"""

from __future__ import annotations

from collections.abc import Sequence
import torch
from torch import Tensor, nn


class KVCache:
    """Keys and values of every layer for the tokens seen so far, in preallocated buffers.

    Pass one to ``GPT.forward`` to run a model incrementally: the first call
    fills it with the prompt, each later call appends its new tokens::

        cache = KVCache()
        logits = model(prompt, cache=cache)            # (B, T, V)
        logits = model(next_token[:, None], cache=cache)  # (B, 1, V)

    Each layer's buffer ``(B, H, capacity, D)`` is allocated at ``capacity``
    positions (when known, e.g. prompt plus new tokens) and grows in whole
    ``chunk``s (at least doubling), so a decoding step writes in place instead of
    concatenating; layers see views ``(B, H, S, D)`` of the filled part.
    """

    def __init__(self, capacity: int = 0, chunk: int = 256) -> None:
        self.chunk = chunk
        self.initial = capacity  # first allocation, e.g. prompt + new tokens
        self._keys: list[Tensor] = []
        self._values: list[Tensor] = []
        self._lengths: list[int] = []

    def __len__(self) -> int:
        """Number of cached positions."""
        return self._lengths[0] if self._lengths else 0

    @property
    def keys(self) -> list[Tensor]:
        """Each layer's cached keys ``(B, H, S, D)`` (views of the buffers)."""
        return [k[:, :, :n] for k, n in zip(self._keys, self._lengths)]

    @property
    def values(self) -> list[Tensor]:
        """Each layer's cached values ``(B, H, S, D)`` (views of the buffers)."""
        return [v[:, :, :n] for v, n in zip(self._values, self._lengths)]

    def capacity(self, layer: int = 0) -> int:
        """Positions the layer's buffer holds before it must grow."""
        return self._keys[layer].size(2) if layer < len(self._keys) else 0

    def _grow(self, layer: int, k: Tensor, needed: int) -> None:
        size = max(needed, 2 * self.capacity(layer), self.initial)
        size = -(-size // self.chunk) * self.chunk  # a whole number of chunks
        B, H, _, D = k.shape
        keys = k.new_zeros(B, H, size, D)  # zeros: never NaN behind a mask
        values = k.new_zeros(B, H, size, D)
        if layer < len(self._keys):
            n = self._lengths[layer]
            keys[:, :, :n] = self._keys[layer][:, :, :n]
            values[:, :, :n] = self._values[layer][:, :, :n]
            self._keys[layer], self._values[layer] = keys, values
        else:
            self._keys.append(keys)
            self._values.append(values)
            self._lengths.append(0)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append this step's ``k``, ``v`` ``(B, H, T, D)`` for ``layer``; return all keys and values so far."""
        start = self._lengths[layer] if layer < len(self._lengths) else 0
        stop = start + k.size(2)
        if stop > self.capacity(layer):
            self._grow(layer, k, stop)
        rows = k.size(0)  # a running batch may step its first rows only (``reserve``)
        keys, values = self._keys[layer][:rows], self._values[layer][:rows]
        keys[:, :, start:stop] = k
        values[:, :, start:stop] = v
        self._lengths[layer] = stop
        return keys[:, :, :stop], values[:, :, :stop]  # (B, H, S, D) views

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` positions (e.g. to undo a step)."""
        self._lengths = [min(n, length) for n in self._lengths]

    # -- rows that join and leave (continuous batching, ``alilama_core.engine.batching``) --------------

    def reserve(self, like: "KVCache", batch: int, capacity: int) -> None:
        """Allocate ``batch`` rows of ``capacity`` positions, shaped as ``like``'s layers, all empty."""
        self._keys = [k.new_zeros(batch, k.size(1), capacity, k.size(3)) for k in like._keys]
        self._values = [v.new_zeros(batch, v.size(1), capacity, v.size(3)) for v in like._values]
        self._lengths = [0] * len(self._keys)

    def place(self, row: int, source: "KVCache", stop: int, source_row: int = 0, count: int | None = None) -> None:
        """Copy the last ``count`` positions (all) of ``source``'s row ``source_row`` into ``row``, ending at
        position ``stop`` (left of it: old data)."""
        n = len(source)
        count = n if count is None else count
        for mine, theirs in ((self._keys, source._keys), (self._values, source._values)):
            for layer, buffer in enumerate(mine):
                buffer[row, :, stop - count : stop] = theirs[layer][source_row, :, n - count : n]

    def shift(self, by: int) -> None:
        """Move every row's positions ``by`` places right (``by < 0``: left, dropping the first ``-by``)."""
        for buffers in (self._keys, self._values):
            for buffer in buffers:
                n = self._lengths[0]
                if by > 0:
                    buffer[:, :, by : by + n] = buffer[:, :, :n].clone()
                    buffer[:, :, :by] = 0
                else:
                    buffer[:, :, : n + by] = buffer[:, :, -by:n].clone()
        self._lengths = [n + by for n in self._lengths]

    def set_length(self, length: int) -> None:
        """Treat the first ``length`` positions of every row as filled (rows join between steps)."""
        self._lengths = [length] * len(self._keys)


class StaticCache:
    """Keys and values of every layer, ``(L, B, H, N, D)``, allocated once for ``N`` positions.

    Each row's and head's columns are one contiguous ``(N, D)`` block, so a step
    reads the filled part of each as one run of memory (a running batch's cache is
    megabytes: with the column first, the same reads jumped a whole ``(L, B, H, D)``
    slab per column, measured 1.6x slower at 16 rows and 128 columns).
    ``kv_cache()`` views the same buffers as a ``KVCache`` (layers of
    ``(B, H, N, D)``) for the eager prefill, placing and shifting (it never grows past ``N``).
    """

    def __init__(self, keys: Tensor, values: Tensor) -> None:
        self.keys, self.values = keys, values  # (L, B, H, N, D) each

    @classmethod
    def for_model(cls, model: nn.Module, batch: int, capacity: int, dtype: torch.dtype | None = None) -> "StaticCache":
        cfg = model.config
        weight = model.tok_emb.weight
        shape = (cfg.n_layers, batch, cfg.n_heads, capacity, cfg.d_model // cfg.n_heads)
        dtype = dtype or weight.dtype
        # zeros: a masked key is never NaN
        return cls(
            torch.zeros(shape, dtype=dtype, device=weight.device), torch.zeros(shape, dtype=dtype, device=weight.device)
        )

    @property
    def capacity(self) -> int:
        return self.keys.size(3)

    @property
    def batch(self) -> int:
        return self.keys.size(1)

    def buffers(self) -> tuple[Tensor, Tensor]:
        """Keys and values, ``(L, B, H, N, D)`` each: what a step reads (the first ``W`` columns of each block)."""
        return self.keys, self.values

    def write(self, column: Tensor, keys: Tensor, values: Tensor) -> None:
        """Store one step's ``keys`` and ``values`` ``(L, B, H, 1, D)`` at ``column`` ``(1,)``."""
        self.keys.index_copy_(3, column, keys)
        self.values.index_copy_(3, column, values)

    def move_rows(self, rows: list[int], into: "StaticCache", width: int) -> None:
        """Copy this cache's ``rows`` into the first rows of ``into``, their first ``width`` columns: a running
        batch moves to a cache of fewer rows, or more, as sequences leave and join."""
        index = torch.tensor(rows, dtype=torch.long, device=self.keys.device)
        into.keys[:, : len(rows), :, :width] = self.keys[:, index, :, :width]
        into.values[:, : len(rows), :, :width] = self.values[:, index, :, :width]

    def kv_cache(self, length: int = 0) -> KVCache:
        """A ``KVCache`` over these buffers, ``length`` positions filled (its writes land here)."""
        cache = KVCache(capacity=self.capacity)
        cache._keys = list(self.keys.unbind(0))  # (B, H, N, D) each
        cache._values = list(self.values.unbind(0))
        cache._lengths = [length] * len(cache._keys)
        cache.chunk = self.capacity  # it must not grow: a step past N is the caller's error
        return cache


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device) -> tuple[Tensor, Tensor]:
    """The prompts as one ``(B, W)`` batch, each ended at the right, and its mask (``True`` on real tokens)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), width), dtype=torch.bool, device=device)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt) :] = True
    return ids, mask


def row_positions(mask: Tensor) -> Tensor:
    """Each row's own positions, from 0 at its first real token, under a left-padded ``(B, W)`` ``mask``."""
    return (mask.long().cumsum(dim=1) - 1).clamp(min=0)
