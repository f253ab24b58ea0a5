"""Upload a run to the Hugging Face Hub (``alilama push RUN --repo USER/NAME``), and the Hub's id rules.

Exports to a temporary folder with the ``hf`` exporter (``alilama_core.runs.exports``), then ``create_repo`` + ``upload_folder`` with the
user's usual token (``HF_TOKEN`` or the one ``hf auth login`` saved). Before any
work it checks, quickly, that a token exists and that the Hub answers, and
fails with a message that says which is missing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from alilama_core.base.errors import AlilamaError

CHECK_TIMEOUT_S = 5.0


def check_repo_id(repo_id: str, option: str = "--repo-id") -> str:
    """``repo_id`` if it is a valid Hub model id ``USER/NAME``; else an ``AlilamaError`` saying why."""
    _check_hub_id(repo_id, option, "USER/NAME, e.g. me/tiny-stories", namespace=True)
    return repo_id


def check_dataset_id(dataset: str, option: str = "--dataset") -> str:
    """``dataset`` if it is a valid Hub dataset id (``OWNER/NAME`` or a plain ``NAME``)."""
    _check_hub_id(dataset, option, "OWNER/NAME or NAME, e.g. roneneldan/TinyStories", namespace=False)
    return dataset


def _check_hub_id(value: str, option: str, form: str, namespace: bool) -> None:
    """The Hub's own rules (``huggingface_hub.utils.validate_repo_id``): an id lands in a card's Markdown,
    its YAML front matter and its Python usage snippet."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not isinstance(value, str) or not value:
        raise AlilamaError(f"{option} must be a Hugging Face Hub id ({form}), got {value!r}")
    try:
        validate_repo_id(value)
    except HFValidationError as exc:
        text = " ".join(str(exc).split())
        first = text.split(": '")[0].rstrip(".") if text else type(exc).__name__
        raise AlilamaError(f"{option} {value!r} is not a valid Hugging Face Hub id ({form}): {first}") from None
    if namespace and value.count("/") != 1:
        raise AlilamaError(f"{option} {value!r} is not a valid Hugging Face Hub id: give it as {form}")


class HubError(AlilamaError):
    """The Hub cannot be used: no token, no network, or the upload failed."""


def find_token() -> str:
    """The user's Hub token, or a ``HubError`` that says how to log in."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise HubError(
            "no Hugging Face token found: log in with `hf auth login` (or set HF_TOKEN) using a "
            "token with write access from https://huggingface.co/settings/tokens"
        )
    return token


def check_hub(timeout: float = CHECK_TIMEOUT_S) -> None:
    """Fail within ``timeout`` seconds when the Hub cannot be reached."""
    from huggingface_hub import constants

    endpoint = constants.ENDPOINT
    if constants.HF_HUB_OFFLINE:
        raise HubError(f"cannot reach the Hugging Face Hub: HF_HUB_OFFLINE is set (unset it to push to {endpoint})")
    from huggingface_hub.utils import get_session

    try:  # huggingface_hub's own HTTP session: same proxies and certificates as the upload
        get_session().head(f"{endpoint}/api/models", timeout=timeout, follow_redirects=True)
    except Exception as exc:  # the client library (requests, httpx) differs between versions
        raise HubError(
            f"cannot reach the Hugging Face Hub at {endpoint} ({type(exc).__name__}: {exc or 'no answer'}); "
            "check the network connection, a proxy (HTTPS_PROXY) or HF_ENDPOINT"
        ) from None


def push(
    run: str | os.PathLike[str],
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    checkpoint: str | None = None,
    license: str | None = None,
    datasets: list[str] | None = None,
    timeout: float = CHECK_TIMEOUT_S,
    format: str = "auto",
    on_step=None,
) -> str:
    """Export ``run`` and upload it to ``repo_id`` (created if needed); returns the commit URL.

    ``on_step(text)``: called after each of the export's steps (``export_steps``) and before the upload.
    """
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise HubError(f"--repo must look like USER/NAME, got {repo_id!r}")
    check_repo_id(repo_id, "--repo")  # the Hub's own rules, before the token and the network are tried
    for dataset in datasets or []:
        check_dataset_id(dataset)
    token = find_token()
    check_hub(timeout)
    from huggingface_hub import create_branch, create_repo, upload_folder
    from huggingface_hub.errors import HfHubHTTPError

    from alilama_core.runs.exports import export
    from alilama_core.runs.outputs import MARKER

    with tempfile.TemporaryDirectory(prefix="alilama-push-") as tmp:
        folder = export(
            "hf",
            run,
            Path(tmp) / "model",
            checkpoint=checkpoint,
            on_step=on_step,
            repo_id=repo_id,
            license=license,
            datasets=list(datasets or []),
            format=format,
        ).out
        if on_step is not None:
            on_step(f"uploading to https://huggingface.co/{repo_id}")
        try:
            create_repo(repo_id, token=token, private=private, repo_type="model", exist_ok=True)
            if revision:
                create_branch(repo_id, branch=revision, token=token, repo_type="model", exist_ok=True)
            commit = upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                repo_type="model",
                revision=revision,
                token=token,
                commit_message=f"Upload Alilama model from {Path(run).name}",
                ignore_patterns=[MARKER],  # a local marker of Alilama's output folders
            )
        except HfHubHTTPError as exc:
            raise HubError(f"the Hub refused the upload to {repo_id!r}: {exc}") from None
    return str(getattr(commit, "commit_url", commit))
