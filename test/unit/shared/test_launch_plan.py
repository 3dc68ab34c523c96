"""The launch wiring (used by launch/*.launch.py and the demo), without ros2 launch."""

from pathlib import Path

import pytest
import yaml

from lerobot_ros import launch_plan
from lerobot_ros.launch_plan import (
    RVIZ_PACKAGE,
    SIM_CAMERA_TOPIC,
    ZENOH_RMW,
    demo_plan,
    exit_problem,
    fleet_plan,
    parse_flag,
    parse_remaps,
    rmw_problem,
    robot_plan,
    ros_args,
    server_namespace_of,
    server_plan,
    share_path,
)
from lerobot_ros.protocol.wire.output_modes import DEFAULT_OUTPUT_MODE, OUTPUT_MODES
from lerobot_ros.sim.description import BASE_LINK
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
from support.paths import REPO


def test_server_plan_defaults_to_rmw_zenoh_and_passes_checkpoint_and_device():
    plan = server_plan("/models/act", device="cuda:1", params_file="/etc/server.yaml")
    (server,) = plan.nodes
    assert (server.executable, server.module, server.name, server.namespace) == (
        "policy_server_node",
        "lerobot_ros.server.node",
        "lerobot",
        "",
    )
    assert server.parameter_files == ("/etc/server.yaml",)
    assert server.parameters == {"checkpoint": "/models/act", "device": "cuda:1"}
    assert plan.environment == {"RMW_IMPLEMENTATION": ZENOH_RMW}
    assert not plan.start_zenoh_router
    assert server_namespace_of(plan) == "/lerobot"


def test_server_plan_namespace_router_and_other_middleware():
    plan = server_plan(
        "ckpt", namespace="gpu0/", start_zenoh_router=True, zenoh_router_config="/cfg/router.json5"
    )
    assert plan.nodes[0].namespace == "/gpu0" and server_namespace_of(plan) == "/gpu0/lerobot"
    assert plan.start_zenoh_router and plan.zenoh_router_config == "/cfg/router.json5"
    fastdds = server_plan("ckpt", rmw_implementation="rmw_fastrtps_cpp").environment
    profile = share_path("config", "fastdds", "large_frames.xml")
    assert fastdds == {
        "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp",
        "FASTDDS_DEFAULT_PROFILES_FILE": profile,
    }
    # One variable, the one the installed Fast DDS reads: both made Fast DDS 3 warn in every node
    # (issue 33).
    assert launch_plan.fastdds_environment(fast_dds_2=lambda: True) == {
        "FASTRTPS_DEFAULT_PROFILES_FILE": profile
    }
    assert robot_plan(rmw_implementation="rmw_fastrtps_cpp").environment == fastdds
    assert server_plan("ckpt", rmw_implementation="").environment == {}
    with pytest.raises(
        ValueError, match="start_zenoh_router needs rmw_implementation 'rmw_zenoh_cpp'"
    ):
        server_plan("ckpt", rmw_implementation="rmw_fastrtps_cpp", start_zenoh_router=True)
    with pytest.raises(ValueError, match="checkpoint is empty"):
        server_plan("")


def test_robot_plan_for_real_hardware_remaps_inputs_and_output():
    plan = robot_plan(
        robot_namespace="left_arm",
        server_namespace="/gpu0/lerobot",
        client_id="left_arm",
        output_mode="joint_trajectory",
        params_file="/etc/left_arm.yaml",
        camera_remaps={"camera/front/image_raw": "/usb_cam/image_raw"},
        joint_states_topic="/left_arm/dynamixel/joint_states",
        command_topic="/left_arm/arm_controller/joint_trajectory",
        extra_parameters={"output_topic": "joint_trajectory_controller/joint_trajectory"},
    )
    (executor,) = plan.nodes
    assert (executor.executable, executor.name, executor.namespace) == (
        "chunk_executor_node",
        "chunk_executor",
        "/left_arm",
    )
    assert executor.parameter_files == ("/etc/left_arm.yaml",)
    assert executor.parameters["server_namespace"] == "/gpu0/lerobot"
    assert executor.parameters["client_id"] == "left_arm"
    assert executor.parameters["output_mode"] == "joint_trajectory"
    assert executor.remappings == (
        ("camera/front/image_raw", "/usb_cam/image_raw"),
        ("joint_states", "/left_arm/dynamixel/joint_states"),
        (
            "joint_trajectory_controller/joint_trajectory",
            "/left_arm/arm_controller/joint_trajectory",
        ),
    )
    assert plan.environment == {"RMW_IMPLEMENTATION": ZENOH_RMW}


