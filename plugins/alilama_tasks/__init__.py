"""Built-in algorithmic tasks (copy, reverse, sort, addition, recall, parity) and their symbol tokenizer.

Registered exactly as a third-party task package would, by lazy ``"module:attr"``
paths, so listing tasks never imports torch.
"""

from alilama_core.contracts.hookspecs import hookimpl

TASKS = {
    "copy": ("Copy", "repeat the prompt"),
    "reverse": ("Reverse", "the prompt backwards"),
    "sort": ("Sort", "the prompt's symbols in order"),
    "addition": ("Addition", "the sum of two numbers of `length` digits"),
    "recall": ("Recall", "the value stored under a key, given `length` key-value pairs"),
    "parity": ("Parity", "whether a bit string holds an odd number of ones"),
}


@hookimpl
def register_tasks(register):
    for name, (cls, description) in TASKS.items():
        register(name, f"alilama_tasks.builtin:{cls}", description=description)


@hookimpl
def register_tokenizers(register):
    register(
        "symbols", "alilama_core.contracts.task:SymbolTokenizer", description="one token per symbol (task vocabularies)"
    )
