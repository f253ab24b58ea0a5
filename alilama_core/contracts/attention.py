"""What an attention backend is and what it receives: ``AttentionFn``, ``AttentionBackend``, ``AttentionCase``,
and ``AttentionBias`` (the bias and masks of one forward pass, with the ``BiasCache`` a model owns).

Shapes follow one convention everywhere: ``B`` batch, ``H`` heads, ``T`` query
length, ``S`` key length (``S >= T``; with a KV cache the queries are the last
``T`` of the ``S`` positions), ``D`` head dim.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch
from torch import Tensor

from alilama_core.base.options import check_options
from alilama_core.contracts.positional import PositionalKind, PositionalScheme

if TYPE_CHECKING:
    pass


def _scheme_state(scheme: PositionalScheme | None) -> tuple[tuple, tuple[Tensor, ...]]:
    """What a kept bias of ``scheme`` is valid for, and the tensors that stamp refers to.

    The scheme itself (a weak reference: equal while it lives, then never
    again) and, unless it declares ``bias_is_static = True``, each parameter's
    and buffer's identity, storage address and version counter.
    """
    if scheme is None:
        return (), ()
    if scheme.bias_is_static:
        return (weakref.ref(scheme),), ()
    tensors = (*scheme.parameters(), *scheme.buffers())
    return (weakref.ref(scheme), *((id(t), t.data_ptr(), t._version) for t in tensors)), tensors


class BiasCache:
    """The biases and masks a model keeps between forward passes, valid for one state of its scheme.

    ``GPT`` owns one (``model.bias_cache``) and hands it to the ``AttentionBias``
    of each pass; backend calls made without one share a cache per scheme
    (``AttentionBias.clear``). What is kept is valid for one state of the
    scheme: the scheme object and, unless it declares ``bias_is_static = True``,
    the identity, storage and version counter of each of its parameters and
    buffers. When that state changes, everything kept is dropped and rebuilt.

    This relies on PyTorch's version counters: every in-place write through a
    tensor bumps its ``_version`` (``copy_``, ``load_state_dict``, ``fill_`` or
    ``add_`` under ``no_grad``, the per-tensor and ``foreach`` optimizer
    steps), and ``load_state_dict(assign=True)`` or ``p.data = ...`` give a new
    tensor or a new storage. Writes into ``p.data`` in place and fused
    optimizer kernels (``AdamW(fused=True)``) bump no counter, which is why a
    scheme with a parameter that requires grad is never kept
    (``PositionalScheme.bias_cacheable``); after writing into a frozen
    scheme's ``.data``, call ``clear()``. The masks kept total at most
    ``AttentionBias.CACHE_BYTES``. A copy or a pickle of the cache is empty.
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Drop everything kept."""
        self._stamp: tuple | None = None
        self._held: tuple[Tensor, ...] = ()  # keeps the stamped tensors' ids from being reused
        self._tables: dict[str, dict[Any, Any]] = {}

    @property
    def masks(self) -> dict[Any, Tensor]:
        """The masks kept now, by ``(what, T, S, device, ...)`` key (read-only use)."""
        return self._tables.get("masks", {})

    def tables(self, scheme: PositionalScheme | None) -> dict[str, dict[Any, Any]]:
        """The tables kept for ``scheme`` in its current state, by name (emptied first if it changed).

        ``"masks"`` holds ``AttentionBias``'s own; a backend may keep tensors
        derived from the bias under a name of its own (``AttentionBias.kept``).
        """
        stamp, held = _scheme_state(scheme)
        if stamp != self._stamp:
            self.clear()
            self._stamp, self._held = stamp, held
        return self._tables

    def __reduce__(self) -> tuple:
        return (type(self), ())


_DIRECT_CACHES: weakref.WeakKeyDictionary[PositionalScheme, BiasCache] = weakref.WeakKeyDictionary()
_DIRECT_NO_SCHEME = BiasCache()


def _direct_cache(scheme: PositionalScheme | None) -> BiasCache:
    """The cache of backend calls made without a model's (one per scheme, dropped with it)."""
    if scheme is None:
        return _DIRECT_NO_SCHEME
    cache = _DIRECT_CACHES.get(scheme)
    if cache is None:
        cache = _DIRECT_CACHES[scheme] = BiasCache()
    return cache