@pytest.mark.parametrize("mode", sorted(OUTPUT_MODES))
def test_robot_plan_with_the_simulated_arm_wires_executor_and_sim_together(mode):
    plan = robot_plan(robot_namespace="sim_arm", output_mode=mode, sim=True)
    sim, executor = plan.nodes
    assert sim.executable == "sim_robot_node" and sim.namespace == executor.namespace == "/sim_arm"
    assert (
        sim.parameters["camera_topics"]
        == [SIM_CAMERA_TOPIC]
        == executor.parameters["camera_topics"]
    )
    assert executor.parameters["camera_names"] == [FRONT_CAMERA]
    assert executor.parameters["joint_names"] == list(SO101_JOINT_NAMES)
    assert executor.parameters["output_topic"] == OUTPUT_MODES[mode].sim_topic
    assert executor.parameters["output_mode"] == mode


def test_robot_plan_refuses_unknown_modes_and_unmappable_command_remaps():
    with pytest.raises(ValueError, match="output_mode 'torque' is not one of"):
        robot_plan(output_mode="torque")
    with pytest.raises(
        ValueError, match="command_topic remaps the executor's output topic, and neither"
    ):
        robot_plan(command_topic="/arm/commands")


def test_demo_plan_runs_server_sim_and_executor_against_each_other():
    plan = demo_plan("/cache/act", output_mode="joint_state")
    assert [node.executable for node in plan.nodes] == [
        "policy_server_node",
        "sim_robot_node",
        "chunk_executor_node",
    ]
    executor = plan.nodes[2]
    assert executor.parameters["server_namespace"] == server_namespace_of(plan)
    assert executor.parameters["client_id"] == "sim_arm"
    assert plan.environment == {}  # the demo keeps the caller's middleware


def test_fleet_plan_runs_replicas_under_their_own_namespaces_and_every_robot_lists_them_all():
    plan = fleet_plan(
        "/cache/act",
        servers=2,
        robots=3,
        start_zenoh_router=True,
        rmw_implementation="rmw_zenoh_cpp",
    )
    servers = [node for node in plan.nodes if node.executable == "policy_server_node"]
    executors = [node for node in plan.nodes if node.executable == "chunk_executor_node"]
    assert [f"{node.namespace}/{node.name}" for node in servers] == [
        "/gpu0/lerobot",
        "/gpu1/lerobot",
    ]
    assert [node.namespace for node in executors] == ["/sim_arm_0", "/sim_arm_1", "/sim_arm_2"]
    assert len({node.parameters["client_id"] for node in executors}) == 3
    assert all(
        node.parameters["server_namespaces"] == ["/gpu0/lerobot", "/gpu1/lerobot"]
        for node in executors
    )
    assert sum(node.executable == "sim_robot_node" for node in plan.nodes) == 3
    assert plan.start_zenoh_router  # one router for the machine
    with pytest.raises(ValueError, match="at least one server"):
        fleet_plan("/cache/act", servers=0)


def _replicas_and_executors(plan):
    replicas = [
        f"{node.namespace}/{node.name}"
        for node in plan.nodes
        if node.executable == "policy_server_node"
    ]
    return replicas, [node for node in plan.nodes if node.executable == "chunk_executor_node"]


@pytest.mark.parametrize("servers", [1, 2, 3])
def test_fleet_plan_with_discovery_lets_every_robot_find_exactly_the_replicas_it_starts(servers):
    # Checked with the executor's own parser and matcher (executor.discovery), so the plan and the
    # executor cannot disagree on what the entry means.
    from lerobot_ros.executor.fleet.discovery import (
        HEARTBEAT_TYPE,
        fleet_problem,
        fleet_spec,
        servers_in,
    )
    from lerobot_ros.launch_plan import discovery_entry

    listed = fleet_plan("/ckpt", servers=servers, robots=3)
    discovered = fleet_plan("/ckpt", servers=servers, robots=3, discovery=True)
    replicas, executors = _replicas_and_executors(discovered)
    assert _replicas_and_executors(listed)[0] == replicas
    assert all(
        node.parameters["server_namespaces"] == replicas
        for node in _replicas_and_executors(listed)[1]
    )
    entry = [discovery_entry(replicas)]
    assert all(node.parameters["server_namespaces"] == entry for node in executors)
    # /gpu<i>/lerobot: two or more replicas share only the root, so the whole graph; one is its own
    # prefix.
    assert entry == (["auto"] if servers > 1 else ["auto:/gpu0/lerobot"])
    assert fleet_problem("server_namespaces", entry) is None
    spec = fleet_spec(entry)
    assert spec.discovers and all(spec.matches(namespace) for namespace in replicas)
    # The graph as the executor reads it: each replica's heartbeat, and the robots' own status
    # topics (no server).
    graph = [(f"{namespace}/status", [HEARTBEAT_TYPE]) for namespace in replicas]
    graph += [
        (f"{node.namespace}/{node.name}/status", ["lerobot_ros/msg/ExecutorStatus"])
        for node in executors
    ]
    assert servers_in(graph, spec) == tuple(sorted(replicas))

    # nothing else changes: same nodes, same parameters but server_namespaces
    def without_list(
        plan,
    ):
        return [
            (
                node.name,
                node.namespace,
                {k: v for k, v in node.parameters.items() if k != "server_namespaces"},
            )
            for node in plan.nodes
        ]

    assert (
        without_list(listed) == without_list(discovered)
        and listed.environment == discovered.environment
    )


