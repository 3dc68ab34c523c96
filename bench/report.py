"""Write a benchmark's results into docs/reference/benchmarks.md (or
docs/reference/reliability.md), between markers.

Each benchmark owns one section, ``<!-- bench:NAME -->`` ... ``<!-- /bench:NAME -->``;
re-running it replaces only that section, so the file keeps every result with
the command that produced it, and with the CPU that work outside the
benchmark used meanwhile (bench/outside_load.py).
"""

from __future__ import annotations

import os
import platform
import re
from datetime import date
from pathlib import Path

from bench import outside_load

# The folder of the generated reference pages, and the default folder of their plots.
DOCS = Path(__file__).resolve().parents[1] / "docs" / "reference"
BENCHMARKS_MD = DOCS / "benchmarks.md"
RELIABILITY_MD = DOCS / "reliability.md"


def machine() -> str:
    cores = len(os.sched_getaffinity(0))  # not nproc: it answers OMP_NUM_THREADS when that is set
    return (
        f"{platform.machine()}, {cores} cores, Python {platform.python_version()}, "
        f"{date.today().isoformat()}"
    )


def table_row(*cells) -> str:
    """One Markdown table row, ``| a | b | ... |``; an empty cell is written ``| |``."""
    return "|" + "|".join(f" {cell} " if str(cell) else " " for cell in cells) + "|"


def write_section(name: str, command: str, body: str, document: Path = BENCHMARKS_MD) -> None:
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    section = (
        f"{start}\nCommand: `{command}` ({machine()})\n\n{outside_load.RECORDER.describe()}\n\n"
        f"{body.strip()}\n{end}"
    )
    text = document.read_text() if document.exists() else f"# {document.stem.capitalize()}\n"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: section, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + section + "\n"
    )
    document.write_text(text)
    print(section)
