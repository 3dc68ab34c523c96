"""Security: no code-executing deserialisation anywhere in the package,
oversize service requests refused by a real server that keeps serving, and
client ids that could not name a ROS topic segment refused.

Covered elsewhere and only referenced in the figures recorded here:
oversize observations (frames, task, ids, camera lists) cross-process in
test_bad_input_properties.py; the shipped Zenoh configs (mTLS on both
routers, a default-deny ACL that confines each robot to its own data plane,
parsed by Zenoh's own parser) in test_zenoh_configs.py; 'bad-id' refused by
a real server in test_server_sessions.py.
"""

from __future__ import annotations

import ast
import re
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol import names
from lerobot_ros.protocol.contract import CLIENT_ID_PATTERN, SCHEMA_VERSION, OpenRequest
from lerobot_ros.server.sessions.open_checks import Refusal, ServerLoad, admit
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
from lerobot_ros.srv import CloseSession, OpenSession, ResetEpisode
from support.paths import REPO
from support.reliability_log import record
from support.robot_client import RobotClient, call

CATEGORY = "security"
PACKAGE = REPO / "lerobot_ros"

# ------------------------------------------------------------------ AST scan

FORBIDDEN_MODULES = {
    "pickle",
    "cPickle",
    "_pickle",
    "marshal",
    "dill",
    "cloudpickle",
    "shelve",
    "jsonpickle",
}
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__"}
#: (path relative to the repository, what) -> why it is safe. Empty today; an
#: entry here must say why the data it touches can never come off the wire.
ALLOWED: dict[tuple[str, str], str] = {}


def _keyword(call_node: ast.Call, name: str):
    return next((keyword.value for keyword in call_node.keywords if keyword.arg == name), None)


def _is_true(node) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def unsafe_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for every construct that can execute code from data."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {alias.name}")
                for alias in node.names
                if alias.name.split(".")[0] in FORBIDDEN_MODULES
            ]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] in FORBIDDEN_MODULES
        ):
            found.append((node.lineno, f"from {node.module} import"))
        elif isinstance(node, ast.ImportFrom) and node.module == "yaml":
            found += [
                (node.lineno, f"from yaml import {alias.name}")
                for alias in node.names
                if alias.name
                in (
                    "load",
                    "unsafe_load",
                    "full_load",
                    "load_all",
                    "unsafe_load_all",
                    "Loader",
                    "UnsafeLoader",
                )
            ]
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_BUILTINS:
                found.append((node.lineno, f"{node.func.id}()"))
            elif name in ("builtins.eval", "builtins.exec"):
                found.append((node.lineno, f"{name}()"))
            elif name.endswith("yaml.load"):
                loader = _keyword(node, "Loader") or (node.args[1] if len(node.args) > 1 else None)
                if loader is None or not _dotted(loader).endswith(("SafeLoader", "CSafeLoader")):
                    found.append((node.lineno, "yaml.load without SafeLoader"))
            elif name.endswith(
                ("yaml.unsafe_load", "yaml.full_load", "yaml.load_all", "yaml.unsafe_load_all")
            ):
                found.append((node.lineno, f"{name}()"))
            elif (
                name.split(".")[-1] in ("load", "loads")
                and name.split(".")[0] in ("np", "numpy")
                and _is_true(_keyword(node, "allow_pickle"))
            ):
                found.append((node.lineno, f"{name}(allow_pickle=True)"))
            elif name in ("torch.load",) and not _is_true(_keyword(node, "weights_only")):
                found.append((node.lineno, "torch.load without weights_only=True"))
            elif name.endswith("read_pickle") or name.endswith("from_pickle"):
                found.append((node.lineno, f"{name}()"))
    return found


UNSAFE_SAMPLES = {
    "import pickle": "import pickle\n",
    "from marshal import loads": "from marshal import loads\n",
    "import dill": "import dill as d\n",
    "import cloudpickle": "import cloudpickle\n",
    "import shelve": "import shelve\n",
    "eval": "x = eval(data)\n",
    "exec": "exec(data)\n",
    "compile": "code = compile(data, 'x', 'exec')\n",
    "yaml.load": "import yaml\nyaml.load(text)\n",
    "yaml.load Loader=yaml.Loader": "import yaml\nyaml.load(text, Loader=yaml.Loader)\n",
    "yaml.unsafe_load": "import yaml\nyaml.unsafe_load(text)\n",
    "from yaml import load": "from yaml import load\nload(text)\n",
    "np.load allow_pickle": "import numpy as np\nnp.load(path, allow_pickle=True)\n",
    "torch.load": "import torch\ntorch.load(path)\n",
    "torch.load weights_only=False": "import torch\ntorch.load(path, weights_only=False)\n",
}
SAFE_SAMPLES = (
    "import yaml\nyaml.load(text, Loader=yaml.SafeLoader)\nyaml.safe_load(text)\n"
    "import numpy as np\nnp.load(path)\nnp.load(path, allow_pickle=False)\n"
    "import torch\ntorch.load(path, weights_only=True)\n"
    "policy.eval()\npattern = re.compile('x')\n"
)