@pytest.mark.parametrize(
    "namespaces, entry",
    [
        (["/fleet_a/gpu0/lerobot", "/fleet_a/gpu1/lerobot"], "auto:/fleet_a"),
        (["/a/b/x", "/a/b/y", "/a/c"], "auto:/a"),
        # whole segments: /fleet_a would miss /fleet_ab
        (
            ["/fleet_a/gpu0/lerobot", "/fleet_ab/gpu1/lerobot"],
            "auto",
        ),
        (["/gpu0/lerobot", "/gpu1/lerobot"], "auto"),
        (["/gpu0/lerobot"], "auto:/gpu0/lerobot"),
    ],
)
def test_discovery_entry_is_the_narrowest_prefix_the_executor_matches_every_namespace_under(
    namespaces, entry
):
    from lerobot_ros.executor.fleet.discovery import fleet_problem, fleet_spec
    from lerobot_ros.launch_plan import discovery_entry

    assert discovery_entry(namespaces) == entry
    assert fleet_problem("server_namespaces", [entry]) is None
    assert all(fleet_spec([entry]).matches(namespace) for namespace in namespaces)


def test_fleet_launch_file_declares_discovery_off_by_default_and_passes_it_to_the_plan():
    # fleet.launch.py imports launch_actions, which needs launch and launch_ros
    pytest.importorskip("launch_ros")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "fleet_launch", REPO / "launch" / "fleet.launch.py"
    )
    fleet_launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fleet_launch)
    assert fleet_launch.ARGUMENTS["discovery"][0] == "false"
    defaults = {name: default for name, (default, _) in fleet_launch.ARGUMENTS.items()} | {
        "checkpoint": "/ckpt"
    }

    def server_namespaces(discovery: str):
        plan = fleet_launch._plan({**defaults, "discovery": discovery})
        return {
            str(node.parameters["server_namespaces"]) for node in _replicas_and_executors(plan)[1]
        }

    assert server_namespaces("false") == {"['/gpu0/lerobot', '/gpu1/lerobot']"}
    assert server_namespaces("True") == {"['auto']"}
    with pytest.raises(ValueError, match="launch argument discovery"):
        server_namespaces("yes")


def test_ros_arguments_carry_name_namespace_files_parameters_and_remaps():
    plan = robot_plan(
        robot_namespace="arm",
        server_namespace="/lerobot",
        params_file="/p.yaml",
        joint_states_topic="/js",
        extra_parameters={"fps": 50.0},
        rmw_implementation="",
    )
    args = plan.nodes[0].ros_arguments()
    assert args[:5] == ["--ros-args", "-r", "__node:=chunk_executor", "-r", "__ns:=/arm"]
    assert args[args.index("--params-file") + 1] == "/p.yaml"
    assert "fps:=50.0" in args and 'server_namespace:="/lerobot"' in args
    assert args[-2:] == ["-r", "joint_states:=/js"]


def test_ros_args_quote_values_and_rename_the_node():
    assert ros_args(
        {"joint_names": ["a", "b"], "fps": 30.0, "checkpoint": "/x y"}, node_name="srv2"
    ) == [
        "--ros-args",
        "-r",
        "__node:=srv2",
        "-p",
        'joint_names:=["a", "b"]',
        "-p",
        "fps:=30.0",
        "-p",
        'checkpoint:="/x y"',
    ]


def test_plans_combine_and_refuse_conflicting_environments():
    combined = server_plan("ckpt") + robot_plan()
    assert len(combined.nodes) == 2
    with pytest.raises(ValueError, match="RMW_IMPLEMENTATION"):
        server_plan("ckpt") + robot_plan(rmw_implementation="rmw_fastrtps_cpp")


def test_remap_arguments_parse():
    assert parse_remaps("a:=b, c/d:=/e") == {"a": "b", "c/d": "/e"}
    assert parse_remaps("") == {}
    with pytest.raises(ValueError, match="not of the form from:=to"):
        parse_remaps("a=b")


