"""What every check of the kit shares: tiny models, twins, the failure message."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from alilama_core.contracts.attention import AttentionCase, attention_backend
from alilama_core.contracts.config import ModelConfig
from alilama_core.contracts.errors import AlilamaError, ConfigError
from alilama_core.contracts.hookspecs import hookimpl
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


def _name(kind: str, scheme: Any) -> tuple[str, Any]:
    """(registry name, context manager) for a name or a class given to a check."""
    name, scope = _scope(kind, scheme)
    return name, scope()


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


def _cpu_backends(config, training: bool, exact_only: bool = False) -> list[str]:
    """Registered backends that can run ``config``'s scheme on the CPU here, routers excluded.

    ``exact_only``: only those that declare exact attention (the ones to compare with eager).
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
            training=training,
        )
        if exact_only and not backend.exact:
            continue
        if backend.supports(scheme) and backend.refuses(case) is None:
            names.append(name)
    return names
