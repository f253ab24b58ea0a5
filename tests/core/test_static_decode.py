"""The static-cache decode step computes what the eager path computes, compiled or not, and says why when it cannot run.

Exactness is checked in two layers. The ``DecodeStep`` itself (uncompiled) against
``GPT.forward`` on a growing ``KVCache``, logits step by step, for every scheme
and every attention backend that runs here, at batch 1 and in a left-padded
batch, with the eager cache growing under it or allocated whole; and the paths
that use it (``generate``, the ``ContinuousBatch`` of ``alilama serve``) with the
step swapped in. Then the real compiled step (an AOTInductor package) for each
scheme, which costs a compile each (``slow``).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch
from alilama_testing import needs_test_plugins

from alilama_core import build_model
from alilama_core.base.errors import AlilamaWarning, ConfigError, PluginUnavailableError
from alilama_core.contracts.attention import attention_backend
from alilama_core.engine import decode as dec
from alilama_core.engine.batching import ContinuousBatch
from alilama_core.engine.cache import KVCache, StaticCache
from alilama_core.engine.decode import DecodeStep
from alilama_core.engine.generation import SamplingSettings, generate
from alilama_core.engine.registry import get_attention, get_registry
from alilama_core.kit.common import KIT_CONTEXT, tiny_model_config
from alilama_core.runs.compiled import RunPackages

SCHEMES = ["alibi", "rope", "learned", "nope", "sinusoidal"]
LIGHT = {"autotune_num_choices_displayed": 0}
"""Inductor's defaults: the packages of the per-scheme tests compile in seconds, not a minute."""


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """Each test starts with nothing compiled in this process (packages of equal models are shared by key)."""
    monkeypatch.setattr(dec, "_LOADED", {})


def backends() -> list[str]:
    names = []
    for name in get_registry().names("attention"):
        try:
            backend = attention_backend(get_attention(name))
        except PluginUnavailableError:  # a plugin that does not import is the registry's report, not ours
            continue
        if backend.available() is None and "cpu" in backend.devices and backend.exact:
            names.append(name)
    return names


def model_for(scheme: str, backend: str = "eager"):
    if scheme not in get_registry().names("positional"):
        pytest.skip(f"{scheme} is not installed (make install adds the example plugin)")
    torch.manual_seed(0)
    config = tiny_model_config(positional=scheme, attention=backend, context_length=KIT_CONTEXT, tie_embeddings=False)
    return build_model(config).eval()


def prompts(lengths=(40, 120)) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 61, (n,), generator=generator).tolist() for n in lengths]


def left_pad(batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.bool)
    for row, p in enumerate(batch):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = True
    return ids, mask, (mask.long().cumsum(1) - 1).clamp(min=0)


@torch.no_grad()
def both_paths(model, batch: list[list[int]], steps: int, step=None, chunk: int | None = 4):
    """Greedy logits ``(steps, B, V)`` of the eager path (a ``KVCache`` that grows by ``chunk``, or whole) and of
    ``step`` (default: the uncompiled ``DecodeStep``) on a ``StaticCache``, both fed the eager path's tokens."""
    ids, mask, positions = left_pad(batch)
    padded = not bool(mask.all())
    B, width = ids.shape
    eager_cache = KVCache(capacity=0 if chunk else width + steps, chunk=chunk or 256)
    static = StaticCache.for_model(model, B, width + steps)
    step = step or DecodeStep(model)
    seq_mask = torch.ones(B, width + steps, dtype=torch.bool)
    seq_mask[:, :width] = mask
    kw = dict(key_padding_mask=mask if padded else None, position_ids=positions if padded else None, logits_to_keep=1)
    eager = [model(ids, cache=eager_cache, **kw)[:, -1]]
    model(ids, cache=static.kv_cache(), **kw)
    compiled = [eager[0]]
    position = positions[:, -1:] + 1 if padded else torch.full((B, 1), width)
    for n in range(width, width + steps - 1):
        token = eager[-1].argmax(-1, keepdim=True)  # (B, 1)
        column = torch.tensor([n])
        w = max(n, 2)  # the filled columns, as generate passes them
        logits, keys, values = step(token, column, position, seq_mask[:, :w].contiguous(), *static.buffers())
        static.write(column, keys, values)
        compiled.append(logits)
        eager.append(
            model(
                token,
                cache=eager_cache,
                key_padding_mask=seq_mask[:, : n + 1] if padded else None,
                position_ids=position if padded else None,
                logits_to_keep=1,
            )[:, -1]
        )
        position = position + 1
    return torch.stack(eager), torch.stack(compiled)