def test_the_shipped_fastdds_profile_is_accepted_by_fastdds_with_a_16_mib_segment():
    """A participant created with the profile: Fast DDS logs XML or transport errors to stderr and
    falls back silently."""
    import os
    import subprocess
    import sys
    import xml.etree.ElementTree as ElementTree

    from lerobot_ros.launch_plan import fastdds_environment

    environment = fastdds_environment()
    namespace = {"dds": "http://www.eprosima.com"}
    root = ElementTree.parse(environment["FASTDDS_DEFAULT_PROFILES_FILE"]).getroot()
    assert root.find(".//dds:transport_descriptor/dds:segment_size", namespace).text == str(
        16 << 20
    )
    assert root.find(".//dds:participant", namespace).get("is_default_profile") == "true"
    script = (
        "import rclpy; rclpy.init(); node = rclpy.create_node('profile_check'); "
        "node.destroy_node(); rclpy.shutdown(); print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **environment, "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    problems = [
        line
        for line in result.stderr.splitlines()
        if "error" in line.lower() or "XMLPARSER" in line
    ]
    assert not problems, problems


def test_robot_plan_leaves_unset_arguments_to_the_params_file():
    (executor,) = robot_plan(params_file="/etc/arm.yaml").nodes
    assert executor.parameter_files == ("/etc/arm.yaml",)
    assert not {"server_namespace", "output_mode", "client_id"} & executor.parameters.keys()
    # The simulated arm must know where the executor commands it, so the mode is set.
    sim, executor = robot_plan(sim=True).nodes
    assert executor.parameters["output_mode"] == DEFAULT_OUTPUT_MODE
    assert executor.parameters["output_topic"] == OUTPUT_MODES[DEFAULT_OUTPUT_MODE].sim_topic


def test_boolean_launch_arguments_are_true_or_false():
    assert parse_flag("sim", "True") is True and parse_flag("sim", "false") is False
    with pytest.raises(ValueError, match="launch argument sim: expected true or false, got 'yes'"):
        parse_flag("sim", "yes")


def test_demo_and_fleet_executors_wait_for_a_server_that_starts_with_them():
    from lerobot_ros.launch_plan import SERVER_START_S

    executors = [
        node
        for node in (demo_plan("/ckpt") + fleet_plan("/ckpt", servers=1, robots=1)).nodes
        if node.executable == "chunk_executor_node"
    ]
    assert [node.parameters["handshake_timeout_s"] for node in executors] == [SERVER_START_S] * 2
    assert (
        demo_plan("/ckpt", executor_parameters={"handshake_timeout_s": 5.0})
        .nodes[2]
        .parameters["handshake_timeout_s"]
        == 5.0
    )


def test_a_launch_lets_the_server_drain_before_escalating_to_sigterm():
    from lerobot_ros.launch_plan import SERVER_STOP_TIMEOUT_S, STOP_TIMEOUT_S
    from lerobot_ros.server.node import DRAIN_TIMEOUT_S

    server, sim, executor = demo_plan("/ckpt").nodes
    assert server.stop_timeout_s == SERVER_STOP_TIMEOUT_S > DRAIN_TIMEOUT_S
    assert sim.stop_timeout_s == executor.stop_timeout_s == STOP_TIMEOUT_S


def test_rviz_opens_in_the_sim_arms_namespace_with_the_shipped_config(monkeypatch):
    monkeypatch.setattr(launch_plan, "package_installed", lambda package: package == RVIZ_PACKAGE)
    plan = demo_plan("ckpt", rviz=True)
    rviz = plan.nodes[-1]
    assert (rviz.package, rviz.executable, rviz.name, rviz.namespace) == (
        RVIZ_PACKAGE,
        "rviz2",
        "rviz",
        "/sim_arm",
    )
    assert (
        rviz.arguments == ("-d", share_path("config", "rviz", "sim_arm.rviz"))
        and Path(rviz.arguments[1]).is_file()
    )
    assert plan.notices == ()
    assert [node.executable for node in demo_plan("ckpt").nodes] == [
        node.executable for node in plan.nodes[:-1]
    ]
    assert robot_plan(robot_namespace="arm", sim=True, rviz=True).nodes[-1].namespace == "/arm"
    with pytest.raises(ValueError, match="rviz shows the simulated arm .* it needs sim"):
        robot_plan(rviz=True)


def test_without_rviz2_the_plan_says_so_and_starts_the_rest(monkeypatch):
    monkeypatch.setattr(launch_plan, "package_installed", lambda package: False)
    plan = demo_plan("ckpt", rviz=True)
    assert plan.nodes == demo_plan("ckpt").nodes
    assert plan.notices == (
        "rviz:=true, but rviz2 is not installed (not in the ament index): starting without it",
    )


def test_the_rviz_config_shows_the_sims_description_frames_and_camera():
    config = yaml.safe_load(Path(share_path("config", "rviz", "sim_arm.rviz")).read_text())[
        "Visualization Manager"
    ]
    assert config["Global Options"]["Fixed Frame"] == BASE_LINK
    displays = {display["Class"].split("/")[-1]: display for display in config["Displays"]}
    description = displays["RobotModel"]["Description Topic"]
    assert (description["Value"], description["Durability Policy"]) == (
        "robot_description",
        "Transient Local",
    )
    assert displays["Image"]["Topic"]["Value"] == SIM_CAMERA_TOPIC
    assert displays["TF"]["Enabled"]


def params_file(tmp_path, **values) -> str:
    import yaml

    path = tmp_path / "my_robot.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}))
    return str(path)


def test_robot_plan_honours_the_params_files_output_topic_and_mode(tmp_path):
    # Issue 33: command_topic:= aborted although the params file set output_topic; sim:=true
    # replaced its mode.
    own = params_file(
        tmp_path, output_mode="joint_trajectory", output_topic="arm_controller/joint_trajectory"
    )
    (executor,) = robot_plan(params_file=own, command_topic="/arm/trajectory").nodes
    assert executor.remappings == (("arm_controller/joint_trajectory", "/arm/trajectory"),)
    assert "output_mode" not in executor.parameters
    mode_only = params_file(tmp_path, output_mode="joint_state", output_topic="")
    (executor,) = robot_plan(params_file=mode_only, command_topic="/arm/joints").nodes
    assert executor.remappings == ((OUTPUT_MODES["joint_state"].default_topic, "/arm/joints"),)
    sim, executor = robot_plan(params_file=mode_only, sim=True).nodes
    assert executor.parameters["output_mode"] == "joint_state"
    assert executor.parameters["output_topic"] == OUTPUT_MODES["joint_state"].sim_topic
    # The shipped robot.yaml names a mode: its default topic is what command_topic remaps.
    (executor,) = robot_plan(
        params_file=str(REPO / "config" / "robot.yaml"), command_topic="/c"
    ).nodes
    assert executor.remappings == ((OUTPUT_MODES[DEFAULT_OUTPUT_MODE].default_topic, "/c"),)
    with pytest.raises(ValueError, match="cannot be read as a ROS parameter file"):
        robot_plan(params_file=str(tmp_path / "missing.yaml"), sim=True)


def test_robot_plan_takes_a_zenoh_session_config_and_router(tmp_path):
    config = tmp_path / "session.json5"
    config.write_text("{}")
    plan = robot_plan(zenoh_session_config=str(config), zenoh_router="tcp/10.0.0.5:7447")
    assert plan.environment["ZENOH_SESSION_CONFIG_URI"] == str(config)
    assert plan.environment["ZENOH_CONFIG_OVERRIDE"] == 'connect/endpoints=["tcp/10.0.0.5:7447"]'
    with pytest.raises(ValueError, match="need rmw_implementation 'rmw_zenoh_cpp'"):
        robot_plan(zenoh_router="tcp/10.0.0.5:7447", rmw_implementation="rmw_fastrtps_cpp")
    with pytest.raises(ValueError, match="expected an endpoint like tcp/"):
        robot_plan(zenoh_router="10.0.0.5")
    with pytest.raises(ValueError, match="is not a file"):
        robot_plan(zenoh_session_config=str(tmp_path / "none.json5"))


def test_a_missing_middleware_is_refused_with_what_to_do_before_any_node_starts():
    plan = robot_plan(sim=True)
    problem = rmw_problem(plan, installed=lambda package: False)
    assert "rmw_zenoh_cpp is not installed here" in problem
    assert (
        "apt install ros-$ROS_DISTRO-rmw-zenoh-cpp" in problem
        and "rmw_implementation:=rmw_fastrtps_cpp" in problem
    )
    assert rmw_problem(plan, installed=lambda package: True) is None
    assert (
        rmw_problem(robot_plan(sim=True, rmw_implementation=""), installed=lambda package: False)
        is None
    )


def test_a_node_exiting_with_an_error_fails_the_launch():
    assert "exited with code 1" in exit_problem("policy_server_node-1", 1)
    assert exit_problem("policy_server_node-1", 0) is None
    assert exit_problem("policy_server_node-1", -2) is None  # the launch's own SIGINT
