"""Running a plan's nodes as child processes: how they are labelled, and that they stop in reverse
order."""

from lerobot_ros.launch_plan import NodeSpec, Plan
from lerobot_ros.processes import start_processes, stop_processes

#: A module that imports and exits at once: ``python -m`` of it ignores the ``--ros-args`` it is
#: given.
QUIET_MODULE = "lerobot_ros.protocol.names"


def test_nodes_of_one_name_are_told_apart_by_namespace_and_stop_last_started_first(tmp_path):
    plan = Plan(
        (
            NodeSpec(executable="policy_server_node", module=QUIET_MODULE, name="lerobot"),
            NodeSpec(
                executable="chunk_executor_node",
                module=QUIET_MODULE,
                name="chunk_executor",
                namespace="/arm_0",
            ),
            NodeSpec(
                executable="chunk_executor_node",
                module=QUIET_MODULE,
                name="chunk_executor",
                namespace="/arm_1",
            ),
        )
    )
    processes = start_processes(plan, tmp_path)
    assert [label for label, _ in processes] == [
        "lerobot",
        "arm_0_chunk_executor",
        "arm_1_chunk_executor",
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "arm_0_chunk_executor.log",
        "arm_1_chunk_executor.log",
        "lerobot.log",
    ]
    for _, process in processes:
        process.wait(timeout=60)  # exited on its own: stop must not interrupt an import half-way
    exit_codes = stop_processes(processes)
    assert list(exit_codes) == ["arm_1_chunk_executor", "arm_0_chunk_executor", "lerobot"]
    assert set(exit_codes.values()) == {0}
