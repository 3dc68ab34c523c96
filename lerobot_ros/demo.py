"""The README's demo command: the whole loop on one machine, no robot, no GPU needed.

Starts policy_server_node (default policy: the trained reach ACT when it
is installed, otherwise the trained reach SmolVLA committed with the
package, which does real-time chunking; ``--policy trained`` builds the
trained ACT on first use, ``--policy act`` and ``--policy smolvla`` serve
random-weight policies), sim_robot_node (a simulated 6-joint arm
with a camera) and chunk_executor_node as three separate processes wired by
``lerobot_ros.launch_plan.demo_plan`` (the same wiring as
``launch/demo.launch.py``), lets them run for a bounded time while printing a
live status line, then stops them and prints a summary whose last line is
JSON. It saves a plot of commanded vs measured joint positions and queue
depth.

Invariant: exit code 0 only if the loop streamed (``streamed``: the
executor ended streaming, merged chunks and published commands at a
reasonable share of its rate), so a demo that merely started is never
reported as working. A run whose end falls just after an episode reset
waits (at most ``RESET_REFILL_S``) for the new episode's first chunk
rather than being judged on the queue the reset emptied. Which checkpoint
``--policy`` means is ``lerobot_ros.policy_names``' rule; starting and
stopping the nodes is ``lerobot_ros.processes``'.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lerobot_ros.launch_plan import demo_plan
from lerobot_ros.policy_names import (
    POLICY_LABELS,
    auto_policy,
    checkpoint_or_default,
    installed_trained_policy,
)
from lerobot_ros.processes import start_processes, stop_processes
from lerobot_ros.protocol.wire.output_modes import (
    DEFAULT_OUTPUT_MODE,
    OUTPUT_MODES,
    OutputMode,
    help_text,
)
from lerobot_ros.recording.evaluate import STREAMING_STATES, EpisodeTally
from lerobot_ros.recording.regenerate import regenerate_and_install
from lerobot_ros.recording.trained_policy import evaluation_line
from lerobot_ros.sim.default_policy import DEFAULT_POLICY_NAMES
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES

#: Seconds after an episode reset in which the empty queue is the new episode's first chunk on its
#: way.
RESET_REFILL_S = 1.0


@dataclass
class Recording:
    """What the demo's monitor node saw, on its own monotonic clock."""

    started: float = field(default_factory=time.monotonic)
    status: list = field(default_factory=list)  # (t, ExecutorStatus)
    measured: list = field(default_factory=list)  # (t, positions)
    commanded: list = field(default_factory=list)  # (t, positions)
    #: Task episodes that started while the loop streamed, counted as the evaluation counts them.
    tasks: EpisodeTally = field(default_factory=lambda: EpisodeTally(None))
    resets: list = field(default_factory=list)  # t of each executor episode reset

    def now(self) -> float:
        return time.monotonic() - self.started

    def on_task(self, msg) -> bool:
        """Follow the sim's task status; True when a counted episode starts (the executor's episode
        resets then)."""
        streaming = bool(self.status) and self.status[-1][1].state_name in STREAMING_STATES
        started = (
            self.tasks.on_status(msg.episode, msg.phase, msg.elapsed_s, streaming) == "started"
        )
        if started:
            self.resets.append(self.now())
        return started

    def in_reset_refill(self, t: float) -> bool:
        """Whether ``t`` falls within RESET_REFILL_S after an episode reset: an empty queue then is
        the new episode's first chunk on its way, not starvation."""
        return any(reset <= t <= reset + RESET_REFILL_S for reset in self.resets)

    def refilling_after_reset(self) -> bool:
        """True while the queue is empty because an episode reset dropped it in the refill window.

        The demo's run does not end inside that window: judged there, a loop that streams would end
        "STALLED" only because the new episode's first chunk is still on its way.
        """
        return (
            self.in_reset_refill(self.now())
            and bool(self.status)
            and self.status[-1][1].state_name not in STREAMING_STATES
        )


def _commanded_positions(mode: OutputMode, msg, joint_names) -> list[float] | None:
    """The positions a command tells the arm to reach first (a trajectory's first point)."""
    try:
        command = mode.read(msg, joint_names)
    except ValueError:
        return None
    return command.positions[0].tolist() if command.positions else None


