"""Evaluate a policy on the simulated reach task through the whole ROS loop.

    python -m lerobot_ros.recording.evaluate --checkpoint CHECKPOINT --episodes 20
    python -m lerobot_ros.recording.evaluate --policy act --episodes 20   # random-weight ACT

Starts policy_server_node, sim_robot_node and chunk_executor_node as
separate processes (the demo's wiring, ``launch_plan.demo_plan``), optionally
episode_recorder_node (``--record DATASET``: the rollouts become a dataset,
DAgger-style), waits until the executor streams, then counts the next
``--episodes`` task episodes; at the start of each it resets the executor's
episode (``~/reset_episode``: the queue of the last episode is dropped and
the server resets the policy). Prints one JSON line: success rate, time to
success, per-episode outcomes and the executor's smoothness figures; the
same summary goes to OUTPUT/evaluation.json and a per-episode plot to
OUTPUT/evaluation.png.

Invariant: only episodes that started while the loop streamed are counted
(``EpisodeTally``), so a slow start-up never counts as a policy failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lerobot_ros.launch_plan import NodeSpec, Plan, demo_plan
from lerobot_ros.policy_names import checkpoint_or_default
from lerobot_ros.processes import start_processes, stop_processes

#: Executor states in which the loop streams chunks (the demos and benchmarks wait for them too).
STREAMING_STATES = ("STREAMING", "DEGRADED")


class EpisodeTally:
    """Outcomes of the episodes that started after counting began (plain Python, no ROS).

    ``episodes`` None: count every episode for as long as statuses come (the demo).
    """

    def __init__(self, episodes: int | None) -> None:
        if episodes is not None and episodes < 1:
            raise ValueError(f"evaluate at least 1 episode, not {episodes}")
        self.wanted = episodes
        self.outcomes: list[dict] = []
        self._counting_from: int | None = None
        self._current: int | None = None

    def on_status(self, episode: int, phase: str, elapsed_s: float, streaming: bool) -> str | None:
        """Follow the task: "started" when a counted episode starts, "ended" when it ends, else
        None."""
        if phase == "RUNNING":
            if self._counting_from is None and streaming:
                self._counting_from = episode + 1  # the one in progress started before streaming
            started = (
                self._counting_from is not None
                and episode >= self._counting_from
                and episode != self._current
            )
            if started and not self.done:
                self._current = episode
                return "started"
            return None
        if episode == self._current and phase in ("SUCCESS", "FAILURE"):
            self.outcomes.append(
                {"episode": episode, "outcome": phase, "elapsed_s": round(elapsed_s, 3)}
            )
            self._current = None
            return "ended"
        return None

    @property
    def done(self) -> bool:
        return self.wanted is not None and len(self.outcomes) >= self.wanted

    def summary(self) -> dict:
        times = [o["elapsed_s"] for o in self.outcomes if o["outcome"] == "SUCCESS"]
        return {
            "episodes": len(self.outcomes),
            "successes": len(times),
            "success_rate": round(len(times) / len(self.outcomes), 3) if self.outcomes else None,
            "time_to_success_s_mean": round(statistics.fmean(times), 3) if times else None,
            "time_to_success_s_median": round(statistics.median(times), 3) if times else None,
            "outcomes": self.outcomes,
        }


def evaluation_plan(
    checkpoint: str,
    output_dir: Path,
    timeout_s: float,
    seed: int,
    record: str = "",
    startup_timeout_s: float = 240.0,
    rtc: bool = True,
    inject_delay_s: float = 0.0,
) -> Plan:
    """The demo's plan with the task's timeout and seed set on the sim, and the recorder (in the
    sim's namespace) if asked.

    ``rtc`` False: the executor never asks for real-time chunking (append mode even for a policy
    that could); ``inject_delay_s``: the server adds that much to every inference, standing in for
    a slower model.
    """
    plan = demo_plan(
        checkpoint,
        server_parameters={
            "audit_log": str(output_dir / "audit.jsonl"),
            "inject_delay_s": inject_delay_s,
        },
        executor_parameters={
            "fps": 30.0,
            "handshake_timeout_s": startup_timeout_s,
            "rtc_requested": rtc,
        },
    )
    nodes = [
        dataclasses.replace(
            node, parameters={**node.parameters, "task_timeout_s": timeout_s, "seed": seed}
        )
        if node.executable == "sim_robot_node"
        else node
        for node in plan.nodes
    ]
    sim = next(node for node in nodes if node.executable == "sim_robot_node")
    if record:
        nodes.append(
            NodeSpec(
                executable="episode_recorder_node",
                module="lerobot_ros.recording.node",
                name="episode_recorder",
                namespace=sim.namespace,
                parameters={"dataset_root": record},
            )
        )
    return Plan(tuple(nodes), plan.environment, plan.start_zenoh_router, plan.zenoh_router_config)


def run(args) -> dict:
    return evaluate(
        checkpoint_or_default(args.checkpoint, args.policy),
        args.episodes,
        args.timeout,
        args.seed,
        record=args.record,
        startup_timeout_s=args.startup_timeout,
        output_dir=args.output_dir,
        rtc=args.rtc == "on",
        inject_delay_s=args.inject_delay_s,
    )


def evaluate(
    checkpoint: str,
    episodes: int,
    timeout_s: float,
    seed: int,
    record: str = "",
    startup_timeout_s: float = 240.0,
    output_dir: str | Path = "",
    rtc: bool = True,
    inject_delay_s: float = 0.0,
) -> dict:
    """Run ``episodes`` task episodes through the whole loop; the summary (also in
    OUTPUT/evaluation.json)."""
    import rclpy
    from std_srvs.srv import Trigger

    from lerobot_ros.msg import ExecutorStatus, TaskStatus

    output_dir = Path(output_dir or tempfile.mkdtemp(prefix="lerobot_ros_eval_"))
    output_dir.mkdir(parents=True, exist_ok=True)
    plan = evaluation_plan(
        checkpoint, output_dir, timeout_s, seed, record, startup_timeout_s, rtc, inject_delay_s
    )
    namespace = next(node.namespace for node in plan.nodes if node.executable == "sim_robot_node")
    print(
        f"evaluate: {checkpoint} on {episodes} episodes (timeout {timeout_s:g} s); logs in "
        f"{output_dir}",
        flush=True,
    )

    rclpy.init()
    node = rclpy.create_node("lerobot_ros_evaluation")
    tally = EpisodeTally(episodes)
    latest: dict = {}
    node.create_subscription(
        ExecutorStatus,
        f"{namespace}/chunk_executor/status",
        lambda msg: latest.__setitem__("executor", msg),
        10,
    )
    reset = node.create_client(Trigger, f"{namespace}/chunk_executor/reset_episode")

    def on_task(msg) -> None:
        executor = latest.get("executor")
        streaming = executor is not None and executor.state_name in STREAMING_STATES
        event = tally.on_status(msg.episode, msg.phase, msg.elapsed_s, streaming)
        if event == "started":
            reset.call_async(Trigger.Request())
            print(f"evaluate: episode {msg.episode} started", flush=True)
        elif event == "ended":
            print(
                f"evaluate: episode {msg.episode} {msg.phase} after {msg.elapsed_s:.2f} s "
                f"({len(tally.outcomes)}/{episodes})",
                flush=True,
            )

    node.create_subscription(TaskStatus, f"{namespace}/sim_robot/status", on_task, 10)
    processes = start_processes(plan, output_dir)
    started = time.monotonic()
    deadline = started + startup_timeout_s + episodes * (timeout_s + 5.0)
    error = ""
    try:
        while not tally.done:
            rclpy.spin_once(node, timeout_sec=0.05)
            dead = [name for name, process in processes if process.poll() is not None]
            if dead:
                error = f"{dead} exited early; see the logs in {output_dir}"
                break
            if time.monotonic() > deadline:
                error = f"not done within {deadline - started:.0f} s"
                break
    except KeyboardInterrupt:
        error = "interrupted"
    finally:
        exit_codes = stop_processes(processes)
        executor = latest.get("executor")
        node.destroy_node()
        rclpy.try_shutdown()
    summary = {
        "checkpoint": checkpoint,
        **tally.summary(),
        "task_timeout_s": timeout_s,
        "seed": seed,
        "rtc_requested": rtc,
        "inject_delay_s": inject_delay_s,
        "wall_s": round(time.monotonic() - started, 1),
        "exit_codes": exit_codes,
        "error": error,
    }
    if executor is not None:
        summary.update(
            {
                field: round(getattr(executor, field), 4)
                for field in (
                    "boundary_jump_mean",
                    "boundary_jump_max",
                    "action_step_mean",
                    "prefix_deviation_mean",
                    "prefix_deviation_max",
                    "latency_ms_p50",
                    "latency_ms_p95",
                )
            }
        )
        summary.update(
            rtc_active=executor.rtc_active,
            chunk_boundaries=executor.chunk_boundaries,
            chunks_merged=executor.chunks_merged,
            starvation_ticks=executor.starvation_ticks,
        )
    if tally.outcomes:
        summary["plot"] = str(save_evaluation_plot(summary, output_dir / "evaluation.png"))
    (output_dir / "evaluation.json").write_text(json.dumps(summary, indent=2))
    return summary


def plot_outcomes(axis, summary: dict) -> None:
    """Each counted episode's time to its outcome on ``axis``: green for success, red for
    failure."""
    outcomes = summary["outcomes"]
    axis.bar(
        range(len(outcomes)),
        [o["elapsed_s"] for o in outcomes],
        color=["tab:green" if o["outcome"] == "SUCCESS" else "tab:red" for o in outcomes],
    )
    axis.axhline(
        summary["task_timeout_s"],
        color="grey",
        linestyle="--",
        linewidth=0.8,
        label="task timeout",
    )
    axis.set_ylabel("time to\noutcome [s]", fontsize=8)


def save_evaluation_plot(summary: dict, path: Path) -> Path:
    """Each counted episode's outcome as a bar, titled with the success count and smoothness;
    ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(max(6.0, 0.12 * len(summary["outcomes"]) + 3), 3.2))
    plot_outcomes(axis, summary)
    axis.set_xlabel("evaluation episode")
    axis.legend(loc="upper right", fontsize=8)
    smoothness = (
        f"; boundary jump mean {summary['boundary_jump_mean']:.3f} rad"
        if "boundary_jump_mean" in summary
        else ""
    )
    axis.set_title(
        f"{Path(summary['checkpoint']).name}: success "
        f"{summary['successes']}/{summary['episodes']} "
        f"(green), seed {summary['seed']}{smoothness}",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", default="", help="policy to evaluate; overrides --policy")
    parser.add_argument(
        "--policy",
        choices=("act", "smolvla", "trained_smolvla"),
        default="act",
        help="default policy to evaluate when no --checkpoint is given: act or smolvla (random "
        "weights) or trained_smolvla (the trained SmolVLA committed with the package)",
    )
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds an episode may take (the sim's task_timeout_s)",
    )
    parser.add_argument(
        "--seed", type=int, default=100, help="the sim's seed: which cubes the episodes show"
    )
    parser.add_argument(
        "--rtc",
        choices=("on", "off"),
        default="on",
        help="off: the executor never asks for real-time chunking (append mode, for comparison)",
    )
    parser.add_argument(
        "--inject-delay-s",
        type=float,
        default=0.0,
        help="the server adds this delay to every inference, standing in for a slower model",
    )
    parser.add_argument(
        "--record", default="", help="also record the rollouts into this LeRobot dataset directory"
    )
    parser.add_argument("--startup-timeout", type=float, default=240.0)
    parser.add_argument("--output-dir", default="")
    args = parser.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    summary = run(args)
    print(json.dumps(summary), flush=True)
    return 0 if not summary["error"] else 1


if __name__ == "__main__":
    sys.exit(main())
