"""The ROS domain ids a test run uses: a block of ids per pytest worker, a slot per use.

Ids 1-96 form 12 blocks of 8. Each process that runs tests (a plain pytest run, or one xdist
worker) owns one block, and within it each use that must not hear another has its slot: the
suite's own graph (the shared server answers at /lerobot there), the `ros2` tools (launch files
start servers at the same fixed names), the demos, the record-train-evaluate loop, the entry
points, and the benchmark scripts. So within one run the ids are unique by construction: the
xdist controller hands each worker a different block (``free_blocks``), and a run started from
inside a test (the README's `run_tests.sh -k contract -x`) reads the blocks its parents hold from
``LEROBOT_ROS_TEST_BLOCKS_IN_USE`` and takes others.

Separate runs on one machine start at a block derived from their pid, so two of them meet only
by chance; ``LEROBOT_ROS_TEST_DOMAIN_BLOCK`` (0-11) pins a run's first block.
"""

from __future__ import annotations

import os

SLOTS = (
    "suite",
    "ros2_tools",
    "demo",
    "readme_demo",
    "record_train",
    "entry_points",
    "bench",
    "spare",
)
BLOCK_SIZE = len(SLOTS)
BLOCKS = 96 // BLOCK_SIZE

_IN_USE = "LEROBOT_ROS_TEST_BLOCKS_IN_USE"
_FIRST = "LEROBOT_ROS_TEST_DOMAIN_BLOCK"
_OWN = "LEROBOT_ROS_TEST_OWN_BLOCK"


def blocks_in_use() -> list[int]:
    """The blocks this run's parents (and, in a worker, its siblings) hold."""
    return [int(b) for b in os.environ.get(_IN_USE, "").split(",") if b]


def free_blocks(count: int) -> list[int]:
    """``count`` blocks no parent holds, from the run's first block on."""
    taken = set(blocks_in_use())
    first = int(os.environ.get(_FIRST, os.getpid() % BLOCKS))
    free = [(first + i) % BLOCKS for i in range(BLOCKS) if (first + i) % BLOCKS not in taken]
    if len(free) < count:
        raise RuntimeError(
            f"{count} ROS domain blocks wanted, {len(free)} free ({sorted(taken)} in use): "
            "fewer workers, or fewer nested runs"
        )
    return free[:count]


def own_block(block: int, siblings: list[int]) -> None:
    """Make ``block`` this process's: its suite domain, and the blocks its children must avoid."""
    os.environ[_OWN] = str(block)
    held = set(blocks_in_use()) | set(siblings) | {block}
    os.environ[_IN_USE] = ",".join(str(b) for b in sorted(held))
    os.environ["ROS_DOMAIN_ID"] = str(domain("suite"))
    # The benchmark scripts (bench/common.py) take this id, and pass it to theirs.
    os.environ["LEROBOT_ROS_TEST_DOMAIN_ID"] = str(domain("bench"))


def domain(slot: str) -> int:
    """The domain id of ``slot`` in this process's block."""
    return 1 + int(os.environ[_OWN]) * BLOCK_SIZE + SLOTS.index(slot)
