"""Which nodes a deployment runs, with which parameters, remappings and environment.

The launch files (``launch/*.launch.py``), the demo commands, the evaluation
and the benchmarks all build their node lists here, so the wiring is plain
Python that is unit-tested on machines without ``ros2 launch``. A plan says
*what* to run; ``launch_actions`` turns it into ``launch_ros`` actions,
``processes.start_processes`` into ``python -m`` processes.

Invariant: one wiring for every way of starting the nodes: a node's
``--ros-args`` (``ros_args``) are built here and nowhere else, so a node run
by the demo gets the same name, namespace, parameters and remappings as
under ``ros2 launch``. Which checkpoint a policy name means is
``policy_names``' rule, not this module's: a plan takes a checkpoint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lerobot_ros.executor.fleet.discovery import AUTO
from lerobot_ros.protocol.wire import output_modes
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES

PACKAGE = "lerobot_ros"
ZENOH_RMW = "rmw_zenoh_cpp"
FASTDDS_RMW = "rmw_fastrtps_cpp"
SIM_CAMERA_TOPIC = "camera/front/image_raw"
#: How long the executors of a demo or fleet wait for their server at start-up (its
#: handshake_timeout_s): all start at once, and the server first imports torch, loads and warms up
#: (over a minute on a loaded CPU).
SERVER_START_S = 180.0
#: How long a launch lets a stopping node finish before escalating to SIGTERM (launch's own
#: default).
STOP_TIMEOUT_S = 5.0
#: The server's: its drain may finish the in-flight request for up to 30 s
# (server.node.DRAIN_TIMEOUT_S), then tears down.
SERVER_STOP_TIMEOUT_S = 40.0
RVIZ_PACKAGE = "rviz2"


def ros_args(
    parameters: Mapping[str, Any],
    node_name: str | None = None,
    namespace: str = "",
    parameter_files: Sequence[str] = (),
    remappings: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """``--ros-args`` for a node: name, namespace, parameter files, then parameters
    (which win over the files; values written as YAML), then remappings."""
    args = ["--ros-args"]
    if node_name:
        args += ["-r", f"__node:={node_name}"]
    if namespace:
        args += ["-r", f"__ns:={namespace}"]
    for path in parameter_files:
        args += ["--params-file", path]
    for name, value in parameters.items():
        # JSON is valid YAML; it quotes strings and writes lists as [..].
        args += ["-p", f"{name}:={json.dumps(value)}"]
    for source, target in remappings:
        args += ["-r", f"{source}:={target}"]
    return args


@dataclass(frozen=True)
class NodeSpec:
    """One node: what `launch_ros.actions.Node` needs, and how to run it without launch."""

    executable: str
    module: str  # empty for a node that is not a Python module of this package (rviz2)
    name: str
    namespace: str = ""
    parameter_files: tuple[str, ...] = ()
    parameters: dict = field(default_factory=dict)  # applied after the files: these win
    remappings: tuple[tuple[str, str], ...] = ()
    stop_timeout_s: float = STOP_TIMEOUT_S  # SIGINT to SIGTERM, under launch
    package: str = PACKAGE
    arguments: tuple[str, ...] = ()  # command-line arguments before --ros-args

    def ros_arguments(self) -> list[str]:
        """``--ros-args`` for ``python -m <module>`` or ``ros2 run``: the same wiring as the launch
        files."""
        return ros_args(
            self.parameters,
            self.name,
            _absolute(self.namespace),
            self.parameter_files,
            self.remappings,
        )


@dataclass(frozen=True)
class Plan:
    nodes: tuple[NodeSpec, ...]
    environment: dict = field(default_factory=dict)
    start_zenoh_router: bool = False
    zenoh_router_config: str = ""  # empty: rmw_zenoh's built-in default
    notices: tuple[
        str, ...
    ] = ()  # logged by whoever runs the plan, e.g. an optional tool that is not installed

    def __add__(self, other: Plan) -> Plan:
        clash = {
            k
            for k in self.environment.keys() & other.environment.keys()
            if self.environment[k] != other.environment[k]
        }
        if clash:
            raise ValueError(f"plans disagree on environment variables {sorted(clash)}")
        return Plan(
            self.nodes + other.nodes,
            {**self.environment, **other.environment},
            self.start_zenoh_router or other.start_zenoh_router,
            self.zenoh_router_config or other.zenoh_router_config,
            self.notices + other.notices,
        )


def _absolute(namespace: str) -> str:
    return "/" + namespace.strip("/") if namespace.strip("/") else ""


def fast_dds_2_installed() -> bool:
    """Whether the Fast DDS here is 2.x (libfastrtps; 3.x is libfastdds), from the library
    directories ROS uses."""
    import sys

    prefixes = [*os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep), sys.prefix]
    directories = [Path(prefix) / "lib" for prefix in prefixes if prefix]
    directories += [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    return any(
        next(directory.glob("libfastrtps.so*"), None)
        for directory in directories
        if directory.is_dir()
    )


def fastdds_environment(fast_dds_2=fast_dds_2_installed) -> dict:
    """The shipped Fast DDS profile (16 MiB shared-memory segment, for raw frames), under the
    variable the installed
    Fast DDS reads: 3.x reads FASTDDS_DEFAULT_PROFILES_FILE and warns, in every node, that
    FASTRTPS_... is
    deprecated; 2.x reads only FASTRTPS_DEFAULT_PROFILES_FILE."""
    profile = share_path("config", "fastdds", "large_frames.xml")
    if fast_dds_2():
        return {"FASTRTPS_DEFAULT_PROFILES_FILE": profile}
    return {"FASTDDS_DEFAULT_PROFILES_FILE": profile}


def _environment(rmw_implementation: str) -> dict:
    # An empty middleware keeps whatever the caller's environment selects.
    if not rmw_implementation:
        return {}
    extra = fastdds_environment() if rmw_implementation == FASTDDS_RMW else {}
    return {"RMW_IMPLEMENTATION": rmw_implementation, **extra}


def server_plan(
    checkpoint: str,
    namespace: str = "",
    device: str = "auto",
    params_file: str = "",
    rmw_implementation: str = ZENOH_RMW,
    start_zenoh_router: bool = False,
    zenoh_router_config: str = "",
    extra_parameters: dict | None = None,
) -> Plan:
    """policy_server_node serving ``checkpoint`` (and optionally the rmw_zenoh router)."""
    if not checkpoint:
        raise ValueError("checkpoint is empty: give a checkpoint directory or Hub id")
    if start_zenoh_router and rmw_implementation != ZENOH_RMW:
        raise ValueError(
            f"start_zenoh_router needs rmw_implementation {ZENOH_RMW!r}, not "
            f"{rmw_implementation!r}"
        )
    parameters = {"checkpoint": checkpoint, "device": device, **(extra_parameters or {})}
    server = NodeSpec(
        executable="policy_server_node",
        module="lerobot_ros.server.node",
        name="lerobot",
        namespace=_absolute(namespace),
        parameter_files=(params_file,) if params_file else (),
        parameters=parameters,
        stop_timeout_s=SERVER_STOP_TIMEOUT_S,
    )
    return Plan(
        (server,), _environment(rmw_implementation), start_zenoh_router, zenoh_router_config
    )


def server_namespace_of(plan: Plan) -> str:
    """Where the plan's server answers, e.g. /lerobot or /gpu0/lerobot."""
    server = next(node for node in plan.nodes if node.executable == "policy_server_node")
    return f"{server.namespace}/{server.name}"


