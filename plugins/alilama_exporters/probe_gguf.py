"""Run a GGUF file in llama.cpp (``llama-cpp-python``) and compare it with Alilama's outputs.

Standalone: it imports only numpy, safetensors and ``llama_cpp``, so it runs
where llama.cpp is installed and Alilama is not (``alilama export gguf
--check-with PYTHON``; the tests)::

    PYTHON probe_gguf.py MODEL.gguf EXPECTED.safetensors [TEXTS.json]

``EXPECTED`` is what ``alilama_core.runs.exports.write_expected`` writes (see
``probe_folder``). With ``TEXTS.json`` (a list of strings) the result also holds
llama.cpp's token ids for each text. The KV cache is kept in f32, so the
figures measure the weights' precision and llama.cpp's arithmetic only.
"""

from __future__ import annotations

import json
import sys

GGML_TYPE_F32 = 0


def _without_extra_buffer_types(llama_cpp) -> None:
    """Load models without llama.cpp's extra CPU buffer types (weight repacking, AMX), as its ``--no-repack``.

    With them, llama.cpp 0.3.36 crashes (SIGSEGV) in Q8_0 matrix products on a CPU with AMX, also on files
    that its own ``llama_model_quantize`` wrote; llama-cpp-python has no argument for the setting, so the
    default model parameters it starts from are changed.
    """
    default = llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama_model_default_params = params
    llama_cpp.llama.llama_cpp.llama_model_default_params = params


def probe(gguf_path: str, expected: str, texts: list[str] | None = None, threads: int = 2) -> dict:
    import llama_cpp
    import llama_cpp.llama
    import numpy as np
    from safetensors import safe_open

    _without_extra_buffer_types(llama_cpp)
    with safe_open(expected, framework="np") as f:
        want = {k: f.get_tensor(k) for k in f.keys()}
        meta = f.metadata()
    eot = int(meta["eot"]) if meta.get("eot") else None
    ids, prompt = want["ids"], want["prompt"].tolist()
    n_new = int(meta["max_new_tokens"])
    llm = llama_cpp.Llama(
        model_path=gguf_path,
        n_ctx=max(ids.shape[1], len(prompt) + n_new) + 8,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=True,
        type_k=GGML_TYPE_F32,
        type_v=GGML_TYPE_F32,
        flash_attn=False,
        verbose=False,
    )
    diff, scale = 0.0, 0.0
    for row, logits in zip(ids.tolist(), want["logits"]):
        llm.reset()
        llm.eval(row)
        got = np.asarray(llm.scores[: len(row)], dtype=np.float32)
        diff = max(diff, float(np.abs(got - logits).max()))
        scale = max(scale, float(np.abs(logits).max()))
    llm.reset()
    llm.eval(prompt)
    greedy: list[int] = []
    for i in range(n_new):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        if token == eot:
            break
        greedy.append(token)
        if i < n_new - 1:  # the last token is not fed back (a learned table may end there)
            llm.eval([token])
    tokenize = lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)  # noqa: E731
    result = {
        "llama_cpp": llama_cpp.__version__,
        "max_logit_diff": diff,
        "logit_scale": scale,
        "greedy_equal": greedy == want["greedy"].tolist(),
        "greedy": greedy,
        "tokenizer_equal": tokenize(meta["prompt_text"]) == prompt,
    }
    if texts is not None:
        result["ids"] = [tokenize(text) for text in texts]
    return result


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python probe_gguf.py MODEL.gguf EXPECTED.safetensors [TEXTS.json]")
    texts = json.loads(open(sys.argv[3], encoding="utf-8").read()) if len(sys.argv) == 4 else None
    print(json.dumps(probe(sys.argv[1], sys.argv[2], texts)))