class AttentionBias:
    """The positional bias and masks of one forward pass, computed once and shared by all layers.

    The model builds one per forward pass and hands it to every layer's backend
    as ``bias=`` (backends that declare ``shared_bias=True``). Everything is
    computed lazily on first use, then reused by the other layers:

    - ``slopes``: ``(H,)`` float32 slopes of a ``has_slopes`` scheme (else ``None``);
      kernels that take slopes need nothing else;
    - ``dense()``: the scheme's ``(H, T, S)`` float32 bias (``None`` without a bias scheme);
    - ``mask(dtype)``: one additive mask ``(B or 1, H or 1, T, S)``: bias, ``-inf``
      above the causal diagonal and on padded keys. A padded query still sees
      itself, so no row is ever fully masked (no NaN in any dtype).

    A bias is kept between forward passes, in ``cache`` (the model's
    ``BiasCache``), only when ``scheme.bias_cacheable()``, and only for the
    values of the scheme's parameters and buffers it was computed from; a
    learnable bias that trains is recomputed each pass (once). Either way it
    never goes stale.
    """

    CACHE_BYTES = 64 * 2**20
    """Largest total size of the masks a cache keeps between forward passes."""

    def __init__(
        self,
        scheme: PositionalScheme | None,
        t: int,
        s: int,
        device: torch.device | str,
        key_padding_mask: Tensor | None = None,
        causal: bool = True,
        cache: BiasCache | None = None,
    ) -> None:
        self.scheme = scheme if scheme is not None and scheme.kind == "bias" else None
        self.t, self.s, self.causal = t, s, causal
        self.device = torch.device(device)
        self.key_padding_mask = key_padding_mask  # (B, S), True for real tokens
        self.static = self.scheme is None or self.scheme.bias_cacheable()
        self._memo: dict[Any, Tensor | None] = {}
        self._slopes: Tensor | None = None
        self._cache = cache
        self._tables: dict[str, dict[Any, Any]] | None = None  # this pass's own, or the cache's (looked up once)

    @property
    def slopes(self) -> Tensor | None:
        """``(H,)`` float32 slopes on the device, when the scheme has them."""
        if self.scheme is None or not self.scheme.has_slopes:
            return None
        if self._slopes is None:
            self._slopes = self.scheme.slopes().to(self.device, torch.float32)
        return self._slopes

    def _kept_tables(self) -> dict[str, dict[Any, Any]]:
        """Tables kept between passes (the cache's, for the scheme's current state), or this pass's own."""
        if self._tables is None:
            if self.static and self.key_padding_mask is None:
                cache = self._cache if self._cache is not None else _direct_cache(self.scheme)
                self._tables = cache.tables(self.scheme)
            else:
                self._tables = {}
        return self._tables

    def kept(self, name: str) -> dict[Any, Any]:
        """A table named ``name`` for a backend's own tensors derived from this bias (e.g. ``tiled``'s masks).

        Kept between passes exactly when the masks are, and emptied when the
        scheme's parameters or buffers change; else it lasts this pass. Store
        only tensors that need no gradient.
        """
        return self._kept_tables().setdefault(name, {})

    def _cached(self, key: tuple, build: Callable[[], Tensor | None]) -> Tensor | None:
        if key in self._memo:
            return self._memo[key]
        store = None
        if self.static and self.key_padding_mask is None:
            store = self.kept("masks")
            if key in store:
                self._memo[key] = store[key]
                return store[key]
        value = build()
        self._memo[key] = value
        if store is not None and value is not None and not value.requires_grad and self.t == self.s:
            # decode shapes rarely repeat; a value with a graph is this pass's alone
            size = value.numel() * value.element_size()
            while store and sum(v.numel() * v.element_size() for v in store.values()) + size > self.CACHE_BYTES:
                store.pop(next(iter(store)))
            if size <= self.CACHE_BYTES:
                store[key] = value
        return value

    def dense(self) -> Tensor | None:
        """The scheme's bias ``(H, T, S)`` in float32, or ``None`` without a bias scheme."""
        if self.scheme is None:
            return None
        key = ("dense", self.t, self.s, self.device)

        def build() -> Tensor:
            k_pos = torch.arange(self.s, device=self.device)
            return self.scheme.bias(k_pos[self.s - self.t :], k_pos).float()  # (H, T, S)

        return self._cached(key, build)

    def keep(self) -> Tensor | None:
        """Boolean ``(B or 1, 1, T, S)``: ``True`` where a query may see a key; ``None``: all."""
        key = ("keep", self.t, self.s, self.device, self.causal)

        def build() -> Tensor | None:
            if self.key_padding_mask is None and (not self.causal or self.t == 1):
                return None  # one query at the end sees every key
            allowed = causal_mask(self.t, self.s, self.device) if self.causal else None  # (T, S)
            if self.key_padding_mask is None:
                return None if allowed is None else allowed[None, None]
            pad = self.key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
            k_pos = torch.arange(self.s, device=self.device)
            own = k_pos[None, :] == k_pos[self.s - self.t :, None]  # (T, S): each query's own key
            visible = pad | own[None, None]  # a padded query still sees itself
            return visible if allowed is None else visible & allowed[None, None]  # (B, 1, T, S)

        return self._cached(key, build)

    def mask(self, dtype: torch.dtype = torch.float32) -> Tensor | None:
        """Additive mask ``(B or 1, H or 1, T, S)`` in ``dtype``: bias plus ``-inf`` where hidden."""
        key = ("mask", self.t, self.s, self.device, self.causal, dtype)

        def build() -> Tensor | None:
            bias, keep = self.dense(), self.keep()
            if bias is None and keep is None:
                return None
            mask = torch.zeros(1, 1, self.t, self.s, device=self.device) if bias is None else bias[None]
            if keep is not None:
                mask = mask.masked_fill(~keep, float("-inf"))
            return mask.to(dtype)

        return self._cached(key, build)

    @staticmethod
    def clear(scheme: PositionalScheme | None = None) -> None:
        """Drop what calls made without a model's ``BiasCache`` kept (for ``scheme``, or for no scheme).

        A model's own: ``model.bias_cache.clear()``.
        """
        cache = _DIRECT_NO_SCHEME if scheme is None else _DIRECT_CACHES.get(scheme)
        if cache is not None:
            cache.clear()


