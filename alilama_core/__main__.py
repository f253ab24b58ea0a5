"""``python -m alilama_core``: the ``alilama`` CLI (used under ``torchrun``)."""

from alilama_core.app.cli import main

main()