@pytest.mark.parametrize("chunk", [4, None], ids=["growing-cache", "whole-cache"])
@pytest.mark.parametrize("lengths", [(40,), (40, 120)], ids=["batch-1", "padded-batch"])
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("backend", backends())
def test_the_static_step_gives_the_eager_logits_for_every_backend(backend, scheme, lengths, chunk):
    model = model_for(scheme, backend)
    eager, static = both_paths(model, prompts(lengths), steps=6, chunk=chunk)
    assert torch.allclose(eager, static, atol=1e-5, rtol=1e-4), (eager - static).abs().max()
    assert torch.equal(eager.argmax(-1), static.argmax(-1))


@pytest.fixture
def uncompiled_step(monkeypatch):
    """``decode="compiled"`` runs the ``DecodeStep`` uncompiled: the paths around it, without a compile."""
    monkeypatch.setattr(dec, "compiled_step", lambda model, build=True: (DecodeStep(model), None))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_generate_on_the_static_step_gives_the_eager_tokens(scheme, uncompiled_step):
    model = model_for(scheme, "sdpa")
    batch = prompts()
    for settings in (
        SamplingSettings(max_new_tokens=8, temperature=0),
        SamplingSettings(max_new_tokens=8, temperature=0.8, top_k=20, top_p=0.9, seed=3),
        SamplingSettings(max_new_tokens=8, temperature=0, repetition_penalty=1.3, logit_bias={5: 3.0}),
        SamplingSettings(max_new_tokens=8, temperature=0.7, frequency_penalty=0.5, presence_penalty=0.3, seed=4),
    ):
        eager = dict(vars(settings), decode="eager")
        compiled = dict(vars(settings), decode="compiled")
        assert generate(model, batch, SamplingSettings(**compiled)) == generate(model, batch, SamplingSettings(**eager))
        for prompt in batch:
            alone = generate(model, [prompt], SamplingSettings(**compiled))
            assert alone == generate(model, [prompt], SamplingSettings(**eager))


def served(model, batch_of, decode: str) -> list[list[float]]:
    batch = ContinuousBatch(model, rows=len(batch_of) + 1, capacity=KIT_CONTEXT, decode=decode)
    greedy = SamplingSettings(max_new_tokens=4, temperature=0)
    out: dict[int, list[float]] = {}
    for prompt in batch_of:
        handle, event = batch.join(prompt, greedy, logprobs=0)
        out[handle] = [event.logprob]
    while len(batch):
        for event in batch.step():
            out[event.handle].append(event.logprob)
    return list(out.values())


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_served_batch_on_the_static_step_gives_the_eager_log_probabilities(scheme, uncompiled_step):
    model = model_for(scheme, "sdpa")
    batch = prompts()
    eager, compiled = served(model, batch, "eager"), served(model, batch, "compiled")
    for got, want in zip(compiled, eager):
        assert got == pytest.approx(want, abs=1e-4)


def test_a_served_batch_compacts_its_static_cache(uncompiled_step):
    model = model_for("alibi", "sdpa")
    greedy = SamplingSettings(max_new_tokens=30, temperature=0)
    runs = {}
    for decode in ("eager", "compiled"):
        batch = ContinuousBatch(model, rows=2, capacity=48, decode=decode)  # 30 + 30 tokens overflow 48 columns
        handle, event = batch.join(prompts((10,))[0], greedy, logprobs=0)
        tokens = [event.token]
        while len(batch):
            tokens += [e.token for e in batch.step()]
        runs[decode] = tokens
    assert runs["compiled"] == runs["eager"]


def scheduled(model, decode: str) -> tuple[dict[int, tuple[list, list]], list[int]]:
    """Sequences join a 4-row batch and leave it at different steps: each one's tokens and log-probabilities, and
    how many rows the compiled step's cache had at each step (none when eager)."""
    batch = ContinuousBatch(model, rows=4, capacity=KIT_CONTEXT, decode=decode)
    texts = prompts((7, 30, 12, 25, 40, 5))
    joins = {0: [(0, 12)], 2: [(1, 3), (2, 20)], 5: [(3, 6), (4, 9)], 11: [(5, 4)]}  # step: (prompt, new tokens)
    out: dict[int, tuple[list, list]] = {}
    sizes = []

    def record(event):
        tokens, logprobs = out.setdefault(event.handle, ([], []))
        tokens.append(event.token)
        logprobs.append(event.logprob)

    for at in range(40):
        for index, new in joins.get(at, []):
            handle, event = batch.join(texts[index], SamplingSettings(max_new_tokens=new, temperature=0), logprobs=0)
            record(event)
        for event in batch.step():
            record(event)
        sizes.append(batch.static.batch if batch.static is not None else 0)
    assert not len(batch)
    return out, sizes


