"""Names and text that go into a model card: Hub ids checked, Markdown escaped.

``--repo-id`` and ``--dataset`` end up in the card's Markdown body, its YAML
front matter and its Python usage snippet, so they are checked against the
Hub's own rules first (``huggingface_hub.utils.validate_repo_id``); anything
else a card shows (a run folder's name, a source file's name) is escaped.

>>> markdown_text("my_run <b>")
'my\\\\_run \\\\<b\\\\>'
>>> code_span("a`b")
'`` a`b ``'
"""

from __future__ import annotations

import re

from alilama_core.contracts.errors import AlilamaError

_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#!|~&])")


def check_repo_id(repo_id: str, option: str = "--repo-id") -> str:
    """``repo_id`` if it is a valid Hub model id ``USER/NAME``; else an ``AlilamaError`` saying why."""
    _check_hub_id(repo_id, option, "USER/NAME, e.g. me/tiny-stories", namespace=True)
    return repo_id


def check_dataset_id(dataset: str, option: str = "--dataset") -> str:
    """``dataset`` if it is a valid Hub dataset id (``OWNER/NAME`` or a plain ``NAME``)."""
    _check_hub_id(dataset, option, "OWNER/NAME or NAME, e.g. roneneldan/TinyStories", namespace=False)
    return dataset


def _check_hub_id(value: str, option: str, form: str, namespace: bool) -> None:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not isinstance(value, str) or not value:
        raise AlilamaError(f"{option} must be a Hugging Face Hub id ({form}), got {value!r}")
    try:
        validate_repo_id(value)
    except HFValidationError as exc:
        raise AlilamaError(
            f"{option} {value!r} is not a valid Hugging Face Hub id ({form}): {_first_sentence(exc)}"
        ) from None
    if namespace and value.count("/") != 1:
        raise AlilamaError(f"{option} {value!r} is not a valid Hugging Face Hub id: give it as {form}")


def _first_sentence(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text.split(": '")[0].rstrip(".") if text else type(exc).__name__


def markdown_text(text: str) -> str:
    """``text`` as literal Markdown inline text: one line, every Markdown special character escaped."""
    return _MARKDOWN.sub(r"\\\1", " ".join(str(text).split()))


def code_span(text: str) -> str:
    """``text`` as a Markdown inline code span, whatever backticks it holds."""
    text = " ".join(str(text).split())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    if not longest:
        return f"`{text}`"
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}"


def python_string(text: str) -> str:
    r"""``text`` as a double-quoted Python string literal that evaluates to exactly ``text``.

    >>> print(python_string('me/x"); import os; ("'))
    "me/x\"); import os; (\""
    """
    out = []
    for ch in str(text):
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:  # a line break, a control character: its escape
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return '"' + "".join(out) + '"'
