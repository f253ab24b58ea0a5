"""A decode step of one shape for a sequence's whole life: the static KV cache and the step that runs on it.

``KVCache`` grows as tokens come, so every decode step of ``GPT.forward`` has a
new shape, and a compiler traces a new graph for each (or gives up). Here the
cache is allocated once at its capacity (``StaticCache``, ``alilama_core.engine.cache``: keys and values
``(L, B, H, N, D)``, each row's and head's columns one contiguous block), a
step reads the filled columns, a prefix of each block, with the padded ones
masked, and returns its keys and values for a column given as a tensor, so
every step of a sequence runs the same code, compiled once with the width of
the filled part, the capacity and the number of rows as its dynamic dimensions
(one package per model serves a sequence alone and a running batch of any size)::

    cache = StaticCache.for_model(model, batch=1, capacity=272)
    logits = model(prompt, cache=cache.kv_cache())         # prefill, eager, in one call
    step, why_not = compiled_step(model)                   # or DecodeStep(model), uncompiled
    width = step_width(model, column, cache.capacity)     # the filled columns (at least 2)
    logits, keys, values = step(token, column, positions, visible[:, :width], *cache.buffers())
    cache.write(column, keys, values)

``generate`` (``SamplingSettings.decode``) and ``ContinuousBatch(decode=...)``
run this loop for ``"compiled"``, and for ``"auto"`` when the compiled step is
ready; ``decode_plan`` says which path a model takes and why.

The step reuses the model's own modules (``CausalSelfAttention.project`` and
``output``, the blocks' norms and MLP) and computes exact attention, the full
softmax of ``q k^T / sqrt(D)`` plus the scheme's bias over the visible keys,
which is what every exact backend computes (``AttentionBackend.exact``). A bias
scheme's bias is asked for the query's column and every key's column, as the
eager path asks for a padded batch's columns (a bias is a function of the
distance alone), so a padded row gets what it gets alone.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import platform
import tempfile
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import torch
from torch import Tensor, nn

from alilama_core.base.errors import AlilamaWarning, ConfigError
from alilama_core.engine.cache import StaticCache
from alilama_core.engine.model import GPT


class DecodeStep(nn.Module):
    """One decoding step on a ``StaticCache``: one new token per row at cache column ``column``.

    ``forward(tokens (B, 1), column (1,), positions (B, 1), visible (B, W), keys, values)
    -> (logits (B, V), keys (L, B, H, 1, D), values (L, B, H, 1, D))``: ``keys`` and ``values`` are the
    whole cache ``(L, B, H, N, D)`` (``StaticCache.buffers``); the step reads their first ``W`` columns
    (``column <= W <= N``) and returns the new token's keys and values, which the caller writes at ``column``
    (``StaticCache.write``; a compiled graph that wrote them itself would copy the whole buffer).
    ``positions`` are each row's own positions (rotary and embedding schemes); ``visible`` marks the
    columns before ``column`` that a row may see (its padding is ``False``); columns from ``column`` on
    are hidden whatever it says.
    """

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, tokens: Tensor, column: Tensor, positions: Tensor, visible: Tensor, keys: Tensor, values: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        model = self.model
        scheme = model.positional
        n, scale = visible.size(1), keys.size(-1) ** -0.5
        torch._check(n <= keys.size(3))  # the columns read are inside the cache
        x = model.tok_emb(tokens)  # (B, 1, C)
        if scheme.kind == "embedding":
            x = x + scheme.embed(positions)  # (B, 1, C)
        columns = torch.arange(n, device=tokens.device)  # (N,)
        keep = visible & (columns < column)  # (B, N): the cached keys a row sees (its own comes apart)
        hidden = torch.zeros(keep.shape, dtype=torch.float32, device=tokens.device).masked_fill(~keep, float("-inf"))
        old_bias = hidden[:, None, None, :]  # (B, 1, 1, N)
        new_bias = torch.zeros(1, 1, 1, 1, device=tokens.device)  # (1, 1, 1, 1)
        if scheme.kind == "bias":
            bias = scheme.bias(column, torch.cat((columns, column))).float()  # (H, 1, N + 1)
            old_bias = old_bias + bias[None, :, :, :n]  # (B, H, 1, N)
            new_bias = bias[None, :, :, n:]  # (1, H, 1, 1)
        new_keys, new_values = [], []
        for layer, block in enumerate(model.blocks):
            q, k, v = block.attn.project(block.ln_attn(x), positions)  # (B, H, 1, D) each
            cached_k = keys[layer, :, :, :n]  # (B, H, N, D)
            cached_v = values[layer, :, :, :n]  # (B, H, N, D)
            old = (q @ cached_k.transpose(-1, -2)).float() * scale + old_bias  # (B, H, 1, N)
            own = (q * k).sum(-1, keepdim=True).float() * scale + new_bias  # (B, H, 1, 1)
            p = torch.cat((old, own), dim=-1).softmax(dim=-1).to(v.dtype)  # (B, H, 1, N + 1)
            y = p[..., :n] @ cached_v + p[..., n:] * v  # (B, H, 1, D)
            x = x + block.attn.output(y)  # (B, 1, C)
            x = x + block.mlp(block.ln_mlp(x))  # (B, 1, C)
            new_keys.append(k)  # (B, H, 1, D)
            new_values.append(v)
        logits = model.head(model.ln_f(x))[:, -1]  # (B, V)
        return logits, torch.stack(new_keys), torch.stack(new_values)  # (B, V), (L, B, H, 1, D) twice


# -- choosing and building the compiled step -------------------------------------------------------

DecodeChoice = Literal["auto", "eager", "compiled"]
DECODE_CHOICES: tuple[str, ...] = ("auto", "eager", "compiled")
"""``eager``: ``GPT.forward`` on a growing ``KVCache`` (the reference). ``compiled``: the ``DecodeStep``
compiled (an AOTInductor package on CPU, built once per model, for any number of rows, and kept in the run
folder when one is attached, ``alilama_core.runs.compiled``; CUDA graphs through ``torch.compile`` on
CUDA), built if need be. ``auto``: the compiled step when it is ready without compiling (built
earlier in this process or cached in the run folder; loading a package takes milliseconds), else eager."""

SAMPLE_CAPACITY = 64
"""The cache capacity the package is traced at (and a few columns fewer read); both are dynamic dimensions,
so one package serves any."""
MAX_CAPACITY = 1 << 20
SAMPLE_ROWS = 4
"""The rows the package is traced with; the rows are a dynamic dimension too (``build_package``)."""
MAX_ROWS = 1 << 12
INDUCTOR_CONFIGS = {
    "freezing": True,
    "max_autotune": True,
    "autotune_num_choices_displayed": 0,  # the tuning tables are Inductor's business, not a user's terminal's
    "max_autotune_report_choices_stats": False,
}
"""Weights folded into the package and Inductor's own small-matrix kernels (measured: about 1.3x the
default on the essay model at batch 1, one thread); the package is therefore per weights."""
CUDA_BUCKET = 256
"""On CUDA a graph is captured per cache width: widths are rounded up to a multiple of this."""


def check_choice(decode: str) -> str:
    if decode not in DECODE_CHOICES:
        raise ConfigError(f"decode must be one of {', '.join(DECODE_CHOICES)}; got {decode!r}")
    return decode


def refusal(model: GPT) -> str | None:
    """Why this model cannot decode with the compiled step (``None``: it can)."""
    device = model.tok_emb.weight.device
    if device.type not in ("cpu", "cuda"):
        return f"no compiled decode step on {device.type} (CPU and CUDA only)"
    if model.training:
        return "the model is in training mode (dropout would differ); call model.eval()"
    backend = model.backend
    if not backend.exact:
        return (
            f"attention backend {backend.name!r} is not exact (exact=False): the compiled step computes exact "
            f"attention, so it would not compute what {backend.name!r} computes"
        )
    if model.positional.kind not in ("bias", "rotary", "embedding", "none"):
        return f"positional scheme {model.config.positional!r} has an unknown kind {model.positional.kind!r}"
    if torch.is_autocast_enabled(device.type):
        return "autocast is on: the package computes in the model's own dtype"
    if device.type == "cpu" and not hasattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader"):
        return f"torch {torch.__version__} has no AOTInductor packages (torch 2.6 or later)"
    return None


def _no_compiler() -> str | None:
    """Why Inductor cannot compile C++ here (checked only before a build: loading a package needs none)."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except Exception as exc:  # no C++ compiler: Inductor says which it looked for
        return f"no C++ compiler for Inductor ({_first_line(exc)})"
    return None


