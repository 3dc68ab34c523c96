"""policy_server_node's parameters: the table, its rules, the settings they make.

Invariant: every parameter is checked, and every problem reported at once, before the seconds of
loading a checkpoint. Each parameter is written once, in ``PARAMETERS``; ``ServerSettings`` is
derived from it, and ``config/server.yaml`` and docs/reference/nodes/policy_server_node.md list the
same names and defaults (a test checks both). ``runtime`` entries are settable while the server
runs (``ros2 param set``; the node's ``_apply_settings``). Plain Python: no rclpy, no torch. The
node reads it with ``node_support.declare_settings(node, ServerSettings)``.
"""

from __future__ import annotations

import re

from lerobot_ros.node_shell.parameters import (
    BOOL,
    FLOAT,
    INTEGER,
    STRING,
    STRING_LIST,
    Parameter,
    at_least,
    matches,
    more_than,
    one_of,
    optional,
    port,
    required,
    ros_name_segment,
    settings_dataclass,
)
from lerobot_ros.protocol.contract import MAX_IMAGE_BYTES
from lerobot_ros.server.policy.policy_families import DTYPES, EXCLUSIVE, SHARED

SERVING_MODES = ("auto", SHARED, EXCLUSIVE)
#: torch.compile of the policy's forward: none, or one of torch's modes (all but "default" are
#: inductor's own).
COMPILE_MODES = (
    "none",
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",
)
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")

