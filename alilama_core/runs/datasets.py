"""Datasets Alilama knows by name, fetched from the Hugging Face Hub into its local cache."""

from __future__ import annotations

from alilama_core.base.errors import AlilamaError

TINYSTORIES = {
    "repo_id": "roneneldan/TinyStories",
    "files": {"train": "TinyStoriesV2-GPT4-train.txt", "valid": "TinyStoriesV2-GPT4-valid.txt"},
}


def download(name: str, split: str = "all", revision: str | None = None) -> list[str]:
    """Local paths of dataset ``name``'s files for ``split`` (train, valid or all), downloading if needed."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    if name.lower() != "tinystories":
        raise AlilamaError(f"unknown dataset {name!r}; available: tinystories")
    files = TINYSTORIES["files"]
    if split != "all" and split not in files:
        raise AlilamaError(f"unknown split {split!r}; available: {', '.join(files)}, all")
    wanted = list(files.values()) if split == "all" else [files[split]]
    paths = []
    for filename in wanted:
        try:
            paths.append(hf_hub_download(TINYSTORIES["repo_id"], filename, repo_type="dataset", revision=revision))
        except LocalEntryNotFoundError as exc:
            raise AlilamaError(
                f"{filename} is not in the local Hugging Face cache and the Hub cannot be reached "
                f"(offline, or HF_HUB_OFFLINE=1): {exc}"
            ) from None
    return paths