def step_width(model: GPT, column: int, capacity: int) -> int:
    """How many cache columns a step at ``column`` reads: the filled ones (at least 2, the package's
    smallest width) on CPU; on CUDA the whole cache, so that one captured graph serves every step."""
    if model.tok_emb.weight.device.type == "cuda":
        return capacity
    return max(column, 2)


def capacity_for(model: GPT, positions: int) -> int:
    """The cache width to allocate for ``positions``: itself on CPU, a multiple of ``CUDA_BUCKET`` on CUDA."""
    if model.tok_emb.weight.device.type == "cuda":
        return -(-positions // CUDA_BUCKET) * CUDA_BUCKET
    return positions


class PackageStore(Protocol):
    """Where compiled packages are kept, one file per key (``alilama_core.runs.compiled.RunPackages``)."""

    def find(self, key: str) -> Path | None:
        """The package for ``key``, if kept."""

    def put(self, key: str, build: Callable[[Path], None]) -> Path:
        """Keep the package ``build(path)`` writes, atomically; return where it is."""

    def discard(self, key: str) -> None:
        """Forget the package for ``key`` (it did not load)."""


class _ProcessStore:
    """Packages of models without a run folder: a temporary folder of this process."""

    def __init__(self) -> None:
        self._folder: tempfile.TemporaryDirectory | None = None

    def _path(self, key: str) -> Path:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="alilama-decode-")
        return Path(self._folder.name) / f"decode-{key}.pt2"

    def find(self, key: str) -> Path | None:
        path = self._path(key)
        return path if path.is_file() else None

    def put(self, key: str, build: Callable[[Path], None]) -> Path:
        build(self._path(key))
        return self._path(key)

    def discard(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


_PROCESS_STORE = _ProcessStore()
_STORES: weakref.WeakKeyDictionary[GPT, PackageStore] = weakref.WeakKeyDictionary()
_LOADED: dict[str, Callable] = {}  # package key -> loaded runner
_CUDA_STEPS: weakref.WeakKeyDictionary[GPT, Callable] = weakref.WeakKeyDictionary()
_KEYS: weakref.WeakKeyDictionary[GPT, tuple[tuple, dict[int, str]]] = weakref.WeakKeyDictionary()
_LOCK = threading.RLock()
_WARNED: set[tuple[int, str]] = set()


def keep_packages(model: GPT, store: PackageStore | None) -> None:
    """Keep ``model``'s compiled packages in ``store`` (``None``: in this process only)."""
    if store is None:
        _STORES.pop(model, None)
    else:
        _STORES[model] = store


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _sources() -> bytes:
    """The code the package is built from: this module, the model's, and the scheme's."""
    return b"".join(Path(f).read_bytes() for f in (__file__, _model_file()))


def _model_file() -> str:
    from alilama_core.engine import model as model_module

    return model_module.__file__


def package_key(model: GPT) -> str:
    """What a package is valid for: torch, the machine, the code, the config, the weights and dtype (any batch size)."""
    tensors = sorted(model.state_dict(keep_vars=True).items())
    state = tuple((name, id(t), t.data_ptr(), t._version) for name, t in tensors)
    with _LOCK:
        seen = _KEYS.get(model)
        if seen is None or seen[0] != state:
            seen = _KEYS[model] = (state, None)
        if seen[1] is not None:
            return seen[1]
    digest = hashlib.sha256()
    weight = model.tok_emb.weight
    scheme_file = getattr(__import__(type(model.positional).__module__, fromlist=["_"]), "__file__", None)
    for part in (
        torch.__version__,
        _machine(),
        platform.python_version(),
        repr(dataclasses.replace(model.config, attention="", attention_options={})),  # the step's own attention
        repr(INDUCTOR_CONFIGS),
        f"{weight.device.type}/{weight.dtype}",
    ):
        digest.update(part.encode() + b"\0")
    digest.update(_sources())
    if scheme_file and Path(scheme_file).is_file():
        digest.update(Path(scheme_file).read_bytes())
    for name, t in tensors:
        digest.update(name.encode() + b"\0")
        digest.update(t.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy().tobytes())
    dtype = str(weight.dtype).removeprefix("torch.")
    key = f"{weight.device.type}-{dtype}-{digest.hexdigest()[:20]}"
    with _LOCK:
        _KEYS[model] = (state, key)
    return key


def example_inputs(model: GPT, batch: int, capacity: int, width: int | None = None) -> tuple[Tensor, ...]:
    """Inputs of ``DecodeStep`` for ``batch`` rows and a cache of ``capacity`` columns, ``width`` of them read
    (default: all); what it is traced with."""
    device = model.tok_emb.weight.device
    cache = StaticCache.for_model(model, batch, capacity)
    width = capacity if width is None else width
    column = width // 2
    return (
        torch.zeros(batch, 1, dtype=torch.long, device=device),
        torch.tensor([column], device=device),
        torch.full((batch, 1), column, dtype=torch.long, device=device),
        torch.ones(batch, width, dtype=torch.bool, device=device),
        *cache.buffers(),
    )


def build_package(model: GPT, path: Path) -> None:
    """Export the ``DecodeStep`` of ``model`` for any number of rows, cache capacity and columns read, and
    compile it to ``path``.

    All three are dynamic dimensions: one package serves a batch of one row and a running batch of many, and
    its kernels run as fast as those of a package traced for one size (measured at 1 to 16 rows)."""
    step = DecodeStep(model).eval()
    width = torch.export.Dim("width", min=2, max=MAX_CAPACITY)
    capacity = torch.export.Dim("capacity", min=2, max=MAX_CAPACITY)
    rows = torch.export.Dim("rows", min=1, max=MAX_ROWS)
    shapes = ({0: rows}, None, {0: rows}, {0: rows, 1: width}, {1: rows, 3: capacity}, {1: rows, 3: capacity})
    example = example_inputs(model, SAMPLE_ROWS, SAMPLE_CAPACITY, SAMPLE_CAPACITY - 8)  # W < N: two dimensions
    with torch.no_grad(), warnings.catch_warnings():
        # the compiler's own use of an API torch deprecates; nothing a user of Alilama can act on
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated", category=UserWarning)
        program = torch.export.export(step, example, dynamic_shapes=shapes)
        configs = dict(INDUCTOR_CONFIGS)  # a copy: the compiler adds to the dict it is given (and the key reads it)
        torch._inductor.aoti_compile_and_package(program, package_path=str(path), inductor_configs=configs)


def _load(path: Path) -> Callable:
    """The package's runner: ``run(*tensors) -> [logits, keys, values]``, without the GIL while it computes.

    The package's model is called through its C interface (``_Unlocked``), which
    ``ctypes`` calls with the GIL released, so the server's HTTP thread runs while
    a step computes; torch's own loader (``boxed_run``) holds the GIL for the
    whole step. Where that interface cannot be had, torch's loader runs it, straight
    from C++: ``aoti_load_package`` would first probe the CPU's vector instructions in
    ten compiler runs (1.4 s a process) to warn about a package from another CPU,
    which the key already rules out (``_machine``).
    """
    try:
        return _Unlocked(path)
    except _NoInterface:
        pass
    loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)

    def run(*tensors: Tensor) -> list[Tensor]:
        return loader.boxed_run(list(tensors))

    return run


