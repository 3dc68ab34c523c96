"""What a robot must match to be served by a policy: the session contract.

Invariant protected here: chunk columns map to motors by order, so a robot is
only ever served when its ordered action names equal the policy's, and every
refusal says what was expected and what arrived. Plain Python: used by the
server (at session open) and by the torch-free executor (at handshake).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: The interface version this package speaks: msg/Observation.msg's CURRENT_SCHEMA_VERSION, kept
#: here too so plain-Python code (launch plans, admission) can read it without message packages;
#: test_contract.py ties the two.
SCHEMA_VERSION = 4
#: A client id becomes one ROS name segment of the data plane topics.
CLIENT_ID_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
CLIENT_ID_MAX_LENGTH = 64
#: Size bounds of what a robot may declare or send (the defaults of
#: ``data_plane.RequestLimits``). Far above any real robot (a VLA task is a
#: sentence; an arm has tens of joints), low enough that an oversize request
#: is refused before it is compared, echoed, decoded or logged.
MAX_TASK_CHARS = 2048
MAX_NAME_CHARS = 256  # one action, joint or camera name
MAX_NAMES = 256  # action names or cameras in one declaration
MAX_ID_CHARS = 128  # a session id (the server makes 16 hex digits)
MAX_IMAGE_BYTES = 8 << 20  # one camera frame as it arrives, compressed or raw
MAX_IMAGE_PIXELS = 4096 * 4096  # what a compressed frame may declare before it is decoded (16 MP)
MAX_STATE_DIM = 4096
MAX_PREFIX_STEPS = 1024  # RTC prefix rows


@dataclass(frozen=True)
class CameraSpec:
    """A camera the policy needs, with the resolution it was trained at."""

    name: str
    height: int
    width: int


@dataclass(frozen=True)
class ServerCapabilities:
    """The model one server process serves and the contract it imposes.

    Mirrors ``lerobot_ros/msg/ServerCapabilities``; ``lerobot_ros.protocol.wire``
    converts between the two.
    """

    model_id: str
    model_fingerprint: str
    policy_type: str
    action_names: tuple[str, ...]
    state_dim: int
    cameras: tuple[CameraSpec, ...]
    chunk_size: int
    model_revision: str = ""
    serving_mode: str = "shared"
    device: str = "cpu"
    dtype: str = "float32"
    state_names: tuple[str, ...] = ()
    trained_fps: float = 0.0
    rtc_supported: bool = False
    rtc_enabled: bool = False
    rtc_execution_horizon: int = 0
    schema_version_min: int = SCHEMA_VERSION
    schema_version_max: int = SCHEMA_VERSION
    pinned_task: str = ""

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(camera.name for camera in self.cameras)

    @property
    def camera_sizes(self) -> dict[str, tuple[int, int]]:
        """(height, width) each camera is fed to the policy at, by name."""
        return {camera.name: (camera.height, camera.width) for camera in self.cameras}


@dataclass(frozen=True)
class OpenRequest:
    """What a robot declares when it opens a session (OpenSession.Request)."""

    client_id: str
    schema_version: int
    action_names: tuple[str, ...]
    state_dim: int
    camera_names: tuple[str, ...]
    fps: float
    task: str = ""
    rtc_requested: bool = False
    # A warm standby session: the robot's failover place on this replica (OpenSession.srv,
    # server/sessions.py).
    standby: bool = False


@dataclass(frozen=True)
class ContractCheck:
    """Outcome of checking a robot against a policy's contract."""

    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        return "; ".join(self.problems)