ShapeClass = Literal["decode", "short", "long"]

DECODE_QUERIES = 16
"""At most this many new queries against a longer KV cache make a ``"decode"`` call."""
LONG_KEYS = 1024
"""From this many keys on, a call is ``"long"``."""


def shape_class(t: int, s: int) -> ShapeClass:
    """The class of a call with ``t`` queries over ``s`` keys: decode, short or long."""
    if t < s and t <= DECODE_QUERIES:
        return "decode"
    return "long" if s >= LONG_KEYS else "short"


@dataclass(frozen=True)
class AttentionCase:
    """What a router such as ``auto`` knows about the calls it chooses a backend for.

    ``shape`` is the class of the call: ``"decode"`` (a few new queries against
    a KV cache), ``"short"`` or ``"long"`` inputs; ``padded``: a key padding mask
    is given; ``training``: gradients are needed; ``bias_trainable``: the bias
    scheme has parameters that require grad.
    """

    device: str
    dtype: torch.dtype
    head_dim: int
    shape: ShapeClass
    kind: PositionalKind = "none"
    has_slopes: bool = False
    padded: bool = False
    training: bool = False
    bias_trainable: bool = False
    causal: bool = True


class AttentionFn(Protocol):
    """One signature for every attention backend.

    ``q``: ``(B, H, T, D)``; ``k``, ``v``: ``(B, H, S, D)`` with the queries being
    the last ``T`` positions of the ``S`` keys. ``positional`` is the model's
    bias scheme, or ``None`` when the scheme adds no bias. ``key_padding_mask``
    ``(B, S)`` is ``True`` for real tokens. Returns ``(B, H, T, D)``::

        out = attention(q, k, v, positional=alibi, causal=True)

    ``bias`` (optional, passed only to backends registered with
    ``shared_bias=True``) is the ``AttentionBias`` of this forward pass: the
    slopes, dense bias and masks computed once and shared by all layers. A
    backend called without it builds its own from ``positional``.
    """

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        positional: PositionalScheme | None = None,
        causal: bool = True,
        key_padding_mask: Tensor | None = None,
        bias: AttentionBias | None = None,
    ) -> Tensor: ...


