"""The sdpa backend's learnable-bias path: fused CPU attention with the mask's gradient from native code.

Every case is checked against float64 autograd through the textbook formula, so
a wrong index, a skipped block or a stale row shows up as a wrong gradient.
"""

from __future__ import annotations

import pytest
import torch
from alilama_attention import bias_grad
from alilama_testing import tiny_config
from torch.testing import assert_close

from alilama_core.contracts.attention import AttentionBias
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import get_attention, get_positional, get_registry

pytestmark = pytest.mark.skipif(bias_grad._kernels is None, reason="the native kernels are not built (make install)")


def _reference(q, k, v, mask):
    """softmax(q k^T / sqrt(d) + mask) v in float64."""
    q, k, v, mask = (x.double() for x in (q, k, v, mask))
    scores = q @ k.transpose(-1, -2) * q.size(-1) ** -0.5 + mask
    return scores.softmax(-1) @ v


def _mask(b, h, t, s, causal, padded, seed):
    g = torch.Generator().manual_seed(seed)
    bias = torch.randn(h, t, s, generator=g).mul(2).requires_grad_()
    mask = bias[None]
    if causal:  # bottom-right aligned, as with a KV cache
        allowed = torch.ones(t, s, dtype=torch.bool).tril(s - t)
        mask = mask.masked_fill(~allowed, float("-inf"))
    if padded:  # batch element 0 is left-padded; a padded query still sees itself, as in AttentionBias
        keep = torch.ones(b, 1, t, s, dtype=torch.bool)
        keep[0, ..., : s // 3] = False
        keep |= torch.ones(t, s, dtype=torch.bool).tril(s - t).triu(s - t)
        mask = mask + torch.zeros(b, 1, t, s).masked_fill(~keep, float("-inf"))
    return bias, mask


CASES = [  # (B, H, T, S, D, causal, padded)
    (2, 4, 16, 16, 8, True, False),
    (3, 2, 5, 9, 16, True, False),  # a KV-cache offset: 4 cached keys
    (2, 8, 128, 128, 16, True, False),  # the essay model's attention
    (2, 3, 33, 65, 16, True, False),  # partial key blocks
    (2, 3, 40, 40, 16, False, False),
    (3, 2, 33, 33, 16, True, True),  # a per-batch mask (padding): no sum over the batch
    (1, 2, 1, 70, 64, True, False),  # one query against a long cache
    (1, 1, 300, 300, 32, True, False),
]


@pytest.mark.parametrize("runtime", ["torch-openmp", "own-threads"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("b,h,t,s,d,causal,padded", CASES)
def test_gradients_match_float64_autograd(b, h, t, s, d, causal, padded, threads, runtime, monkeypatch):
    """On PyTorch's OpenMP workers (where found) and on threads of the kernel's own."""
    if runtime == "torch-openmp" and not bias_grad._torch_openmp_parallel():
        pytest.skip("PyTorch runs on no GNU OpenMP runtime here: the kernel starts its own threads")
    if runtime == "own-threads":
        monkeypatch.setattr(bias_grad, "_torch_openmp_parallel", lambda: 0)
    g = torch.Generator().manual_seed(b * 1000 + t)
    q = torch.randn(b, h, t, d, generator=g, requires_grad=True)
    k = torch.randn(b, h, s, d, generator=g, requires_grad=True)
    v = torch.randn(b, h, s, d, generator=g, requires_grad=True)
    bias, mask = _mask(b, h, t, s, causal, padded, seed=t)
    assert bias_grad.supported(q, k, v, mask)
    dout = torch.randn(b, h, t, d, generator=g)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = bias_grad.LearnableMaskAttention.apply(q, k, v, mask, causal)
        grads = torch.autograd.grad(out, (q, k, v, bias), dout, retain_graph=True)
    finally:
        torch.set_num_threads(before)
    expected = _reference(q, k, v, mask)
    expected_grads = torch.autograd.grad(expected, (q, k, v, bias), dout.double())
    assert_close(out, expected.float(), rtol=1e-5, atol=2e-5)
    for name, got, want in zip("q k v bias".split(), grads, expected_grads):
        assert_close(got, want.float(), rtol=1e-4, atol=2e-5, msg=lambda m, name=name: f"d{name}: {m}")
    if causal:  # nothing flows above the diagonal
        assert not grads[3].masked_select(~torch.ones(t, s, dtype=torch.bool).tril(s - t)).any()


def test_strided_inputs_as_the_model_passes_them():
    """q, k, v as views of one (B, T, 3, H, D) projection, dout in (B, T, H, D) order."""
    b, h, t, d = 2, 4, 48, 16
    qkv = torch.randn(b, t, 3, h, d, requires_grad=True)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    bias, mask = _mask(b, h, t, t, causal=True, padded=False, seed=1)
    dout = torch.randn(b, t, h, d).transpose(1, 2)
    out = bias_grad.LearnableMaskAttention.apply(q, k, v, mask, True)
    got = torch.autograd.grad(out, (qkv, bias), dout, retain_graph=True)
    want = torch.autograd.grad(_reference(q, k, v, mask), (qkv, bias), dout.double())
    for a, w in zip(got, want):
        assert_close(a, w.float(), rtol=1e-4, atol=2e-5)


def test_a_summed_output_gives_an_expanded_gradient():
    """``out.sum()`` hands the backward a gradient with zero strides; it is read as the ones it stands for."""
    q, k, v = (torch.randn(2, 3, 9, 8, requires_grad=True) for _ in range(3))
    bias, mask = _mask(2, 3, 9, 9, causal=True, padded=False, seed=2)
    out = bias_grad.LearnableMaskAttention.apply(q, k, v, mask, True)
    got = torch.autograd.grad(out.sum(), (q, k, v, bias), retain_graph=True)
    want = torch.autograd.grad(_reference(q, k, v, mask).sum(), (q, k, v, bias))
    for a, w in zip(got, want):
        assert_close(a, w.float(), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize(
    "change,why",
    [
        (lambda q, k, v, m: (q.double(), k.double(), v.double(), m.double()), "float64"),
        (lambda q, k, v, m: (q, k, v, m.detach()), "no gradient wanted"),
        (lambda q, k, v, m: (q, k, v[..., :4].contiguous(), m), "value head size differs"),
        (lambda q, k, v, m: (q, k, v, m[:, :1]), "no head axis"),
    ],
)
def test_unsupported_calls_are_declined(change, why):
    q, k, v = (torch.randn(2, 2, 8, 8, requires_grad=True) for _ in range(3))
    _, mask = _mask(2, 2, 8, 8, causal=True, padded=False, seed=0)
    assert not bias_grad.supported(*change(q, k, v, mask)), why


def test_sdpa_backend_takes_the_path_and_matches_eager():
    """A scheme with trainable parameters: sdpa's loss and every gradient equal eager's, through the fused path."""
    if "kerple-log" not in get_registry().names("positional"):
        pytest.skip("the kerple-log test plugin is not installed (make install)")
    torch.manual_seed(0)
    cfg = tiny_config(positional="kerple-log", attention="eager", n_layers=2, n_heads=4, d_model=64)
    eager = build_model(cfg)
    sdpa = build_model(tiny_config(positional="kerple-log", attention="sdpa", n_layers=2, n_heads=4, d_model=64))
    sdpa.load_state_dict(eager.state_dict())
    x = torch.randint(0, cfg.vocab_size, (3, 40))
    calls = []
    original = bias_grad.LearnableMaskAttention.apply

    def counting(*args):
        calls.append(args[3].shape)
        return original(*args)

    losses, grads = [], []
    for model in (eager, sdpa):
        bias_grad.LearnableMaskAttention.apply = counting
        try:
            loss = model(x).logsumexp(-1).mean()
        finally:
            bias_grad.LearnableMaskAttention.apply = original
        losses.append(loss)
        grads.append(torch.autograd.grad(loss, list(model.parameters())))
    assert len(calls) == 2  # sdpa's two layers; eager never comes here
    assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
    names = [n for n, _ in eager.named_parameters()]
    for name, a, b in zip(names, grads[1], grads[0]):
        assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    scheme_grads = [g for n, g in zip(names, grads[1]) if "raw_r" in n]
    assert scheme_grads and all(g.abs().sum() > 0 for g in scheme_grads)


def test_direct_backend_call_with_padding_reaches_the_bias():
    """sdpa called as a plugin author would, with a padding mask: the bias gradient sums the batch."""
    config = tiny_config(n_heads=2, d_model=16)
    if "kerple-log" not in get_registry().names("positional"):
        pytest.skip("the kerple-log test plugin is not installed (make install)")
    scheme = get_positional("kerple-log")(config)
    q, k, v = (torch.randn(2, 2, 9, 8, requires_grad=True) for _ in range(3))
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, :3] = False  # left padding
    out = {}
    for name in ("eager", "sdpa"):
        fn = get_attention(name).fn
        y = fn(q, k, v, positional=scheme, key_padding_mask=keep, bias=AttentionBias(scheme, 9, 9, "cpu", keep))
        out[name] = torch.autograd.grad(
            y[keep[:, None, :, None].expand_as(y)].square().sum(), list(scheme.parameters())
        )
    for a, b in zip(out["sdpa"], out["eager"]):
        assert_close(a, b, rtol=1e-4, atol=1e-6)
