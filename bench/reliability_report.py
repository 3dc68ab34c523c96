"""Run the reliability suite and write its tables into docs/reference/reliability.md.

Runs the fast reliability tests (chaos, bad input, isolation, security, a
hostile process; a file that does not exist yet is skipped and named as such) with
``LEROBOT_ROS_RELIABILITY_LOG`` set, so each test records what it tried
(test/support/reliability_log.py), then turns those JSON lines into one table per
category: each fault or input class with how many cases were tried, how many
the system survived (kept running, refused, or recovered as specified) and
what was lost (actions executed that must not be, chunks, audit lines or
sessions lost or crossed: must be 0), plus the pytest outcome of every file.
Only its own section of the document is replaced; the soak's stays.

usage: python -m bench.reliability_report [--document docs/reference/reliability.md]
       [pytest args...]
Exit code: pytest's, or 1 when anything was lost or not survived.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from bench.report import RELIABILITY_MD, write_section

REPO = Path(__file__).resolve().parents[1]
TEST_FILES = (
    "test/reliability/test_chaos.py",
    "test/reliability/test_fleet.py",
    "test/reliability/test_bad_input_properties.py",
    "test/reliability/test_isolation.py",
    "test/reliability/test_security.py",
    "test/reliability/test_hostile.py",
    "test/reliability/test_flood.py",
)
# Categories are listed by the first of these their name starts with, then alphabetically.
CATEGORY_ORDER = ("fault", "bad input", "isolation", "security", "hostile", "flood")
LIST_SHOWN = 6  # items of a recorded list shown in a details cell
RUN_TIMEOUT_S = 1800


def run_tests(files: list[str], log: Path, junit: Path, extra: list[str]) -> tuple[int, float]:
    env = {**os.environ, "LEROBOT_ROS_RELIABILITY_LOG": str(log)}
    started = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "pytest",
        *files,
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *extra,
    ]
    print("$ " + " ".join(command), flush=True)
    try:
        code = subprocess.run(command, cwd=REPO, env=env, timeout=RUN_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        code = 124
    return code, time.monotonic() - started


def test_outcomes(junit: Path) -> dict[str, dict]:
    """Per test file: passed / failed / xfailed / skipped counts, seconds, and the failed tests'
    names."""
    files: dict[str, dict] = {}
    if not junit.exists():
        return files
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        # classname is "test.test_chaos" (or "test.test_chaos.TestClass"): keep the module.
        parts = case.get("classname", "").split(".")
        module = next((part for part in parts if part.startswith("test_")), parts[-1])
        entry = files.setdefault(
            module,
            {"passed": 0, "failed": 0, "xfailed": 0, "skipped": 0, "seconds": 0.0, "failures": []},
        )
        entry["seconds"] += float(case.get("time", 0) or 0)
        if case.find("failure") is not None or case.find("error") is not None:
            entry["failed"] += 1
            entry["failures"].append(case.get("name"))
        elif case.find("skipped") is not None:
            # pytest writes an expected failure (a known bug, marked xfail) as a skip of this type.
            entry[
                "xfailed" if case.find("skipped").get("type") == "pytest.xfail" else "skipped"
            ] += 1
        else:
            entry["passed"] += 1
    return files


def read_records(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def describe(values: list) -> str:
    """One detail over one or several records: as recorded, or if they differ a range of numbers or
    the first few."""
    if len(values) == 1:
        if not isinstance(values[0], list):
            return str(values[0])
        shown = ", ".join(map(str, values[0][:LIST_SHOWN]))
        return shown + (f", ... ({len(values[0])} values)" if len(values[0]) > LIST_SHOWN else "")
    flat = []
    for value in values:
        flat.extend(value if isinstance(value, list) else [value])
    unique = []
    for value in flat:
        if value not in unique:
            unique.append(value)
    if len(unique) == 1:
        return str(unique[0])
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in unique):
        return f"{min(unique):g}..{max(unique):g}"
    shown = ", ".join(str(v) for v in unique[:3])
    return shown + (f", ... ({len(unique)} values)" if len(unique) > 3 else "")


def aggregate(records: list[dict]) -> dict[str, list[dict]]:
    """category -> rows, one per case (several records of one case add up)."""
    rows: dict[tuple[str, str], dict] = {}
    for record in records:
        key = (record["category"], record["case"])
        row = rows.setdefault(
            key,
            {
                "case": record["case"],
                "tried": 0,
                "survived": 0,
                "lost": 0,
                "records": 0,
                "details": {},
            },
        )
        row["tried"] += int(record["tried"])
        row["survived"] += int(record["survived"])
        row["lost"] += int(record["lost"])
        row["records"] += 1
        for name, value in record.items():
            if name not in ("category", "case", "tried", "survived", "lost", "at"):
                row["details"].setdefault(name, []).append(value)
    categories: dict[str, list[dict]] = {}
    for (category, _), row in rows.items():
        categories.setdefault(category, []).append(row)

    def rank(category: str) -> tuple[int, str]:
        return next(
            (i for i, prefix in enumerate(CATEGORY_ORDER) if category.startswith(prefix)),
            len(CATEGORY_ORDER),
        ), category

    return {category: categories[category] for category in sorted(categories, key=rank)}


def cell(text: str, limit: int = 400) -> str:
    # Generated inputs may hold control characters: escape them, keep the table one line per row.
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render(
    categories: dict[str, list[dict]],
    outcomes: dict[str, dict],
    missing: list[str],
    code: int,
    seconds: float,
) -> tuple[str, bool]:
    totals = {
        key: sum(row[key] for rows in categories.values() for row in rows)
        for key in ("tried", "survived", "lost")
    }
    clean = totals["lost"] == 0 and totals["survived"] == totals["tried"]
    lines = [
        f"Tests run in {seconds:.0f} s, pytest exit code {code}. Totals over every category: "
        f"**{totals['tried']} tried, {totals['survived']} survived, {totals['lost']} lost**"
        + ("." if clean else " — **not clean**: see the rows marked below."),
        "",
        "| test file | passed | failed | xfailed (known bug) | skipped | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for module, entry in outcomes.items():
        failures = f" (failed: {', '.join(entry['failures'])})" if entry["failures"] else ""
        lines.append(
            f"| `{module}.py`{failures} | {entry['passed']} | {entry['failed']} | "
            f"{entry['xfailed']} "
            f"| {entry['skipped']} | {entry['seconds']:.0f} |"
        )
    for path in missing:
        lines.append(f"| `{Path(path).name}` (not written yet) | - | - | - | - | - |")
    for category, rows in categories.items():
        lines += [
            "",
            f"#### {category}",
            "",
            "| case | tried | survived | lost | details |",
            "|---|---|---|---|---|",
        ]
        for row in rows:
            mark = "" if row["lost"] == 0 and row["survived"] == row["tried"] else " **(!)**"
            details = "; ".join(
                f"{name} {describe(values)}" for name, values in sorted(row["details"].items())
            )
            lines.append(
                f"| {cell(row['case'], 200)}{mark} | {row['tried']} | {row['survived']} | "
                f"{row['lost']} "
                f"| {cell(details)} |"
            )
    if not categories:
        lines += [
            "",
            "No test recorded a figure (was LEROBOT_ROS_RELIABILITY_LOG passed through?).",
        ]
    return "\n".join(lines), clean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--document", default=str(RELIABILITY_MD))
    args, pytest_args = parser.parse_known_args()
    present = [path for path in TEST_FILES if (REPO / path).exists()]
    missing = [path for path in TEST_FILES if path not in present]
    with tempfile.TemporaryDirectory(prefix="lerobot_ros_reliability_") as tmp:
        log, junit = Path(tmp) / "reliability.jsonl", Path(tmp) / "junit.xml"
        code, seconds = run_tests(present, log, junit, pytest_args) if present else (5, 0.0)
        records, outcomes = read_records(log), test_outcomes(junit)
    body, clean = render(aggregate(records), outcomes, missing, code, seconds)
    write_section(
        "reliability_suite",
        "python -m bench.reliability_report",
        body,
        document=Path(args.document),
    )
    sys.exit(code if code else (0 if clean else 1))


if __name__ == "__main__":
    main()
