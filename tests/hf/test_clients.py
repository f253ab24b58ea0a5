"""Real clients on exported models: peft LoRA (fine-tune with transformers' Trainer, then merge)."""

from __future__ import annotations

import pytest
import torch

PROMPT = "Once upon a time, Lily saw"
# What docs/huggingface.md tells users to pass for the remote-code model (the MLP's ``proj`` is left out).
ALILAMA_LORA_TARGETS = ["qkv", "attn.proj"]


def _lora_fine_tune(model, tok, tmp_path, target_modules=None):
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer, TrainingArguments

    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=target_modules, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    ids = tok(PROMPT * 8, return_tensors="pt").input_ids[0]
    rows = [{"input_ids": ids[i : i + 16], "labels": ids[i : i + 16]} for i in range(8)]
    args = TrainingArguments(
        output_dir=str(tmp_path / "lora"),
        per_device_train_batch_size=4,
        max_steps=3,
        learning_rate=5e-2,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        logging_steps=1,
    )
    Trainer(model=peft_model, args=args, train_dataset=rows).train()
    return peft_model.eval(), ids[None, :16]


NATIVE = {"native-mpt": "alibi-nobias", "native-gpt2": "learned", "native-gpt-neox": "rope"}


@pytest.mark.slow  # fine-tunes with peft
@pytest.mark.parametrize("which", [*NATIVE, "remote-code"])
def test_peft_lora_fine_tune_and_merge(which, exports, native_exports, tmp_path):
    pytest.importorskip("peft")
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate")
    import alilama_hf

    alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = native_exports[NATIVE[which]] if which in NATIVE else exports["alibi"]
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        before = model(tok(PROMPT, return_tensors="pt").input_ids).logits
    # peft knows the native architectures' attention (Wqkv, c_attn, query_key_value); remote code names its own.
    targets = None if which in NATIVE else ALILAMA_LORA_TARGETS
    peft_model, ids = _lora_fine_tune(model, tok, tmp_path, targets)
    wrapped = [n for n, _ in peft_model.named_modules() if n.endswith("lora_A")]
    assert wrapped and all(".mlp." not in n and ".ffn." not in n for n in wrapped)
    with torch.no_grad():
        tuned = peft_model(ids).logits
        merged = peft_model.merge_and_unload()
        assert not any("lora" in n for n, _ in merged.named_parameters())
        torch.testing.assert_close(merged(ids).logits, tuned, rtol=1e-4, atol=1e-4)
        after = merged(tok(PROMPT, return_tensors="pt").input_ids).logits
    assert (after - before).abs().max() > 1e-3  # the fine-tune changed the model


def test_peft_without_target_modules_says_to_name_them(exports):
    pytest.importorskip("peft")
    import alilama_hf

    alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(exports["alibi"])
    with pytest.raises(ValueError, match="target_modules"):
        get_peft_model(model, LoraConfig(r=4, task_type="CAUSAL_LM"))
