"""The machinery: the plugin registry, the model, generation, continuous batching and the scheduler thread
that serves it (``scheduler``: no HTTP), the typed OpenAI requests, chat templates, attention capture, configs
(loading, overrides, presets) and what is checked once when a model is built.

It imports ``alilama_core.contracts`` only.
"""
