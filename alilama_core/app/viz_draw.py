"""What ``alilama viz`` draws: attention maps, head distances, the logit lens, positional terms.

``read_tape`` runs a model once on a prompt (``alilama_core.engine.capture``) and
keeps everything the pictures and the HTML page need as plain numpy arrays.
Token labels come from the tokenizer's ``decode`` of each id, so any tokenizer
(BPE, a task's symbol vocabulary) works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from alilama_core.base.errors import AlilamaError
from alilama_core.base.files import atomic_open
from alilama_core.base.limits import describe, limit


@dataclass
class Tape:
    """One prompt read by one model.

    ``attentions`` ``(L, H, T, T)``: row ``i`` is what token ``i`` reads;
    ``lens_ids``/``lens_probs`` ``(L, T, K)``: each layer's top-K next-token
    guesses at each position (logit lens; the last layer is the model's output);
    ``next_logprob`` ``(L, T-1)``: log-probability each layer gives the token
    that really follows; ``distance`` ``(L, H)``: mean distance from a query to
    the keys it reads; ``slopes``: ALiBi-style per-head slopes, when the scheme has them.
    """

    ids: list[int]
    labels: list[str]
    attentions: np.ndarray
    lens_ids: np.ndarray
    lens_probs: np.ndarray
    lens_labels: list[list[list[str]]]
    next_logprob: np.ndarray
    distance: np.ndarray
    slopes: list[float] | None
    positional: str
    kind: str
    attention: str
    notes: list[str] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(layers, heads, tokens)``."""
        L, H, T, _ = self.attentions.shape
        return L, H, T


def token_label(tokenizer, token_id: int) -> str:
    """The tokenizer's text for one id, with whitespace made visible (``·`` space, ``↵`` newline)."""
    from alilama_core.base.errors import TokenizerError

    try:
        text = tokenizer.decode([int(token_id)])
    except (TokenizerError, ValueError, KeyError, IndexError):
        return f"<{int(token_id)}>"  # an id the tokenizer does not know (a model vocabulary padded past it)
    return text.replace(" ", "·").replace("\n", "↵").replace("\t", "→") or "∅"


def read_tape(model, tokenizer, text: str, top_k: int = 5, max_tokens: int | None = None) -> Tape:
    """Encode ``text``, run ``model`` once with capture, and collect attention and logit-lens data.

    A prompt longer than the model's context (or ``max_tokens``) keeps its first tokens.
    """
    import torch

    from alilama_core.engine.capture import capture

    ids = tokenizer.encode(text, allowed_special="all")
    if not ids:
        raise AlilamaError("the prompt encodes to no tokens; give a non-empty --prompt")
    notes = []
    limit = min(x for x in (model.config.context_length, max_tokens) if x)
    if len(ids) > limit:
        notes.append(f"the prompt has {len(ids)} tokens; showing the first {limit}")
        ids = ids[:limit]
    device = next(model.parameters()).device
    idx = torch.tensor([ids], device=device)  # (1, T)
    result = capture(model, idx)
    att = torch.stack(result.attentions)[:, 0].float().cpu()  # (L, H, T, T)
    lens = result.lens()[:, 0].float()  # (L, T, V)
    logp = torch.log_softmax(lens, dim=-1)  # (L, T, V)
    probs, top = logp.exp().topk(min(top_k, logp.size(-1)), dim=-1)  # (L, T, K)
    nxt = torch.tensor(ids[1:], device=logp.device)  # (T-1,)
    next_logprob = logp[:, :-1].gather(-1, nxt[None, :, None].expand(logp.size(0), -1, 1))[..., 0]  # (L, T-1)
    vocab: dict[int, str] = {}

    def label(i: int) -> str:
        if i not in vocab:
            vocab[i] = token_label(tokenizer, i)
        return vocab[i]

    labels = [label(int(i)) for i in ids]
    top_np = top.cpu().numpy()
    lens_labels = [[[label(int(i)) for i in row] for row in layer] for layer in top_np]
    dist = result.mean_distance().cpu().numpy()  # (L, H)
    scheme = model.positional
    slopes = scheme.slopes() if scheme.kind == "bias" and scheme.has_slopes else None
    return Tape(
        ids=list(map(int, ids)),
        labels=labels,
        attentions=att.numpy(),
        lens_ids=top_np,
        lens_probs=probs.cpu().numpy(),
        lens_labels=lens_labels,
        next_logprob=next_logprob.cpu().numpy(),
        distance=dist,
        slopes=None if slopes is None else [float(s) for s in slopes],
        positional=model.config.positional,
        kind=scheme.kind,
        attention=model.config.attention,
        notes=notes,
    )


def extreme_heads(tape: Tape) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(layer, head)`` of the head that reads most locally and of the one that reads farthest."""
    flat = tape.distance.reshape(-1)
    H = tape.distance.shape[1]
    lo, hi = int(flat.argmin()), int(flat.argmax())
    return (lo // H, lo % H), (hi // H, hi % H)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path, dpi: int, tight: bool = True) -> Path:
    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_open(path, "wb") as f:
            fig.savefig(
                f, format="png", dpi=dpi, bbox_inches="tight" if tight else None, pil_kwargs={"compress_level": 3}
            )
    finally:
        plt.close(fig)
    return path


def _ticks(n: int, max_labels: int) -> list[int]:
    step = max(1, -(-n // max(1, max_labels)))
    return list(range(0, n, step))


LABEL_SPACE = 1.45
"""Space one tick label needs, in multiples of its font size (the label's height and a gap)."""
MIN_FONT, FONT, MAX_FONT = 5.5, 7.5, 9.0
"""Smallest readable, usual and largest useful label font sizes, in points."""


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def labelling_note(n: int, ticks: list[int]) -> str:
    """``"every 4th token labelled"`` when only every k-th of ``n`` tokens has a label, else ``""``."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1
    return f"every {_ordinal(step)} token labelled" if step > 1 and n > 1 else ""


def label_font(inches: float, labels: int) -> float:
    """Points for ``labels`` tick labels side by side along ``inches``, kept between readable bounds."""
    return max(MIN_FONT, min(MAX_FONT, 72 * inches / max(labels, 1) / LABEL_SPACE))


def map_inches(tokens: int, labels: int, base: float = 0.9) -> float:
    """Inches for one attention map of ``tokens`` with ``labels`` tick labels: grows with both, so every
    label gets ``FONT`` points and a long prompt keeps about 1.5 pixels per token at 100 dpi."""
    return max(base + 0.009 * tokens, labels * FONT * LABEL_SPACE / 72)


def _check(tape: Tape, layer: int | None, head: int | None) -> None:
    L, H, _ = tape.shape
    if layer is not None and not 0 <= layer < L:
        raise AlilamaError(f"--layer {layer} is out of range: the model has layers 0..{L - 1}")
    if head is not None and not 0 <= head < H:
        raise AlilamaError(f"--head {head} is out of range: the model has heads 0..{H - 1}")


def draw_grid(tape: Tape, path: str | Path, max_labels: int = 16, dpi: int = 100) -> Path:
    """A PNG of every attention map: rows are layers, columns heads; token labels beside each
    layer's first map and under the first column (``--layer/--head`` draws one map with every label).

    The maps are tiled into one image (one ``imshow``), so a 8 x 8 grid of
    128-token maps draws in a fraction of a second.
    """
    from matplotlib.colors import PowerNorm

    plt = _pyplot()
    L, H, T = tape.shape
    gap = max(2, T // 12)
    step = T + gap
    # Colour the maps once here (square-root scale, so weak reads stay visible), white between maps.
    colours = (plt.get_cmap("viridis")(np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)  # (256, 3)
    level = np.rint(np.sqrt(np.clip(tape.attentions, 0, 1)) * 255).astype(np.uint8)  # (L, H, T, T)
    mosaic = np.full((L * step - gap, H * step - gap, 3), 255, dtype=np.uint8)
    for l in range(L):
        for h in range(H):
            mosaic[l * step : l * step + T, h * step : h * step + T] = colours[level[l, h]]
    ticks = _ticks(T, max_labels)  # every k-th token past max_labels, said in the title
    cell = map_inches(T, len(ticks))  # inches per map: larger for longer prompts and more labels
    font = label_font(cell, len(ticks))  # points: one label per tick, no overlap, never unreadably small
    fig, ax = plt.subplots(figsize=(cell * H + 1.5, cell * L + 1.2))
    ax.imshow(mosaic, interpolation="nearest")
    image = plt.cm.ScalarMappable(norm=PowerNorm(0.5, vmin=0, vmax=1), cmap="viridis")
    ax.set_yticks(
        [l * step + i for l in range(L) for i in ticks],
        [tape.labels[i] for _ in range(L) for i in ticks],
        fontsize=font,
    )
    ax.set_xticks(ticks, [tape.labels[i] for i in ticks], fontsize=font, rotation=90)  # under the first column
    ax.tick_params(length=1.5, pad=1)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    for h in range(H):
        title = f"head {h}" + (f"\nslope {tape.slopes[h]:.3g}" if tape.slopes is not None else "")
        ax.text(h * step + T / 2, -gap, title, ha="center", va="bottom", fontsize=8)
    widest = 0.62 * font * max(len(tape.labels[i]) for i in ticks) + 4  # points: the longest tick label, its pad
    for l in range(L):
        ax.annotate(
            f"layer {l}",
            xy=(0, l * step + T / 2),
            xycoords=("axes fraction", "data"),
            xytext=(-widest - 4, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            fontsize=9,
            rotation=90,
        )
    fig.colorbar(image, ax=ax, fraction=0.02, pad=0.01, label="attention probability")
    margin = widest / 72  # inches the tick labels take beside and under the maps
    fig.set_size_inches(fig.get_figwidth() + max(0.0, margin - 0.55), fig.get_figheight() + max(0.0, margin - 0.5))
    height = fig.get_figheight()
    note = labelling_note(T, ticks)
    fig.suptitle(
        f"attention, {tape.positional} positions: row = query token, column = the token it reads"
        + (f" ({note})" if note else ""),
        fontsize=10,
        y=1 - 0.12 / height,
        va="top",
    )
    fig.subplots_adjust(
        left=(margin + 0.35) / fig.get_figwidth(),
        right=1 - 1.0 / fig.get_figwidth(),
        bottom=(margin + 0.3) / height,
        top=1 - 0.75 / height,
    )
    return _save(fig, path, dpi, tight=False)  # fixed margins: one draw instead of two


def draw_map(
    tape: Tape,
    path: str | Path,
    layer: int,
    head: int,
    max_tokens: int | None = None,
    dpi: int = 100,
    max_labels: int = 128,
) -> Path:
    """One head's map, large, with every token labelled (the first ``max_tokens`` if given); past
    ``max_labels`` tokens every k-th is labelled, and the title says so."""
    _check(tape, layer, head)
    plt = _pyplot()
    T = tape.shape[2] if max_tokens is None else min(max_tokens, tape.shape[2])
    ticks = _ticks(T, max_labels)
    size = max(5.0, map_inches(T, len(ticks), base=1.5), 0.13 * len(ticks) + 1.5)
    font = label_font(size, len(ticks))
    fig, ax = plt.subplots(figsize=(size + 1, size))
    from matplotlib.colors import PowerNorm

    image = ax.imshow(
        tape.attentions[layer, head, :T, :T],
        cmap="viridis",
        norm=PowerNorm(0.5, vmin=0, vmax=1),
        interpolation="nearest",
    )
    labels = [tape.labels[i] for i in ticks]
    ax.set_xticks(ticks, labels, fontsize=font, rotation=90)
    ax.set_yticks(ticks, labels, fontsize=font)
    ax.set_xlabel("key: the token read", fontsize=11)
    ax.set_ylabel("query: the token reading", fontsize=11)
    slope = f", slope {tape.slopes[head]:.3g}" if tape.slopes is not None else ""
    note = labelling_note(T, ticks)
    ax.set_title(
        f"layer {layer}, head {head}{slope}: mean distance {tape.distance[layer, head]:.1f} tokens"
        + (f"\n({note})" if note else ""),
        fontsize=12,
    )
    fig.colorbar(image, ax=ax, fraction=0.04, label="attention probability")
    return _save(fig, path, dpi)


def draw_distances(tape: Tape, path: str | Path, dpi: int = 80) -> Path:
    """Each head's mean attention distance, one line per layer, against its slope (or head index)."""
    plt = _pyplot()
    L, H, _ = tape.shape
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.array(tape.slopes) if tape.slopes is not None else np.arange(H)
    for l in range(L):
        ax.plot(x, tape.distance[l], marker="o", lw=1, label=f"layer {l}")
    if tape.slopes is not None:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ALiBi slope of the head (log scale)")
    else:
        ax.set_xlabel("head")
    ax.set_ylabel("mean attention distance (tokens)")
    ax.set_title("how far each head reads")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path, dpi)


def draw_lens(tape: Tape, path: str | Path, dpi: int = 80) -> Path:
    """Logit lens summary: mean log-probability of the true next token after each layer."""
    plt = _pyplot()
    L = tape.shape[0]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    mean = tape.next_logprob.mean(axis=1) / np.log(2)  # bits
    top1 = (tape.lens_ids[:, :-1, 0] == np.array(tape.ids[1:])[None]).mean(axis=1)
    ax.plot(range(1, L + 1), -mean, marker="o", color="C0")
    ax.set_xlabel("after block")
    ax.set_ylabel("bits per token (true next token)", color="C0")
    ax.set_xticks(range(1, L + 1))
    twin = ax.twinx()
    twin.plot(range(1, L + 1), top1, marker="s", color="C1")
    twin.set_ylabel("top guess is right (share)", color="C1")
    ax.set_title("logit lens: each block's guess of the next token")
    ax.grid(alpha=0.3)
    return _save(fig, path, dpi)


def check_profile_size(scheme, model_config, n: int) -> None:
    """Refuse a profile over ``n`` distances past ``MAX_VIZ_DISTANCE``, or one whose tensors would not fit in memory."""
    from alilama_core.base.errors import ConfigError
    from alilama_core.engine.validate import available_memory

    if n > limit("MAX_VIZ_DISTANCE"):
        raise ConfigError(
            f"the picture would cover {n:,} distances (--distance, default model.context_length): "
            f"{describe('MAX_VIZ_DISTANCE')}"
        )
    points = n + 1
    per_kind = {
        "bias": 3 * model_config.n_heads * points,
        "rotary": 4 * scheme.head_dim * points if hasattr(scheme, "head_dim") else 4 * points,
        "embedding": 2 * points * points + 2 * model_config.d_model * points,
    }
    need = 4 * per_kind.get(scheme.kind, points)  # float32 bytes
    have = available_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"drawing {model_config.positional} over {n:,} distances needs about {need / 2**30:,.1f} GiB but "
            f"{have / 2**30:,.1f} GiB of memory is available; give a smaller --distance"
        )


