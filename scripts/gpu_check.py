#!/usr/bin/env python3
"""One prepared check of the GPU paths: one line per check, PASS / FAIL / SKIP (reason).

    python3 scripts/gpu_check.py            # on a CUDA machine, under 5 minutes
    python3 scripts/gpu_check.py --dry-run  # on CPU at tiny sizes; CUDA-only rows skip

1. Every registered backend and ``auto`` against fp32 ``eager`` with ALiBi:
   forward and backward, full sequence, KV-cache chunk, single-token decode and
   a left-padded batch, in fp32, fp16 and bf16, head sizes 8 and 16.
2. FlexAttention compiles over three decode steps of a model (at most one).
3. ``auto``'s choice per shape class, and ``auto`` beside the fastest explicit
   backend (>= 0.95x): essay-model training tokens per second per backend beside
   a nanoGPT-shaped causal baseline (a plain causal-SDPA GPT of the same size),
   greedy decoding tokens per second, and fused-kernel time and peak memory for
   forward + backward at T=8192.
4. The compiled decode step (``alilama_core.engine.decode``: a static KV cache,
   CUDA graphs through ``torch.compile(mode="reduce-overhead")`` on CUDA, an
   AOTInductor package on CPU) gives eager decoding's greedy tokens at batch 1
   and in a left-padded batch, in fp32 (and bf16 on CUDA), with its speed
   beside eager's and the first call's compile time.

Exits 1 if any row fails. The native tokenizer is not needed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn

TOLERANCE = {torch.float32: 2e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}
"""Largest error against fp32 eager, relative to the reference's largest magnitude."""

failures = 0
deadline = float("inf")


def over_budget(name: str) -> bool:
    """Past the time budget, a check is one SKIP line (rerun with --only for the rest)."""
    if time.perf_counter() < deadline:
        return False
    row("SKIP", name, "(time budget spent; rerun with --only to run it)")
    return True


def row(status: str, name: str, detail: str = "") -> None:
    global failures
    failures += status == "FAIL"
    print(f"{status:4s}  {name:58s} {detail}", flush=True)


def guarded(name: str):
    """Run a check; an exception is one FAIL line, never the end of the script."""

    def wrap(fn):
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - every failure is reported, then the next check runs
                message = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                row("FAIL", name, message)
                if os.environ.get("GPU_CHECK_TRACEBACK"):
                    traceback.print_exc()

        return run

    return wrap


