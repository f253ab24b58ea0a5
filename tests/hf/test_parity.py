"""The same transformers calls on a GPT-2 built locally and on an exported Alilama model.

Every row runs for both models and asserts the same property, so a row that
passes for GPT-2 and fails for Alilama is a difference a transformers user
would meet. Alilama is the remote-code export (``AlilamaForCausalLM``, loaded
here through the registered Auto classes); its native exports are
transformers' own classes and are checked in ``test_hub.py``.
"""

from __future__ import annotations

import shutil

import pytest
import torch

MODELS = ["gpt2", "alilama"]
PROMPT = "Once upon a time, Lily saw"


@pytest.fixture(scope="module")
def folders(tmp_path_factory, exports) -> dict:
    """``{"gpt2": folder, "alilama": folder}``: a random GPT-2 of the same size, with the same tokenizer."""
    import alilama_hf

    alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    from transformers import GPT2Config, GPT2LMHeadModel

    alilama = exports["alibi"]
    gpt2 = tmp_path_factory.mktemp("gpt2") / "gpt2"
    torch.manual_seed(0)
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(alilama)
    config = GPT2Config(
        vocab_size=c.vocab_size,
        n_embd=c.d_model,
        n_layer=c.n_layers,
        n_head=c.n_heads,
        n_inner=c.d_mlp,
        n_positions=64,
        bos_token_id=c.eos_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.eos_token_id,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    GPT2LMHeadModel(config).save_pretrained(gpt2)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copyfile(alilama / name, gpt2 / name)
    return {"gpt2": gpt2, "alilama": alilama}


@pytest.fixture(scope="module")
def tok(folders):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folders["alilama"])


def load(folders, name, cls=None, **kw):
    from transformers import AutoModelForCausalLM

    return (cls or AutoModelForCausalLM).from_pretrained(folders[name], **kw).eval()


def _batch(tok, texts, side="left"):
    tok.padding_side = side
    return tok(texts, return_tensors="pt", padding=True)


@pytest.mark.parametrize("name", MODELS)
def test_forward_with_labels_padding_and_ignore_index(folders, tok, name):
    model = load(folders, name)
    batch = _batch(tok, [PROMPT, "She loved the big red ball in the park"], side="right")
    labels = batch.input_ids.masked_fill(batch.attention_mask == 0, -100)
    labels[0, 2] = -100
    out = model(**batch, labels=labels)
    logits = out.logits.float()
    expected = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    torch.testing.assert_close(out.loss, expected, rtol=1e-5, atol=1e-6)
    assert model(**batch, labels=torch.full_like(labels, -100)).loss.isnan()  # as torch's mean over nothing


def _greedy_by_hand(model, ids, n, eos):
    for _ in range(n):
        with torch.no_grad():
            nxt = model(ids).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        if int(nxt) == eos:
            break
    return ids


@pytest.mark.parametrize("name", MODELS)
def test_generate_greedy_sampling_beams(folders, tok, name):
    model = load(folders, name)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    greedy = model.generate(ids, max_new_tokens=10, do_sample=False)
    assert greedy.tolist() == _greedy_by_hand(model, ids, 10, tok.eos_token_id).tolist()
    torch.manual_seed(3)
    a = model.generate(ids, do_sample=True, top_k=20, max_new_tokens=8, min_new_tokens=8)
    torch.manual_seed(3)
    b = model.generate(ids, do_sample=True, top_k=20, max_new_tokens=8, min_new_tokens=8)
    assert a.tolist() == b.tolist() and a.shape[1] == ids.shape[1] + 8
    beams = model.generate(
        ids,
        num_beams=3,
        num_return_sequences=2,
        max_new_tokens=6,
        min_new_tokens=6,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
    )
    assert beams.sequences.shape == (2, ids.shape[1] + 6)
    assert beams.sequences_scores[0] >= beams.sequences_scores[1]


@pytest.mark.parametrize("name", MODELS)
def test_max_length_and_max_new_tokens(folders, tok, name):
    model = load(folders, name)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    assert model.generate(ids, max_length=20, min_length=20, do_sample=False).shape[1] == 20
    assert model.generate(ids, max_new_tokens=7, min_new_tokens=7, do_sample=False).shape[1] == ids.shape[1] + 7


@pytest.mark.parametrize("name", MODELS)
def test_stop_strings(folders, tok, name):
    model = load(folders, name)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    n = ids.shape[1]
    full = model.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False)
    pieces = [tok.decode(t) for t in full[0, n:].tolist()]
    k = next(i for i, p in enumerate(pieces) if p.strip())  # the first new token with visible text
    stopped = model.generate(ids, max_new_tokens=12, do_sample=False, stop_strings=[pieces[k].strip()], tokenizer=tok)
    assert stopped.shape[1] <= n + k + 1
    assert stopped[0].tolist() == full[0, : stopped.shape[1]].tolist()


