"""A chat template for a base model: how a list of messages becomes the text the model continues.

Alilama's models are base models (trained to continue text, never on
conversations), so the default template is plain text: system messages as
paragraphs, then one ``User: ...`` or ``Assistant: ...`` line per turn, and
``Assistant:`` for the model to go on::

    Be kind.

    User: Tell me a story.
    Assistant:

It is a Jinja template, as transformers' ``chat_template`` is, rendered in
Jinja's sandbox as transformers renders it: ``alilama serve`` uses it for
``/v1/chat/completions`` and ``alilama chat``, and ``alilama export hf``
writes the same text into ``tokenizer_config.json``, so
``AutoTokenizer.apply_chat_template`` gives the same prompt. A run holds its
own template in ``RUN/chat_template.jinja`` (UTF-8); without one it uses
``DEFAULT_CHAT_TEMPLATE``.
"""

from __future__ import annotations

import os
from pathlib import Path

from alilama_core.base.errors import ConfigError

TEMPLATE_FILE = "chat_template.jinja"
CHAT_STOPS = ["\nUser:", "\nAssistant:"]
"""Where an assistant turn ends under the default template: the model starting the next turn itself."""
DEFAULT_CHAT_TEMPLATE = (
    "{%- for message in messages if message['role'] in ['system', 'developer'] -%}"
    "{{ message['content'] }}{{ '\\n\\n' }}"
    "{%- endfor -%}"
    "{%- for message in messages if message['role'] in ['user', 'assistant'] -%}"
    "{{ 'User' if message['role'] == 'user' else 'Assistant' }}: {{ message['content'] }}{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}Assistant:{%- endif -%}"
)


def run_template(run: str | os.PathLike[str]) -> str:
    """The run's own template (``RUN/chat_template.jinja``), else the default."""
    path = Path(run) / TEMPLATE_FILE
    if not path.is_file():
        return DEFAULT_CHAT_TEMPLATE
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the run's chat template {path}: {exc}") from None


def render(template: str, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """``template`` applied to ``messages`` (dicts with ``role`` and text ``content``), as transformers does it."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)
    except TemplateError as exc:
        raise ConfigError(f"the chat template does not render: {exc}") from None


def chat_prompt(messages: list, template: str | None = None) -> str:
    """The prompt text for OpenAI ``messages`` (dicts or ``requests.Message``) under ``template`` (default:
    ``DEFAULT_CHAT_TEMPLATE``); ``ConfigError`` when the template does not render."""
    from alilama_core.engine.requests import Message

    typed = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
    plain = [{"role": m.role, "content": m.text} | ({"name": m.name} if m.name else {}) for m in typed]
    return render(template or DEFAULT_CHAT_TEMPLATE, plain)