def positional_profile(model_config, distance: int | None = None):
    """What the scheme adds to an attention score, by distance, through its interface.

    Returns ``(distances, terms, kind, note)``, ``terms`` ``(H or 1, N)``:

    - bias schemes: ``bias(q, k)`` for a query at ``N`` and keys ``N..0``, per head;
    - rotary schemes: ``rotate(q, n) . rotate(k, n - d) / sqrt(D)`` for a fixed all-ones ``q = k``;
    - embedding schemes: cosine similarity of the embeddings of positions ``p`` and ``p - d``, averaged over ``p``;
    - none: zero.
    """
    import torch

    from alilama_core.engine.registry import get_positional

    scheme = get_positional(model_config.positional)(model_config)
    scheme.reset_parameters()
    n = int(distance or model_config.context_length)
    if scheme.max_positions is not None:
        n = min(n, scheme.max_positions - 1)
    check_profile_size(scheme, model_config, n)
    d = torch.arange(n + 1)  # (N+1,)
    with torch.no_grad():
        if scheme.kind == "bias":
            k_pos = torch.arange(n + 1)
            terms = scheme.bias(torch.tensor([n]), k_pos)[:, 0].flip(-1)  # (H, N+1), by distance
            note = "added to the score of a key d tokens back, per head"
        elif scheme.kind == "rotary":
            q = torch.ones(1, 1, 1, scheme.head_dim)  # (1, 1, 1, D)
            rq = scheme.rotate(q, torch.tensor([n]))  # (1, 1, 1, D)
            rk = scheme.rotate(q.expand(1, 1, n + 1, -1), n - d)  # (1, 1, N+1, D)
            terms = (rq @ rk.transpose(-2, -1))[0, 0] / scheme.head_dim**0.5  # (1, N+1)
            note = "q.k / sqrt(D) for q = k = ones, rotated d positions apart (every head alike)"
        elif scheme.kind == "embedding":
            pos = torch.arange(n + 1)
            e = torch.nn.functional.normalize(scheme.embed(pos).float(), dim=-1)  # (N+1, C)
            sim = e @ e.T  # (N+1, N+1)
            terms = torch.stack([sim.diagonal(-k).mean() for k in range(n + 1)])[None]  # (1, N+1)
            note = "cosine similarity of the position embeddings d apart"
        else:
            terms = torch.zeros(1, n + 1)
            note = "no positional term: only the causal mask orders tokens"
    return d.numpy(), terms.float().numpy(), scheme.kind, note


def draw_positional(model_config, path: str | Path, distance: int | None = None, dpi: int = 110) -> Path:
    """A PNG of each head's positional term against distance (see ``positional_profile``), large enough to read:
    the legend sits beside the plot, in columns of at most 16 heads."""
    d, terms, kind, note = positional_profile(model_config, distance)  # checks its size before pyplot loads
    plt = _pyplot()
    many = terms.shape[0] > 1
    columns = max(1, -(-terms.shape[0] // 16)) if many else 1
    fig, ax = plt.subplots(figsize=(10 + 1.3 * columns, 6))
    colours = plt.get_cmap("viridis" if terms.shape[0] > 10 else "tab10")
    for h, row in enumerate(terms):
        colour = colours(h / max(1, terms.shape[0] - 1)) if terms.shape[0] > 10 else colours(h % 10)
        ax.plot(d, row, lw=2, color=colour, label=f"head {h}" if many else model_config.positional)
    ax.set_xlabel("distance d (query position - key position)", fontsize=12)
    ax.set_ylabel("positional term", fontsize=12)
    ax.tick_params(labelsize=11)
    ax.set_title(f"{model_config.positional} ({kind}):\n{note}", fontsize=13)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=10, ncol=columns, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path, dpi)
