"""``data prepare``'s progress on stderr: a bar of the input's bytes in a terminal, plain lines elsewhere."""

from __future__ import annotations

import time

from alilama_core.app.common import err_console, plain_line, show_bar


ENCODE_LINE_EVERY_S = 5.0
"""Outside a terminal, ``data prepare`` prints a progress line at most this often."""


class EncodeProgress:
    """``data prepare``'s progress on stderr: in a terminal, a rich bar of the input's bytes; else plain lines.

    The plain lines: one when encoding starts, one at most every ``every_s`` seconds with the documents,
    bytes and tokens done so far (``update`` is called after each batch), and one at the end (``finish``).
    """

    def __init__(
        self, inputs: list[str], total_bytes: int | None, bar: bool = True, every_s: float = ENCODE_LINE_EVERY_S
    ) -> None:
        self.inputs, self.total, self.every_s = inputs, total_bytes, every_s
        self.started = self.last_line = time.monotonic()
        self._bar = self._task = None
        if show_bar(bar):
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self._bar = Progress(
                TextColumn("encode"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=err_console
            )

    def __enter__(self) -> EncodeProgress:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("encode", total=self.total)
        else:
            size = f" ({self.total:,} bytes)" if self.total else ""
            plain_line(f"encode: reading {', '.join(self.inputs)}{size}")
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, done) -> None:
        """``done``: the documents, bytes and tokens encoded so far (a ``SplitStats`` of both splits)."""
        if self._bar is not None:
            self._bar.update(self._task, completed=done.bytes)
            return
        if time.monotonic() - self.last_line < self.every_s:
            return
        self.last_line = time.monotonic()
        share = f" ({min(1.0, done.bytes / self.total):.0%} of the input)" if self.total else ""
        plain_line(
            f"encode: {done.documents:,} documents, {done.bytes:,} bytes, {done.tokens:,} tokens{share}, "
            f"{self._elapsed():.0f} s"
        )

    def finish(self, meta: dict) -> None:
        """The last plain line: what was encoded, from the meta dict ``prepare`` returns (the bar: full)."""
        if self._bar is not None:
            if self.total:  # counted in the text's bytes, not the files' (separators, JSON): all read now
                self._bar.update(self._task, completed=self.total)
            return
        splits = meta["splits"].values()
        documents, size, tokens = (sum(s[key] for s in splits) for key in ("documents", "bytes", "tokens"))
        plain_line(f"encoded {documents:,} documents, {size:,} bytes, {tokens:,} tokens in {self._elapsed():.1f} s")