#: Why the others are start-up only: the checkpoint, device, dtype, serving mode, RTC and task pin
#: are baked into the loaded policy and its advertised capabilities; names, ports and files are the
#: node's entities and open resources; heartbeat_period_s is what robots time their watchdogs
#: against; max_image_bytes is shared with the worker's parser. Unconfigured, all may change
#: (configure reads them).
PARAMETERS = (
    Parameter(
        "checkpoint",
        STRING,
        "",
        "LeRobot checkpoint: a local directory or a Hugging Face Hub id (required)",
        (required("give a checkpoint directory or Hub id"),),
    ),
    Parameter(
        "revision",
        STRING,
        "",
        "Hub revision (branch, tag or commit) of the checkpoint; empty for the default",
    ),
    Parameter(
        "device",
        STRING,
        "auto",
        "Torch device: auto (cuda when available, else cpu), cpu, cuda, cuda:N",
        (matches(_DEVICE, "auto, cpu, mps, cuda or cuda:N"),),
    ),
    Parameter(
        "dtype", STRING, "float32", "Model dtype: float32, float16 or bfloat16", (one_of(DTYPES),)
    ),
    Parameter(
        "action_names",
        STRING_LIST,
        [""],
        "Ordered action names the policy outputs; empty to read them from the checkpoint's "
        "lerobot_ros.json",
    ),
    Parameter(
        "trained_fps",
        FLOAT,
        0.0,
        "Control rate the policy was trained at (Hz); 0 to read it from lerobot_ros.json",
    ),
    Parameter(
        "strict_fps",
        BOOL,
        False,
        "Refuse robots whose fps differs from trained_fps (otherwise warn)",
        runtime=True,
    ),
    Parameter(
        "service_name",
        STRING,
        "",
        "Extra namespace segment for every entity, e.g. act_so101 -> /lerobot/act_so101/...",
        (optional(ros_name_segment()),),
    ),
    Parameter("default_task", STRING, "", "Task used when a robot sends none"),
    Parameter(
        "pin_task",
        BOOL,
        False,
        "Serve only default_task: refuse robots and observations asking for another",
    ),
    Parameter(
        "serving_mode",
        STRING,
        "auto",
        "auto (from the policy family), shared, or exclusive (one session)",
        (one_of(SERVING_MODES),),
    ),
    Parameter(
        "max_sessions",
        INTEGER,
        8,
        "Most sessions open at once (exclusive mode: always 1)",
        (at_least(1),),
        runtime=True,
    ),
    Parameter(
        "max_batch_size",
        INTEGER,
        8,
        "Micro-batching: most sessions' observations run in one forward pass (1: one at a time; "
        "exclusive-mode and GR00T policies always 1)",
        (at_least(1),),
        runtime=True,
    ),
    Parameter(
        "batch_window_ms",
        FLOAT,
        0.0,
        "Micro-batching: how long to wait after the first ready observation for others to join "
        "its "
        "forward pass (milliseconds); 0: take only those ready now",
        (at_least(0),),
        runtime=True,
    ),
    Parameter(
        "latency_budget_ms",
        FLOAT,
        0.0,
        "Admit a robot only while the predicted p95 round trip of every admitted robot stays "
        "within this "
        "(milliseconds; pipeline only); 0: admit by max_sessions alone",
        (at_least(0),),
        runtime=True,
    ),
    Parameter(
        "pipeline",
        BOOL,
        True,
        "Admission (decode, validate, preprocess), forward and finish (postprocess, sign, "
        "publish, audit) on "
        "threads of their own, so the forward thread only runs forwards; false: one thread runs "
        "every stage in "
        "turn",
    ),
    Parameter(
        "admission_workers",
        INTEGER,
        0,
        "Pipeline: threads that decode and preprocess observations; 0: one per usable core beside "
        "the "
        "forward thread's, at least 1 and at most 4",
        (at_least(0),),
    ),
    Parameter(
        "warmup_inferences",
        INTEGER,
        2,
        "Requests run through the full request path before the server advertises",
        (at_least(0),),
    ),
    Parameter(
        "torch_threads",
        INTEGER,
        1,
        "CPU threads of torch's operations in this process (intra-op threads: the forward on a "
        "CPU, the "
        "admission pool's preprocessing everywhere); 0: torch's default, one per core. On a quiet "
        "2-core "
        "machine torch's default made a small ACT forward 6-15 % slower and a 3-camera one 8-26 % "
        "faster; "
        "on a GPU server the CPU threads only serve preprocessing, where a team per admission "
        "thread "
        "oversubscribes the cores, so 1 stays the default (docs/reference/benchmarks.md, "
        "server_request_latency). Try 0 "
        "on a CPU-only server with cores to itself and a large forward",
        (at_least(0),),
    ),
    Parameter(
        "compile_mode",
        STRING,
        "none",
        "torch.compile the policy's forward: none, default, reduce-overhead (CUDA graphs), "
        "max-autotune or "
        "max-autotune-no-cudagraphs; the warm-up compiles (minutes on a CPU). Off by default: on "
        "a CPU only a "
        "flow-matching policy without RTC gained (docs/reference/benchmarks.md, compiled_forward)",
        (one_of(COMPILE_MODES),),
    ),
    Parameter(
        "compile_backend",
        STRING,
        "inductor",
        "torch.compile backend when compile_mode is not none (torch._dynamo.list_backends(); e.g. "
        "inductor, "
        "cudagraphs, aot_eager)",
    ),
    Parameter(
        "rtc_enabled",
        BOOL,
        True,
        "Offer real-time chunking to robots that ask, when the policy supports it",
    ),
    Parameter(
        "rtc_execution_horizon",
        INTEGER,
        10,
        "RTC: steps of the previous chunk's prefix the policy conditions on",
        (at_least(1),),
    ),
    Parameter(
        "heartbeat_period_s",
        FLOAT,
        0.5,
        "Period of the ~/status heartbeat (seconds)",
        (more_than(0),),
    ),
    Parameter(
        "session_idle_timeout_s",
        FLOAT,
        10.0,
        "Close a session after this long without an observation (seconds); a standby session "
        "waiting for its "
        "first observation is exempt",
        (more_than(0),),
        runtime=True,
    ),
    Parameter(
        "session_first_observation_timeout_s",
        FLOAT,
        5.0,
        "Close a session that sent no observation this long after opening; re-opening does not "
        "extend it. A "
        "standby session is exempt, but closed if its observation publisher has not appeared by "
        "then "
        "(seconds)",
        (more_than(0),),
        runtime=True,
    ),
    Parameter(
        "flood_refusals_per_s",
        INTEGER,
        20,
        "Observations of one session refused per second (on arrival, or superseding a waiting "
        "one) "
        "before the rest of that second are dropped unchecked",
        (at_least(1),),
        runtime=True,
    ),
    Parameter(
        "flood_close_after_s",
        FLOAT,
        2.0,
        "Close a session whose refusals exceeded flood_refusals_per_s this many seconds in a row "
        "(seconds)",
        (more_than(0),),
        runtime=True,
    ),
    Parameter(
        "flood_backoff_initial_s",
        FLOAT,
        5.0,
        "After a flood closure, refuse the client id's OpenSession this long; doubles with each "
        "closure "
        "(seconds)",
        (more_than(0),),
        runtime=True,
    ),
    Parameter(
        "flood_backoff_max_s",
        FLOAT,
        120.0,
        "Longest backoff after flood closures (seconds)",
        (more_than(0),),
        runtime=True,
    ),
    Parameter(
        "refusal_audit_window_s",
        FLOAT,
        10.0,
        "Audit: a few full lines per client and refusal reason in each window, then one summary "
        "line with "
        "the count (seconds)",
        (more_than(0),),
        runtime=True,
    ),
    Parameter(
        "max_image_bytes",
        INTEGER,
        MAX_IMAGE_BYTES,
        "Largest accepted camera frame, compressed or raw (bytes)",
        (at_least(1),),
    ),
    Parameter(
        "audit_log",
        STRING,
        "auto",
        "One JSON line per request: auto (ROS log dir), off, - (stdout), or a file path",
    ),
    Parameter(
        "capture_dir",
        STRING,
        "",
        "Directory for a bounded msgpack capture of request/response pairs; empty: off",
    ),
    Parameter(
        "capture_max_mb",
        INTEGER,
        256,
        "Size bound of the capture directory (MiB); oldest segments are deleted",
        (at_least(0),),
    ),
    Parameter(
        "http_port",
        INTEGER,
        0,
        "Port of the HTTP /healthz and /metrics endpoint; 0: off",
        (port(),),
    ),
    Parameter("http_host", STRING, "127.0.0.1", "Address the HTTP endpoint binds to"),
    Parameter(
        "noise_seed",
        INTEGER,
        -1,
        "-1: fresh noise every request; >= 0: seed each request's noise from (seed, client, "
        "episode, seq), "
        "making flow-matching and diffusion chunks reproducible",
        (at_least(-1, "-1 (off) or a seed >= 0"),),
    ),
    Parameter(
        "inject_delay_s",
        FLOAT,
        0.0,
        "Fault injection: extra seconds before each inference, to rehearse a slower model; keep 0 "
        "in production",
        (at_least(0),),
    ),
    Parameter(
        "autostart",
        BOOL,
        True,
        "Configure and activate at start-up; false: stay unconfigured for a lifecycle manager",
    ),
)


