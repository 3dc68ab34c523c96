"""Figures for docs/reference/reliability.md, recorded by the reliability tests themselves.

When ``LEROBOT_ROS_RELIABILITY_LOG`` names a file, each call to ``record``
appends one JSON line to it; otherwise it does nothing, so the tests run the
same in CI. ``bench/reliability_report.py`` runs the tests with the variable
set and turns the lines into the tables of docs/reference/reliability.md.
"""

from __future__ import annotations

import json
import os
import time

ENV = "LEROBOT_ROS_RELIABILITY_LOG"


def record(category: str, case: str, tried: int, survived: int, lost: int = 0, **details) -> None:
    """One fault or input class: how many cases were tried, how many the system survived
    (kept running, refused or recovered as specified), and how many actions, chunks,
    audit lines or sessions were lost or crossed (must be 0)."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = {
        "category": category,
        "case": case,
        "tried": tried,
        "survived": survived,
        "lost": lost,
        **details,
    }
    line["at"] = time.time()
    with open(path, "a") as sink:
        sink.write(json.dumps(line, sort_keys=True, default=str) + "\n")
