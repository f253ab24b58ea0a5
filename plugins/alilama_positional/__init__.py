"""Built-in positional schemes, registered exactly as a third-party plugin would.

Each scheme lives in its own module and is registered by a lazy ``"module:attr"``
path, so loading the plugin list never imports torch.
"""

from alilama_core.contracts.hookspecs import hookimpl


@hookimpl
def register_positional_schemes(register):
    register("alibi", "alilama_positional.alibi:ALiBi", description="ALiBi linear distance bias (Press et al., 2022)")
    register("rope", "alilama_positional.rope:RoPE", description="rotary embeddings of q and k (Su et al., 2021)")
    register("learned", "alilama_positional.learned:LearnedPositions", description="learned absolute position table")
    register("nope", "alilama_positional.nope:NoPositions", description="no positional information (causal mask only)")