@pytest.mark.parametrize("construct", list(UNSAFE_SAMPLES))
def test_the_scanner_finds_each_unsafe_construct(construct):
    assert unsafe_uses(UNSAFE_SAMPLES[construct]), f"the scan misses {construct!r}"


def test_the_scanner_leaves_safe_uses_alone():
    assert unsafe_uses(SAFE_SAMPLES) == []


def test_the_package_has_no_pickle_marshal_or_eval_path():
    files = sorted(PACKAGE.rglob("*.py"))
    found = []
    for path in files:
        relative = str(path.relative_to(REPO))
        found += [
            (relative, line, what)
            for line, what in unsafe_uses(path.read_text())
            if (relative, what) not in ALLOWED
        ]
    record(
        CATEGORY,
        "no pickle/marshal/eval/unsafe yaml/numpy/torch loading in lerobot_ros/ (AST scan)",
        tried=len(files),
        survived=len(files) - len({f for f, *_ in found}),
        lost=len(found),
        constructs_checked=len(UNSAFE_SAMPLES),
        allowed=len(ALLOWED),
    )
    assert len(files) > 30, "the scan did not find the package"
    assert found == [], found


# --------------------------------------------------- invalid client ids (admission)


def _capabilities():
    from lerobot_ros.protocol.contract import CameraSpec, ServerCapabilities

    return ServerCapabilities(
        model_id="m",
        model_fingerprint="f" * 16,
        policy_type="act",
        action_names=tuple(SO101_JOINT_NAMES),
        state_dim=6,
        cameras=(CameraSpec(FRONT_CAMERA, 96, 128),),
        chunk_size=50,
        trained_fps=30.0,
    )


def _request(**overrides) -> OpenRequest:
    values = dict(
        client_id="arm",
        schema_version=SCHEMA_VERSION,
        action_names=tuple(SO101_JOINT_NAMES),
        state_dim=6,
        camera_names=(FRONT_CAMERA,),
        fps=30.0,
    )
    values.update(overrides)
    return OpenRequest(**values)


ROOM = ServerLoad(ready=True, draining=False, active_sessions=0, max_sessions=8)


def test_a_client_id_is_accepted_only_when_it_makes_a_valid_ros_topic():
    """Every accepted id names valid topics (checked by rclpy's own validator);
    every refused one is refused as a bad client id, with a message that says why."""
    from rclpy.exceptions import InvalidTopicNameException
    from rclpy.validate_full_topic_name import validate_full_topic_name

    capabilities = _capabilities()
    tally = {"tried": 0, "survived": 0, "refused": 0}

    @settings(
        max_examples=300,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.one_of(
            st.text(max_size=80),
            st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,70}", fullmatch=True),
            st.sampled_from(
                [
                    "",
                    "a/b",
                    "../x",
                    "a b",
                    "1abc",
                    "_x",
                    "a-b",
                    "ä",
                    "a" * 65,
                    "~x",
                    "a{b}",
                    "a__b",
                ]
            ),
        )
    )
    def checked(client_id):
        tally["tried"] += 1
        admission = admit(capabilities, _request(client_id=client_id), ROOM)
        if admission.accepted:
            topics_valid = True
            for topic in (names.observation_topic(client_id), names.action_chunk_topic(client_id)):
                try:
                    validate_full_topic_name("/lerobot/" + topic)
                except InvalidTopicNameException:
                    topics_valid = False
            ok = topics_valid and len(client_id) <= 64
        else:
            tally["refused"] += 1
            ok = admission.refusal is Refusal.BAD_CLIENT_ID and "client_id" in admission.message
            ok = ok and len(admission.message) < 300
        tally["survived"] += ok
        assert ok, (client_id, admission)
        assert admission.accepted == bool(
            CLIENT_ID_PATTERN.match(client_id) and len(client_id) <= 64
        )

    try:
        checked()
    finally:
        record(
            CATEGORY,
            "client ids that are not one valid ROS name segment (admission, rclpy's validator)",
            tried=tally["tried"],
            survived=tally["survived"],
            lost=tally["tried"] - tally["survived"],
            refused=tally["refused"],
            cross_process="test_server_sessions.py::test_bad_client_id_is_refused_not_crashed_on "
            "and test_oversize_and_invalid_service_requests_are_refused_by_a_real_server",
        )


