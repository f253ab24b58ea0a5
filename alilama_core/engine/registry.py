"""The plugin registry: loads ``alilama`` entry points once and builds name tables.

Built-in plugins (the ``alilama`` distribution's own entry points) and
third-party ones load the same way. ``ALILAMA_PLUGINS`` limits which *external*
distributions load: a comma-separated list of distribution names; an empty value
loads none. A plugin that raises while importing or registering is recorded in
``failures()`` and skipped; nothing it does can stop the CLI from starting.

Registered objects may be given as lazy ``"module:attr"`` strings, resolved on
first lookup, so that loading the registry never imports torch; so may the
objects registered beside them that ``LAZY_META`` names (a tokenizer's
``importer``). ``Registry.check()`` (``alilama plugins --check``) resolves every one of them.

Hooks are called through the plugin manager (``pm.hook.<name>``): only functions
marked with ``@hookimpl`` count, ``tryfirst``/``trylast`` and ``specname`` are
honoured, and each implementation is called on its own so that one that raises
is recorded and the others still register. The plugin kinds are one table,
``HOOKS`` (kind -> hook name): a new kind is one more line there and one hookspec.

Who owns a name: within a kind, a name belongs to the first plugin loaded that
registers it (built-ins load first, then other distributions by entry-point
name, then plugins registered in-process, in order; ``tryfirst``/``trylast``
change only the order of the calls). Another plugin registering the same name
is refused: recorded in ``failures()`` with both distributions named, and the
holder keeps it. A plugin takes over a name only by saying whose it takes,
``register("sdpa", MyBackend, replaces="alilama")`` (the holder's distribution,
or for an in-process plugin its plugin name); its ``Entry.replaced`` keeps the
entry it took over, and ``replacements()`` lists every such entry.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from alilama_core.contracts import hookspecs
from alilama_core.base.errors import PluginUnavailableError, UnknownPluginError, UnsupportedError

ENTRY_POINT_GROUP = "alilama"
ENV_VAR = "ALILAMA_PLUGINS"
BUILTIN_DISTRIBUTION = "alilama"
HOOKS: dict[str, str] = {
    "tokenizer": "register_tokenizers",
    "positional": "register_positional_schemes",
    "attention": "register_attention_backends",
    "trainer": "register_trainers",
    "task": "register_tasks",
    "logger": "register_loggers",
    "optimizer": "register_optimizers",
    "exporter": "register_exporters",
}
"""Plugin kind -> the ``register_*`` hook that fills its name table."""
KINDS = tuple(HOOKS)
LAZY_META: dict[str, tuple[str, ...]] = {"tokenizer": ("importer",)}
"""Plugin kind -> the ``register(..., key=...)`` objects that may be lazy ``"module:attr"`` paths too."""


@dataclass
class Entry:
    """One registered thing: its name, where it came from, and the object (or a lazy path)."""

    kind: str
    name: str
    target: Any
    plugin: str
    distribution: str
    version: str
    meta: dict[str, Any] = field(default_factory=dict)
    replaces: str | None = None
    """The distribution (or plugin) whose name this entry declared it takes over."""
    replaced: Entry | None = None
    """The entry this one took over (``None`` unless a declared replacement found one)."""
    seq: int = 0
    """Load order of the plugin that registered it (lower loaded earlier)."""

    @property
    def owner(self) -> str:
        """``"plugin 'x' of distribution 1.0"``: who registered it, for messages."""
        version = f" {self.version}" if self.version else ""
        return f"plugin {self.plugin!r} of {self.distribution}{version}"

    def replacement_note(self) -> str:
        """One line saying what this entry replaces and by whom (``""`` when it replaces nothing)."""
        if self.replaced is None:
            return ""
        built_in = "built-in " if self.replaced.distribution == BUILTIN_DISTRIBUTION else ""
        return (
            f"the {built_in}{self.kind} {self.name!r} of {self.replaced.distribution} is replaced by "
            f"{self.owner} (declared replaces={self.replaces!r})"
        )

    def resolve(self) -> Any:
        if isinstance(self.target, str):
            self.target = _import_path(self.target)
        return self.target

    def resolve_meta(self, key: str) -> Any:
        """The object registered as ``key=`` beside the target (a lazy ``"module:attr"`` is imported once)."""
        value = self.meta.get(key)
        if isinstance(value, str):
            value = self.meta[key] = _import_path(value)
        return value


def _import_path(path: str) -> Any:
    """The object a ``"module:attr"`` path names (``"module"`` alone: the module)."""
    module, _, attr = path.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


@dataclass
class Failure:
    plugin: str
    distribution: str
    error: str
    refused: bool = False
    """A registration refused because another plugin holds the name (the plugin's other names stand)."""


class Registry:
    """Name tables for every plugin kind, filled from the pluggy hooks."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("alilama")
        self.pm.add_hookspecs(hookspecs)
        self._tables: dict[str, dict[str, Entry]] | None = None
        self._load_failures: list[Failure] = []  # import-time, kept for the process
        self._build_failures: list[Failure] = []  # registration-time, reset on every rebuild
        self._origin: dict[int, tuple[str, str, str]] = {}  # id(plugin) -> (name, dist, version)
        self._seq: dict[int, int] = {}  # id(plugin) -> load order, which decides who holds a name
        self._next_seq = 0
        self._lock = threading.RLock()
        self._loaded = False
        self._apps: set[int] = set()  # ids of the typer apps plugins have added commands to

    # -- loading -----------------------------------------------------------------

    def _allowed(self, dist_name: str) -> bool:
        if dist_name == BUILTIN_DISTRIBUTION:
            return True
        value = os.environ.get(ENV_VAR)
        if value is None:
            return True
        allowed = {v.strip().lower().replace("_", "-") for v in value.split(",") if v.strip()}
        return dist_name.lower().replace("_", "-") in allowed

    def load_entry_points(self) -> None:
        """Import and register every allowed entry point of the group, once."""
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=_ep_sort_key):
                dist = ep.dist.name if ep.dist is not None else "?"
                version = ep.dist.version if ep.dist is not None else "?"
                if not self._allowed(dist) or self.pm.has_plugin(ep.name):
                    continue
                try:
                    module = ep.load()
                    self.register_plugin(module, name=ep.name, distribution=dist, version=version)
                except Exception as exc:  # a broken plugin is reported, never fatal
                    self._load_failures.append(Failure(ep.name, dist, f"{type(exc).__name__}: {exc}"))

    def register_plugin(
        self, plugin: object, name: str | None = None, distribution: str = "local", version: str = ""
    ) -> str:
        """Register a plugin object (module or instance) in-process; tables are rebuilt."""
        with self._lock:
            registered = self.pm.register(plugin, name=name)
            if registered is None:
                raise ValueError(f"plugin {name!r} is already registered")
            try:
                self.pm.check_pending()  # a misspelt hook name fails loudly
            except BaseException:
                # Taken out again, so the plugins registered after it do not inherit its error.
                self.pm.unregister(plugin)
                raise
            self._origin[id(plugin)] = (registered, distribution, version)
            self._seq[id(plugin)] = self._next_seq
            self._next_seq += 1
            self._tables = None
            return registered

    def unregister_plugin(self, name: str) -> None:
        with self._lock:
            plugin = self.pm.unregister(name=name)
            if plugin is not None:
                self._origin.pop(id(plugin), None)
                self._seq.pop(id(plugin), None)
            self._tables = None

    # -- tables -------------------------------------------------------------------

    def _build(self) -> dict[str, dict[str, Entry]]:
        self.load_entry_points()
        self._build_failures = []
        tables: dict[str, dict[str, Entry]] = {k: {} for k in HOOKS}
        for kind, hook in HOOKS.items():
            caller = getattr(self.pm.hook, hook)  # every kind in HOOKS has a hookspec
            claims: list[Entry] = []
            # Called in pluggy's order (tryfirst first, then the latest registered); who holds a
            # name is decided afterwards, by load order (``_claim``).
            for impl in reversed(caller.get_hookimpls()):
                if impl.hookwrapper or impl.wrapper:
                    continue
                pname, dist, version = self._origin.get(id(impl.plugin), (impl.plugin_name, "local", ""))
                seq = self._seq.get(id(impl.plugin), self._next_seq)

                def register(
                    name: str,
                    target: Any,
                    *,
                    replaces: str | None = None,
                    _kind: str = kind,
                    _origin=(pname, dist, version),
                    _seq: int = seq,
                    **meta: Any,
                ) -> None:
                    if not isinstance(name, str) or not name:
                        raise TypeError(f"register() needs a non-empty string name, got {name!r}")
                    if replaces is not None and (not isinstance(replaces, str) or not replaces.strip()):
                        raise TypeError(
                            f"register({name!r}, ..., replaces={replaces!r}): replaces must name the distribution "
                            f"whose {_kind} {name!r} this takes over, e.g. replaces={BUILTIN_DISTRIBUTION!r}"
                        )
                    claims.append(Entry(_kind, name, target, *_origin, meta, replaces=replaces, seq=_seq))

                try:
                    impl.function(*[{"register": register}[arg] for arg in impl.argnames])
                except Exception as exc:
                    self._build_failures.append(Failure(pname, dist, f"{hook}: {type(exc).__name__}: {exc}"))
            for claim in sorted(claims, key=lambda e: e.seq):  # stable: one plugin's own order is kept
                refused = _claim(tables[kind], claim)
                if refused:
                    self._build_failures.append(
                        Failure(claim.plugin, claim.distribution, f"{hook}: {refused}", refused=True)
                    )
        return tables

    def tables(self) -> dict[str, dict[str, Entry]]:
        with self._lock:
            if self._tables is None:
                self._tables = self._build()
            return self._tables

    def names(self, kind: str) -> list[str]:
        return sorted(self.tables()[kind])

    def entry(self, kind: str, name: str) -> Entry:
        table = self.tables()[kind]
        if name not in table:
            failed = [f"{f.plugin} ({f.distribution}): {f.error}" for f in self.failures()]
            raise UnknownPluginError(kind, name, list(table), failed=failed)
        return table[name]

    def get(self, kind: str, name: str) -> Any:
        entry = self.entry(kind, name)
        try:
            return entry.resolve()
        except (ImportError, AttributeError) as exc:
            raise PluginUnavailableError(
                f"{kind} {name!r} from plugin {entry.plugin!r} could not be imported: {exc}"
            ) from exc

    def names_of(self, kind: str, obj: Any) -> list[str]:
        """The names ``obj`` is registered under in ``kind`` (a tokenizer class: the kinds its folders record).

        A lazy ``"module:attr"`` entry matches by its path first; only when none
        matches are the other lazy entries imported to compare the objects.
        """
        table = self.tables()[kind]
        path = f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"
        names = [n for n, e in sorted(table.items()) if e.target is obj or e.target == path]
        if names:
            return names
        for name, entry in sorted(table.items()):
            try:
                if entry.resolve() is obj:
                    names.append(name)
            except Exception:  # an entry that does not import is not this object (`--check` reports it)
                continue
        return names

    def failures(self) -> list[Failure]:
        """Plugins that failed to import or to register (each was skipped), and refused registrations."""
        self.tables()
        return self._load_failures + self._build_failures

    def replacements(self) -> list[Entry]:
        """Every entry that took over a name another plugin held (it declared ``replaces=``)."""
        return [e for table in self.tables().values() for _, e in sorted(table.items()) if e.replaced is not None]

    def check(self) -> list[Failure]:
        """Resolve every lazily registered object; return the load failures plus one per object that fails.

        What ``alilama plugins --check`` runs: a ``"module:attr"`` path that does
        not import, or names nothing, is found here rather than at first use.
        """
        found = list(self.failures())
        for kind, table in self.tables().items():
            for name, entry in sorted(table.items()):
                try:
                    entry.resolve()
                    for key in LAZY_META.get(kind, ()):
                        entry.resolve_meta(key)
                except Exception as exc:  # reported, never raised
                    found.append(
                        Failure(entry.plugin, entry.distribution, f"{kind} {name!r}: {type(exc).__name__}: {exc}")
                    )
        return found

    def add_commands(self, app: Any) -> None:
        """Let every plugin add CLI commands (once per app); a failing one is recorded and skipped."""
        if id(app) in self._apps:
            return
        self._apps.add(id(app))
        self.load_entry_points()
        for impl in reversed(self.pm.hook.register_commands.get_hookimpls()):
            commands, groups = list(app.registered_commands), list(app.registered_groups)
            try:
                impl.function(app=app)
                _check_commands(app)
            except Exception as exc:  # roll back whatever the plugin added
                app.registered_commands[:], app.registered_groups[:] = commands, groups
                origin = self._origin.get(id(impl.plugin), (impl.plugin_name, "?", ""))
                self._load_failures.append(
                    Failure(impl.plugin_name, origin[1], f"register_commands: {type(exc).__name__}: {exc}")
                )


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _takes_over(claim: Entry, held: Entry) -> bool:
    """Whether ``claim`` declared that it replaces ``held`` (by distribution, or by plugin name)."""
    return claim.replaces is not None and _norm(claim.replaces) in {_norm(held.distribution), _norm(held.plugin)}


def _claim(table: dict[str, Entry], claim: Entry) -> str:
    """Put ``claim`` in ``table`` if it may hold its name; else the reason it is refused."""
    held = table.get(claim.name)
    if held is None:
        table[claim.name] = claim
        return ""
    what = f"{claim.kind} {claim.name!r}"
    if (held.plugin, held.distribution) == (claim.plugin, claim.distribution):
        return f"{what} is registered twice by {claim.owner}; the first registration is kept (register a name once)"
    if _takes_over(claim, held):
        claim.replaced = held
        table[claim.name] = claim
        return ""
    if _takes_over(held, claim) and held.replaced is None:  # the replacement was called first
        held.replaced = claim
        return ""
    holder = held.owner + (f" (which replaced {held.replaced.distribution}'s)" if held.replaced else "")
    whose = held.plugin if held.distribution == "local" else held.distribution  # what replaces= must say
    if claim.replaces is not None:
        return (
            f"{what} of {claim.owner} declares replaces={claim.replaces!r}, but {what} is held by {holder}; "
            f"the registration was refused and {what} stays with {whose}. To take it over, "
            f"declare replaces={whose!r}"
        )
    return (
        f"{what} is already registered by {holder}; the registration by {claim.owner} was refused and "
        f"{what} stays with {whose}. Rename it, or, to replace it on purpose, register it with "
        f"register({claim.name!r}, ..., replaces={whose!r})"
    )


def _check_commands(app: Any) -> None:
    """Build the click command tree now, so a plugin's malformed command fails here, not at run time."""
    import typer.main

    typer.main.get_command(app)


def _ep_sort_key(ep: metadata.EntryPoint) -> tuple[bool, str]:
    return (ep.dist is None or ep.dist.name != BUILTIN_DISTRIBUTION, ep.name)


_REGISTRY: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry (created on first use)."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = Registry()
    return _REGISTRY


def get_tokenizer(name: str) -> Any:
    return get_registry().get("tokenizer", name)


def get_tokenizer_importer(name: str) -> Any:
    """The vocabulary importer the tokenizer ``name`` registers (``register(name, cls, importer=fn)``).

    ``alilama tokenizer import --kind NAME`` calls it (``contracts.tokenizer.VocabularyImporter``).
    An unknown name raises ``UnknownPluginError``; a tokenizer that registers no
    importer, ``UnsupportedError`` naming the tokenizers that do.
    """
    registry = get_registry()
    entry = registry.entry("tokenizer", name)
    if entry.meta.get("importer") is None:
        able = [n for n, e in sorted(registry.tables()["tokenizer"].items()) if e.meta.get("importer") is not None]
        raise UnsupportedError(
            f"the tokenizer {name!r} cannot import a vocabulary (its plugin registers no importer); "
            f"tokenizers that can: {', '.join(able) or 'none'} (--kind NAME)"
        )
    try:
        return entry.resolve_meta("importer")
    except (ImportError, AttributeError) as exc:
        raise PluginUnavailableError(
            f"the importer of tokenizer {name!r} from plugin {entry.plugin!r} could not be imported: {exc}"
        ) from exc


def get_positional(name: str) -> Any:
    return get_registry().get("positional", name)


def get_attention(name: str) -> Any:
    return get_registry().get("attention", name)


def get_trainer(name: str) -> Any:
    return get_registry().get("trainer", name)


def get_optimizer(name: str) -> Any:
    return get_registry().get("optimizer", name)


def optimizer_for(train: Any) -> Any:
    """The ``OptimizerFactory`` that ``train.optimizer`` names, set up with ``train.optimizer_options``
    (``contracts.optimizer``): an unknown name raises ``UnknownPluginError`` listing the registered
    ones, an unknown option ``ConfigError``, before any model is built."""
    from alilama_core.contracts.optimizer import optimizer_factory

    return optimizer_factory(get_optimizer(train.optimizer), train.optimizer)(train)


def build_optimizer(model: Any, train: Any) -> Any:
    """The optimiser ``train.optimizer`` names for ``model``'s trainable parameters (see ``optimizer_for``)."""
    from alilama_core.contracts.optimizer import ModelParameters

    return optimizer_for(train).build(ModelParameters.of(model))


def get_exporter(name: str) -> Any:
    """The ``Exporter`` class registered as ``name`` (``alilama export NAME``)."""
    return get_registry().get("exporter", name)


def register_plugin(plugin: object, name: str | None = None) -> str:
    return get_registry().register_plugin(plugin, name=name)


def unregister_plugin(name: str) -> None:
    get_registry().unregister_plugin(name)
