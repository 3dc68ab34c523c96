#!/usr/bin/env python3
"""Group the per-phase lines test/support/timings.py wrote into where the suite's time went.

Usage: LEROBOT_ROS_TEST_TIMINGS=/tmp/t.jsonl scripts/run_tests.sh -n 0
       scripts/test_durations.py /tmp/t.jsonl [--slowest 10]

Prints Markdown: the time by folder and by what it was spent on, then the slowest tests.
A test body is "CPU-bound" when the machine was busy at least 0.6 of a core on average
while it ran (of 2 cores here), "mostly waiting" otherwise (timers, timeouts, a process
starting or answering); fixture set-up is the checkpoints, shared servers and set-ups a
test's fixtures built first.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def kind_of(line: dict) -> str:
    if line["phase"] != "call":
        return "fixture set-up and teardown"
    busy_cores = line["machine_cpu_s"] / line["wall_s"] if line["wall_s"] > 0 else 0.0
    return "test body, CPU-bound" if busy_cores >= 0.6 else "test body, mostly waiting"


def folder_of(nodeid: str) -> str:
    parts = nodeid.split("::")[0].split("/")
    return "/".join(parts[:3]) if parts[1] == "unit" else "/".join(parts[:2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timings", help="the JSON-lines file LEROBOT_ROS_TEST_TIMINGS named")
    parser.add_argument("--slowest", type=int, default=10)
    args = parser.parse_args()
    with open(args.timings) as lines:
        rows = [json.loads(line) for line in lines if line.strip()]

    tests = {row["nodeid"] for row in rows}
    wall = sum(row["wall_s"] for row in rows)
    cpu = sum(row["machine_cpu_s"] for row in rows)
    print(f"{len(tests)} tests, {wall:,.0f} s of phases, {cpu:,.0f} s of machine CPU\n")

    by_kind = defaultdict(lambda: [0.0, 0.0, 0, set()])
    by_folder = defaultdict(lambda: defaultdict(float))
    for row in rows:
        kind = kind_of(row)
        entry = by_kind[kind]
        entry[0] += row["wall_s"]
        entry[1] += row["machine_cpu_s"]
        entry[2] += row["processes"]
        entry[3].add(row["nodeid"])
        by_folder[folder_of(row["nodeid"])][kind] += row["wall_s"]

    print("| spent on | tests | wall s | share | machine CPU s | processes started |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, (k_wall, k_cpu, processes, ids) in sorted(by_kind.items(), key=lambda i: -i[1][0]):
        print(
            f"| {kind} | {len(ids)} | {k_wall:,.0f} | {k_wall / wall:.0%} "
            f"| {k_cpu:,.0f} | {processes} |"
        )

    kinds = sorted(by_kind, key=lambda k: -by_kind[k][0])
    print("\n| folder | tests | " + " | ".join(kinds) + " | wall s |")
    print("|---|---:|" + "---:|" * (len(kinds) + 1))
    tests_in = defaultdict(set)
    for row in rows:
        tests_in[folder_of(row["nodeid"])].add(row["nodeid"])
    for folder, spent in sorted(by_folder.items(), key=lambda i: -sum(i[1].values())):
        cells = " | ".join(f"{spent.get(k, 0.0):,.0f}" for k in kinds)
        print(f"| {folder} | {len(tests_in[folder])} | {cells} | {sum(spent.values()):,.0f} |")

    per_test = defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        entry = per_test[row["nodeid"]]
        entry[0] += row["wall_s"]
        entry[1] += row["machine_cpu_s"]
        entry[2] += row["processes"]
    print(f"\n| slowest {args.slowest} tests (all phases) | wall s | machine CPU s | processes |")
    print("|---|---:|---:|---:|")
    slowest = sorted(per_test.items(), key=lambda i: -i[1][0])[: args.slowest]
    for nodeid, (t_wall, t_cpu, processes) in slowest:
        print(f"| `{nodeid}` | {t_wall:.1f} | {t_cpu:.1f} | {processes} |")


if __name__ == "__main__":
    main()
