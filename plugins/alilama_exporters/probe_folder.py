"""Load an exported folder with *this* Python's transformers and compare it with Alilama's outputs.

Standalone: it imports only torch, transformers and safetensors, so it runs in
an environment without Alilama, under whichever transformers version a user
has (``alilama export hf --check-with PYTHON`` runs it there; the export runs
the same ``probe`` in-process on the folder it just wrote)::

    PYTHON probe_folder.py OUT EXPECTED.safetensors

``EXPECTED`` is written by ``alilama_core.runs.exports.write_expected``: tensors
``ids`` ``(B, T)`` and ``logits`` ``(B, T, V)`` (Alilama's), ``prompt``
``(P,)`` and ``greedy`` ``(N,)`` (Alilama's greedy continuation, cut before
end-of-text); metadata ``max_new_tokens``, ``eot``, ``prompt_text`` and, where the
tokenizer can spell every greedy id, ``greedy_text``. It prints
one JSON object: the versions, the architecture transformers built, the
largest logit difference, and whether the greedy ids, the greedy text and the
tokenizer's ids for ``prompt_text`` equal Alilama's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _until(tokens: list[int], eot: int | None) -> list[int]:
    return tokens[: tokens.index(eot)] if eot is not None and eot in tokens else tokens


def probe(folder: str | Path, expected: str | Path) -> dict:
    """What the installed transformers makes of ``folder``, against ``expected`` (see the module doc)."""
    import torch
    import transformers
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(folder)
    with safe_open(str(expected), framework="pt") as f:
        want = {k: f.get_tensor(k) for k in f.keys()}
        meta = f.metadata()
    eot = int(meta["eot"]) if meta.get("eot") not in (None, "") else None
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    remote = "auto_map" in config  # the remote-code export: its own files, which the export wrote
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=remote, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    with torch.no_grad():
        logits = model(want["ids"]).logits.float()
        prompt = want["prompt"][None, :]
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=int(meta["max_new_tokens"]),
            do_sample=False,
            pad_token_id=eot,
        )
    greedy = _until(out[0, prompt.shape[1] :].tolist(), eot)
    expected_greedy = want["greedy"].tolist()
    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "architecture": type(model).__name__,
        "max_logit_diff": (logits - want["logits"].float()).abs().max().item(),
        "greedy_equal": greedy == expected_greedy,
        "greedy": greedy,
        # None where Alilama's greedy ids include ones its tokenizer cannot spell (a model wider than it)
        "text_equal": tok.decode(greedy) == meta["greedy_text"] if "greedy_text" in meta else None,
        "tokenizer_equal": tok(meta["prompt_text"]).input_ids == want["prompt"].tolist(),
    }


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python probe_folder.py FOLDER EXPECTED.safetensors")
    print(json.dumps(probe(sys.argv[1], sys.argv[2])))