def status_line(status) -> str:
    return (
        f"{status.state_name:<12} queue {status.queue_depth:3d} ({status.queued_time_s:4.2f} s)  "
        f"latency p50 {status.latency_ms_p50:6.1f} ms p95 {status.latency_ms_p95:6.1f} ms  "
        f"commands {status.commands_published:6d}  chunks {status.chunks_merged:4d}  "
        # Ticks that held position: the wait for the first chunk and each episode reset's refill,
        # not starvation.
        f"holds (start-up, resets) {status.fallback_ticks:4d}"
    )


def save_demo_plot(
    recording: Recording,
    joint_names,
    path: Path,
    streaming_since: float | None = None,
    policy_label: str = "random-weight ACT",
) -> None:
    """Commanded vs measured position of each joint, and the executor's queue depth, over the
    run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axes = plt.subplots(
        len(joint_names) + 1, 1, figsize=(10, 1.6 * (len(joint_names) + 1)), sharex=True
    )
    for index, name in enumerate(joint_names):
        axis = axes[index]
        if recording.measured:
            t, q = zip(*recording.measured, strict=False)
            axis.plot(t, np.array(q)[:, index], label="measured", linewidth=1.2)
        if recording.commanded:
            t, q = zip(*recording.commanded, strict=False)
            axis.plot(t, np.array(q)[:, index], "--", label="commanded", linewidth=1.0)
        axis.set_ylabel(f"{name}\n[rad]", fontsize=8)
        axis.grid(alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8)
    if recording.status:
        t, statuses = zip(*recording.status, strict=False)
        axes[-1].step(t, [s.queue_depth for s in statuses], where="post", color="tab:green")
    axes[-1].set_ylabel("queue\n[actions]", fontsize=8)
    axes[-1].set_xlabel("time since start [s]")
    axes[-1].grid(alpha=0.3)
    if streaming_since is not None:  # start-up (loading the model) is not interesting to look at
        axes[-1].set_xlim(left=max(0.0, streaming_since - 2.0))
    figure.suptitle(
        f"lerobot_ros demo: commanded vs measured joints ({policy_label})", fontsize=10
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def summarize(
    recording: Recording, streaming_since: float | None, duration_s: float, exit_codes: dict
) -> dict:
    last = recording.status[-1][1] if recording.status else None
    first_streaming = next(
        (s for t, s in recording.status if streaming_since is not None and t >= streaming_since),
        None,
    )
    steady = [
        (t, s)
        for t, s in recording.status
        if streaming_since is not None and t >= streaming_since + 2.0
    ]
    steady_starvation = (
        sum(
            max(0, after.starvation_ticks - before.starvation_ticks)
            for (_, before), (t, after) in zip(steady, steady[1:], strict=False)
            if not recording.in_reset_refill(t)
        )
        if len(steady) >= 2
        else None
    )
    summary = {
        "final_state": last.state_name if last else "NO_STATUS",
        "reason": last.reason if last else "",
        "commands_published": last.commands_published if last else 0,
        "chunks_merged": last.chunks_merged if last else 0,
        "chunks_dropped": last.chunks_dropped if last else 0,
        # Why the latest was dropped: usually a chunk of the old episode landing after a reset
        # ("stale_episode").
        "last_drop_reason": last.last_drop_reason if last else "",
        "starvation_ticks": last.starvation_ticks if last else 0,
        "starvation_ticks_after_warmup": steady_starvation,
        "fallback_ticks": last.fallback_ticks if last else 0,
        "request_timeouts": last.request_timeouts if last else 0,
        "latency_ms_p50": round(last.latency_ms_p50, 2) if last else None,
        "latency_ms_p95": round(last.latency_ms_p95, 2) if last else None,
        "streamed_s": round(recording.now() - streaming_since, 1)
        if streaming_since is not None
        else 0.0,
        "commands_while_streaming": (last.commands_published - first_streaming.commands_published)
        if last and first_streaming
        else 0,
        "duration_s": duration_s,
        "exit_codes": exit_codes,
        "episode_resets": len(recording.resets),
        "task_episodes": len(recording.tasks.outcomes),
        "task_successes": sum(
            outcome["outcome"] == "SUCCESS" for outcome in recording.tasks.outcomes
        ),
    }
    return summary


def streamed(summary: dict, fps: float) -> bool:
    return (
        summary["final_state"] in STREAMING_STATES
        and summary["chunks_merged"] >= 2
        and summary["commands_while_streaming"] >= 0.5 * fps * summary["streamed_s"] > 0
    )


def resolve_policy(policy: str, build_dir: Path) -> tuple[str, Path]:
    """The kind the demo serves for ``--policy`` and its checkpoint.

    "auto": ``policy_names.auto_policy``. Only an explicit "trained" builds
    the trained ACT (record, train, evaluate: see docs/reference/benchmarks.md for how
    long that takes); "auto" never makes a first demo wait for a training.
    """
    trained = installed_trained_policy()
    if policy == "auto":
        policy = auto_policy()
        if trained is None:
            print(
                "demo: no trained ACT is installed, so this demo serves the "
                f"{POLICY_LABELS[policy]}; "
                "`--policy trained` builds the ACT once (about an hour on 2 CPU cores)",
                flush=True,
            )
    if policy == "trained":
        if trained is None:
            trained = build_trained_policy(build_dir)
        return policy, trained
    if policy in DEFAULT_POLICY_NAMES:
        print(
            f"demo: preparing the default {policy} policy {DEFAULT_POLICY_NAMES[policy]} "
            "(random weights; built once, then cached)",
            flush=True,
        )
    try:
        return policy, Path(checkpoint_or_default("", policy))
    except ValueError as error:  # a named policy this install does not have: say so, no traceback
        raise SystemExit(f"demo: {error}") from error


def build_trained_policy(build_dir: Path) -> Path:
    print(
        f"demo: building the trained policy in {build_dir}: record expert episodes, train ACT "
        "(progress bar), "
        "evaluate, install",
        flush=True,
    )
    return Path(regenerate_and_install(build_dir)["installed"])


def run(args) -> int:
    import rclpy
    from sensor_msgs.msg import JointState
    from std_srvs.srv import Trigger

    from lerobot_ros.msg import ExecutorStatus, TaskStatus

    output_dir = Path(args.output_dir or tempfile.mkdtemp(prefix="lerobot_ros_demo_"))
    output_dir.mkdir(parents=True, exist_ok=True)
    if args.checkpoint:
        policy, checkpoint = "checkpoint", args.checkpoint
    else:
        policy, path = resolve_policy(args.policy, output_dir / "trained_policy_build")
        checkpoint = str(path)
        if policy in ("trained", "trained_smolvla"):
            print(
                f"demo: serving the {POLICY_LABELS[policy]}: {evaluation_line(path)}", flush=True
            )
    plan = demo_plan(
        checkpoint,
        output_mode=args.output_mode,
        device=args.device,
        server_parameters={"audit_log": str(output_dir / "audit.jsonl")},
        executor_parameters={"fps": args.fps},
    )
    robot_namespace = plan.nodes[-1].namespace
    print(f"demo: policy {checkpoint}; logs, audit and plot in {output_dir}", flush=True)
    print(
        "demo: starting policy_server_node, sim_robot_node and chunk_executor_node as separate "
        "processes",
        flush=True,
    )

    rclpy.init()
    node = rclpy.create_node("lerobot_ros_demo_monitor")
    recording = Recording()
    mode = OUTPUT_MODES[args.output_mode]
    node.create_subscription(
        ExecutorStatus,
        f"{robot_namespace}/chunk_executor/status",
        lambda msg: recording.status.append((recording.now(), msg)),
        10,
    )
    node.create_subscription(
        JointState,
        f"{robot_namespace}/joint_states",
        lambda msg: recording.measured.append((recording.now(), list(msg.position))),
        50,
    )

    def on_command(msg) -> None:
        positions = _commanded_positions(mode, msg, SO101_JOINT_NAMES)
        if positions is not None:
            recording.commanded.append((recording.now(), positions))

    node.create_subscription(
        mode.message_type, f"{robot_namespace}/{mode.sim_topic}", on_command, 50
    )
    reset_episode = node.create_client(Trigger, f"{robot_namespace}/chunk_executor/reset_episode")

    def on_task(msg) -> None:
        # A new cube: drop the queue planned for the last one, as the evaluation does (without it
        # the rest of the last episode plays first, closed gripper included, and the policy
        # succeeds far less).
        if recording.on_task(msg):
            reset_episode.call_async(Trigger.Request())

    node.create_subscription(TaskStatus, f"{robot_namespace}/sim_robot/status", on_task, 10)
    processes = start_processes(plan, output_dir)
    interactive = sys.stdout.isatty()
    streaming_since = None
    deadline = time.monotonic() + args.startup_timeout
    end_at = None
    last_print = 0.0
    try:
        while True:
            rclpy.spin_once(node, timeout_sec=0.05)
            now = time.monotonic()
            if any(process.poll() is not None for _, process in processes):
                dead = [name for name, process in processes if process.poll() is not None]
                print(f"\ndemo: {dead} exited early; see the logs in {output_dir}", flush=True)
                break
            state = recording.status[-1][1].state_name if recording.status else "starting"
            if streaming_since is None and state in STREAMING_STATES:
                streaming_since = recording.now()
                end_at = now + args.duration
                print(
                    f"demo: streaming after {streaming_since:.1f} s; running {args.duration:g} s",
                    flush=True,
                )
            if state in ("DEAD", "OFFLINE"):
                print(f"\ndemo: executor is {state}: {recording.status[-1][1].reason}", flush=True)
                break
            if end_at is None and now > deadline:
                print(
                    f"\ndemo: the loop did not start streaming within {args.startup_timeout:g} s",
                    flush=True,
                )
                break
            if end_at is not None and now >= end_at and not recording.refilling_after_reset():
                break
            if recording.status and now - last_print >= (0.25 if interactive else 2.0):
                last_print = now
                line = status_line(recording.status[-1][1])
                print(
                    ("\r" + line) if interactive else line,
                    end="" if interactive else "\n",
                    flush=True,
                )
    except KeyboardInterrupt:
        print("\ndemo: interrupted", flush=True)
    finally:
        exit_codes = stop_processes(processes)
        node.destroy_node()
        rclpy.try_shutdown()
    if interactive:
        print()
    summary = summarize(recording, streaming_since, args.duration, exit_codes)
    plot = output_dir / "demo.png"
    save_demo_plot(
        recording,
        SO101_JOINT_NAMES,
        plot,
        streaming_since,
        POLICY_LABELS.get(policy, Path(checkpoint).name),
    )
    summary.update(plot=str(plot), policy=policy, checkpoint=checkpoint)
    summary["ok"] = streamed(summary, args.fps)
    print(
        f"demo: final state {summary['final_state']}; {summary['commands_published']} commands "
        "published, "
        f"{summary['chunks_merged']} chunks merged, {summary['starvation_ticks']} starved ticks "
        f"({summary['starvation_ticks_after_warmup']} after warm-up), latency p50 "
        f"{summary['latency_ms_p50']} ms "
        f"p95 {summary['latency_ms_p95']} ms; task episodes ended while it ran: "
        f"{summary['task_successes']} "
        f"of {summary['task_episodes']} succeeded",
        flush=True,
    )
    print(f"demo: plot of commanded vs measured joints and queue depth: {plot}", flush=True)
    if not summary["ok"]:
        print(
            f"demo: FAILED: the loop did not stream; logs in {output_dir}",
            file=sys.stderr,
            flush=True,
        )
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=30.0,
        help="seconds to stream once streaming (default 30)",
    )
    parser.add_argument(
        "--output-mode", choices=list(OUTPUT_MODES), default=DEFAULT_OUTPUT_MODE, help=help_text()
    )
    parser.add_argument(
        "--fps", type=float, default=30.0, help="control rate of the executor (Hz)"
    )
    parser.add_argument(
        "--policy",
        choices=tuple(["auto", *POLICY_LABELS]),
        default="auto",
        help="policy to serve when no --checkpoint is given: auto (default) is the trained reach "
        "ACT when installed, else the trained reach SmolVLA committed with the package; "
        "trained builds the ACT first if needed (record, train, evaluate); trained_smolvla the "
        "committed SmolVLA (real-time chunking); act a random ACT; smolvla a tiny random "
        "SmolVLA with real-time chunking (RTC)",
    )
    parser.add_argument("--checkpoint", default="", help="policy to serve; overrides --policy")
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--startup-timeout", type=float, default=180.0, help="seconds allowed until streaming"
    )
    parser.add_argument(
        "--output-dir", default="", help="where logs, audit and the plot go (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    # A demo must never talk to robots on the network it happens to run on.
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
