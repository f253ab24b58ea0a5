"""Export a native Hugging Face folder to ONNX with optimum, then run it in onnxruntime against Alilama's outputs.

Standalone: it imports only torch, safetensors, optimum-onnx and onnxruntime,
because optimum-onnx admits transformers below 4.58 only and so usually lives
in an environment of its own, without Alilama (``alilama export onnx --python
PYTHON`` runs it there; the tests run it in the same way)::

    PYTHON onnx_folder.py HF_FOLDER OUT EXPECTED.safetensors

It writes ``OUT`` with ``optimum.exporters.onnx.main_export`` (task
``text-generation-with-past``: a decoder that takes and returns past keys and
values, so onnxruntime generates incrementally), moves the model into
``OUT/onnx/`` (where transformers.js looks for ``model.onnx``; its external
data, if any, beside it), loads it with
``ORTModelForCausalLM`` and prints one JSON object: the versions, the largest
logit difference from ``EXPECTED`` (written by ``alilama_core.runs.exports.write_expected``),
whether greedy generation through the KV cache gives Alilama's ids, and the
files written.
"""

from __future__ import annotations

import json
import os
import sys


def export_and_check(folder: str, out: str, expected: str) -> dict:
    import onnxruntime
    import optimum
    import torch
    from optimum.exporters.onnx import main_export
    from optimum.onnxruntime import ORTModelForCausalLM
    from safetensors import safe_open

    with safe_open(expected, framework="pt") as f:
        want = {k: f.get_tensor(k) for k in f.keys()}
        meta = f.metadata()
    main_export(folder, output=out, task="text-generation-with-past", device="cpu", do_validation=False)
    os.mkdir(os.path.join(out, "onnx"))
    for name in os.listdir(out):  # model.onnx and its external data (model.onnx_data), as transformers.js reads them
        if name.endswith((".onnx", ".onnx_data")):
            os.replace(os.path.join(out, name), os.path.join(out, "onnx", name))
    model = ORTModelForCausalLM.from_pretrained(out, use_cache=True)
    ids = want["ids"]
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()
    prompt = want["prompt"][None, :]
    eot = int(meta["eot"]) if meta.get("eot") else None
    out_ids = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=int(meta["max_new_tokens"]),
        pad_token_id=eot,
    )[0, prompt.shape[1] :].tolist()
    greedy = out_ids[: out_ids.index(eot)] if eot is not None and eot in out_ids else out_ids
    return {
        "optimum": getattr(optimum, "__version__", None) or _version("optimum"),
        "optimum_onnx": _version("optimum-onnx"),
        "onnxruntime": onnxruntime.__version__,
        "max_logit_diff": (logits - want["logits"].float()).abs().max().item(),
        "greedy_equal": greedy == want["greedy"].tolist(),
        "greedy": greedy,
        "files": sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs),
    }


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python onnx_folder.py HF_FOLDER OUT EXPECTED.safetensors")
    print(json.dumps(export_and_check(*sys.argv[1:4])))
