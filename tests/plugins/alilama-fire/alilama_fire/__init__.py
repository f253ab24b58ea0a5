"""Registers ``fire``: a learned bias of the distance over the query's position (Li et al., 2023, FIRE)."""

from alilama_core import hookimpl


@hookimpl
def register_positional_schemes(register):
    register("fire", "alilama_fire.scheme:Fire", description="learned f(psi(i-j) / psi(max(i, L))) bias (FIRE)")
