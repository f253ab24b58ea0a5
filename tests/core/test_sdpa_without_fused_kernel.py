"""``sdpa`` stays available where PyTorch lacks the private fused CPU kernel the learnable-bias path calls.

``bias_grad`` looks the kernel up through ``fused_cpu_kernels()``; without it
the learnable-bias fast path is declined and ``sdpa`` runs PyTorch's public
``scaled_dot_product_attention``, with eager's results and gradients.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from alilama_attention import bias_grad
from alilama_testing import tiny_config
from torch import nn
from torch.testing import assert_close

from alilama_core import build_model
from alilama_core.contracts.hookspecs import hookimpl
from alilama_core.contracts.positional import PositionalScheme
from alilama_core.engine.registry import get_attention, register_plugin, unregister_plugin

REPO = Path(__file__).resolve().parents[2]


class LogDistance(PositionalScheme):
    """``-r[h] * log(1 + (i - j))`` with ``r`` trained per head."""

    kind = "bias"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.r = nn.Parameter(torch.linspace(0.5, 2.0, self.n_heads))

    def bias(self, q_pos, k_pos):
        distance = (q_pos[:, None] - k_pos[None, :]).clamp(min=0).float()  # (T, S)
        return -self.r[:, None, None] * torch.log1p(distance)  # (H, T, S)


class _Scheme:
    @hookimpl
    def register_positional_schemes(self, register):
        register("log-distance-test", LogDistance)


@pytest.fixture(scope="module")
def log_distance():
    register_plugin(_Scheme(), name="sdpa-fallback-test")
    yield "log-distance-test"
    unregister_plugin("sdpa-fallback-test")


def _step(model, idx):
    model.zero_grad()
    logits = model(idx)
    logits.square().mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_without_the_fused_kernel_sdpa_trains_a_learnable_bias_as_eager_does(log_distance, monkeypatch):
    torch.manual_seed(0)
    eager = build_model(tiny_config(positional=log_distance, attention="eager"))
    sdpa = build_model(tiny_config(positional=log_distance, attention="sdpa"))
    sdpa.load_state_dict(eager.state_dict())
    idx = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(0))
    q = k = v = torch.randn(1, 4, 5, 8)
    mask = torch.zeros(1, 4, 5, 5, requires_grad=True)
    if bias_grad._kernels is not None and bias_grad.fused_cpu_kernels() is not None:
        assert bias_grad.supported(q, k, v, mask)  # the fast path applies here...
    monkeypatch.setattr(bias_grad, "fused_cpu_kernels", lambda: None)
    assert not bias_grad.supported(q, k, v, mask)  # ...and is declined without the kernel
    assert get_attention("sdpa").available() is None
    want, want_grads = _step(eager, idx)
    got, got_grads = _step(sdpa, idx)
    assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got_grads.keys() == want_grads.keys()
    for name, grad in want_grads.items():
        assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    assert want_grads["positional.r"].abs().sum() > 0  # the bias did get a gradient


HIDE_KERNEL = """
import torch
names = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward")
aten = torch.ops.aten
for name in names:
    aten.__dict__.pop(name, None)
lookup = type(aten).__getattr__
def hidden(self, name):
    if name in names:
        raise AttributeError(name)
    return lookup(self, name)
type(aten).__getattr__ = hidden
assert not hasattr(torch.ops.aten, names[0])

from torch import nn
from alilama_core.kit.common import tiny_model_config
from alilama_core.contracts.positional import PositionalScheme
from alilama_core.engine.registry import get_attention

class LogDistance(PositionalScheme):
    kind = "bias"
    def __init__(self, config):
        super().__init__(config)
        self.r = nn.Parameter(torch.linspace(0.5, 2.0, self.n_heads))
    def bias(self, q_pos, k_pos):
        distance = (q_pos[:, None] - k_pos[None, :]).clamp(min=0).float()
        return -self.r[:, None, None] * torch.log1p(distance)

sdpa, eager = get_attention("sdpa"), get_attention("eager")
assert sdpa.available() is None, sdpa.available()
scheme = LogDistance(tiny_model_config())
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 4, 9, 8, generator=g, requires_grad=True) for _ in range(3))
results = []
for backend in (eager, sdpa):
    out = backend.fn(q, k, v, positional=scheme)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v, scheme.r))
    results.append((out, *grads))
for want, got in zip(*results):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
print("sdpa ok without the fused kernel")
"""


def test_a_torch_without_the_fused_kernel_still_imports_and_runs_sdpa():
    """In a fresh process whose torch lacks the ops, as an older or newer release might."""
    done = subprocess.run([sys.executable, "-c", HIDE_KERNEL], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sdpa ok without the fused kernel" in done.stdout
