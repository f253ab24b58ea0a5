"""What a plugin author reads, and nothing else: the contracts of every plugin kind.

``PositionalScheme`` (``positional``), ``AttentionBackend``, ``AttentionFn``,
``AttentionCase`` and ``AttentionBias`` (``attention``), ``Tokenizer``
(``tokenizer``), ``Trainer`` (``trainer``), ``Task`` and its symbol tokenizer
(``task``), ``Logger`` (``logger``), ``DataSource`` (``data``), ``RunWriter`` (``runs``), plain-data
configs whose ``validate()`` checks values only (``config``), every error class
(``errors``), the hook specifications (``hookspecs``), plugin settings
(``options``), the table of limits (``limits``) and the file primitives (atomic
writes, locks: ``files``). This layer imports nothing else of Alilama.
"""
