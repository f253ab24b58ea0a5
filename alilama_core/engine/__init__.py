"""The machinery: the plugin registry, the model, generation, attention capture, configs
(loading, overrides, presets) and what is checked once when a model is built.

It imports ``alilama_core.contracts`` only.
"""