def ensure_builtins() -> None:
    """Register the built-in plugins by hand where no installed entry points name them.

    A fresh GPU machine can run this from a source checkout (``PYTHONPATH=.:plugins``)
    without building the package.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in (root, os.path.join(root, "plugins")):
        if path not in sys.path:
            sys.path.append(path)
    import importlib

    from alilama_core.engine.registry import get_registry

    reg = get_registry()
    for kind, module in (("attention", "alilama_attention"), ("positional", "alilama_positional")):
        if not reg.names(kind):
            reg.register_plugin(importlib.import_module(module), name=kind)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def backends() -> dict[str, object]:
    from alilama_core.contracts.attention import attention_backend
    from alilama_core.engine.registry import get_registry

    reg = get_registry()
    table = {name: attention_backend(reg.get("attention", name)) for name in reg.names("attention")}
    return {name: b for name, b in table.items() if b.exact}  # the others compute other attention than eager


# -- 1. numerics against fp32 eager ----------------------------------------------------------


MODES = {  # (queries, cached keys before them, padded)
    "full": (64, 0, False),
    "kv-chunk": (16, 64, False),
    "decode": (1, 80, False),
    "left-padded": (48, 0, True),
}


def _inputs(device, heads, head_dim, t, offset, padded):
    g = torch.Generator(device="cpu").manual_seed(t + offset + head_dim)
    s = t + offset
    q = torch.randn(2, heads, t, head_dim, generator=g).to(device)
    k = torch.randn(2, heads, s, head_dim, generator=g).to(device)
    v = torch.randn(2, heads, s, head_dim, generator=g).to(device)
    keep = None
    if padded:
        keep = torch.ones(2, s, dtype=torch.bool, device=device)
        keep[0, :11] = False  # row 0 is left-padded by 11 tokens
    return q, k, v, keep


def _relative_error(got, want) -> float:
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).abs().max() / want.abs().max().clamp(min=1e-6))


def numerics(device: torch.device, dry_run: bool, dtypes: list[torch.dtype]) -> None:
    from alilama_attention.auto import case_of

    from alilama_core import ModelConfig
    from alilama_core.base.errors import AlilamaError
    from alilama_core.engine.registry import get_positional

    table = backends()
    eager = table["eager"].fn
    for name, backend in table.items():
        if name == "eager" and device.type == "cpu":
            continue
        for dtype in dtypes:
            for head_dim in (8, 16):
                heads = 4
                alibi = get_positional("alibi")(ModelConfig(n_heads=heads, d_model=heads * head_dim)).to(device)
                for mode, (t, offset, padded) in MODES.items():
                    label = f"{name} {mode} {str(dtype)[6:]} D={head_dim}"
                    if over_budget(label):
                        continue
                    q, k, v, keep = _inputs(device, heads, head_dim, t, offset, padded)
                    grad = mode in ("full", "kv-chunk")
                    case = case_of(q.to(dtype).requires_grad_(grad), k.to(dtype), alibi, True, keep)
                    reason = backend.refuses(case) if backend.resolve is None else None
                    if reason:
                        row("SKIP", label, f"({reason})")
                        continue
                    _compare(label, backend, eager, q, k, v, keep, alibi, dtype, grad, AlilamaError)


def _compare(label, backend, eager, q, k, v, keep, alibi, dtype, grad, AlilamaError) -> None:
    @guarded(label)
    def check():
        ref_in = [x.clone().requires_grad_(grad) for x in (q, k, v)]
        want = eager(*ref_in, positional=alibi, causal=True, key_padding_mask=keep)
        low = [x.to(dtype).requires_grad_(grad) for x in (q, k, v)]
        try:
            got = backend.fn(*low, positional=alibi, causal=True, key_padding_mask=keep)
        except AlilamaError as exc:
            row("SKIP", label, f"(refused: {exc})")
            return
        real = slice(None) if keep is None else keep[:, -q.size(2) :][:, None, :, None]  # real queries only
        wrap = (lambda x: x) if keep is None else (lambda x: x.masked_fill(~real, 0))
        # flash runs fp32 inputs in bf16 (documented): judge it at bf16 tolerance.
        precision = (
            torch.bfloat16 if dtype == torch.float32 and backend.dtypes and dtype not in backend.dtypes else dtype
        )
        tol = TOLERANCE[precision]
        err = _relative_error(wrap(got), wrap(want))
        worst = err
        if grad:
            weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(1)).to(q.device)
            g_want = torch.autograd.grad((wrap(want) * weights).sum(), ref_in)
            g_got = torch.autograd.grad((wrap(got).float() * weights).sum(), low)
            worst = max([err] + [_relative_error(a, b) for a, b in zip(g_got, g_want)])
        finite = bool(torch.isfinite(got).all())
        status = "PASS" if finite and worst <= tol else "FAIL"
        what = "fwd+bwd" if grad else "fwd"
        row(status, label, f"{what} max rel err {worst:.1e} (tol {tol:.0e}){'' if finite else ' NON-FINITE'}")

    check()


# -- 2. FlexAttention compiles over decode steps ---------------------------------------------


def flex_compiles(device: torch.device, dry_run: bool) -> None:
    name = "flex compiles over 3 decode steps (model, 2 layers)"
    if device.type != "cuda":
        row("SKIP", name, "(CUDA only: flex compiles on CUDA; a dry run has no GPU)")
        return

    @guarded(name)
    def check():
        import torch._dynamo
        from torch._dynamo.utils import counters

        from alilama_core import KVCache, ModelConfig, build_model

        model = build_model(ModelConfig(vocab_size=512, n_layers=2, attention="flex")).to(device).eval()
        with torch.no_grad():
            cache = KVCache()
            model(torch.randint(0, 512, (1, 40), device=device), cache=cache)
            before = counters["stats"]["unique_graphs"]
            for _ in range(3):
                model(torch.randint(0, 512, (1, 1), device=device), cache=cache)
            compiles = counters["stats"]["unique_graphs"] - before
        row("PASS" if compiles <= 1 else "FAIL", name, f"{compiles} compile(s) (at most 1 allowed)")

    check()


# -- 3. speed: auto's choices, training, decoding, long context ------------------------------


class BaselineGPT(nn.Module):
    """nanoGPT's shape: token + learned positions, pre-norm blocks, causal SDPA, tied head."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, d_mlp: int, max_len: int):
        super().__init__()
        self.h = heads
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                dict(
                    ln1=nn.LayerNorm(d),
                    attn=nn.Linear(d, 3 * d),
                    proj=nn.Linear(d, d),
                    ln2=nn.LayerNorm(d),
                    fc=nn.Linear(d, d_mlp),
                    out=nn.Linear(d_mlp, d),
                )
            )
            for _ in range(layers)
        )
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))  # (B, T, C)
        for b in self.blocks:
            q, k, v = b["attn"](b["ln1"](x)).split(x.size(-1), dim=2)
            q, k, v = (z.view(B, T, self.h, -1).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + b["proj"](y.transpose(1, 2).reshape(B, T, -1))
            x = x + b["out"](F.gelu(b["fc"](b["ln2"](x))))
        return self.head(self.ln_f(x))


def _time(fn, device, steps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    sync(device)
    return (time.perf_counter() - start) / steps


def auto_choices(device: torch.device) -> None:
    from alilama_attention.auto import choose

    from alilama_core.contracts.attention import AttentionCase

    for dtype in (torch.float32, torch.bfloat16):
        picks = []
        for shape in ("decode", "short", "long"):
            for training in (False, True):
                if shape == "decode" and training:
                    continue
                case = AttentionCase(device.type, dtype, 16, shape, "bias", True, training=training)
                picks.append(f"{shape}{'/train' if training else ''}: {choose(case).name}")
        row("PASS", f"auto choices {device.type} alibi {str(dtype)[6:]}", ", ".join(picks))


def _explicit(table) -> list[str]:
    return [n for n, b in table.items() if b.resolve is None]


def _compare_auto(label: str, speeds: dict[str, float], dry_run: bool) -> None:
    explicit = {n: s for n, s in speeds.items() if n not in ("auto", "baseline-causal")}
    if "auto" not in speeds or not explicit:
        row("SKIP", label, "(no figures)")
        return
    best = max(explicit, key=explicit.get)
    ratio = speeds["auto"] / explicit[best]
    figure = f"auto {ratio:.2f}x the fastest explicit ({best})"
    if dry_run:
        row("SKIP", label, f"(dry run: tiny sizes are not judged; {figure})")
    else:
        row("PASS" if ratio >= 0.95 else "FAIL", label, f"{figure}, needs >= 0.95x")


def training_speed(device: torch.device, dry_run: bool, dtype_name: str) -> None:
    from alilama_core import ModelConfig, build_model

    table = backends()
    cfg = ModelConfig(n_layers=2, vocab_size=512) if dry_run else ModelConfig()  # the essay model
    b, t = (2, 32) if dry_run else (32, cfg.context_length)
    steps, warmup = (2, 1) if dry_run else (20, 3)
    autocast = dtype_name == "bf16"
    speeds: dict[str, float] = {}
    data = torch.randint(0, cfg.vocab_size, (b, t + 1), device=device)
    x, y = data[:, :-1], data[:, 1:]
    for name in ["baseline-causal", *_explicit(table), "auto"]:
        label = f"train tokens/s {dtype_name} {name}"
        if over_budget(label):
            continue
        if name not in ("baseline-causal", "auto"):
            reason = table[name].refuses(_train_case(device, cfg, autocast))
            if reason:
                row("SKIP", label, f"({reason})")
                continue

        @guarded(label)
        def measure():
            torch.manual_seed(0)
            if name == "baseline-causal":
                model = BaselineGPT(cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_mlp, t)
            else:
                model = build_model(ModelConfig(**{**cfg.__dict__, "attention": name}))
            model = model.to(device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

            def step():
                with torch.autocast(device.type, torch.bfloat16, enabled=autocast):
                    logits = model(x)
                loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            seconds = _time(step, device, steps, warmup)
            speeds[name] = b * t / seconds
            base = speeds.get("baseline-causal")
            vs = f" ({speeds[name] / base:.2f}x baseline)" if base and name != "baseline-causal" else ""
            row("PASS", label, f"{speeds[name]:,.0f} tokens/s{vs}")

        measure()
    _compare_auto(f"train {dtype_name}: auto vs explicit", speeds, dry_run)


def _train_case(device, cfg, autocast):
    from alilama_core.contracts.attention import AttentionCase, shape_class

    dtype = torch.bfloat16 if autocast else torch.float32
    return AttentionCase(
        device.type,
        dtype,
        cfg.head_dim,
        shape_class(cfg.context_length, cfg.context_length),
        "bias",
        True,
        training=True,
    )


def decode_speed(device: torch.device, dry_run: bool) -> None:
    from alilama_core import ModelConfig, build_model
    from alilama_core.contracts.attention import AttentionCase
    from alilama_core.engine.generation import SamplingSettings, generate

    table = backends()
    cfg = ModelConfig(n_layers=2, vocab_size=512) if dry_run else ModelConfig()
    new = 8 if dry_run else 512
    speeds: dict[str, float] = {}
    prompt = list(range(1, 17))
    reference = None
    for name in [*_explicit(table), "auto"]:
        label = f"decode tokens/s fp32 {name} ({new} greedy tokens, B=1)"
        if over_budget(label):
            continue
        if name != "auto":
            reason = table[name].refuses(
                AttentionCase(device.type, torch.float32, cfg.head_dim, "decode", "bias", True)
            )
            if reason:
                row("SKIP", label, f"({reason})")
                continue

        @guarded(label)
        def measure():
            nonlocal reference
            torch.manual_seed(0)
            model = build_model(ModelConfig(**{**cfg.__dict__, "attention": name})).to(device).eval()
            settings = SamplingSettings(max_new_tokens=new, temperature=0)
            tokens = generate(model, [prompt], settings)[0]  # warm-up (and compiles)
            seconds = _time(lambda: generate(model, [prompt], settings), device, 1 if dry_run else 2, 0)
            speeds[name] = new / seconds
            reference = reference or tokens
            same = sum(a == b for a, b in zip(tokens, reference))
            row("PASS", label, f"{speeds[name]:,.0f} tokens/s; {same}/{new} tokens as the first backend")

        measure()
    _compare_auto("decode fp32: auto vs explicit", speeds, dry_run)


def compiled_decode(device: torch.device, dry_run: bool) -> None:
    import warnings

    from alilama_core import ModelConfig, build_model
    from alilama_core.base.errors import AlilamaWarning
    from alilama_core.engine import decode as dec
    from alilama_core.engine.generation import SamplingSettings, generate

    if dry_run:  # Inductor's defaults: a tiny package in seconds, not a tuned one in a minute
        dec.INDUCTOR_CONFIGS = {"autotune_num_choices_displayed": 0}
    cfg = ModelConfig(n_layers=2, vocab_size=512) if dry_run else ModelConfig()
    new = 8 if dry_run else 512
    how = "CUDA graphs" if device.type == "cuda" else "AOTInductor"
    for dtype in [torch.float32] if dry_run else [torch.float32, torch.bfloat16]:
        for batch in (2,) if dry_run else (1, 2):  # a dry run checks the padded path, one compile
            label = f"compiled decode {str(dtype)[6:]} B={batch}{' padded' if batch > 1 else ''} ({how})"
            if over_budget(label):
                continue

            @guarded(label)
            def measure():
                torch.manual_seed(0)
                model = build_model(cfg).to(device, dtype).eval()
                prompts = [list(range(1, 17)), list(range(3, 9))][:batch]
                eager = SamplingSettings(max_new_tokens=new, temperature=0, decode="eager")
                compiled = SamplingSettings(max_new_tokens=new, temperature=0, decode="compiled")
                with warnings.catch_warnings():
                    warnings.simplefilter("error", AlilamaWarning)  # a fallback to eager is a failure here
                    start = time.perf_counter()
                    got = generate(model, prompts, compiled)  # compiles (CUDA: captures the graphs)
                    first = time.perf_counter() - start
                    want = generate(model, prompts, eager)
                    reps = 1 if dry_run else 3
                    t_eager = _time(lambda: generate(model, prompts, eager), device, reps, 0)
                    t_compiled = _time(lambda: generate(model, prompts, compiled), device, reps, 0)
                same = sum(a == b for g, w in zip(got, want) for a, b in zip(g, w))
                total = sum(len(w) for w in want)
                prefix = all(g[:16] == w[:16] for g, w in zip(got, want))
                exact = same == total if dtype == torch.float32 else prefix  # bf16 rounding may flip a late near-tie
                tokens = batch * new
                row(
                    "PASS" if exact else "FAIL",
                    label,
                    f"{tokens / t_compiled:,.0f} tokens/s compiled, {tokens / t_eager:,.0f} eager "
                    f"({t_eager / t_compiled:.2f}x); first call {first:.1f} s; {same}/{total} tokens as eager",
                )

            measure()


def long_context(device: torch.device, dry_run: bool) -> None:
    from alilama_attention.auto import case_of

    from alilama_core import ModelConfig
    from alilama_core.engine.registry import get_positional

    table = backends()
    t = 256 if dry_run else 8192
    heads, head_dim, b = 8, 16, 1
    alibi = get_positional("alibi")(ModelConfig(n_heads=heads, d_model=heads * head_dim)).to(device)
    speeds: dict[str, float] = {}
    for dtype in [torch.float32] if dry_run else [torch.bfloat16, torch.float32]:
        speeds.clear()
        for name in ["baseline-causal", *_explicit(table), "auto"]:
            label = f"T={t} fwd+bwd {str(dtype)[6:]} {name}"
            if over_budget(label):
                continue
            g = torch.Generator().manual_seed(0)
            q, k, v = (
                torch.randn(b, heads, t, head_dim, generator=g).to(device, dtype).requires_grad_() for _ in range(3)
            )
            if name == "baseline-causal":
                fn, positional = table["sdpa"].fn, None
            else:
                fn, positional = table[name].fn, alibi
                reason = table[name].refuses(case_of(q, k, alibi, True, None)) if name != "auto" else None
                if reason:
                    row("SKIP", label, f"({reason})")
                    continue

            @guarded(label)
            def measure():
                def step():
                    out = fn(q, k, v, positional=positional, causal=True)
                    out.float().sum().backward()
                    q.grad = k.grad = v.grad = None

                step()  # warm-up (and compiles)
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                seconds = _time(step, device, 1 if dry_run else 3, 0)
                speeds[name] = 1 / seconds
                memory = ""
                if device.type == "cuda":
                    memory = f", peak {(torch.cuda.max_memory_allocated() - base) / 2**20:,.0f} MiB"
                row("PASS", label, f"{seconds * 1000:,.1f} ms{memory}")

            measure()
        _compare_auto(f"T={t} {str(dtype)[6:]}: auto vs explicit", speeds, dry_run)


SECTIONS = ["compiles", "choices", "numerics", "train", "decode", "compiled-decode", "long", "numerics-low"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="run on CPU at tiny sizes; CUDA-only rows skip")
    parser.add_argument("--budget", type=float, default=300, help="seconds; later checks skip once spent")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, help="run only these sections")
    args = parser.parse_args()
    global deadline
    ensure_builtins()
    deadline = time.perf_counter() + args.budget
    torch._dynamo.config.cache_size_limit = 64  # the numerics compile many shapes; never fall back silently
    cuda = torch.cuda.is_available() and not args.dry_run
    device = torch.device("cuda" if cuda else "cpu")
    name = torch.cuda.get_device_name() if cuda else "CPU (dry run)" if args.dry_run else "CPU (no CUDA device)"
    try:
        import flash_attn

        flash = f"flash-attn {flash_attn.__version__}"
    except ImportError:
        flash = "flash-attn not installed"
    print(f"# gpu_check: {name}, torch {torch.__version__}, {flash}", flush=True)
    if not cuda:
        row("SKIP", "CUDA rows", "(no CUDA device: " + ("dry run)" if args.dry_run else "none found)"))
    started = time.perf_counter()
    dry = not cuda
    low = [] if dry else [torch.float16, torch.bfloat16]
    run = {
        "compiles": lambda: flex_compiles(device, dry),  # first: before the numerics compile other shapes
        "choices": lambda: auto_choices(device),
        "numerics": lambda: numerics(device, dry, [torch.float32]),
        "train": lambda: [training_speed(device, dry, d) for d in (["fp32"] if dry else ["fp32", "bf16"])],
        "decode": lambda: decode_speed(device, dry),
        "compiled-decode": lambda: compiled_decode(device, dry),
        "long": lambda: long_context(device, dry),
        "numerics-low": lambda: numerics(device, dry, low),
    }
    for section in SECTIONS:
        if args.only is None or section in args.only:
            run[section]()
    print(f"# {failures} failure(s) in {time.perf_counter() - started:.0f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