BiasSupport = Literal["dense", "slopes", "none"]


@dataclass(frozen=True)
class AttentionBackend:
    """An attention function and what it can do, as registered by a plugin.

    Capabilities (all declared, so a router such as ``auto`` can choose among
    every registered backend, a third party's included):

    - ``bias``: ``"dense"`` takes any bias scheme, ``"slopes"`` only schemes
      that return ``slopes()``, ``"none"`` no bias at all;
    - ``devices``: device types it runs on; ``trains_on``: those where backward works;
    - ``dtypes``: activation dtypes it computes in natively (``None``: any);
    - ``padding``: it takes a ``key_padding_mask``;
    - ``check()``: ``None`` when it can run in this installation, else why not;
    - ``accepts(case)``: ``None`` when it handles an ``AttentionCase``, else why
      not (for limits the fields above cannot say, e.g. a minimum head size);
    - ``priority``: how much a router should prefer it, by ``"device:shape"``,
      ``"shape"`` or ``"device"`` key (``shape``: decode, short, long), first
      match wins, default 0; the highest eligible backend wins;
    - ``shared_bias``: the function accepts ``bias=`` (an ``AttentionBias``);
    - ``resolve(case)``: set on routers only: the backend to run for a case.
      The model resolves a router once per shape class and calls the result;
    - ``exact``: it computes exact attention (see below).

    Exactness. ``exact=True`` (the default) promises the full causal softmax of
    ``q k^T / sqrt(D)`` plus the scheme's bias, with padded keys hidden: what
    ``eager`` computes, equal to it up to float rounding. Every backend that
    computes anything else (a sliding window, local, sparse, low-rank or any
    other approximate attention) must declare ``exact=False``. Alilama then
    never substitutes one for the other: ``auto`` routes among exact backends
    only, a run trained with a non-exact backend records it and is evaluated
    and sampled with it, and what cannot reproduce it refuses it by name
    (``alilama export hf``; ``alilama viz attention`` unless the backend
    declares its ``probabilities``). A router is exact when everything it
    resolves to is.

    Example::

        def my_attention(q, k, v, *, positional=None, causal=True, key_padding_mask=None):
            ...
        register("mine", AttentionBackend("mine", my_attention, bias="dense", priority={"cpu:decode": 60}))
    """

    name: str
    fn: AttentionFn
    bias: BiasSupport = "dense"
    trains_on: tuple[str, ...] = ("cpu", "cuda", "mps")
    check: Callable[[], str | None] | None = None
    description: str = ""
    devices: tuple[str, ...] = ("cpu", "cuda", "mps")
    dtypes: tuple[torch.dtype, ...] | None = None
    padding: bool = True
    accepts: Callable[[AttentionCase], str | None] | None = field(default=None, compare=False)
    priority: dict[str, int] = field(default_factory=dict, compare=False, hash=False)
    shared_bias: bool = False
    resolve: Callable[[AttentionCase], AttentionBackend] | None = field(default=None, compare=False)
    memory: Callable[[int, int], str] | None = field(default=None, compare=False)
    """Optional: one line on what the bias costs in memory for ``(heads, T)`` (``alilama model info``)."""
    defaults: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """The backend's own settings and their default values; ``model.attention_options``
    sets them and ``configured`` hands them to ``fn`` as keyword arguments."""
    exact: bool = True
    """It computes exact attention, equal to ``eager`` up to float rounding (see the class docstring);
    ``False`` for a sliding window, local or any approximate attention."""
    probabilities: Callable[..., Tensor] | None = field(default=None, compare=False)
    """Optional, for a backend with ``exact=False``: the attention weights it computes,
    ``probabilities(q, k, *, positional=None, causal=True, key_padding_mask=None, **options)``
    ``-> (B, H, T, S)`` float32 rows summing to 1, so ``alilama viz attention`` can draw
    them. Without it, the attention of a non-exact backend cannot be captured."""

    def configured(self, options: dict[str, Any] | None) -> AttentionBackend:
        """This backend with ``options`` bound to ``fn`` (itself when there are none); unknown keys raise."""
        if not options:
            return self
        values = check_options("attention backend", self.name, self.defaults, options)
        probabilities = self.probabilities and functools.partial(self.probabilities, **values)
        return dataclasses.replace(self, fn=functools.partial(self.fn, **values), probabilities=probabilities)

    def available(self) -> str | None:
        return self.check() if self.check is not None else None

    def supports(self, scheme: type[PositionalScheme] | PositionalScheme) -> bool:
        if scheme.kind != "bias":
            return True
        if self.bias == "dense":
            return True
        if self.bias == "slopes":
            return scheme.has_slopes
        return False

    def rank(self, case: AttentionCase) -> int:
        """This backend's declared priority for ``case`` (see ``priority``)."""
        for key in (f"{case.device}:{case.shape}", case.shape, case.device):
            if key in self.priority:
                return self.priority[key]
        return 0

    def refuses(self, case: AttentionCase) -> str | None:
        """Why this backend cannot run ``case`` (``None``: it can), from its declared capabilities."""
        if self.resolve is not None:
            return "it is a router"
        reason = self.available()
        if reason:
            return reason
        if case.device not in self.devices:
            return f"it runs on {', '.join(self.devices)}, not {case.device}"
        if case.training and case.device not in self.trains_on:
            return f"it has no backward pass on {case.device}"
        if self.dtypes is not None and case.dtype not in self.dtypes:
            return f"it computes in {', '.join(str(d).removeprefix('torch.') for d in self.dtypes)}, not {str(case.dtype).removeprefix('torch.')}"
        if case.kind == "bias" and self.bias == "none":
            return "it takes no attention bias"
        if case.kind == "bias" and self.bias == "slopes" and not case.has_slopes:
            return "it takes slope-shaped biases only"
        if case.padded and not self.padding:
            return "it takes no padding mask"
        return self.accepts(case) if self.accepts is not None else None


def human_bytes(n: float) -> str:
    """A byte count for people, for ``AttentionBackend.memory`` lines: ``human_bytes(65536) == '64.0 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def attention_backend(obj: Any) -> AttentionBackend:
    """Accept a registered ``AttentionBackend`` or a bare function (taken as dense-capable)."""
    if isinstance(obj, AttentionBackend):
        return obj
    if callable(obj):
        return AttentionBackend(getattr(obj, "__name__", "custom"), obj)
    raise TypeError(f"expected an AttentionBackend or a function, got {type(obj).__name__}")


def causal_mask(t: int, s: int, device: torch.device | str | None = None) -> Tensor:
    """``(T, S)`` boolean mask, ``True`` where query ``i`` (position ``s - t + i``) may see key ``j``."""
    q = torch.arange(s - t, s, device=device)
    k = torch.arange(s, device=device)
    return k[None, :] <= q[:, None]
