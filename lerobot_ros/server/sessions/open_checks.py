"""Whether a robot may open a session: the capability matrix of the contract.

Invariant: a session opens only when the robot's ordered action names, state
dimension, cameras and schema version match the policy, its task is allowed
and the server has room; every refusal carries one reason code and a message
that shows what was expected and what arrived. Acceptances may carry
warnings (fps differs from training, RTC downgraded). Plain Python: the
refusal codes mirror ``lerobot_ros/srv/OpenSession`` and a test keeps them
equal.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from lerobot_ros.protocol.contract import (
    MAX_TASK_CHARS,
    OpenRequest,
    ServerCapabilities,
    action_names_mismatch,
    client_id_problem,
    missing_cameras,
    names_size_problem,
    size_problem,
)

#: Relative fps difference tolerated without a warning.
FPS_TOLERANCE = 0.01


def _versions(low: int, high: int) -> str:
    return f"schema version {low}" if low == high else f"schema versions {low} to {high}"


class Refusal(enum.IntEnum):
    NONE = 0
    NOT_READY = 1
    DRAINING = 2
    CAPACITY = 3
    BAD_CLIENT_ID = 4
    SCHEMA_VERSION = 5
    ACTION_NAMES = 6
    STATE_DIM = 7
    CAMERAS = 8
    FPS = 9
    TASK = 10
    CLIENT_ID_IN_USE = 11  # decided by sessions.SessionRegistry.claim, after admission
    BACKOFF = 12  # decided by arrival_guard.ArrivalGuard.reopen_refusal, before admission


@dataclass(frozen=True)
class ServerLoad:
    """The server's situation when the request arrives."""

    ready: bool
    draining: bool
    active_sessions: int  # other clients' sessions (a re-open does not count itself)
    max_sessions: int


@dataclass(frozen=True)
class Admission:
    accepted: bool
    refusal: Refusal = Refusal.NONE
    message: str = ""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    rtc_enabled: bool = False
    task: str = ""

    @classmethod
    def refuse(cls, refusal: Refusal, message: str) -> Admission:
        return cls(False, refusal, message)


def _fps_check(
    capabilities: ServerCapabilities, fps: float, strict: bool
) -> tuple[str | None, str | None]:
    """(refusal message, warning) for the robot's control rate."""
    trained = capabilities.trained_fps
    if fps <= 0:
        return f"fps must be positive; the robot sent {fps}", None
    if trained <= 0 or abs(fps - trained) <= FPS_TOLERANCE * trained:
        return None, None
    text = f"the robot runs at {fps:g} Hz but the policy was trained at {trained:g} Hz"
    if strict:
        return text + " (strict_fps is on)", None
    return None, text + "; actions will play back at a different speed than trained"


def admit(
    capabilities: ServerCapabilities,
    request: OpenRequest,
    load: ServerLoad,
    strict_fps: bool = False,
) -> Admission:
    """Decide one OpenSession request. Checks run from "try later" to "never"."""
    if load.draining:
        return Admission.refuse(
            Refusal.DRAINING, "the server is shutting down; try another replica"
        )
    if not load.ready:
        return Admission.refuse(
            Refusal.NOT_READY, "the server is still loading or warming up its policy"
        )
    problem = client_id_problem(request.client_id)
    if problem:
        return Admission.refuse(Refusal.BAD_CLIENT_ID, problem)
    low, high = capabilities.schema_version_min, capabilities.schema_version_max
    if not low <= request.schema_version <= high:
        return Admission.refuse(
            Refusal.SCHEMA_VERSION,
            f"observation schema version {request.schema_version} is not supported; expected "
            f"{low}..{high} "
            "(the robot speaks lerobot_ros interfaces of schema version "
            f"{request.schema_version}, this server "
            f"{_versions(low, high)}: upgrade the older side; docs/reference/protocol.md, "
            "Versions and changelog)",
        )
    # Sizes first: an oversize list or string is refused before it is compared or echoed in a
    # message.
    oversize = names_size_problem(
        "action_names", request.action_names, len(capabilities.action_names)
    )
    if oversize:
        return Admission.refuse(Refusal.ACTION_NAMES, oversize)
    oversize = names_size_problem("camera_names", request.camera_names, len(capabilities.cameras))
    if oversize:
        return Admission.refuse(Refusal.CAMERAS, oversize)
    oversize = size_problem("task", request.task, MAX_TASK_CHARS)
    if oversize:
        return Admission.refuse(Refusal.TASK, oversize)
    mismatch = action_names_mismatch(capabilities.action_names, request.action_names)
    if mismatch:
        return Admission.refuse(Refusal.ACTION_NAMES, mismatch)
    if request.state_dim != capabilities.state_dim:
        return Admission.refuse(
            Refusal.STATE_DIM,
            f"state dimension differs: policy expects {capabilities.state_dim}, robot sends "
            f"{request.state_dim}",
        )
    cameras = missing_cameras(capabilities.camera_names, request.camera_names)
    if cameras:
        return Admission.refuse(Refusal.CAMERAS, cameras)
    fps_refusal, fps_warning = _fps_check(capabilities, request.fps, strict_fps)
    if fps_refusal:
        return Admission.refuse(Refusal.FPS, fps_refusal)
    pinned = capabilities.pinned_task
    if pinned and request.task and request.task != pinned:
        return Admission.refuse(
            Refusal.TASK,
            f"this server is pinned to task {pinned!r}; the robot asked for {request.task!r}",
        )
    if load.active_sessions >= load.max_sessions:
        return Admission.refuse(
            Refusal.CAPACITY,
            f"the server is full: {load.active_sessions} of {load.max_sessions} sessions in use; "
            "try another replica",
        )

    warnings = [fps_warning] if fps_warning else []
    unread = [name for name in request.camera_names if name not in capabilities.camera_names]
    if unread:
        warnings.append(
            f"cameras {unread} are not read by the policy: the executor leaves them out of its "
            "observations and the server ignores them"
        )
    rtc_enabled = False
    if request.rtc_requested:
        if not capabilities.rtc_supported:
            warnings.append(
                f"RTC requested but {capabilities.policy_type} cannot condition on a prefix; "
                "chunks will be appended without RTC"
            )
        elif not capabilities.rtc_enabled:
            warnings.append(
                "RTC requested but it is disabled on this server (rtc_enabled=false); chunks will "
                "be appended"
            )
        else:
            rtc_enabled = True
    return Admission(
        True, warnings=tuple(warnings), rtc_enabled=rtc_enabled, task=pinned or request.task
    )
