"""Registers ``hf-bpe``: a byte-level BPE tokenizer trained and run by Hugging Face ``tokenizers``."""

from alilama_core import hookimpl


@hookimpl
def register_tokenizers(register):
    register("hf-bpe", "alilama_hftok.tokenizer:HFByteBPE")
