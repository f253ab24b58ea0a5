"""The transformers classes compute what Alilama computes, for every positional scheme."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from alilama_testing import SCHEMES

from alilama_core.engine.generation import SamplingSettings, generate
from alilama_core.runs.checkpoint import load_run

PROMPT = "Once upon a time, Lily saw"


def _hf(export_dir, attn="sdpa"):
    import alilama_hf

    alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(export_dir, attn_implementation=attn).eval()


def _until_eot(tokens: list[int], eot: int) -> list[int]:
    return tokens[: tokens.index(eot)] if eot in tokens else tokens


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("positional", SCHEMES)
def test_logits_equal_alilama(runs, exports, positional, attn):
    loaded = load_run(runs[positional])
    model = _hf(exports[positional], attn)
    assert type(model).__module__ == "alilama_hf.modeling_alilama"  # registered, no remote code
    assert model.config._attn_implementation == attn
    ids = torch.tensor([loaded.tokenizer.encode(PROMPT * 4)[:30], list(range(100, 130))])  # (2, 30)
    with torch.no_grad():
        expected = loaded.model(ids)
        got = model(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positional", SCHEMES)
def test_buffers_and_tied_head_survive_from_pretrained(runs, exports, positional):
    from alilama_positional.standalone_alibi import alibi_slopes
    from alilama_positional.standalone_rope import rope_inv_freq
    from safetensors import safe_open

    model = _hf(exports[positional])
    assert model.lm_head.weight is model.model.embed_tokens.weight
    with safe_open(exports[positional] / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys
    scheme = model.model.positional
    if positional == "alibi":  # 6 heads: the interleaved slopes of a non-power-of-two count
        assert torch.equal(scheme.slopes(), alibi_slopes(6))
        assert alibi_slopes(6).tolist() == [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    if positional == "rope":
        assert torch.equal(scheme.inv_freq, rope_inv_freq(8, 500.0))
    if positional == "learned":
        assert "model.positional.table.weight" in keys
        torch.testing.assert_close(scheme.table.weight, load_run(runs[positional]).model.positional.table.weight)


def test_an_older_learned_export_still_loads_its_table(runs, exports, tmp_path):
    """Exports written before the built-in schemes shipped their own modules named the learned table
    ``model.embed_positions.weight`` and recorded no scheme module: they must load to the same logits."""
    from safetensors.torch import load_file, save_file

    old = tmp_path / "older"
    shutil.copytree(exports["learned"], old)
    state = load_file(old / "model.safetensors")
    state["model.embed_positions.weight"] = state.pop("model.positional.table.weight")
    save_file(state, old / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((old / "config.json").read_text())
    config.pop("positional_module", None), config.pop("positional_class", None)
    (old / "config.json").write_text(json.dumps(config))
    loaded = load_run(runs["learned"])
    model = _hf(old)
    ids = torch.tensor([loaded.tokenizer.encode(PROMPT * 4)[:30]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, loaded.model(ids), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positional", SCHEMES)
def test_built_in_schemes_export_like_a_plugin(exports, positional):
    """One copy of each scheme's maths: the plugin class is its standalone module's class, which the export ships."""
    import importlib
    from pathlib import Path

    from alilama_core.engine import attention_math
    from alilama_core.engine.registry import get_positional

    cls = get_positional(positional)
    source = Path(cls.export_source())
    standalone = importlib.import_module(f"alilama_positional.{source.stem}")
    assert getattr(standalone, cls.__name__) in cls.__mro__  # the plugin runs the very class it exports
    config = json.loads((exports[positional] / "config.json").read_text())
    assert config["positional_class"] == cls.__name__
    shipped = exports[positional] / f"{config['positional_module']}.py"
    assert shipped.read_text() == source.read_text()
    assert (exports[positional] / "attention_math.py").read_text() == Path(attention_math.__file__).read_text()
    for path in (shipped, exports[positional] / "attention_math.py"):
        imports = [line.split()[1] for line in path.read_text().splitlines() if line.startswith(("import ", "from "))]
        assert {name.split(".")[0] for name in imports} <= {"__future__", "math", "torch"}, (path.name, imports)


@pytest.mark.parametrize("positional", SCHEMES)
def test_cached_and_uncached_generate_agree(runs, exports, positional):
    loaded = load_run(runs[positional])
    model = _hf(exports[positional])
    ids = torch.tensor([loaded.tokenizer.encode(PROMPT)])
    n = 20 if positional == "learned" else 40  # ALiBi, RoPE and NoPE run past their 32-token context
    kw = dict(max_new_tokens=n, do_sample=False, min_new_tokens=n)
    cached = model.generate(ids, use_cache=True, **kw)
    uncached = model.generate(ids, use_cache=False, **kw)
    static = model.generate(ids, cache_implementation="static", **kw)  # preallocated: empty slots masked
    assert cached.shape[1] == ids.shape[1] + n
    assert cached.tolist() == uncached.tolist() == static.tolist()


@pytest.mark.parametrize("positional", SCHEMES)
def test_greedy_generate_equals_alilama(runs, exports, positional):
    loaded = load_run(runs[positional])
    model = _hf(exports[positional])
    eot = loaded.tokenizer.eot_id
    prompt = loaded.tokenizer.encode(PROMPT)
    n = 20 if positional == "learned" else 40
    ours = generate(loaded.model, [prompt], SamplingSettings(max_new_tokens=n, temperature=0), eot_id=eot)[0]
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
    theirs = _until_eot(out[0, len(prompt) :].tolist(), eot)
    assert theirs == ours


@pytest.mark.parametrize("positional", ["alibi", "rope", "learned"])
def test_left_padded_batch_equals_one_by_one(runs, exports, positional):
    loaded = load_run(runs[positional])
    model = _hf(exports[positional])
    tok = loaded.tokenizer
    prompts = [tok.encode(PROMPT), tok.encode("She loved"), tok.encode("Max barked at the ball and")]
    settings = SamplingSettings(max_new_tokens=12, temperature=0)
    ours = generate(loaded.model, prompts, settings, eot_id=tok.eot_id)
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.eot_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    theirs = [_until_eot(row[width:], tok.eot_id) for row in out.tolist()]
    assert theirs == ours


def test_learned_positions_refuse_to_run_past_their_table(exports):
    model = _hf(exports["learned"])
    with pytest.raises(ValueError, match="covers 64 positions"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_weight_names_round_trip(runs):
    from alilama_exporters.hf_folder import from_hf_state_dict, to_hf_state_dict

    for positional in SCHEMES:
        state = load_run(runs[positional]).model.state_dict()
        hf = to_hf_state_dict(state)
        assert "lm_head.weight" not in hf and all(k.startswith("model.") for k in hf)
        back = from_hf_state_dict(hf)
        assert back.keys() == state.keys() - {"head.weight"}
        assert all(back[k] is state[k] for k in back)


def test_auto_classes_load_without_remote_code(exports):
    import alilama_hf

    alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(exports["rope"])
    assert type(config).__name__ == "AlilamaConfig" and config.tie_word_embeddings
    base = AutoModel.from_pretrained(exports["rope"])
    assert type(base).__name__ == "AlilamaModel"
    hidden = base(torch.tensor([[1, 2, 3]])).last_hidden_state
    assert hidden.shape == (1, 3, 32)


def test_exported_folder_is_complete(exports, tokenizer):
    out = exports["alibi"]
    names = {p.name for p in out.iterdir()}
    assert names >= {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "configuration_alilama.py",
        "modeling_alilama.py",
        "attention_math.py",
        "positional_alibi.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "README.md",
    }
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "alilama" and config["tie_word_embeddings"] is True
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_alilama.AlilamaForCausalLM"
    assert config["positional"] == "alibi" and config["n_heads"] == 6
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == gen["bos_token_id"] == gen["pad_token_id"] == tokenizer.eot_id
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tok_config["eos_token"] == tok_config["pad_token"] == "<|endoftext|>"
    assert config["positional_module"] == "positional_alibi" and config["positional_class"] == "ALiBi"
    # Remote code must not need Alilama: only torch, transformers and the sibling files.
    for name in ("modeling_alilama.py", "configuration_alilama.py", "attention_math.py", "positional_alibi.py"):
        assert "alilama_" not in "".join(
            line for line in (out / name).read_text().splitlines() if line.lstrip().startswith(("import", "from"))
        )


def test_auto_tokenizer_matches_alilama(exports, tokenizer):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(exports["alibi"])
    for text in ["Once upon a time", "  spaces\tand\nnewlines  ", "Ünïcödé 🙂 and 中文", ""]:
        assert hf(text)["input_ids"] == tokenizer.encode(text)
        assert hf.decode(tokenizer.encode(text)) == text
    assert hf.eos_token == "<|endoftext|>" and hf.eos_token_id == tokenizer.eot_id
    assert hf.pad_token_id == tokenizer.eot_id


def test_model_card(exports, native_exports):
    import yaml
    from huggingface_hub import ModelCard

    card = (exports["alibi"] / "README.md").read_text()
    _, front, body = card.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-generation"
    assert {"alilama", "custom_code", "alibi"} <= set(meta["tags"]) and meta["license"] == "mit"
    assert body.lstrip().startswith("# alibi\n")  # the title comes from --repo-id alilama-test/alibi
    assert "## Architecture" in body and "| attention heads | 6 x 8 |" in body
    assert "ALiBi" in body and "4 optimizer steps" in body and "384 training tokens" in body
    assert "| 4 | 384 | 4.4 | 2.9 |" in body  # the eval figures from metrics.jsonl
    assert "## Intended use" in body and "## Limitations" in body
    assert "not a transformers architecture: MPT has no linear or norm biases" in body  # why remote code
    assert 'AutoModelForCausalLM.from_pretrained("alilama-test/alibi", trust_remote_code=True)' in body
    parsed = ModelCard(card).data.to_dict()  # the Hub's own parser reads the metadata back
    assert parsed["license"] == "mit" and parsed["library_name"] == "transformers"
    # A run without metrics.jsonl still gets a card.
    bare = (exports["nope"] / "README.md").read_text()
    assert "no metrics.jsonl" in bare and "No evaluation figures" in bare
    # A native export says so, and needs no remote code.
    mpt = (native_exports["alibi-nobias"] / "README.md").read_text()
    assert "`MptForCausalLM`" in mpt and "trust_remote_code=True" not in mpt and "custom_code" not in mpt
    assert "license:" not in mpt.split("---")[1] and "No license was given" in mpt
    assert "8,192 positions" in mpt


def test_model_card_reads_the_prepared_data(runs, tmp_path):
    """Datasets and token counts come from the prepared data's meta.json, which RUN/run.json names."""
    import yaml
    from alilama_exporters.hf_folder import export

    run = tmp_path / "story-run"
    shutil.copytree(runs["nope"], run)
    data = tmp_path / "data"
    data.mkdir()
    source = (
        "/home/u/.cache/huggingface/hub/datasets--roneneldan--TinyStories/snapshots/abc/TinyStoriesV2-GPT4-train.txt"
    )
    meta = {
        "vocab_size": 320,
        "sources": [source, "/data/extra.txt"],
        "splits": {
            "train": {"tokens": 123456, "bytes": 500000, "documents": 900},
            "val": {"tokens": 6789, "bytes": 27000, "documents": 50},
        },
    }
    (data / "meta.json").write_text(json.dumps(meta))
    (run / "run.json").write_text(json.dumps({"data": str(data)}))
    card = (export(run, tmp_path / "out", format="remote-code") / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["datasets"] == ["roneneldan/TinyStories"] and "license" not in front
    assert "# story-run\n" in card  # no --repo-id: the run's name
    assert "`TinyStoriesV2-GPT4-train.txt`, `extra.txt`" in card
    assert "| train | 123,456 | 900 | 500,000 |" in card and "| val | 6,789 | 50 | 27,000 |" in card


def test_cache_is_accepted_as_cache_and_as_past_key_values(runs, exports):
    from transformers import DynamicCache

    loaded = load_run(runs["rope"])
    model = _hf(exports["rope"])
    ids = torch.tensor([loaded.tokenizer.encode(PROMPT * 3)[:24]])
    with torch.no_grad():
        full = model(ids).logits
        first = model(ids[:, :10], cache=DynamicCache(config=model.config), use_cache=True)
        second = model(ids[:, 10:20], past_key_values=first.cache, use_cache=True)  # the older name
        third = model(ids[:, 20:], cache=second.cache, use_cache=True)
    assert third.cache.get_seq_length() == 24
    steps = torch.cat([first.logits, second.logits, third.logits], dim=1)
    torch.testing.assert_close(steps, full, rtol=1e-5, atol=1e-5)


def test_labels_give_alilama_next_token_loss(runs, exports):
    loaded = load_run(runs["alibi"])
    model = _hf(exports["alibi"])
    ids = torch.tensor([loaded.tokenizer.encode(PROMPT * 3)[:24]])
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(loaded.model(ids)[0, :-1], ids[0, 1:])
        loss = model(ids, labels=ids).loss
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("attn", ["sdpa", "flex_attention", "flash_attention_2"])
def test_attention_implementations_on_cuda_agree_with_eager(make_run, tmp_path, tokenizer, attn):
    """On a GPU: every attention function against eager, fp32 and fp16, with left padding (head dim 16)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if attn == "flash_attention_2":
        pytest.importorskip("flash_attn", reason="flash-attn is not installed")
    from alilama_exporters.hf_folder import export

    run = make_run(tmp_path, "alibi", tokenizer, metrics=False, d_model=64, n_heads=4, context_length=32)
    out = export(run, tmp_path / "out", format="remote-code")
    ids = torch.randint(0, 300, (3, 40), generator=torch.Generator().manual_seed(0)).cuda()
    mask = torch.ones_like(ids)
    mask[1, :7] = 0
    real = mask.bool()
    with torch.no_grad():
        want = _hf(out, "eager").cuda()(ids, attention_mask=mask).logits
        for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 2e-2)):
            model = _hf(out, attn).to("cuda", dtype)
            got = model(ids, attention_mask=mask).logits.float()
            assert torch.isfinite(got).all()
            assert (got[real] - want[real]).abs().max() < tol, (attn, dtype)


def test_the_essay_nobias_preset_maps_onto_mpt_and_the_essay_preset_does_not():
    from alilama_exporters.native import native_reason

    from alilama_core.engine.configs import preset

    assert native_reason(preset("essay-nobias").model) is None
    assert "linear biases" in native_reason(preset("essay").model)
    nobias = preset("essay-nobias").model
    assert (nobias.d_model, nobias.n_layers, nobias.n_heads, nobias.d_mlp) == (128, 8, 8, 512)


def test_one_eager_attention_for_the_backend_capture_and_the_export():
    """The eager backend, attention capture and the remote code all run ``attention_math``; it is the plain formula."""
    import math

    from alilama_attention.eager import eager_attention as backend
    from alilama_hf import modeling_alilama
    from alilama_testing import tiny_config

    from alilama_core import build_model
    from alilama_core.engine import attention_math
    from alilama_core.engine.capture import attention_probabilities

    assert modeling_alilama.eager_attention is attention_math.eager_attention
    scheme = build_model(tiny_config(positional="alibi", attention="eager", d_model=32, n_heads=4)).positional
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, n, 8, generator=g) for n in (5, 9, 9))  # 5 queries after 4 cached keys
    pad = torch.ones(2, 9, dtype=torch.bool)
    pad[1, :3] = False
    k_pos = torch.arange(9)
    bias = scheme.bias(k_pos[4:], k_pos)  # (H, T, S)
    keep = (k_pos[None, :] <= k_pos[4:, None]) & (pad[:, None, None, :] | (k_pos[None, :] == k_pos[4:, None]))
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(8)) + bias  # (B, H, T, S)
    want = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)  # written out once more, by hand
    assert torch.equal(attention_probabilities(q, k, scheme, True, pad), want)
    assert torch.equal(backend(q, k, v, positional=scheme, key_padding_mask=pad), want @ v)