def action_names_mismatch(
    expected: tuple[str, ...] | list[str], got: tuple[str, ...] | list[str]
) -> str | None:
    """Explain why ``got`` is not exactly ``expected`` (order matters), or None."""
    expected, got = list(expected), list(got)
    if expected == got:
        return None
    if sorted(expected) == sorted(got):
        first = next(i for i, (e, g) in enumerate(zip(expected, got, strict=False)) if e != g)
        detail = (
            f"same names in a different order (first difference at index {first}: expected "
            f"{expected[first]!r}, got {got[first]!r})"
        )
    elif len(expected) != len(got):
        detail = f"{len(expected)} names expected, {len(got)} arrived"
    else:
        missing = [name for name in expected if name not in got]
        unexpected = [name for name in got if name not in expected]
        detail = f"missing {missing}, unexpected {unexpected}"
    return f"action names differ: {detail}; policy expects {expected}, robot sent {got}"


def missing_cameras(
    expected: tuple[str, ...] | list[str], provided: tuple[str, ...] | list[str]
) -> str | None:
    """Explain which expected cameras the robot does not provide, or None."""
    missing = [name for name in expected if name not in provided]
    if not missing:
        return None
    return (
        f"cameras missing: {missing}; policy expects {list(expected)}, robot provides "
        f"{list(provided)}"
    )


def check_robot(
    capabilities: ServerCapabilities,
    action_names: tuple[str, ...] | list[str],
    camera_names: tuple[str, ...] | list[str] | None = None,
    state_dim: int | None = None,
) -> ContractCheck:
    """Check what a robot declares against the policy; every problem is reported.

    ``camera_names`` and ``state_dim`` are checked only when given.
    """
    problems = []
    mismatch = action_names_mismatch(capabilities.action_names, action_names)
    if mismatch:
        problems.append(mismatch)
    if camera_names is not None:
        cameras = missing_cameras(capabilities.camera_names, camera_names)
        if cameras:
            problems.append(cameras)
    if state_dim is not None and state_dim != capabilities.state_dim:
        problems.append(
            f"state dimension differs: policy expects {capabilities.state_dim}, robot sends "
            f"{state_dim}"
        )
    return ContractCheck(tuple(problems))


def client_id_problem(client_id: str) -> str | None:
    """Why ``client_id`` cannot name a data plane topic segment, or None."""
    if not client_id:
        return "client_id is empty; expected a name like 'so101_left'"
    if len(client_id) > CLIENT_ID_MAX_LENGTH:
        return (
            f"client_id is {len(client_id)} characters long; at most {CLIENT_ID_MAX_LENGTH} "
            "are allowed"
        )
    if not CLIENT_ID_PATTERN.match(client_id):
        return (
            f"client_id {client_id!r} is not a valid ROS name segment: expected letters, digits "
            "and "
            "underscores, starting with a letter"
        )
    return None


def size_problem(what: str, value: str, limit: int) -> str | None:
    """Why the string ``value`` is too long to accept, or None (the value itself is not echoed)."""
    if len(value) <= limit:
        return None
    return f"{what} is {len(value)} characters long; at most {limit} are accepted"


def truncated(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, saying its full length when cut."""
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} characters)"


def shown(value: str, limit: int = MAX_ID_CHARS) -> str:
    """``repr(value)`` for a message or a log line, cut at ``limit`` characters with the full
    length said."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}...({len(value)} characters)"


def names_size_problem(
    what: str, names: tuple[str, ...] | list[str], expected_count: int | None = None
) -> str | None:
    """Why a list of names is too large to accept, or None; checked before the names are compared
    or echoed."""
    if len(names) > MAX_NAMES:
        expected = f" (the policy expects {expected_count})" if expected_count is not None else ""
        return f"{what} holds {len(names)} names; at most {MAX_NAMES} are accepted{expected}"
    for index, name in enumerate(names):
        problem = size_problem(f"{what}[{index}]", name, MAX_NAME_CHARS)
        if problem:
            return problem
    return None


def sanitize_client_id(name: str) -> str:
    """Turn an arbitrary robot name (host name, namespace) into a valid client id."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name.strip("/")).strip("_") or "robot"
    if not cleaned[0].isalpha():
        cleaned = "r_" + cleaned
    return cleaned[:CLIENT_ID_MAX_LENGTH]
