"""The package's metadata, build files and configs agree with its code."""

import importlib
import importlib.metadata
import importlib.util
import json
import re
import xml.etree.ElementTree as ET

import pytest
import yaml

from support.paths import REPO

INTERFACES = (
    sorted((REPO / "msg").glob("*.msg"))
    + sorted((REPO / "srv").glob("*.srv"))
    + sorted((REPO / "action").glob("*.action"))
)


def test_package_xml_is_format_3_and_declares_every_real_dependency():
    root = ET.parse(REPO / "package.xml").getroot()
    assert root.get("format") == "3"
    assert root.findtext("name") == "lerobot_ros"
    declared = {element.tag: set() for element in root}
    for element in root:
        declared[element.tag].add(element.text)
    depends = declared.get("depend", set())
    build = declared.get("buildtool_depend", set()) | depends
    run = declared.get("exec_depend", set()) | depends
    assert {"ament_cmake", "rosidl_default_generators"} <= build
    assert {"builtin_interfaces", "std_msgs", "sensor_msgs", "action_msgs"} <= depends
    assert {
        "rosidl_default_runtime",
        "rclpy",
        "std_srvs",
        "trajectory_msgs",
        "diagnostic_msgs",
        "launch",
        "launch_ros",
        "rmw_zenoh_cpp",
        "python3-numpy",
        "python3-opencv",
        "python3-msgpack",
        "python3-yaml",
    } <= run
    assert "python3-pytest" in declared.get("test_depend", set())
    assert "rosidl_interface_packages" in declared.get("member_of_group", set())
    assert root.find("export/build_type").text == "ament_cmake"


def test_cmake_generates_exactly_the_interface_files_in_the_tree():
    cmake = (REPO / "CMakeLists.txt").read_text()
    listed = sorted(re.findall(r'"((?:msg|srv|action)/\w+\.(?:msg|srv|action))"', cmake))
    assert listed == sorted(str(path.relative_to(REPO)) for path in INTERFACES)


@pytest.mark.parametrize("path", INTERFACES, ids=lambda path: path.name)
def test_every_interface_is_generated_and_importable(path):
    module = importlib.import_module(f"lerobot_ros.{path.suffix[1:]}")
    interface = getattr(module, path.stem)
    if path.suffix == ".srv":
        interface.Request(), interface.Response()
    elif path.suffix == ".action":
        interface.Goal(), interface.Result(), interface.Feedback()
    else:
        interface()


@pytest.mark.parametrize("path", INTERFACES, ids=lambda path: path.name)
def test_every_interface_field_is_documented(path):
    """Every block of declarations (lines between blank lines) opens with a comment."""
    blocks = re.split(r"\n\s*\n|\n---\n", path.read_text())
    undocumented = [
        block.strip().splitlines()[0]
        for block in blocks
        if block.strip() and not block.strip().startswith("#")
    ]
    assert not undocumented, f"{path.name}: blocks without a comment: {undocumented}"


def config_parameters(name: str) -> dict:
    document = yaml.safe_load((REPO / "config" / name).read_text())
    return document["/**"]["ros__parameters"]


@pytest.mark.parametrize(
    ("config", "module"),
    [
        ("server.yaml", "lerobot_ros.server.settings"),
        ("robot.yaml", "lerobot_ros.executor.settings"),
        ("sim_robot.yaml", "lerobot_ros.sim.settings"),
        ("episode_recorder.yaml", "lerobot_ros.recording.settings"),
    ],
)
def test_config_file_lists_every_parameter_with_its_default(config, module):
    table = importlib.import_module(module).PARAMETERS
    assert config_parameters(config) == {parameter.name: parameter.default for parameter in table}


def test_console_scripts_resolve_to_the_node_mains():
    scripts = {
        entry.name: entry
        for entry in importlib.metadata.entry_points(group="console_scripts")
        if entry.value.startswith("lerobot_ros.")
    }
    assert set(scripts) == {
        "policy_server_node",
        "chunk_executor_node",
        "sim_robot_node",
        "episode_recorder_node",
    }
    for name, entry in scripts.items():
        assert callable(entry.load())
        # colcon installs bin/<name>, which must call the same function.
        module, function = entry.value.split(":")
        assert f"from {module} import {function}" in (REPO / "bin" / name).read_text()


@pytest.mark.parametrize(
    "path", sorted((REPO / "launch").glob("*.launch.py")), ids=lambda path: path.name
)
def test_launch_files_compile_and_build_their_nodes_from_the_launch_plan(path):
    # They run under `ros2 launch` in test/tools (where the tools are installed);
    # everywhere they must parse, and all wiring must come from
    # lerobot_ros.launch_plan (tested in test_launch_plan).
    source = path.read_text()
    compile(source, str(path), "exec")
    assert "return launch_description(ARGUMENTS, _plan)" in source
    assert re.search(
        r"def _plan\(value: dict\[str, str\]\):\n    return (server|robot|demo|fleet)_plan\(",
        source,
    )
    assert "Node(" not in source, "nodes are declared in launch_plan, not in launch files"


def test_every_planned_executable_is_installed():
    from lerobot_ros import launch_plan

    plan = launch_plan.demo_plan("ckpt") + launch_plan.server_plan("ckpt", namespace="other")
    for node in plan.nodes:
        assert (REPO / "bin" / node.executable).is_file(), node.executable
        assert importlib.util.find_spec(node.module) is not None, node.module


@pytest.mark.parametrize(
    "module, page",
    [
        ("lerobot_ros.server.settings", "policy_server_node.md"),
        ("lerobot_ros.executor.settings", "chunk_executor_node.md"),
        ("lerobot_ros.sim.settings", "sim_robot_node.md"),
        ("lerobot_ros.recording.settings", "episode_recorder_node.md"),
    ],
)
def test_node_page_parameter_tables_match_the_declarations(module, page):
    # Each node's parameter table is in its page of the node reference,
    # docs/reference/nodes/<node>.md.
    document = (REPO / "docs" / "reference" / "nodes" / page).read_text()
    table = importlib.import_module(module).PARAMETERS
    for parameter in table:
        settable = "*runtime:* " if parameter.runtime else ""  # settable while the node runs
        row = (
            f"| `{parameter.name}` | `{json.dumps(parameter.default)}` | "
            f"{settable}{parameter.description} |"
        )
        assert row in document, f"docs/reference/nodes/{page} lacks or misstates the row: {row}"
