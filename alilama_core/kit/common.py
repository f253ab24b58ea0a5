"""What every check of the kit shares: tiny models, twins, the failure message."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from alilama_core.contracts.attention import AttentionCase, attention_backend
from alilama_core.contracts.config import ModelConfig
from alilama_core.base.errors import AlilamaError, ConfigError
from alilama_core.contracts.hookspecs import hookimpl
from alilama_core.engine.cache import row_positions
from alilama_core.engine.configs import PRESETS
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import HOOKS, get_registry

TRICKY_TEXTS = (
    "",
    "hello world",
    "  leading and trailing spaces  ",
    "line one\nline two\r\n\ttabbed",
    "Ünïcödé, 日本語, emoji 🙂🚀 and a ZWJ 👩‍👩‍👧",
    "numbers 1234567 and punctuation!?...",
)
"""Strings every tokenizer must round-trip exactly."""


def _fail(what: str, why: str) -> AssertionError:
    return AssertionError(f"{what}: {why}")


def _refuses_unknown_option(what: str, attempt: Callable[[], Any], where: str) -> None:
    """``attempt()`` (given the option ``no_such_option``) raises ``ConfigError`` naming it."""
    try:
        attempt()
    except ConfigError as exc:
        if "no_such_option" not in str(exc):
            raise _fail(what, f"the error for an unknown option does not name it: {exc}") from None
    else:
        raise _fail(what, f"an unknown key in {where} was accepted")


@contextmanager
def registered(kind: str, name: str, target: Any) -> Iterator[str]:
    """Register ``target`` as ``kind`` ``name`` for the duration of a ``with`` block (for unregistered classes)."""

    def register_one(register):
        register(name, target)

    plugin = types.SimpleNamespace(**{HOOKS[kind]: hookimpl(register_one)})
    registry = get_registry()
    plugin_name = registry.register_plugin(plugin, name=f"conformance-{kind}-{name}")
    try:
        yield name
    finally:
        registry.unregister_plugin(plugin_name)


def _scope(kind: str, target: Any) -> tuple[str, Callable[[], Any]]:
    """(registry name, a factory of context managers under which that name is registered)."""
    if isinstance(target, str):
        return target, _nothing
    label = getattr(target, "__name__", None) or getattr(target, "name", None) or "plugin"
    name = f"conformance-{str(label).lower()}"
    return name, lambda: registered(kind, name, target)


def _scoped(scope: Callable[[], Any], fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` run with the plugin's name registered (a class given to a check is registered for each run)."""

    def run() -> None:
        with scope():
            fn()

    return run


@dataclass(frozen=True)
class Check:
    """One named check of a plugin's contract: call it to run it (``AssertionError`` says what fails).

    ``skip`` says why the check does not apply to this plugin (declared from
    what the plugin declares, before anything runs); ``gap`` marks a check the
    plugin is known to fail (a declared known gap, with its reason).
    """

    kind: str
    target: str
    name: str
    run: Callable[[], None] = field(repr=False)
    skip: str | None = None
    gap: str | None = None

    def __call__(self) -> None:
        self.run()

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.target}:{self.name}"


def run_checks(checks: Iterable[Check], known_gaps: Mapping[str, str] | None = None) -> list[str]:
    """Run ``checks`` in order; return the names of those that ran (a ``check_*`` function's result).

    A check with a ``skip`` is not run. A check named in ``known_gaps`` must fail
    (``AssertionError``); if it passes, the gap is gone and that is an error too.
    """
    done = []
    for check in checks:
        if check.skip is not None:
            continue
        gap = (known_gaps or {}).get(check.name, check.gap)
        if gap is None:
            check()
            done.append(check.name)
            continue
        try:
            check()
        except AssertionError:
            done.append(f"{check.name} (known gap: {gap})")
        else:
            raise AssertionError(f"{check.id}: declared as a known gap ({gap}) but it passes; remove the declaration")
    return done


class Subject:
    """What the checks of one plugin share, built once, when a check first needs it."""

    def __init__(self, **build: Callable[[], Any]) -> None:
        self._build = build
        self._built: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        build = self.__dict__.get("_build", {})
        if name not in build:
            raise AttributeError(name)
        if name not in self._built:
            self._built[name] = build[name]()
        return self._built[name]


def parametrize_with_checks(*plans: Iterable[Check]):
    """A ``pytest.mark.parametrize`` over every check of ``plans``: one test case per check.

    In scikit-learn's ``parametrize_with_checks`` shape: a check that does not
    apply is a skipped case with its reason, a declared known gap an expected
    failure (strict: it must fail)::

        from alilama_core.kit import parametrize_with_checks, positional_checks

        @parametrize_with_checks(positional_checks("kerple-log"), attention_checks("window"))
        def test_conforms(check):
            check()
    """
    import pytest

    cases = []
    for plan in plans:
        for check in plan:
            marks = []
            if check.skip is not None:
                marks.append(pytest.mark.skip(reason=check.skip))
            elif check.gap is not None:
                marks.append(pytest.mark.xfail(reason=check.gap, raises=AssertionError, strict=True))
            cases.append(pytest.param(check, id=check.id, marks=marks))
    return pytest.mark.parametrize("check", cases)


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def tiny_model_config(**overrides: Any):
    """A CPU-sized ``ModelConfig`` for conformance checks: the ``tiny`` preset's model (2 layers,
    4 heads of 8), with 61 ids, 16 positions and the eager reference backend unless overridden."""
    base = {**PRESETS["tiny"]["model"], "vocab_size": 61, "context_length": 16, "attention": "eager"}
    return ModelConfig(**{**base, **overrides})


