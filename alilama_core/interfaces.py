"""The four plugin interfaces: ``Tokenizer``, ``PositionalScheme``, ``AttentionBackend``, ``Trainer``.

The core knows no implementation; plugins register these through the hooks in
``alilama_core.hookspecs``. Shapes follow one convention everywhere:
``B`` batch, ``H`` heads, ``T`` query length, ``S`` key length (``S >= T``; with a
KV cache the queries are the last ``T`` of the ``S`` positions), ``D`` head dim.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import torch
from torch import Tensor, nn

from alilama_core.options import check_options
from alilama_core.tokenizer import Tokenizer

if TYPE_CHECKING:
    from alilama_core.config import ModelConfig

__all__ = [
    "human_bytes",
    "Tokenizer",
    "PositionalScheme",
    "AttentionFn",
    "AttentionBackend",
    "AttentionBias",
    "BiasCache",
    "AttentionCase",
    "Trainer",
    "Task",
]

PositionalKind = Literal["bias", "rotary", "embedding", "none"]


class PositionalScheme(nn.Module):
    """How a model knows where a token is. A scheme declares one ``kind``:

    - ``"bias"``: an additive attention bias ``bias(q_pos, k_pos) -> (H, T, S)``
      (ALiBi). A bias that is ``-slope_h * (q - k)`` also returns its per-head
      ``slopes()`` so kernels that take slopes (flash-attn, FlexAttention) never
      build the dense bias.
    - ``"rotary"``: ``rotate(x, positions)`` turns q and k (RoPE).
    - ``"embedding"``: ``embed(positions) -> (T, C)`` is added to the token embeddings.
    - ``"none"``: nothing (NoPE; the causal mask alone carries order).

    Positions are absolute token indices, so a query block that follows a KV
    cache of length ``n`` has positions ``n .. n+T-1``. Worked example, a bias
    scheme that penalises distance with one fixed slope for every head::

        class Linear(PositionalScheme):
            kind = "bias"
            def bias(self, q_pos, k_pos):                      # (T,), (S,)
                dist = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
                return (-0.1 * dist).expand(self.n_heads, -1, -1)  # (H, T, S)
    """

    kind: ClassVar[PositionalKind] = "none"
    bias_is_static: ClassVar[bool | None] = None
    """Whether ``bias()`` may be cached between forward passes, per shape.

    ``None`` (the default): the core decides from what it can see. While no
    parameter of the scheme requires grad (``bias_cacheable()``) the bias is
    kept for the current values of the scheme's parameters and buffers, and
    recomputed once any of them changes (``BiasCache``): loading new weights
    into a frozen model is seen. A learnable bias that trains is recomputed
    every forward pass, once, and shared by all layers. ``True``: the bias
    depends on no parameter or buffer value, so it is cached by shape alone;
    ``False`` never caches.
    """
    has_slopes: ClassVar[bool] = False
    """``slopes()`` describes the bias exactly: ``bias(q, k) == -slopes()[h] * (q - k)``.

    Kernels that take slopes (``tiled``, FlexAttention, flash-attn) then never
    build the dense bias. The model checks the claim against ``bias()`` when it
    is built (``check_slopes``) and refuses a scheme whose slopes disagree.
    """

    defaults: ClassVar[dict[str, Any]] = {}
    """The scheme's own settings and their default values (e.g. RoPE's ``{"theta": 10000.0}``).

    A config sets them in ``model.positional_options``; the constructor checks
    them (an unknown key is a ``ConfigError`` naming it) and stores the result in
    ``self.options``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.options: dict[str, Any] = self.check_options(config.positional_options, config.positional)
        self.n_heads = config.n_heads
        self.head_dim = config.d_model // config.n_heads
        self.d_model = config.d_model
        self.context_length = config.context_length

    @classmethod
    def check_options(cls, options: dict[str, Any] | None, name: str = "") -> dict[str, Any]:
        """``defaults`` with ``options`` applied; an unknown key raises ``ConfigError``."""
        return check_options("positional scheme", name or cls.__name__, cls.defaults, options)

    @property
    def max_positions(self) -> int | None:
        """Largest number of positions the scheme supports (``None``: unbounded)."""
        return None

    def embed(self, positions: Tensor) -> Tensor:
        """``(T,)`` or ``(B, T)`` positions to ``(T, C)`` or ``(B, T, C)`` embeddings."""
        raise NotImplementedError(f"{type(self).__name__} is not an embedding scheme")

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate ``x`` of shape ``(B, H, T, D)`` for ``(T,)`` or per-row ``(B, T)`` positions."""
        raise NotImplementedError(f"{type(self).__name__} is not a rotary scheme")

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Additive attention bias of shape ``(H, T, S)`` for ``(T,)`` and ``(S,)`` positions."""
        raise NotImplementedError(f"{type(self).__name__} is not a bias scheme")

    def slopes(self) -> Tensor | None:
        """``(H,)`` float32 slopes when the bias is ``-slope_h * (q - k)``, else ``None``."""
        return None

    def bias_cacheable(self) -> bool:
        """Whether a computed bias may be reused by later passes while the scheme's values are unchanged.

        See ``bias_is_static``. A parameter that requires grad makes it ``False``:
        an optimizer step may change it without a trace the core can see.
        """
        if self.bias_is_static is not None:
            return bool(self.bias_is_static)
        return not any(p.requires_grad for p in self.parameters())

    def check_slopes(self) -> str | None:
        """Why ``slopes()`` does not describe ``bias()`` (``None``: it does, or there are no slopes).

        Compares both on a small grid of query and key positions, with a cache offset.
        """
        if self.kind != "bias" or not self.has_slopes:
            return None
        slopes = self.slopes()
        if slopes is None or tuple(slopes.shape) != (self.n_heads,):
            return (
                f"slopes() must return ({self.n_heads},) slopes, got {None if slopes is None else tuple(slopes.shape)}"
            )
        with torch.no_grad():
            device = slopes.device
            q_pos, k_pos = torch.arange(5, 9, device=device), torch.arange(9, device=device)
            got = self.bias(q_pos, k_pos).float()  # (H, T, S)
            distance = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
            want = -slopes.detach().float()[:, None, None] * distance  # (H, T, S)
            causal = distance >= 0  # keys the query may see
            if got.shape != want.shape or not torch.allclose(got[:, causal], want[:, causal], rtol=1e-4, atol=1e-5):
                return "bias() differs from -slopes()[h] * (q - k)"
        return None

    def reset_parameters(self) -> None:
        """(Re)initialise parameters and computed buffers (called by the model's init)."""

    @classmethod
    def export_source(cls) -> str | None:
        """Optional, for ``alilama export hf``: the path of a standalone module for the exported model.

        ``None`` (the default): the scheme cannot be exported. Otherwise a
        Python file that imports only torch and defines a ``torch.nn.Module``
        class with this class's ``__name__``, built as ``cls(config)`` from
        the exported config (``n_heads``, ``d_model``, ``head_dim``,
        ``context_length``, ``positional_options``), with the same ``kind``,
        the same methods of its kind (``embed``, ``rotate`` or ``bias`` and
        ``slopes``), ``max_positions``, and the same parameter and buffer names,
        so the trained weights load into it. The export copies the file beside
        the modeling code, which loads the class by name. Example::

            @classmethod
            def export_source(cls):
                return str(Path(__file__).with_name("standalone.py"))
        """
        return None


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


