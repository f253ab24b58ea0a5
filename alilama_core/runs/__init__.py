"""Runs on disk: the run folder written (``RunWriter``) and read (``load_run``) in one place,
text and task data behind the ``DataSource`` contract, tokenizer folders, evaluation and the
rules of output folders.

It imports ``alilama_core.engine`` and ``alilama_core.contracts``.
"""