PROMPT_LENGTHS = (64, 200)
"""The prompts of a padded batch the kit checks: as long as real prompts, far past a 12-token probe."""
DECODE_STEPS = 3
"""Tokens the kit decodes with a KV cache after a padded batch's prompts."""
KIT_CONTEXT = 256
"""``context_length`` of the positional and attention kits' models: a table scheme (learned) covers the
longest prompt and its decoded tokens."""


def prompt_lengths(limit: int | None) -> tuple[int, ...] | None:
    """``PROMPT_LENGTHS``, cut so that the prompts and ``DECODE_STEPS`` fit in ``limit`` positions (``None``: any).

    ``None`` when fewer than two different lengths fit.
    """
    if limit is None or limit >= PROMPT_LENGTHS[-1] + DECODE_STEPS:
        return PROMPT_LENGTHS
    longest = limit - DECODE_STEPS
    return (longest // 3, longest) if longest >= 3 else None


def _padded_batch_error(model, reference=None, lengths: tuple[int, ...] = PROMPT_LENGTHS) -> str | None:
    """Where a left-padded batch differs from each of its prompts alone (``None``: nowhere).

    Prompts of ``lengths`` tokens, shortest first so that row 0 is the padded one,
    are batched as ``generate_stream`` and ``alilama serve`` batch them: left-padded,
    the padding hidden by ``key_padding_mask``, each row given its own
    ``position_ids`` (0 at its first real token). The batch is prefilled into a
    ``KVCache`` and decodes ``DECODE_STEPS`` more tokens; every logit must be
    finite, padding included, and those of every real token must be what
    ``reference`` (default: ``model``) gives for the row's tokens alone, in one
    pass without padding.
    """
    import torch

    from alilama_core.engine.cache import KVCache

    reference = model if reference is None else reference
    model.eval()
    reference.eval()
    rows, width = len(lengths), max(lengths)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.config.vocab_size, (rows, width + DECODE_STEPS), generator=generator)
    ids = torch.zeros(rows, width, dtype=torch.long)
    mask = torch.zeros(rows, width, dtype=torch.bool)  # True on real tokens
    for row, n in enumerate(lengths):
        ids[row, width - n :], mask[row, width - n :] = tokens[row, :n], True
    positions = row_positions(mask)  # (rows, width)
    cache = KVCache()
    with torch.no_grad():
        steps = [model(ids, cache=cache, key_padding_mask=mask, position_ids=positions)]
        for step in range(DECODE_STEPS):
            mask = torch.cat((mask, mask.new_ones(rows, 1)), dim=1)
            positions = positions[:, -1:] + 1  # (rows, 1)
            new = torch.stack([tokens[row, n + step] for row, n in enumerate(lengths)])[:, None]  # (rows, 1)
            steps.append(model(new, cache=cache, key_padding_mask=mask, position_ids=positions))
        batched = torch.cat(steps, dim=1)  # (rows, width + DECODE_STEPS, V)
        if not torch.isfinite(batched).all():
            return "it gives logits that are not finite (a padded query must still see its own key: never a fully hidden row)"
        for row, n in enumerate(lengths):
            alone = reference(tokens[row : row + 1, : n + DECODE_STEPS])[0]  # (n + DECODE_STEPS, V)
            got = batched[row, width - n :]
            if not torch.allclose(got, alone, atol=1e-4, rtol=1e-4):
                diff = (got - alone).abs().amax(dim=-1)  # per token
                at = int(diff.argmax())
                where = f"prompt token {at}" if at < n else f"decode step {at - n + 1} (KV cache)"
                return (
                    f"row {row} ({n}-token prompt after {width - n} padding tokens), at {where}: "
                    f"max |difference| {float(diff.max()):.2e}"
                )
    return None


def _check_twins(what: str, ref, other, x, logits_differ: str, gradient_differs: Callable[[str], str]) -> None:
    """``other`` gives ``ref``'s logits on ``x`` and, after a backward pass, its parameter gradients."""
    import torch

    a, b = ref(x), other(x)
    if not torch.allclose(a, b, atol=1e-4, rtol=1e-4):
        raise _fail(what, f"{logits_differ} (max {(a - b).abs().max():.2e})")
    a.float().logsumexp(-1).mean().backward()
    b.float().logsumexp(-1).mean().backward()
    for (pname, pa), (_, pb) in zip(ref.named_parameters(), other.named_parameters()):
        if pa.grad is not None and not torch.allclose(pa.grad, pb.grad, atol=1e-4, rtol=1e-3):
            raise _fail(what, gradient_differs(pname))


def _twins(config, attention: str, options: dict[str, Any] | None = None):
    """The eager reference and a model with ``attention`` (set up with ``options``) holding the same weights."""
    import torch

    torch.manual_seed(0)
    ref = build_model(config)
    other = build_model(_replace(config, attention=attention, attention_options=dict(options or {})))
    other.load_state_dict(ref.state_dict())
    return ref, other


def _replace(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)


def _cpu_backends(config, training: bool, exact_only: bool = False, padded: bool = False) -> list[str]:
    """Registered backends that can run ``config``'s scheme on the CPU here, routers excluded.

    ``exact_only``: only those that declare exact attention (the ones to compare with eager);
    ``padded``: only those that take a key padding mask.
    """
    import torch

    registry = get_registry()
    scheme = registry.get("positional", config.positional)
    names = []
    for name in registry.names("attention"):
        try:
            backend = attention_backend(registry.get("attention", name))
        except AlilamaError:
            continue
        case = AttentionCase(
            device="cpu",
            dtype=torch.float32,
            head_dim=config.d_model // config.n_heads,
            shape="short",
            kind=scheme.kind,
            has_slopes=scheme.has_slopes,
            padded=padded,
            training=training,
        )
        if exact_only and not backend.exact:
            continue
        if backend.supports(scheme) and backend.refuses(case) is None:
            names.append(name)
    return names
