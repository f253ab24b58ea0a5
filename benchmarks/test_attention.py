"""The essay's model with ALiBi (the default ``auto``, eager and sdpa) beside a plain causal-SDPA GPT of the same size.

The baseline is written here in nanoGPT's shape (learned absolute positions, no
attention bias, ``is_causal=True``), so the comparison shows what ALiBi costs.

    make bench                                              # full sizes
    .venv/bin/pytest benchmarks/test_attention.py --benchmark-only --benchmark-group-by=group
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from alilama_bench import FULL, peak_memory_mib
from torch import nn

from alilama_core import ModelConfig, build_model


class BaselineBlock(nn.Module):
    def __init__(self, d: int, h: int, d_mlp: int):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, d_mlp), nn.Linear(d_mlp, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class BaselineGPT(nn.Module):
    """nanoGPT's shape: token + learned position embeddings, causal SDPA, tied head."""

    def __init__(self, c: ModelConfig, max_len: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.d_model), nn.Embedding(max_len, c.d_model)
        self.blocks = nn.ModuleList(BaselineBlock(c.d_model, c.n_heads, c.d_mlp) for _ in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


ESSAY = ModelConfig()  # vocab 4096, d 128, 8 layers, 8 heads, MLP 512, context 128
MODELS = ["baseline-causal-sdpa", "alibi-auto", "alibi-sdpa", "alibi-eager"]


def make_model(name: str, max_len: int) -> nn.Module:
    torch.manual_seed(0)
    if name == "baseline-causal-sdpa":
        return BaselineGPT(ESSAY, max_len)
    attention = name.split("-", 1)[1]
    return build_model(ModelConfig(context_length=max_len, positional="alibi", attention=attention))


def _batch(b: int, t: int) -> torch.Tensor:
    return torch.randint(0, ESSAY.vocab_size, (b, t + 1), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", MODELS)
def test_train_step_essay(benchmark, name):
    """One AdamW step at the essay's context (B=32, T=128): tokens per second."""
    b, t = (32, 128) if FULL else (4, 128)
    model = make_model(name, t)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = _batch(b, t)
    x, y = data[:, :-1], data[:, 1:]

    def step():
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    benchmark.group = "train step, essay config, T=128"
    benchmark.extra_info["tokens_per_step"] = b * t
    benchmark.pedantic(step, rounds=20 if FULL else 1, warmup_rounds=2 if FULL else 0)
    assert torch.isfinite(step())


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("T", [128, 512, 2048])
def test_forward(benchmark, name, T):
    """Inference forward at T = 128, 512, 2048 (ALiBi extrapolates; the baseline's table is sized to T)."""
    if not FULL and T > 512:
        pytest.skip("T=2048 runs only with ALILAMA_BENCH_FULL=1 (make bench)")
    b = max(1, 4096 // T) if FULL else 1
    model = make_model(name, T).eval()
    x = _batch(b, T)[:, :-1]

    def forward():
        with torch.no_grad():
            return model(x)

    benchmark.group = f"forward, T={T}, B={b}"
    benchmark.extra_info["peak_memory_mib"] = round(peak_memory_mib(forward), 1)
    benchmark.pedantic(forward, rounds=10 if FULL else 1, warmup_rounds=1 if FULL else 0)
    assert forward().shape == (b, T, ESSAY.vocab_size)
