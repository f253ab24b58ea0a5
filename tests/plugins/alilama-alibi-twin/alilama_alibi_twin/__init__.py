"""Registers ``alibi-twin`` (ALiBi's slopes and bias, declaring what it is in GGUF and transformers)
and ``alibi-undeclared`` (the same maths, declaring nothing: every architecture export refuses it by name)."""

from alilama_core import hookimpl


@hookimpl
def register_positional_schemes(register):
    register("alibi-twin", "alilama_alibi_twin.scheme:AlibiTwin", description="ALiBi, exported as mpt")
    register("alibi-undeclared", "alilama_alibi_twin.scheme:AlibiUndeclared", description="ALiBi, no export targets")