class Trainer(abc.ABC):
    """Runs a training config to a run folder::

        trainer = registry.get_trainer("default")(config, echo=print, show_progress=False)
        result = trainer.fit(data_dir="data/", out_dir="runs/essay")

    This is everything ``alilama train`` and ``alilama quickstart`` call on a
    trainer: the constructor with its run control (``echo``, ``show_progress``)
    and ``fit`` with its arguments (``resume``, ``overwrite``, ``stop_at``).
    A subclass keeps these signatures; extra settings belong in the config.
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    """The trainer's own settings and their default values; ``train.trainer_options``
    sets them, and the constructor checks them into ``self.options``."""

    def __init__(self, config: Any, echo: Callable[[str], None] = print, show_progress: bool = True) -> None:
        """``config``: the full ``Config``. ``echo``: where messages go (one string per call).
        ``show_progress``: draw a progress bar (else progress lines go to ``echo``)."""
        self.options: dict[str, Any] = self.check_options(config.train.trainer_options, config.train.trainer)
        self.config = config
        self.echo = echo
        self.show_progress = show_progress

    @classmethod
    def check_options(cls, options: dict[str, Any] | None, name: str = "") -> dict[str, Any]:
        """``defaults`` with ``options`` applied; an unknown key raises ``ConfigError``."""
        return check_options("trainer", name or cls.name or cls.__name__, cls.defaults, options)

    @abc.abstractmethod
    def fit(
        self,
        data_dir: str,
        out_dir: str,
        resume: bool = False,
        overwrite: bool = False,
        stop_at: int | None = None,
    ) -> dict[str, Any]:
        """Train on the prepared data in ``data_dir``; write the run folder ``out_dir``.

        ``resume``: continue the run in ``out_dir`` from its newest complete
        checkpoint (``self.config`` is its saved config with any overrides
        applied). ``overwrite``: replace an existing run that Alilama wrote.
        ``stop_at``: checkpoint and return after this step. Returns metrics:
        ``step`` always; ``val_loss``/``val_bpb`` when evaluated; ``interrupted``
        (a reason) when stopped early; ``finished`` when the run had already
        reached ``train.max_steps`` and nothing was trained.
        """


def causal_mask(t: int, s: int, device: torch.device | str | None = None) -> Tensor:
    """``(T, S)`` boolean mask, ``True`` where query ``i`` (position ``s - t + i``) may see key ``j``."""
    q = torch.arange(s - t, s, device=device)
    k = torch.arange(s, device=device)
    return k[None, :] <= q[:, None]


class Task(abc.ABC):
    """An algorithmic task: a symbol vocabulary and a seeded generator of ``(prompt, answer)`` examples.

    A task is trained on and scored like a language model's text, but with no BPE:
    each symbol is one token. An example is laid out as::

        prompt symbols  "="  answer symbols  "<eos>"

    and only the answer and ``<eos>`` are scored (the loss mask), so a model is
    never asked to predict the random prompt. ``length`` is the task's own size
    (items to copy, digits to add, pairs to recall). Worked example::

        class Copy(Task):
            name = "copy"
            defaults = {"symbols": 10}
            @property
            def symbols(self):
                return [str(d) for d in range(self.options["symbols"])]
            def example(self, length, rng):
                prompt = [self.symbols[i] for i in rng.integers(0, len(self.symbols), size=length)]
                return prompt, list(prompt)
            def sequence_length(self, length):
                return 2 * length + 2

    Third-party packages register tasks with ``register_tasks(register)`` and run
    ``alilama_core.testing.check_task`` on them.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    """The task's options and their default values; ``task.options`` in a config overrides them."""
    SPECIALS: ClassVar[tuple[str, str, str]] = ("<pad>", "<eos>", "=")
    """Symbols every task has, first in its vocabulary: padding, end of answer, prompt/answer separator."""

    def __init__(self, **options: Any) -> None:
        from alilama_core.errors import ConfigError

        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            known = ", ".join(sorted(self.defaults)) or "none"
            raise ConfigError(f"task {self.name!r} has no option(s) {', '.join(unknown)}; its options: {known}")
        self.options: dict[str, Any] = {**self.defaults, **options}

    @property
    @abc.abstractmethod
    def symbols(self) -> list[str]:
        """The task's own symbols (the specials are added in front by ``vocabulary``)."""

    @abc.abstractmethod
    def example(self, length: int, rng: Any) -> tuple[list[str], list[str]]:
        """One ``(prompt, answer)`` pair of size ``length``, drawn from ``rng`` (a ``numpy.random.Generator``)."""

    @abc.abstractmethod
    def sequence_length(self, length: int) -> int:
        """Most tokens an example of size ``length`` takes: prompt, ``=``, answer and ``<eos>``."""

    @property
    def max_length(self) -> int | None:
        """Largest ``length`` the task can generate (``None``: unbounded)."""
        return None

    def score(self, predicted: list[str], answer: list[str]) -> bool:
        """Exact match: whether a predicted answer counts as right (default: symbol for symbol)."""
        return list(predicted) == list(answer)

    def vocabulary(self) -> list[str]:
        """Every symbol, specials first; a symbol's index is its token id."""
        return [*self.SPECIALS, *self.symbols]

    def tokenizer(self):
        """A ``Tokenizer`` over ``vocabulary()`` (saved in task runs, so tools can label tokens)."""
        from alilama_core.tasks import SymbolTokenizer

        return SymbolTokenizer(self.vocabulary())