@functools.cache
def _capsules() -> tuple[Callable, Callable]:
    """``PyCapsule_GetPointer`` and ``PyCapsule_New`` with their signatures, as private prototypes (setting
    ``argtypes`` on ``ctypes.pythonapi``'s own would change them for every user of ``ctypes`` in the process)."""
    import ctypes

    pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
    capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
    return pointer(("PyCapsule_GetPointer", ctypes.pythonapi)), capsule(("PyCapsule_New", ctypes.pythonapi))


class _NoInterface(Exception):
    """The package's C interface cannot be called here (torch's loader runs it instead)."""


class _Unlocked:
    """A CPU package's model called through AOTInductor's C interface (``aoti_runtime/interface.h``).

    ``AOTInductorModelContainerRun`` takes the inputs as tensor handles (it steals
    them) and gives the outputs as new handles; torch's ``_aoti`` helpers turn
    tensors into handles and back. ``ctypes`` releases the GIL for the call.
    """

    def __init__(self, path: Path) -> None:
        import ctypes
        import zipfile

        helpers = getattr(torch._C, "_aoti", None)
        if not all(
            hasattr(helpers, f)
            for f in ("unsafe_alloc_void_ptrs_from_tensors", "alloc_tensors_by_stealing_from_void_ptrs")
        ):
            raise _NoInterface
        with zipfile.ZipFile(path) as archive, tempfile.TemporaryDirectory(prefix="alilama-decode-") as folder:
            libraries = [n for n in archive.namelist() if "/data/aotinductor/model/" in n and n.endswith(".so")]
            if len(libraries) != 1:  # weights outside the library, or another layout: torch's loader knows it
                raise _NoInterface
            library = ctypes.CDLL(archive.extract(libraries[0], folder))  # mapped: the file may go
        if not hasattr(library, "AOTInductorModelContainerRun"):
            raise _NoInterface
        self._library, self._helpers, self._ctypes = library, helpers, ctypes
        handle = ctypes.c_void_p()
        self._check(
            library.AOTInductorModelContainerCreateWithDevice(ctypes.byref(handle), ctypes.c_size_t(1), b"cpu", None),
            "load",
        )
        self._handle = handle
        count = ctypes.c_size_t()
        self._check(library.AOTInductorModelContainerGetNumOutputs(handle, ctypes.byref(count)), "load")
        self._outputs = count.value
        self._run = library.AOTInductorModelContainerRun
        self._run.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        self._pointer, self._capsule = _capsules()

    @staticmethod
    def _check(error: int, what: str) -> None:
        if error:
            raise RuntimeError(f"the compiled decode step failed to {what} (AOTInductor error {error})")

    def __call__(self, *tensors: Tensor) -> list[Tensor]:
        ctypes = self._ctypes
        handles = self._helpers.unsafe_alloc_void_ptrs_from_tensors(list(tensors))
        inputs = (ctypes.c_void_p * len(tensors))(*[self._pointer(h, None) for h in handles])
        outputs = (ctypes.c_void_p * self._outputs)()
        self._check(self._run(self._handle, inputs, len(tensors), outputs, self._outputs, None, None), "run")
        return self._helpers.alloc_tensors_by_stealing_from_void_ptrs([self._capsule(p, None, None) for p in outputs])

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None:
            self._library.AOTInductorModelContainerDelete(handle)


