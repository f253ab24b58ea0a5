"""Built-in attention backends: ``eager`` (the reference), ``sdpa``, ``flex``, ``flash``,
``tiled`` (ALiBi by query blocks on CPU) and ``auto`` (picks one per call).

All share one signature (see ``alilama_core.contracts.attention.AttentionFn``) and are
registered by lazy ``"module:attr"`` paths to an ``AttentionBackend``.
"""

from alilama_core.contracts.hookspecs import hookimpl


@hookimpl
def register_attention_backends(register):
    register("eager", "alilama_attention.eager:backend")
    register("sdpa", "alilama_attention.sdpa:backend")
    register("flex", "alilama_attention.flex:backend")
    register("flash", "alilama_attention.flash:backend")
    register("tiled", "alilama_attention.tiled:backend")
    register("auto", "alilama_attention.auto:backend")
