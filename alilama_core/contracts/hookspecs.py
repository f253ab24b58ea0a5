"""Pluggy hook specifications for Alilama plugins.

A plugin module implements any of these hooks with ``@alilama_core.hookimpl``.
Each ``register_*`` hook receives a ``register`` callback so that one plugin can
register several things::

    from alilama_core import hookimpl

    @hookimpl
    def register_positional_schemes(register):
        register("sinusoidal", Sinusoidal)
"""

import pluggy

hookspec = pluggy.HookspecMarker("alilama")
hookimpl = pluggy.HookimplMarker("alilama")


@hookspec
def register_tokenizers(register):
    """Register tokenizer classes: ``register(name, cls)``, cls a ``Tokenizer`` subclass."""


@hookspec
def register_positional_schemes(register):
    """Register positional schemes: ``register(name, cls)``, cls a ``PositionalScheme`` subclass."""


@hookspec
def register_attention_backends(register):
    """Register attention backends: ``register(name, fn, **capabilities)``, see ``AttentionBackend``."""


@hookspec
def register_trainers(register):
    """Register trainers: ``register(name, cls)``, cls a ``Trainer`` subclass."""


@hookspec
def register_tasks(register):
    """Register algorithmic tasks: ``register(name, cls)``, cls a ``Task`` subclass."""


@hookspec
def register_loggers(register):
    """Register experiment loggers: ``register(name, cls)``, cls a ``Logger`` subclass (``contracts.logger``)."""


@hookspec
def register_optimizers(register):
    """Register optimizers: ``register(name, cls)``, cls an ``OptimizerFactory`` subclass (``contracts.optimizer``)."""


@hookspec
def register_exporters(register):
    """Register export formats: ``register(name, cls)``, cls an ``Exporter`` subclass (``contracts.exporter``)."""


@hookspec
def register_commands(app):
    """Add commands or sub-apps to the ``alilama`` typer app."""
