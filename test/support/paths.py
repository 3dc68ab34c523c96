"""Where things are: the repository and the helper processes the tests run."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Scripts run as separate processes (robot driver stand-ins, publishers, a bare timer).
PROCESSES = REPO / "test" / "processes"