def test_the_compiled_batch_steps_as_many_rows_as_it_holds_sequences(uncompiled_step):
    model = model_for("rope", "sdpa")
    eager, _ = scheduled(model, "eager")
    compiled, sizes = scheduled(model, "compiled")
    for handle, (tokens, logprobs) in eager.items():
        assert compiled[handle][0] == tokens
        assert compiled[handle][1] == pytest.approx(logprobs, abs=1e-4)
    assert sizes[0] == 1 and max(sizes) == 4  # one row alone; four when four sequences run
    assert 2 in sizes[sizes.index(4) :] and sizes[-1] == 1  # fewer again as they leave


def test_the_server_counts_every_cache_the_compiled_batch_keeps(uncompiled_step):
    """``Limits.check`` weighs the memory of the caches a compiled batch keeps, one per size it has stepped."""
    from alilama_core.engine.scheduler import Limits

    model = model_for("alibi", "sdpa")
    batch = ContinuousBatch(model, rows=6, capacity=KIT_CONTEXT, decode="compiled")
    for prompt in prompts((5, 6, 7, 8, 9, 10)):
        batch.join(prompt, SamplingSettings(max_new_tokens=20, temperature=0))
        batch.step()
    kept = sum(cache.batch for cache in batch._statics.values())
    assert kept == Limits(max_batch=6).cache_rows("compiled") == 6 + 4 + 2 + 1
    assert Limits(max_batch=6).cache_rows("eager") == 6


# -- choosing, falling back, saying why ---------------------------------------------------------


def test_decode_must_be_a_known_choice():
    with pytest.raises(ConfigError, match="decode must be one of auto, eager, compiled"):
        SamplingSettings(decode="fast").validate()