@pytest.mark.parametrize(
    ("overrides", "refusal", "expected"),
    [
        (
            dict(action_names=tuple(f"j{i}" for i in range(100_000))),
            Refusal.ACTION_NAMES,
            "action_names holds 100000 names; at most 256 are accepted (the policy expects 6)",
        ),
        (
            dict(action_names=("x" * 10_000, *SO101_JOINT_NAMES[1:])),
            Refusal.ACTION_NAMES,
            "action_names[0] is 10000 characters long; at most 256",
        ),
        (
            dict(camera_names=tuple(f"c{i}" for i in range(5000))),
            Refusal.CAMERAS,
            "camera_names holds 5000 names; at most 256",
        ),
        (
            dict(camera_names=("c" * 300,)),
            Refusal.CAMERAS,
            "camera_names[0] is 300 characters long",
        ),
        (dict(task="t" * 100_000), Refusal.TASK, "task is 100000 characters long; at most 2048"),
        (
            dict(client_id="a" * 100_000),
            Refusal.BAD_CLIENT_ID,
            "client_id is 100000 characters long; at most 64",
        ),
    ],
)
def test_oversize_open_session_fields_are_refused_before_they_are_compared_or_echoed(
    overrides, refusal, expected
):
    admission = admit(_capabilities(), _request(**overrides), ROOM)
    assert not admission.accepted and admission.refusal is refusal
    assert expected in admission.message and len(admission.message) < 300, admission.message[:500]


def test_shown_bounds_what_a_message_or_log_line_echoes():
    from lerobot_ros.protocol.contract import MAX_ID_CHARS, shown

    assert shown("arm_1") == "'arm_1'"
    long = shown("x" * 1_000_000)
    assert long.endswith("...(1000000 characters)") and len(long) < MAX_ID_CHARS + 40


# ----------------------------------------------------- against a real server


def _service(node, kind, name, request, namespace="/lerobot"):
    client = node.create_client(kind, f"{namespace}/{name}")
    try:
        started = time.monotonic()
        response = call(node, client, request, timeout_s=30)
        return response, time.monotonic() - started
    finally:
        node.destroy_client(client)


# characters or list entries: far beyond every bound, small enough for a 2-core CI run
HUGE = 200_000


def _open(client_id="sec_arm", **overrides) -> OpenSession.Request:
    request = OpenSession.Request(
        client_id=client_id,
        schema_version=SCHEMA_VERSION,
        action_names=list(SO101_JOINT_NAMES),
        state_dim=6,
        camera_names=[FRONT_CAMERA],
        fps=30.0,
    )
    for name, value in overrides.items():
        setattr(request, name, value)
    return request


