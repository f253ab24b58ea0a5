"""The built-in exporters, registered as plugins like any other (``alilama export FORMAT RUN OUT``).

- ``hf``: a Hugging Face model folder (``hf_folder``; native architectures in ``native``, the card in ``model_card``)
- ``gguf``: one GGUF file for llama.cpp (``gguf_file``)
- ``onnx``: an ONNX folder for onnxruntime and transformers.js, through optimum (``onnx_export``)

Each is an ``alilama_core.contracts.exporter.Exporter``; the core stages, reads
back and checks every one the same way (``alilama_core.runs.exports``). The
``probe_*.py`` and ``onnx_folder.py`` files are standalone readers, run by
``--check-with PYTHON`` in environments without Alilama.
"""

from alilama_core.contracts.hookspecs import hookimpl


@hookimpl
def register_exporters(register):
    register("hf", "alilama_exporters.hf_folder:HFExporter", description="Hugging Face model folder (transformers)")
    register("gguf", "alilama_exporters.gguf_file:GGUFExporter", description="GGUF file (llama.cpp, ollama)")
    register("onnx", "alilama_exporters.onnx_export:ONNXExporter", description="ONNX folder (onnxruntime, optimum)")
