"""What a plugin author reads, and nothing else: the contracts of every plugin kind.

``PositionalScheme`` (``positional``), ``AttentionBackend``, ``AttentionFn``,
``AttentionCase`` and ``AttentionBias`` (``attention``), ``Tokenizer``
(``tokenizer``), ``Trainer`` (``trainer``), ``Task`` and its symbol tokenizer
(``task``), ``Logger`` (``logger``), ``DataSource`` (``data``), ``RunWriter`` (``runs``), plain-data
configs whose ``validate()`` checks values only (``config``) and the hook
specifications (``hookspecs``). It imports only ``alilama_core.base`` (errors,
limits, options, files), which a plugin author need not read.
"""
