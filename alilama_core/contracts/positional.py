"""What a positional scheme is: the ``PositionalScheme`` contract."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from alilama_core.base.options import check_options

if TYPE_CHECKING:
    from alilama_core.contracts.config import ModelConfig

PositionalKind = Literal["bias", "rotary", "embedding", "none"]


class PositionalScheme(nn.Module):
    """How a model knows where a token is. A scheme declares one ``kind``:

    - ``"bias"``: an additive attention bias ``bias(q_pos, k_pos) -> (H, T, S)``
      (ALiBi), a function of ``q_pos - k_pos`` alone (see below). A bias that is
      ``-slope_h * (q - k)`` also returns its per-head ``slopes()`` so kernels
      that take slopes (flash-attn, FlexAttention) never build the dense bias.
    - ``"rotary"``: ``rotate(x, positions)`` turns q and k (RoPE).
    - ``"embedding"``: ``embed(positions) -> (T, C)`` is added to the token embeddings.
    - ``"none"``: nothing (NoPE; the causal mask alone carries order).

    Positions are absolute token indices, so a query block that follows a KV
    cache of length ``n`` has positions ``n .. n+T-1``.

    Positions in a batch. In a left-padded batch (``generate`` with several
    prompts, ``alilama serve``) each row has its own positions, 0 at its first
    real token. ``rotate`` and ``embed`` receive them as ``(B, T)`` and must
    use each row's own. ``bias`` is computed once for the whole batch (and
    shared by every layer, and kept between passes), from the batch's columns
    ``0 .. S-1``: each row's positions are those columns shifted by its
    padding. So a bias must be a function of the distance ``q_pos - k_pos``
    alone: then the shift cancels and every row gets exactly what it gets
    alone. A bias that reads an absolute position (FIRE's normalisation by the
    query's position), the number of keys, or anything else is wrong in a
    batch; absolute positions belong in a rotary or embedding scheme. The
    conformance kit checks this rule up to 200 positions (``positions per
    row``) and runs every scheme in a padded batch (``padded batch == alone``).

    Worked example, a bias scheme that penalises distance with one fixed slope
    for every head::

        class Linear(PositionalScheme):
            kind = "bias"
            def bias(self, q_pos, k_pos):                      # (T,), (S,)
                dist = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
                return (-0.1 * dist).expand(self.n_heads, -1, -1)  # (H, T, S)
    """

    kind: ClassVar[PositionalKind] = "none"
    bias_is_static: ClassVar[bool | None] = None
    """Whether ``bias()`` may be cached between forward passes, per shape.

    ``None`` (the default): the core decides from what it can see. While no
    parameter of the scheme requires grad (``bias_cacheable()``) the bias is
    kept for the current values of the scheme's parameters and buffers, and
    recomputed once any of them changes (``BiasCache``): loading new weights
    into a frozen model is seen. A learnable bias that trains is recomputed
    every forward pass, once, and shared by all layers. ``True``: the bias
    depends on no parameter or buffer value, so it is cached by shape alone;
    ``False`` never caches.
    """
    has_slopes: ClassVar[bool] = False
    """``slopes()`` describes the bias exactly: ``bias(q, k) == -slopes()[h] * (q - k)``.

    Kernels that take slopes (``tiled``, FlexAttention, flash-attn) then never
    build the dense bias. The model checks the claim against ``bias()`` when it
    is built (``check_slopes``) and refuses a scheme whose slopes disagree.
    """

    export_targets: ClassVar[dict[str, str]] = {}
    """What this scheme is in each export target that names architectures, e.g. ALiBi's
    ``{"gguf": "mpt", "hf": "mpt"}``: in ``gguf`` the llama.cpp architecture (``mpt``, ``gpt2``,
    ``gptneox``), in ``hf`` the transformers ``model_type`` (``mpt``, ``gpt2``, ``gpt_neox``) that
    computes exactly what the scheme computes. An exporter reads nothing else: a scheme that declares
    a target is written as that architecture and read back against the run's logits; one that declares
    nothing for a target is refused by name there (``hf`` then falls back to remote code).
    """

    defaults: ClassVar[dict[str, Any]] = {}
    """The scheme's own settings and their default values (e.g. RoPE's ``{"theta": 10000.0}``).

    A config sets them in ``model.positional_options``; the constructor checks
    them (an unknown key is a ``ConfigError`` naming it) and stores the result in
    ``self.options``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.options: dict[str, Any] = self.check_options(config.positional_options, config.positional)
        self.n_heads = config.n_heads
        self.head_dim = config.d_model // config.n_heads
        self.d_model = config.d_model
        self.context_length = config.context_length

    @classmethod
    def check_options(cls, options: dict[str, Any] | None, name: str = "") -> dict[str, Any]:
        """``defaults`` with ``options`` applied; an unknown key raises ``ConfigError``."""
        return check_options("positional scheme", name or cls.__name__, cls.defaults, options)

    @property
    def max_positions(self) -> int | None:
        """Largest number of positions the scheme supports (``None``: unbounded)."""
        return None

    def embed(self, positions: Tensor) -> Tensor:
        """``(T,)`` or ``(B, T)`` positions to ``(T, C)`` or ``(B, T, C)`` embeddings (row ``b`` from ``positions[b]``)."""
        raise NotImplementedError(f"{type(self).__name__} is not an embedding scheme")

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate ``x`` of shape ``(B, H, T, D)`` for ``(T,)`` or per-row ``(B, T)`` positions (row ``b`` by ``positions[b]``)."""
        raise NotImplementedError(f"{type(self).__name__} is not a rotary scheme")

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Additive attention bias of shape ``(H, T, S)`` for ``(T,)`` and ``(S,)`` positions.

        A function of ``q_pos[:, None] - k_pos[None, :]`` alone: the positions are
        the batch's columns, which in a left-padded batch are each row's positions
        shifted by its padding (see the class docstring). Only keys at or before
        their query (``k <= q``) are ever seen.
        """
        raise NotImplementedError(f"{type(self).__name__} is not a bias scheme")

    def slopes(self) -> Tensor | None:
        """``(H,)`` float32 slopes when the bias is ``-slope_h * (q - k)``, else ``None``."""
        return None

    def bias_cacheable(self) -> bool:
        """Whether a computed bias may be reused by later passes while the scheme's values are unchanged.

        See ``bias_is_static``. A parameter that requires grad makes it ``False``:
        an optimizer step may change it without a trace the core can see.
        """
        if self.bias_is_static is not None:
            return bool(self.bias_is_static)
        return not any(p.requires_grad for p in self.parameters())

    def check_slopes(self) -> str | None:
        """Why ``slopes()`` does not describe ``bias()`` (``None``: it does, or there are no slopes).

        Compares both on a small grid of query and key positions, with a cache offset.
        """
        if self.kind != "bias" or not self.has_slopes:
            return None
        slopes = self.slopes()
        if slopes is None or tuple(slopes.shape) != (self.n_heads,):
            return (
                f"slopes() must return ({self.n_heads},) slopes, got {None if slopes is None else tuple(slopes.shape)}"
            )
        with torch.no_grad():
            device = slopes.device
            q_pos, k_pos = torch.arange(5, 9, device=device), torch.arange(9, device=device)
            got = self.bias(q_pos, k_pos).float()  # (H, T, S)
            distance = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
            want = -slopes.detach().float()[:, None, None] * distance  # (H, T, S)
            causal = distance >= 0  # keys the query may see
            if got.shape != want.shape or not torch.allclose(got[:, causal], want[:, causal], rtol=1e-4, atol=1e-5):
                return "bias() differs from -slopes()[h] * (q - k)"
        return None

    def reset_parameters(self) -> None:
        """(Re)initialise parameters and computed buffers (called by the model's init)."""

    @classmethod
    def export_source(cls) -> str | None:
        """Optional, for ``alilama export hf``: the path of a standalone module for the exported model.

        ``None`` (the default): the scheme cannot be exported. Otherwise a
        Python file that imports only torch and defines a ``torch.nn.Module``
        class with this class's ``__name__``, built as ``cls(config)`` from
        the exported config (``n_heads``, ``d_model``, ``head_dim``,
        ``context_length``, ``positional_options``), with the same ``kind``,
        the same methods of its kind (``embed``, ``rotate`` or ``bias`` and
        ``slopes``), ``max_positions``, and the same parameter and buffer names,
        so the trained weights load into it. The export copies the file beside
        the modeling code, which loads the class by name. Example::

            @classmethod
            def export_source(cls):
                return str(Path(__file__).with_name("standalone.py"))
        """
        return None