OPEN_CASES = {
    "huge client id": (
        _open("a" * HUGE),
        OpenSession.Response.REFUSAL_BAD_CLIENT_ID,
        f"client_id is {HUGE} characters long",
    ),
    "huge task": (
        _open(task="t" * HUGE),
        OpenSession.Response.REFUSAL_TASK,
        f"task is {HUGE} characters long",
    ),
    "huge action name list": (
        _open(action_names=[f"j{i}" for i in range(HUGE // 10)]),
        OpenSession.Response.REFUSAL_ACTION_NAMES,
        f"action_names holds {HUGE // 10} names",
    ),
    "huge action name": (
        _open(action_names=["j" * HUGE, *SO101_JOINT_NAMES[1:]]),
        OpenSession.Response.REFUSAL_ACTION_NAMES,
        f"action_names[0] is {HUGE} characters long",
    ),
    "huge camera list": (
        _open(camera_names=[f"c{i}" for i in range(HUGE // 10)]),
        OpenSession.Response.REFUSAL_CAMERAS,
        f"camera_names holds {HUGE // 10} names",
    ),
    "client id with a slash": (
        _open("arm/../other"),
        OpenSession.Response.REFUSAL_BAD_CLIENT_ID,
        "not a valid ROS name segment",
    ),
    "client id with a space": (
        _open("arm one"),
        OpenSession.Response.REFUSAL_BAD_CLIENT_ID,
        "not a valid ROS name segment",
    ),
    "client id starting with a digit": (
        _open("1arm"),
        OpenSession.Response.REFUSAL_BAD_CLIENT_ID,
        "not a valid ROS name segment",
    ),
    "client id with a wildcard": (
        _open("arm_*"),
        OpenSession.Response.REFUSAL_BAD_CLIENT_ID,
        "not a valid ROS name segment",
    ),
    "empty client id": (
        _open(""),
        OpenSession.Response.REFUSAL_BAD_CLIENT_ID,
        "client_id is empty",
    ),
}


def test_oversize_and_invalid_service_requests_are_refused_by_a_real_server(
    policy_server, ros_node
):
    refused, problems = 0, []
    for case, (request, refusal, expected) in OPEN_CASES.items():
        response, seconds = _service(ros_node, OpenSession, "open_session", request)
        ok = (
            not response.accepted
            and response.refusal == refusal
            and expected in response.message
            and len(response.message) < 1000
            and policy_server.process.poll() is None
        )
        refused += ok
        if not ok:
            problems.append((case, response.accepted, response.refusal, response.message[:300]))
    record(
        CATEGORY,
        "OpenSession with oversize strings/lists or invalid client ids (real server)",
        tried=len(OPEN_CASES),
        survived=refused,
        lost=len(OPEN_CASES) - refused,
        cases=list(OPEN_CASES),
    )
    assert problems == [], problems

    huge = "s" * HUGE
    answers = []
    for kind, name, request in (
        (CloseSession, "close_session", CloseSession.Request(client_id=huge, session_id=huge)),
        (
            ResetEpisode,
            "reset_episode",
            ResetEpisode.Request(client_id=huge, session_id=huge, episode=3),
        ),
        (
            CloseSession,
            "close_session",
            CloseSession.Request(client_id="sec_nobody", session_id=huge),
        ),
    ):
        response, seconds = _service(ros_node, kind, name, request)
        answers.append((name, response.success, len(response.message), seconds))
    record(
        CATEGORY,
        "CloseSession/ResetEpisode with oversize ids (real server)",
        tried=len(answers),
        survived=sum(not success for _, success, _, _ in answers),
        lost=sum(success for _, success, _, _ in answers),
        message_lengths=[length for _, _, length, _ in answers],
    )
    assert all(not success for _, success, _, _ in answers), answers
    assert policy_server.process.poll() is None

    # Still serving: a well-formed robot opens a session and gets its chunk.
    robot = RobotClient(ros_node, "sec_after_arm")
    try:
        assert robot.open().accepted
        assert (
            robot.request(robot.observation(1, state=np.zeros(6))).status == ActionChunk.STATUS_OK
        )
    finally:
        if robot.session_id:
            robot.close()


def test_refusals_of_close_and_reset_do_not_echo_oversize_ids(policy_server, ros_node):
    huge = "s" * HUGE
    response, _ = _service(
        ros_node,
        CloseSession,
        "close_session",
        CloseSession.Request(client_id=huge, session_id=huge),
    )
    assert not response.success and len(response.message) < 1000, len(response.message)


# ------------------------------------------------------------ documentation


def test_the_deployment_security_section_explains_sros2_and_zenoh_acl_deployment():
    deployment = (REPO / "docs" / "how-to" / "deployment.md").read_text()
    section = re.search(r"^### Security\n(.*?)(?=^#{2,3} |\*\*What CI)", deployment, re.S | re.M)
    assert section, "docs/how-to/deployment.md has no '### Security' section"
    text = section.group(1)
    needed = [
        "SROS2",
        "ROS_SECURITY_ENABLE",
        "ROS_SECURITY_STRATEGY=Enforce",
        "mTLS",
        "access-control list",
        "router_server.json5",
        "router_robot.json5",
        "pickle",
        "session_secret",
        "HMAC-SHA256",
        "sniffer of service replies",
        "REFUSAL_CLIENT_ID_IN_USE",
        "test_hostile.py",
    ]
    missing = [word for word in needed if word not in text]
    record(
        CATEGORY,
        "docs/how-to/deployment.md security section: SROS2 and rmw_zenoh mTLS + ACL deployment",
        tried=len(needed),
        survived=len(needed) - len(missing),
        lost=len(missing),
        configs_checked_by="test_zenoh_configs.py (zenoh's parser: mTLS on both routers, "
        "default-deny ACL per robot)",
    )
    assert missing == [], missing
