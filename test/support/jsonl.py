"""JSON-lines files that another process may still be writing (audit logs, command recorders)."""

from __future__ import annotations

import json
from pathlib import Path


def read_jsonl(path: Path, containing: str = "") -> list[dict]:
    """Every complete line of ``path`` (optionally only those containing ``containing``), parsed.

    A writer in another process can be caught mid-line: the text after the
    last newline is not a record yet and is left for the next read.
    """
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    return [
        json.loads(line) for line in complete.splitlines() if line.strip() and containing in line
    ]
