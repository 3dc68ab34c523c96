"""Ready a policy for serving, before the server advertises anything: load, then warm up.

Invariant: whatever stops a policy from being served (a checkpoint that
cannot be read or served, a warm-up request that fails) surfaces as one
``StartupFailed`` naming why, raised before any ROS entity exists, so a
robot never sees a server that cannot answer it.

torch and LeRobot take seconds to import: they are imported inside
``load_runner``, after rclpy is up, so Ctrl-C during start-up ends the node
cleanly.

Loading and warming up run on a thread of their own that has ended when
``ready_runner`` returns (``model_threads.run_on_passing_thread``), so the
main thread never enters one of torch's parallel regions and only the
inference worker owns an OpenMP thread pool (why: model_threads.py).
"""

from __future__ import annotations

import time

from lerobot_ros.protocol.checkpoint_layout import local_checkpoint_problem
from lerobot_ros.server.policy.model_threads import run_on_passing_thread, use_torch_threads
from lerobot_ros.server.policy.policy_families import UnsupportedPolicyError
from lerobot_ros.server.policy.warmup import warm_up
from lerobot_ros.server.settings import ServerSettings


class StartupFailed(RuntimeError):
    """The policy cannot be served; the message says why."""


# Bench-only: a benchmark that models an accelerator replaces the forward of the runner this
# process builds, and nothing else (bench/modeled_accelerator.py). Never set by the product.
_forward_override = None


def override_forward(make_forward) -> None:
    """Bench-only hook: ``make_forward(runner)`` returns the ``infer`` the runner serves with.

    Called before the server starts (bench/modeled_accelerator.py runs the product's server main
    after it); decoding, the checkpoint's pre- and postprocessors, signing and publishing stay the
    product's own.
    """
    global _forward_override
    _forward_override = make_forward


def ready_runner(settings: ServerSettings, log, on_forward=None):
    """The policy loaded as ``settings`` say and warmed up: a PolicyRunner ready to serve.

    ``log`` has ``info`` and ``warning`` taking one string (the node's rclpy logger);
    ``on_forward(batch_size, seconds)`` hears each warm-up forward. Both steps run on a passing
    thread, never on the caller's (see the module docstring).
    """
    problem = local_checkpoint_problem(settings.checkpoint)
    # before torch is imported: a mistyped path fails at once, not after seconds of imports
    if problem:
        raise StartupFailed(problem)

    def load_and_warm_up():
        use_torch_threads(settings.torch_threads)
        runner = load_runner(settings, log)
        warm_up_runner(runner, settings.warmup_inferences, settings.default_task, log, on_forward)
        return runner

    return run_on_passing_thread(load_and_warm_up, name="lerobot_ros-load")


def load_runner(settings: ServerSettings, log):
    """The checkpoint loaded and wrapped in a PolicyRunner; empty ``action_names``: from the
    checkpoint."""
    from lerobot_ros.server.policy.checkpoint import CheckpointError, load_policy
    from lerobot_ros.server.policy.inference import PolicyRunner

    log.info(f"loading {settings.checkpoint} on {settings.device} as {settings.dtype}")
    started = time.monotonic()
    try:
        loaded = load_policy(
            settings.checkpoint,
            revision=settings.revision,
            device=settings.device,
            dtype=settings.dtype,
            action_names=list(settings.action_names) or None,
            trained_fps=settings.trained_fps,
            serving_mode=settings.serving_mode,
            rtc_enabled=settings.rtc_enabled,
            rtc_execution_horizon=settings.rtc_execution_horizon,
            pinned_task=settings.default_task if settings.pin_task else "",
        )
    except (CheckpointError, UnsupportedPolicyError) as error:
        raise StartupFailed(str(error)) from error
    log.info(
        f"loaded {loaded.capabilities.policy_type} in {time.monotonic() - started:.1f} s; "
        f"serving mode {loaded.capabilities.serving_mode}: {loaded.serving_reason}"
    )
    if settings.inject_delay_s > 0:
        log.warning(f"fault injection: every inference is delayed by {settings.inject_delay_s} s")
    runner = PolicyRunner(
        loaded,
        settings.rtc_enabled,
        settings.rtc_execution_horizon,
        noise_seed=settings.noise_seed if settings.noise_seed >= 0 else None,
        inject_delay_s=settings.inject_delay_s,
    )
    if _forward_override is not None:
        runner.infer = _forward_override(runner)
        log.warning(
            f"benchmark: the forward is modeled ({runner.infer.__doc__ or 'bench hook'}), not the "
            "policy's"
        )
    if settings.compile_mode != "none":
        try:
            runner.compile_forward(settings.compile_mode, settings.compile_backend)
        except ValueError as error:
            raise StartupFailed(str(error)) from error
        log.info(f"torch.compile ({runner.compiled}): the warm-up compiles the forward")
        if runner.rtc_active:
            log.warning(
                "torch.compile with RTC: LeRobot's guidance reads the flow time and each "
                "request's delay as "
                "Python numbers, so torch compiles a graph per value until its recompile limit, "
                "then runs "
                "those steps eager: a long warm-up for little gain (docs/reference/benchmarks.md, "
                "compiled_forward)"
            )
    return runner


def warm_up_runner(runner, count: int, default_task: str, log, on_forward=None) -> None:
    """``count`` requests through the full request path, each one's duration logged."""
    log.info(f"warming up ({count} requests through the full request path)")
    try:
        durations = warm_up(runner, count, default_task, on_forward)
    except RuntimeError as error:
        raise StartupFailed(f"warm-up failed: {error}") from error
    if durations:
        log.info("warm-up done: " + ", ".join(f"{seconds * 1000:.0f} ms" for seconds in durations))