def executor_file_parameters(params_file: str) -> dict:
    """chunk_executor's parameters in a ROS parameter file (``/**`` and ``chunk_executor``
    sections); {} without
    one. The launch wires what the file says (output mode and topic); an unreadable file is an
    error naming it."""
    if not params_file:
        return {}
    import yaml

    try:
        document = yaml.safe_load(Path(params_file).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(
            f"params_file {params_file!r} cannot be read as a ROS parameter file: {error}"
        ) from error
    values: dict = {}
    for section in ("/**", "chunk_executor", "/chunk_executor"):
        values.update((document.get(section) or {}).get("ros__parameters") or {})
    return values


def _output_topic(parameters: dict, params_file: str) -> str:
    """The topic the executor publishes on (what ``command_topic`` remaps): set, the file's, or the
    mode's default."""
    if parameters.get("output_topic"):
        return parameters["output_topic"]
    from_file = executor_file_parameters(params_file)
    topic = from_file.get("output_topic")
    mode = parameters.get("output_mode") or from_file.get("output_mode")
    if not topic and mode:
        topic = output_modes.output_mode(mode).default_topic
    if not topic:
        raise ValueError(
            "command_topic remaps the executor's output topic, and neither output_topic nor "
            "output_mode is set "
            f"(params_file {params_file or '(none)'}): set output_topic or output_mode in the "
            "params file, "
            "or pass output_mode:="
        )
    return topic


def robot_plan(
    robot_namespace: str = "",
    server_namespace: str = "",
    client_id: str = "",
    output_mode: str = "",
    params_file: str = "",
    camera_remaps: dict[str, str] | None = None,
    joint_states_topic: str = "",
    command_topic: str = "",
    sim: bool = False,
    rmw_implementation: str = ZENOH_RMW,
    extra_parameters: dict | None = None,
    rviz: bool = False,
    zenoh_session_config: str = "",
    zenoh_router: str = "",
    allow_no_joint_limits: bool = False,
) -> Plan:
    """chunk_executor_node for one robot; with ``sim``, also sim_robot_node wired to it (and with
    ``rviz``, rviz2).

    ``camera_remaps`` maps the executor's camera topics (its ``camera_topics``
    parameter) to the driver's actual topics; ``joint_states_topic`` and
    ``command_topic`` remap the state input and the command output.
    An empty ``server_namespace``, ``output_mode`` or ``client_id`` sets
    nothing, so the params file's value (or the node's default) stays; the
    simulated arm needs to know the mode, so with ``sim`` an empty mode is
    the default one.
    """
    if rviz and not sim:
        raise ValueError(
            "rviz shows the simulated arm (its robot_description and /tf): it needs sim"
        )
    namespace = _absolute(robot_namespace)
    if sim and not output_mode:
        # The simulated arm must know the mode: the params file's, else the default (never silently
        # replaced).
        output_mode = (
            executor_file_parameters(params_file).get("output_mode")
            or output_modes.DEFAULT_OUTPUT_MODE
        )
    parameters: dict = {}
    for name, value in (
        ("server_namespace", server_namespace),
        ("output_mode", output_mode),
        ("client_id", client_id),
    ):
        if value:
            parameters[name] = value
    if output_mode:
        mode = output_modes.output_mode(output_mode)
    nodes = []
    if sim:
        # The simulated arm matches the default policy: SO-101 joints, one front camera.
        parameters.update(
            joint_names=list(SO101_JOINT_NAMES),
            camera_names=[FRONT_CAMERA],
            camera_topics=[SIM_CAMERA_TOPIC],
            camera_transports=["raw"],
            state_topic="joint_states",
            output_topic=mode.sim_topic,
        )
        nodes.append(
            NodeSpec(
                executable="sim_robot_node",
                module="lerobot_ros.sim.robot_node",
                name="sim_robot",
                namespace=namespace,
                parameters={"camera_topics": [SIM_CAMERA_TOPIC], "camera_transport": "raw"},
            )
        )
    # a real robot: no motion without an envelope (joint_limits.py)
    if not sim and not allow_no_joint_limits:
        parameters["require_joint_limits"] = True
    parameters.update(extra_parameters or {})
    remappings = [(source, target) for source, target in (camera_remaps or {}).items()]
    if joint_states_topic:
        remappings.append((parameters.get("state_topic", "joint_states"), joint_states_topic))
    if command_topic:
        remappings.append((_output_topic(parameters, params_file), command_topic))
    executor = NodeSpec(
        executable="chunk_executor_node",
        module="lerobot_ros.executor.node",
        name="chunk_executor",
        namespace=namespace,
        parameter_files=(params_file,) if params_file else (),
        parameters=parameters,
        remappings=tuple(remappings),
    )
    environment = {
        **_environment(rmw_implementation),
        **zenoh_environment(rmw_implementation, zenoh_session_config, zenoh_router),
    }
    plan = Plan((*nodes, executor), environment)
    return plan + rviz_plan(namespace) if rviz else plan


def zenoh_environment(rmw_implementation: str, session_config: str = "", router: str = "") -> dict:
    """rmw_zenoh's session settings: a config file (``ZENOH_SESSION_CONFIG_URI``) and/or the router
    to connect to
    (``tcp/<host>:7447``, as ``ZENOH_CONFIG_OVERRIDE``); {} when neither is given."""
    if not (session_config or router):
        return {}
    if rmw_implementation != ZENOH_RMW:
        raise ValueError(
            f"zenoh_session_config and zenoh_router need rmw_implementation {ZENOH_RMW!r}, "
            f"not {rmw_implementation!r}"
        )
    environment = {}
    if session_config:
        if not Path(session_config).is_file():
            raise ValueError(f"zenoh_session_config {session_config!r} is not a file")
        environment["ZENOH_SESSION_CONFIG_URI"] = session_config
    if router:
        if "/" not in router or ":" not in router:
            raise ValueError(
                f"zenoh_router: expected an endpoint like tcp/192.168.1.10:7447, got {router!r}"
            )
        environment["ZENOH_CONFIG_OVERRIDE"] = f'connect/endpoints=["{router}"]'
    return environment


def rviz_plan(robot_namespace: str = "") -> Plan:
    """rviz2 showing the simulated arm (``config/rviz/sim_arm.rviz``); a notice instead where rviz2
    is not installed.

    rviz2 runs in the robot's namespace, so the config's relative topics
    (robot_description, the camera) are that robot's; ``/tf`` is global.
    """
    if not package_installed(RVIZ_PACKAGE):
        return Plan(
            (),
            notices=(
                f"rviz:=true, but {RVIZ_PACKAGE} is not installed (not in the ament index): "
                "starting without it",
            ),
        )
    rviz = NodeSpec(
        executable="rviz2",
        module="",
        name="rviz",
        namespace=_absolute(robot_namespace),
        package=RVIZ_PACKAGE,
        arguments=("-d", share_path("config", "rviz", "sim_arm.rviz")),
    )
    return Plan((rviz,))


def demo_plan(
    checkpoint: str,
    output_mode: str = output_modes.DEFAULT_OUTPUT_MODE,
    device: str = "auto",
    rmw_implementation: str = "",
    start_zenoh_router: bool = False,
    server_parameters: dict | None = None,
    executor_parameters: dict | None = None,
    rviz: bool = False,
) -> Plan:
    """Server + simulated robot + executor, talking to each other (with ``rviz``, rviz2 showing the
    arm)."""
    server = server_plan(
        checkpoint,
        device=device,
        rmw_implementation=rmw_implementation,
        start_zenoh_router=start_zenoh_router,
        extra_parameters=server_parameters,
    )
    robot = robot_plan(
        robot_namespace="sim_arm",
        server_namespace=server_namespace_of(server),
        client_id="sim_arm",
        output_mode=output_mode,
        sim=True,
        rmw_implementation=rmw_implementation,
        rviz=rviz,
        extra_parameters={"handshake_timeout_s": SERVER_START_S, **(executor_parameters or {})},
    )
    return server + robot


def fleet_plan(
    checkpoint: str,
    servers: int = 2,
    robots: int = 3,
    output_mode: str = output_modes.DEFAULT_OUTPUT_MODE,
    device: str = "auto",
    rmw_implementation: str = "",
    start_zenoh_router: bool = False,
    server_parameters: dict | None = None,
    executor_parameters: dict | None = None,
    discovery: bool = False,
) -> Plan:
    """A small fleet on one machine: ``servers`` replicas of one policy (/gpu<i>/lerobot) and
    ``robots`` simulated arms (/sim_arm_<j>), each executor listing every replica in order (with
    ``discovery``, finding them on the ROS graph instead: ``server_namespaces``
    [``discovery_entry`` of the replicas]).

    On real hardware each replica runs on its own GPU (``server_plan`` with
    namespace gpu<i> and device cuda:<i>, one per machine or per GPU).
    """
    if servers < 1 or robots < 1:
        raise ValueError(
            f"a fleet needs at least one server and one robot, got {servers} and {robots}"
        )
    replicas = [
        server_plan(
            checkpoint,
            namespace=f"gpu{index}",
            device=device,
            rmw_implementation=rmw_implementation,
            start_zenoh_router=start_zenoh_router and index == 0,
            extra_parameters=server_parameters,
        )
        for index in range(servers)
    ]
    namespaces = [server_namespace_of(replica) for replica in replicas]
    # Two or more /gpu<i>/lerobot share only the root, so discovery is "auto": every server on the
    # ROS domain (one of another model is skipped at its handshake, as in a list); any narrower
    # prefix would miss a replica.
    fleet = [discovery_entry(namespaces)] if discovery else namespaces
    arms = [
        robot_plan(
            robot_namespace=f"sim_arm_{index}",
            server_namespace=namespaces[0],
            client_id=f"sim_arm_{index}",
            output_mode=output_mode,
            sim=True,
            rmw_implementation=rmw_implementation,
            extra_parameters={
                "server_namespaces": fleet,
                "handshake_timeout_s": SERVER_START_S,
                **(executor_parameters or {}),
            },
        )
        for index in range(robots)
    ]
    return sum([*replicas[1:], *arms], replicas[0])


def discovery_entry(namespaces: Sequence[str]) -> str:
    """The ``server_namespaces`` entry that discovers the servers ``namespaces`` and as few others
    as it can:
    ``auto:/<their longest common namespace, whole name segments>``, or ``auto`` when only the root
    is common."""
    common = os.path.commonprefix(
        [[part for part in namespace.split("/") if part] for namespace in namespaces]
    )
    return f"{AUTO}:/{'/'.join(common)}" if common else AUTO


def parse_flag(name: str, text: str) -> bool:
    """A boolean launch argument: ``true`` or ``false`` (any case)."""
    if text.lower() not in ("true", "false"):
        raise ValueError(f"launch argument {name}: expected true or false, got {text!r}")
    return text.lower() == "true"


def parse_remaps(text: str) -> dict[str, str]:
    """``"a:=b, c:=d"`` -> {"a": "b", "c": "d"} (the launch argument form of remaps)."""
    remaps = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        source, separator, target = item.partition(":=")
        if not separator or not source or not target:
            raise ValueError(f"remap {item!r} is not of the form from:=to")
        remaps[source] = target
    return remaps


def package_installed(package: str) -> bool:
    """Whether the ament index (a ROS install or colcon workspace on AMENT_PREFIX_PATH) holds
    ``package``."""
    try:
        from ament_index_python.packages import get_package_prefix

        get_package_prefix(package)
    # OSError: no AMENT_PREFIX_PATH (not a ROS install)
    except (
        ImportError,
        LookupError,
        OSError,
    ):
        return False
    return True


def rmw_problem(plan: Plan, installed=package_installed) -> str | None:
    """Why ``plan``'s middleware cannot start here (checked before any node starts), or None.
    Without it every
    node exits 102 ("Expected RMW implementation identifier of ...") while ``ros2 launch`` returns
    0."""
    rmw = plan.environment.get("RMW_IMPLEMENTATION", "")
    if not rmw or installed(rmw):
        return None
    install = (
        f"apt install ros-$ROS_DISTRO-{rmw.replace('_', '-')}"
        if rmw == ZENOH_RMW
        else f"install {rmw}"
    )
    return (
        f"rmw_implementation {rmw} is not installed here (no {rmw} on AMENT_PREFIX_PATH): "
        f"{install}, or "
        f"pass rmw_implementation:={FASTDDS_RMW} (Fast DDS, in every ROS 2 install and in the "
        "venv "
        "scripts/setup_env.sh makes), or rmw_implementation:= to keep the environment's "
        "RMW_IMPLEMENTATION"
    )


def exit_problem(name: str, returncode: int | None) -> str | None:
    """Why a node's exit fails the launch (it ended with an error code), or None (stopped cleanly,
    or by a signal
    of the launch's own shutdown)."""
    if returncode in (None, 0) or returncode < 0:
        return None
    return f"{name} exited with code {returncode} (see its log above): the launch fails"


def share_path(*parts: str) -> str:
    """A file of this package's share directory (colcon install), or of the source tree.

    Resolved: in a --symlink-install or the dev venv the share files are links
    into the checkout, and Fast DDS loads a profile named by a link and by its
    target twice (its two profile variables), refusing the second copy.
    """
    try:
        from ament_index_python.packages import get_package_share_directory

        return str(Path(get_package_share_directory(PACKAGE), *parts).resolve())
    # OSError: no AMENT_PREFIX_PATH (not a ROS install)
    except (
        ImportError,
        LookupError,
        OSError,
    ):
        return str(Path(__file__).resolve().parents[1].joinpath(*parts))
