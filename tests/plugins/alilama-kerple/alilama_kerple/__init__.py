"""Registers ``kerple-log``: a learnable logarithmic distance bias (Chi et al., 2022, KERPLE)."""

from alilama_core import hookimpl


@hookimpl
def register_positional_schemes(register):
    register("kerple-log", "alilama_kerple.scheme:KerpleLog", description="learnable -r1*log(1+r2*(i-j)) bias")
