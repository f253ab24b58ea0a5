"""Hugging Face integration: what transformers loads (the config and model classes) and the Hub push.

``register_auto_classes()`` registers ``AlilamaConfig``, ``AlilamaModel``,
``AlilamaForCausalLM`` and ``AlilamaForSequenceClassification`` with
``AutoConfig``, ``AutoModel``, ``AutoModelForCausalLM`` and
``AutoModelForSequenceClassification``, so exported folders load without remote
code where Alilama is installed::

    import alilama_hf
    alilama_hf.register_auto_classes()
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("out/")   # no trust_remote_code needed

Importing ``alilama_hf`` is light and changes nothing: it imports neither torch nor
transformers and installs no import hook. Taking one of the classes from it
(``alilama_hf.AlilamaForCausalLM``) registers them too. The exporters live in
``alilama_exporters`` (``alilama export hf``); ``alilama_hf.push`` uploads a run.
"""

import importlib
import threading

__all__ = [
    "AlilamaConfig",
    "AlilamaForCausalLM",
    "AlilamaForSequenceClassification",
    "AlilamaModel",
    "AlilamaPreTrainedModel",
    "register_auto_classes",
]

_LAZY = {
    "AlilamaConfig": "alilama_hf.configuration_alilama",
    "AlilamaModel": "alilama_hf.modeling_alilama",
    "AlilamaForCausalLM": "alilama_hf.modeling_alilama",
    "AlilamaForSequenceClassification": "alilama_hf.modeling_alilama",
    "AlilamaPreTrainedModel": "alilama_hf.modeling_alilama",
}
_registered = False
_lock = threading.RLock()


def register_auto_classes() -> bool:
    """Register the classes with transformers' Auto classes (idempotent); False without transformers."""
    global _registered
    with _lock:
        if _registered:
            return True
        try:
            from transformers import (
                AutoConfig,
                AutoModel,
                AutoModelForCausalLM,
                AutoModelForSequenceClassification,
            )
        except ImportError:
            return False
        from alilama_hf.configuration_alilama import AlilamaConfig
        from alilama_hf.modeling_alilama import AlilamaForCausalLM, AlilamaForSequenceClassification, AlilamaModel

        AutoConfig.register(AlilamaConfig.model_type, AlilamaConfig, exist_ok=True)
        AutoModel.register(AlilamaConfig, AlilamaModel, exist_ok=True)
        AutoModelForCausalLM.register(AlilamaConfig, AlilamaForCausalLM, exist_ok=True)
        AutoModelForSequenceClassification.register(AlilamaConfig, AlilamaForSequenceClassification, exist_ok=True)
        _registered = True
        return True


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        register_auto_classes()
        return getattr(module, name)
    raise AttributeError(f"module 'alilama_hf' has no attribute {name!r}")
