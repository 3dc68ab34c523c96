"""Replica discovery across processes: a server started after the robot takes it, the robot
untouched.

Real processes: two policy_server_node replicas of one ACT checkpoint under
the ROS namespace /disc, a stand-in robot driver and one chunk_executor_node
whose ``server_namespaces`` lists no replica, only ``[auto:/disc]``.

1. /disc/first is up; the executor starts, finds it on the graph and streams
   on it; its ~/status lists just that replica (a server outside /disc, such
   as the suite's shared /lerobot, is never listed);
2. /disc/second is started after the robot: the executor finds it (its
   heartbeat publisher) and lists it, with no parameter set, no restart and
   no call to the robot;
3. /disc/first is drained (SIGTERM): the robot moves to /disc/second, a
   replica it was never told about, and merges its chunks; the drained
   server says goodbye on the graph and leaves the list.

Figures recorded (and printed): seconds from the second server's services
answering this test process to its name in the executor's ~/status, and from
the drain to the first chunk merged from the second server.
"""

from __future__ import annotations

import signal
import time

from lerobot_ros.processes import stop
from support.reliability_log import record
from support.ros import spin_until
from support.servers import spawn_server, wait_for_server

FLEET = "/disc"
FIRST, SECOND = f"{FLEET}/first", f"{FLEET}/second"
DISCOVERY_PERIOD_S = 0.5
# one server loads in ~11 s on 2 idle cores; much longer while others work
SERVER_START_TIMEOUT_S = 240.0
CATEGORY = "fault: fleet"


def test_a_replica_started_after_the_robot_is_found_and_used_without_touching_the_robot(
    act_checkpoint, tmp_path, ros_node, launched
):
    servers = {}
    try:
        servers[FIRST] = wait_for_server(
            spawn_server(
                act_checkpoint,
                tmp_path,
                node_name="first",
                ros_namespace=FLEET,
                warmup_inferences=1,
            ),
            ros_node,
            SERVER_START_TIMEOUT_S,
        )
        robot = launched("/disc_robot", commands=[("forward_command", "/disc_robot/commands")])
        executor = launched.executor(
            "exec_disc",
            robot.executor_parameters(
                server_namespaces=[f"auto:{FLEET}"],
                discovery_period_s=DISCOVERY_PERIOD_S,
                heartbeat_timeout_s=2.0,
                request_timeout_s=2.0,
                max_action_age_s=4.0,
                handshake_timeout_s=30.0,
                replica_status_timeout_s=3.0,
                fallback="hold",
            ),
        )

        # 1. Found on the graph, streaming on the only replica under /disc.
        first = executor.wait(
            lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 1, 90, "streaming"
        )
        assert first.server_namespace == FIRST and list(first.replicas) == [FIRST], (
            first.replicas,
            executor.log_text(),
        )

        # 2. A second replica, started after the robot: found without touching the robot.
        servers[SECOND] = wait_for_server(
            spawn_server(
                act_checkpoint,
                tmp_path,
                node_name="second",
                ros_namespace=FLEET,
                warmup_inferences=1,
            ),
            ros_node,
            SERVER_START_TIMEOUT_S,
        )
        answering_at = time.monotonic()
        listed = executor.wait(lambda s: SECOND in s.replicas, 20, f"{SECOND} listed in ~/status")
        found_s = round(time.monotonic() - answering_at, 3)
        assert list(listed.replicas) == [FIRST, SECOND] and listed.server_namespace == FIRST
        assert f"replica {SECOND} found on the graph" in executor.log.read_text()

        # 3. Drain the first: the robot moves to the replica it discovered.
        executor.wait(lambda s: s.state_name == "STREAMING", 30, "streaming on the first replica")
        drained_at = time.monotonic()
        servers[FIRST].process.send_signal(signal.SIGTERM)
        moved = executor.wait(
            lambda s: s.server_namespace == SECOND and s.state_name == "STREAMING",
            40,
            f"moved to {SECOND}",
        )
        merged_before = moved.chunks_merged
        on_second = executor.wait(
            lambda s: s.server_namespace == SECOND and s.chunks_merged > merged_before,
            30,
            f"a chunk merged from {SECOND}",
        )
        first_chunk_s = round(time.monotonic() - drained_at, 3)
        assert on_second.last_move_reason.startswith(f"{FIRST} -> {SECOND}: "), (
            on_second.last_move_reason
        )
        assert "announced a drain" in on_second.last_move_reason, on_second.last_move_reason
        assert spin_until(ros_node, lambda: servers[FIRST].process.poll() is not None, 40)
        assert servers[FIRST].process.returncode == 0, servers[FIRST].log_text()[-3000:]
        left = executor.wait(
            lambda s: list(s.replicas) == [SECOND], 20, f"{FIRST} gone from the replicas"
        )
        assert "DEAD" not in executor.states_since(
            drained_at
        ) and "OFFLINE" not in executor.states_since(drained_at)
        assert executor.process.poll() is None, "the executor was never restarted"
        figures = {
            "s_answering_to_listed": found_s,
            "s_drain_to_first_chunk_from_found_replica": first_chunk_s,
            "discovery_period_s": DISCOVERY_PERIOD_S,
            "replicas_at_end": list(left.replicas),
            "move_reason": on_second.last_move_reason,
        }
        print(f"discovery figures: {figures}")
        record(
            CATEGORY,
            "a replica started after the robot (server_namespaces [auto:/prefix]) is found and "
            "takes "
            "the robot on the first replica's drain",
            tried=1,
            survived=1,
            lost=0,
            **figures,
        )
    finally:
        for server in servers.values():
            if server.process.poll() is None:
                stop(server.process)