@pytest.mark.parametrize("name", MODELS)
def test_left_padded_batch_equals_one_by_one(folders, tok, name):
    model = load(folders, name)
    prompts = [PROMPT, "She loved", "Max barked at the ball and"]
    batch = _batch(tok, prompts)
    out = model.generate(**batch, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    width = batch.input_ids.shape[1]
    for row, prompt in zip(out.tolist(), prompts):
        ids = tok(prompt, return_tensors="pt").input_ids
        alone = model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
        assert row[width:] == alone[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize("name", MODELS)
def test_output_attentions_and_hidden_states(folders, tok, name):
    model = load(folders, name, attn_implementation="eager")
    ids = tok(PROMPT, return_tensors="pt").input_ids
    t = ids.shape[1]
    out = model(ids, output_attentions=True, output_hidden_states=True)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    assert len(out.attentions) == layers and out.attentions[0].shape == (1, heads, t, t)
    for w in out.attentions:
        torch.testing.assert_close(w.sum(-1), torch.ones(1, heads, t))
        assert w.triu(1).abs().max() == 0  # causal
    assert len(out.hidden_states) == layers + 1 and out.hidden_states[0].shape == (1, t, model.config.hidden_size)
    base = model.base_model(ids).last_hidden_state
    torch.testing.assert_close(out.hidden_states[-1], base)
    if name == "alilama":  # under sdpa the call runs eager for the weights (GPT-2 returns none there)
        sdpa = load(folders, name)
        for a, b in zip(sdpa(ids, output_attentions=True).attentions, out.attentions):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", MODELS)
def test_static_cache_and_save_pretrained(folders, tok, name, tmp_path):
    model = load(folders, name)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    kw = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False)
    assert model.generate(ids, cache_implementation="static", **kw).tolist() == model.generate(ids, **kw).tolist()
    model.save_pretrained(tmp_path / "saved")
    again = type(model).from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)


@pytest.mark.parametrize("name", MODELS)
def test_resize_token_embeddings(folders, tok, name):
    model = load(folders, name)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        before = model(ids).logits
    v = model.config.vocab_size
    model.resize_token_embeddings(v + 8)
    assert model.config.vocab_size == v + 8
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    with torch.no_grad():
        after = model(ids).logits
    assert after.shape[-1] == v + 8
    torch.testing.assert_close(after[..., :v], before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("every_n_layers", [1, 2])
@pytest.mark.parametrize("name", MODELS)
def test_gradient_checkpointing_gives_the_same_gradients(folders, tok, name, every_n_layers):
    """As the Trainer enables it (``activation_checkpointing_enable``), every layer or every other one.

    The layers really are recomputed in the backward pass (counted), and the
    gradients do not change.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer

    ids = tok(PROMPT * 2, return_tensors="pt").input_ids
    grads, calls = [], []
    for checkpointing in (False, True):
        model = load(folders, name).train()
        if checkpointing:
            model.activation_checkpointing_enable(every_n_layers=every_n_layers)
            assert model.is_activation_checkpointing
        layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        count = [0]
        for layer in layers:  # a hook inside the layer: transformers keeps the layer's own hooks out of the replay
            next(layer.children()).register_forward_hook(lambda *_: count.__setitem__(0, count[0] + 1))
        model(ids, labels=ids).loss.backward()
        calls.append((len(layers), count[0]))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    (n_layers, plain), (_, recomputed) = calls
    assert n_layers >= 2 and plain == n_layers
    assert recomputed == n_layers + len(range(0, n_layers, every_n_layers))  # checkpointed layers run twice
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_half_precision_with_left_padding_stays_finite(folders, tok, name):
    batch = _batch(tok, [PROMPT, "She"])
    with torch.no_grad():
        ref = load(folders, name)(**batch).logits
        for dtype, attn in ((torch.bfloat16, "sdpa"), (torch.float16, "eager"), (torch.float16, "sdpa")):
            model = load(folders, name, dtype=dtype, attn_implementation=attn)
            logits = model(**batch).logits
            assert logits.dtype == dtype and torch.isfinite(logits).all(), (dtype, attn)
            real = batch.attention_mask.bool()
            assert (logits.float()[real] - ref[real]).abs().max() < 0.1, (dtype, attn)


@pytest.mark.parametrize("name", MODELS)
def test_pipeline_text_generation(folders, name):
    from transformers import pipeline

    generator = pipeline("text-generation", model=str(folders[name]))
    text = generator(PROMPT, max_new_tokens=6, do_sample=False)[0]["generated_text"]
    assert text.startswith(PROMPT) and len(text) > len(PROMPT)
    short = generator(PROMPT, max_length=12, do_sample=False, return_tensors=True)[0]["generated_token_ids"]
    assert len(short) <= 12


@pytest.mark.parametrize("name", MODELS)
def test_sequence_classification(folders, tok, name):
    from transformers import AutoModelForSequenceClassification

    model = load(folders, name, cls=AutoModelForSequenceClassification, num_labels=3)
    assert type(model).__name__.endswith("ForSequenceClassification")
    batch = _batch(tok, [PROMPT, "She loved"], side="right")
    out = model(**batch, labels=torch.tensor([0, 2]))
    assert out.logits.shape == (2, 3) and torch.isfinite(out.loss)
    out.loss.backward()
    with torch.no_grad():
        alone = model(tok("She loved", return_tensors="pt").input_ids).logits
    torch.testing.assert_close(out.logits[1:].detach(), alone, rtol=1e-5, atol=1e-5)  # pooled at the last real token


@pytest.mark.parametrize("name", MODELS)
def test_trainer_gradient_accumulation_keeps_loss_and_grad_norm(folders, tok, name, tmp_path):
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate")
    from transformers import Trainer, TrainingArguments

    ids = tok(PROMPT * 8, return_tensors="pt").input_ids[0]
    rows = [{"input_ids": ids[i : i + 16], "labels": ids[i : i + 16]} for i in range(8)]
    logged = {}
    for batch, accumulation in ((8, 1), (2, 4)):
        args = TrainingArguments(
            output_dir=str(tmp_path / f"acc{accumulation}"),
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            logging_steps=1,
            learning_rate=1e-3,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        trainer = Trainer(model=load(folders, name).train(), args=args, train_dataset=rows)
        trainer.train()
        logged[accumulation] = next(h for h in trainer.state.log_history if "loss" in h)
    assert logged[4]["loss"] == pytest.approx(logged[1]["loss"], rel=1e-4)
    assert logged[4]["grad_norm"] == pytest.approx(logged[1]["grad_norm"], rel=1e-4)
