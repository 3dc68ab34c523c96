"""Zero-gap failover across processes: kill -9 of the serving replica leaves no empty-queue tick.

Real processes: two policy_server_node replicas of the tiny SmolVLA (RTC-capable), a stand-in robot
driver and one chunk_executor_node per merge mode (append: ``rtc_requested`` false; RTC replace:
true) at 30 Hz with the default buffer_time_s (0.5 s) and heartbeat timeout (2 s),
``server_namespaces`` naming both replicas and ``standby_session`` on (the default).

Per mode: the executor streams on one replica and holds a warm standby session on the other (its
~/status names it, and the standby's server counts it in ``standby_sessions``); once its hedge
deadline is measured, the serving replica is killed with SIGKILL (never SIGTERM, which says
goodbye). Its request in flight (or the next one) is hedged to the standby, whose answer is merged
first: the robot is on the other replica with NO control tick that found the queue empty, no
request timeout, and no policy command ever paused (the driver's record). The killed replica is
started again between the modes, and the robot's new standby goes there.
"""

from __future__ import annotations

import signal
import time

import pytest

from support.reliability_log import record
from support.ros import spin_until
from support.servers import heartbeats_and_servers, spawn_server, wait_for_server

REPLICAS = ("standby_x", "standby_y")
SERVER_START_TIMEOUT_S = 300.0  # two servers importing torch at once on 2 shared cores
CATEGORY = "fault: fleet"
FPS = 30.0


def ns(name: str) -> str:
    return f"/{name}"


@pytest.mark.serial
@pytest.mark.timeout(900)
def test_kill_9_of_the_serving_replica_leaves_no_empty_queue_tick_in_append_and_rtc(
    smolvla_checkpoint, tmp_path, ros_node, launched
):
    with heartbeats_and_servers(ros_node, [ns(name) for name in REPLICAS]) as (
        heartbeats,
        servers,
    ):
        started = {}
        for name in REPLICAS:
            directory = tmp_path / name
            directory.mkdir()
            started[name] = spawn_server(
                smolvla_checkpoint, directory, node_name=name, warmup_inferences=1
            )
        for name, server in started.items():
            servers[name] = wait_for_server(server, ros_node, SERVER_START_TIMEOUT_S)
        rows = []
        for mode, rtc in (("append", False), ("RTC replace", True)):
            robot = launched(
                f"/standby_{'rtc' if rtc else 'append'}",
                commands=[("forward_command", f"/standby_{'rtc' if rtc else 'append'}/commands")],
            )
            executor = launched.executor(
                f"exec_standby_{'rtc' if rtc else 'append'}",
                robot.executor_parameters(
                    server_namespaces=[ns(name) for name in REPLICAS],
                    fps=FPS,
                    rtc_requested=rtc,
                    replica_status_timeout_s=3.0,
                    fallback="hold",
                    status_period_s=0.05,
                ),
            )
            armed = executor.wait(
                lambda s: (
                    s.state_name == "STREAMING"
                    and s.standby_replica != ""
                    and s.hedge_deadline_ms > 0
                    and s.chunks_merged >= 8
                ),
                120,
                "streaming with a standby armed and a hedge deadline measured",
            )
            serving, standby = armed.server_namespace.strip("/"), armed.standby_replica.strip("/")
            assert {serving, standby} == set(REPLICAS), (serving, standby)
            assert armed.rtc_active is rtc
            assert spin_until(
                ros_node,
                lambda standby=standby: (
                    heartbeats.get(ns(standby)) is not None
                    and heartbeats[ns(standby)].standby_sessions >= 1
                ),
                5.0,
            ), f"{standby} does not report the standby session: {heartbeats.get(ns(standby))}"
            executor.spin(1.0)
            before = executor.status
            killed_at = time.monotonic()
            servers[serving].process.send_signal(signal.SIGKILL)
            servers[serving].process.wait()
            moved = executor.wait(
                lambda s, standby=standby, before=before: (
                    s.server_namespace == ns(standby)
                    and s.chunks_merged > before.chunks_merged + 1
                ),
                30,
                f"a chunk merged from {standby}",
            )
            moved_at = time.monotonic()
            executor.spin(1.0)
            after = executor.status
            figures = {
                "mode": mode,
                "s_kill_to_chunk_from_standby": round(moved_at - killed_at, 3),
                "empty_queue_ticks": after.starvation_ticks - before.starvation_ticks,
                "fallback_ticks": after.fallback_ticks - before.fallback_ticks,
                "request_timeouts": after.request_timeouts - before.request_timeouts,
                "hedges_sent": after.hedges_sent,
                "hedges_won": after.hedges_won,
                "standby_promotions": after.standby_promotions,
                "move_reason": moved.last_move_reason,
                "hedge_deadline_ms": round(before.hedge_deadline_ms, 1),
                "latency_ms_p95": round(before.latency_ms_p95, 1),
            }
            rows.append(figures)
            print(f"kill -9 with a standby: {figures}")
            record(
                CATEGORY,
                f"kill -9 of the serving replica with a warm standby ({mode}): "
                "no empty-queue tick",
                tried=1,
                survived=int(figures["empty_queue_ticks"] == 0),
                lost=figures["empty_queue_ticks"],
                **figures,
            )
            assert moved.last_move_reason.startswith(f"{ns(serving)} -> {ns(standby)}: "), (
                moved.last_move_reason
            )
            assert figures["empty_queue_ticks"] == 0 and figures["fallback_ticks"] == 0, (
                figures,
                executor.log_text(),
            )
            assert figures["request_timeouts"] == 0, figures
            assert (
                "RECONNECTING" not in executor.states_since(killed_at)
                or "heartbeat" in moved.last_move_reason
            )
            executor.stop()
            robot.stop()
            # The fleet whole again for the next mode.
            directory = tmp_path / f"{serving}_again_{mode[:3]}"
            directory.mkdir()
            servers[serving] = wait_for_server(
                spawn_server(
                    smolvla_checkpoint, directory, node_name=serving, warmup_inferences=1
                ),
                ros_node,
                SERVER_START_TIMEOUT_S,
            )
        assert len(rows) == 2