def _machine() -> str:
    """The CPU a package's kernels are built for: its model and instruction-set flags (Linux), else the platform."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            lines = [line for line in info if line.startswith(("model name", "flags"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


NOT_BUILT = "the compiled decode step is not built"
"""How every reason that only means "not built yet" begins (``decode_plan``, the commands' notice)."""


def compiled_step(model: GPT, build: bool = True) -> tuple[Callable | None, str | None]:
    """The compiled ``DecodeStep`` of ``model`` (any number of rows) and why not (``(None, reason)``).

    On CPU: loaded from this process, or from the model's ``PackageStore``, or
    (``build``) compiled and kept there; a package that does not load is
    discarded and rebuilt. On CUDA: ``torch.compile`` with CUDA graphs, once per process.
    """
    if (reason := refusal(model)) is not None:
        return None, reason
    if model.tok_emb.weight.device.type == "cuda":
        return _cuda_step(model, build)
    key = package_key(model)
    with _LOCK:
        if (runner := _LOADED.get(key)) is not None:
            return runner, None
        store = _STORES.get(model, _PROCESS_STORE)
        path = store.find(key)
        if path is not None:
            try:
                runner = _load(path)
            except Exception as exc:  # a truncated or foreign file: rebuild it, never crash on it
                store.discard(key)
                warnings.warn(
                    f"the cached decode step {path} did not load ({_first_line(exc)}); rebuilding it",
                    AlilamaWarning,
                    stacklevel=3,
                )
                path = None
        if path is None:
            if not build:
                return (
                    None,
                    f"{NOT_BUILT} for this model yet (decode='compiled' builds it once)",
                )
            if (reason := _no_compiler()) is not None:
                return None, reason
            try:
                path = store.put(key, lambda target: build_package(model, target))
                runner = _load(path)
            except Exception as exc:  # a scheme the compiler cannot trace, a compiler error: eager, and why
                return None, f"the decode step did not compile: {_first_line(exc)}"
        _LOADED[key] = runner
        return runner, None


def _cuda_step(model: GPT, build: bool) -> tuple[Callable | None, str | None]:
    with _LOCK:
        step = _CUDA_STEPS.get(model)
        if step is None:
            if not build:
                return None, f"{NOT_BUILT} in this process yet (decode='compiled' builds it)"
            compiled = torch.compile(DecodeStep(model).eval(), mode="reduce-overhead", fullgraph=True, dynamic=False)

            def step(*args: Tensor) -> tuple[Tensor, Tensor, Tensor]:
                torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are consumed
                return compiled(*args)

            try:
                with torch.no_grad():
                    step(*example_inputs(model, 1, CUDA_BUCKET))
            except Exception as exc:
                return None, f"the decode step did not compile: {_first_line(exc)}"
            _CUDA_STEPS[model] = step
        return step, None


def decode_step(model: GPT, decode: str = "auto") -> Callable | None:
    """The step to decode with for choice ``decode`` (``None``: eager).

    ``compiled`` that cannot be had warns why (``AlilamaWarning``, once per model and reason) and
    decodes eagerly: the same tokens, slower. ``auto`` never compiles by itself.
    """
    if check_choice(decode) == "eager":
        return None
    step, reason = compiled_step(model, build=decode == "compiled")
    if step is None and decode == "compiled" and (id(model), reason) not in _WARNED:
        _WARNED.add((id(model), reason))
        warnings.warn(f"decode='compiled' decodes eagerly: {reason}", AlilamaWarning, stacklevel=3)
    return step


@dataclass(frozen=True)
class DecodePlan:
    """What ``decode`` means for a model now: the path taken and, when it is eager, why."""

    path: Literal["eager", "compiled"]
    reason: str | None = None


def decode_plan(model: GPT, decode: str = "auto") -> DecodePlan:
    """What ``generate`` would do for ``decode`` (nothing is built; a cached package is loaded)."""
    if check_choice(decode) == "eager":
        return DecodePlan("eager", "decode='eager'")
    step, reason = compiled_step(model, build=False)
    if step is not None:
        return DecodePlan("compiled")
    if decode == "compiled" and reason is not None and reason.startswith(NOT_BUILT):
        return DecodePlan("compiled", "built at first use")
    return DecodePlan("eager", reason)
