"""Write the request field tables of docs/serving.md from the request models (alilama_core.engine.requests)."""

from __future__ import annotations

import re
from pathlib import Path

from alilama_core.engine.requests import ChatRequest, CompletionRequest, field_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "serving.md"


def main() -> None:
    text = DOC.read_text()
    for name, kind in (("completions", CompletionRequest), ("chat", ChatRequest)):
        begin, end = f"<!-- fields:{name}:begin -->", f"<!-- fields:{name}:end -->"
        block = f"{begin}\n{field_table(kind)}\n{end}"
        if begin in text:
            text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
        else:
            raise SystemExit(f"{DOC} has no {begin} marker: add the two markers where the table goes")
    DOC.write_text(text)
    print(f"wrote the request field tables into {DOC}")


if __name__ == "__main__":
    main()