def test_auto_never_compiles_by_itself(monkeypatch):
    model = model_for("alibi")
    monkeypatch.setattr(dec, "build_package", lambda *a: pytest.fail("auto compiled"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert generate(model, prompts((5,)), SamplingSettings(max_new_tokens=3, temperature=0))
    plan = dec.decode_plan(model, "auto")
    assert plan.path == "eager" and "not built" in plan.reason
    assert dec.decode_plan(model, "compiled").reason == "built at first use"


def test_a_non_exact_backend_decodes_eagerly_and_says_why():
    backend = dataclass_replace(attention_backend(get_attention("eager")), name="window-like", exact=False)
    model = model_for("alibi")
    model.backend = backend
    reason = dec.refusal(model)
    assert "'window-like' is not exact" in reason
    with pytest.warns(AlilamaWarning, match="decode='compiled' decodes eagerly: attention backend 'window-like'"):
        got = generate(model, prompts((5,)), SamplingSettings(max_new_tokens=4, temperature=0, decode="compiled"))
    assert got == generate(model, prompts((5,)), SamplingSettings(max_new_tokens=4, temperature=0, decode="eager"))


def dataclass_replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


def test_a_model_in_training_mode_decodes_eagerly():
    model = model_for("rope").train()
    assert "training mode" in dec.refusal(model)


def test_a_step_that_does_not_compile_decodes_eagerly_and_says_why(monkeypatch, tmp_path):
    model = model_for("nope")
    dec.keep_packages(model, RunPackages(tmp_path))

    def fails(*args):
        raise RuntimeError("the scheme reads a tensor's value\nmore detail")

    monkeypatch.setattr(dec, "build_package", fails)
    with pytest.warns(AlilamaWarning, match="did not compile: RuntimeError: the scheme reads a tensor's value"):
        got = generate(model, prompts((5,)), SamplingSettings(max_new_tokens=4, temperature=0, decode="compiled"))
    assert got == generate(model, prompts((5,)), SamplingSettings(max_new_tokens=4, temperature=0, decode="eager"))
    assert not list(tmp_path.rglob(".building-*"))  # nothing half-written is left


# -- the real compiled step ----------------------------------------------------------------------


@pytest.fixture
def light(monkeypatch):
    monkeypatch.setattr(dec, "INDUCTOR_CONFIGS", LIGHT)


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory) -> RunPackages:
    """The run folder the per-scheme tests compile into; the package test below starts from its ALiBi package
    (the same weights, so the same key) instead of compiling it a second time."""
    return RunPackages(tmp_path_factory.mktemp("compiled-run"))


@pytest.mark.slow
@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_compiled_step_gives_the_eager_logits_and_tokens(scheme, light, shared_store):
    model = model_for(scheme, "sdpa")
    dec.keep_packages(model, shared_store)
    lengths = (40, 120)  # a padded batch; batch 1 compiles in the package test below
    step, reason = dec.compiled_step(model)
    assert reason is None and shared_store.find(dec.package_key(model)) is not None  # built and kept
    eager, compiled = both_paths(model, prompts(lengths), steps=6, step=step)
    assert torch.allclose(eager, compiled, atol=1e-5, rtol=1e-4), (eager - compiled).abs().max()
    greedy = SamplingSettings(max_new_tokens=10, temperature=0)
    got = generate(model, prompts(lengths), SamplingSettings(**dict(vars(greedy), decode="compiled")))
    assert got == generate(model, prompts(lengths), SamplingSettings(**dict(vars(greedy), decode="eager")))


@pytest.mark.slow
def test_the_package_is_kept_in_the_run_folder_loaded_rebuilt_when_corrupt_or_stale(
    light, tmp_path, monkeypatch, shared_store
):
    model = model_for("alibi", "sdpa")
    store = RunPackages(tmp_path)
    dec.keep_packages(model, store)
    built = shared_store.find(dec.package_key(model))  # compiled by the [alibi] test above, when it ran
    if built is not None:
        store.folder.mkdir(parents=True)
        shutil.copyfile(built, store.path(dec.package_key(model)))
    step, reason = dec.compiled_step(model)
    assert reason is None
    for lengths in ((20,), (20, 9), (20, 9, 14)):  # one package for any number of rows
        eager, compiled = both_paths(model, prompts(lengths), steps=4, step=step)
        assert torch.allclose(eager, compiled, atol=1e-5, rtol=1e-4), lengths
    assert isinstance(step, dec._Unlocked)  # called without the GIL: the server's HTTP thread runs beside it
    (package,) = (tmp_path / "compiled").glob("decode-cpu-float32-*.pt2")
    assert not list(tmp_path.rglob(".building-*"))
    key = dec.package_key(model)
    assert package == store.path(key)
    good = package.read_bytes()
    loader = torch._C._aoti.AOTIModelPackageLoader(str(package), "model", False, 1, -1)  # torch's own runner
    inputs = dec.example_inputs(model, 3, 24)
    with torch.no_grad():
        for ours, torchs in zip(step(*inputs), loader.boxed_run(list(inputs))):
            assert torch.equal(ours, torchs)

    dec._LOADED.clear()  # another process: it loads the file and compiles nothing
    monkeypatch.setattr(dec, "build_package", lambda *a: pytest.fail("rebuilt a good package"))
    assert dec.compiled_step(model, build=False)[0] is not None
    assert dec.decode_plan(model, "auto").path == "compiled"

    builds = []

    def rebuild(model, path):  # what the compiler made of these weights above, without compiling again
        builds.append(Path(path).name)
        Path(path).write_bytes(good)

    dec._LOADED.clear()
    package.write_bytes(b"not a package")  # corrupt: rebuilt, with a warning, never a crash
    monkeypatch.setattr(dec, "build_package", rebuild)
    with pytest.warns(AlilamaWarning, match="did not load"):
        step, reason = dec.compiled_step(model)
    assert reason is None and len(builds) == 1 and package.read_bytes() == good
    eager, compiled = both_paths(model, prompts((20,)), steps=4, step=step)  # the rebuilt package runs
    assert torch.allclose(eager, compiled, atol=1e-5, rtol=1e-4)

    with torch.no_grad():  # new weights: a new key, a new build, and the old package goes
        model.head.weight.mul_(1.5)
    assert dec.package_key(model) != key
    assert dec.compiled_step(model)[1] is None and len(builds) == 2
    (newer,) = (tmp_path / "compiled").glob("decode-cpu-float32-*.pt2")
    assert newer != package and newer == store.path(dec.package_key(model)) and newer.name == builds[1]


@needs_test_plugins("alilama-kerple")
@pytest.mark.slow
def test_a_learnable_bias_compiles_and_matches(light, tmp_path):
    model = model_for("kerple-log", "sdpa")
    dec.keep_packages(model, RunPackages(tmp_path))
    step, reason = dec.compiled_step(model)
    assert reason is None
    eager, compiled = both_paths(model, prompts(), steps=5, step=step)
    assert torch.allclose(eager, compiled, atol=1e-5, rtol=1e-4)