# ---- cross-field rules (each gets the converted settings) ------------------


def pinned_task_is_named(settings: ServerSettings) -> str | None:
    if settings.pin_task and not settings.default_task:
        return "'pin_task' is true but 'default_task' is empty: name the task to pin"
    return None


def compile_mode_fits_backend(settings: ServerSettings) -> str | None:
    if settings.compile_mode not in ("none", "default") and settings.compile_backend != "inductor":
        return (
            f"'compile_mode' {settings.compile_mode!r} is a mode of the inductor backend; with "
            f"'compile_backend' {settings.compile_backend!r} use compile_mode 'default' (or "
            "backend 'inductor')"
        )
    return None


def compiling_is_warmed_up(settings: ServerSettings) -> str | None:
    if settings.compile_mode != "none" and settings.warmup_inferences < 1:
        return (
            f"'compile_mode' {settings.compile_mode!r} with 'warmup_inferences' 0 would make the "
            "first robot wait "
            "for the compilation: give warmup_inferences >= 1"
        )
    return None


def flood_backoff_is_ordered(settings: ServerSettings) -> str | None:
    if settings.flood_backoff_initial_s > settings.flood_backoff_max_s:
        return (
            f"'flood_backoff_initial_s' {settings.flood_backoff_initial_s:g} is above "
            "'flood_backoff_max_s' "
            f"{settings.flood_backoff_max_s:g}: the backoff starts at the first and doubles up to "
            "the second"
        )
    return None


RULES = (
    pinned_task_is_named,
    compile_mode_fits_backend,
    compiling_is_warmed_up,
    flood_backoff_is_ordered,
)


class ServerSettings(settings_dataclass(PARAMETERS, RULES)):
    """Validated parameters, in the types the server uses (``action_names`` without
    placeholders)."""
