"""policy_server_node's parameter table: every check, before any loading (no torch needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lerobot_ros.node_shell.parameters import InvalidParameters
from lerobot_ros.server.settings import PARAMETERS, ServerSettings

VALID = {"checkpoint": "/models/act"}


def problems(**overrides) -> list[str]:
    return ServerSettings.problems_of({**VALID, **overrides})


def test_the_defaults_with_a_checkpoint_are_valid_settings():
    made = ServerSettings.from_values(VALID)
    assert (
        made.checkpoint == "/models/act"
        and made.action_names == ()
        and made.max_image_bytes == 8 << 20
    )
    assert made.noise_seed == -1 and made.http_port == 0
    assert ServerSettings.from_values({**VALID, "action_names": ["", "a", "b"]}).action_names == (
        "a",
        "b",
    )
    assert [entry.name for entry in PARAMETERS][:2] == ["checkpoint", "revision"]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"checkpoint": ""}, "'checkpoint' is empty: give a checkpoint directory or Hub id"),
        (
            {"dtype": "float64"},
            "'dtype' is 'float64', expected one of ['float32', 'float16', 'bfloat16']",
        ),
        ({"device": "gpu"}, "'device' is 'gpu', expected auto, cpu, mps, cuda or cuda:N"),
        ({"device": "cuda:"}, "'device' is 'cuda:', expected auto, cpu, mps, cuda or cuda:N"),
        (
            {"serving_mode": "both"},
            "'serving_mode' is 'both', expected one of ['auto', 'shared', 'exclusive']",
        ),
        (
            {"service_name": "act/so101"},
            "'service_name' is 'act/so101', expected one ROS name segment",
        ),
        ({"service_name": "1act"}, "'service_name' is '1act', expected one ROS name segment"),
        (
            {"pin_task": True},
            "'pin_task' is true but 'default_task' is empty: name the task to pin",
        ),
        ({"warmup_inferences": -1}, "'warmup_inferences' is -1, expected 0 or more"),
        (
            {"compile_mode": "off"},
            "'compile_mode' is 'off', expected one of ['none', 'default', 'reduce-overhead', "
            "'max-autotune', 'max-autotune-no-cudagraphs']",
        ),
        (
            {"compile_mode": "reduce-overhead", "compile_backend": "aot_eager"},
            "'compile_mode' 'reduce-overhead' is a mode of the inductor backend; with "
            "'compile_backend' 'aot_eager' use "
            "compile_mode 'default' (or backend 'inductor')",
        ),
        (
            {"compile_mode": "default", "warmup_inferences": 0},
            "'compile_mode' 'default' with 'warmup_inferences' 0 would make the first robot wait "
            "for the compilation: "
            "give warmup_inferences >= 1",
        ),
        ({"capture_max_mb": -1}, "'capture_max_mb' is -1, expected 0 or more"),
        ({"max_sessions": 0}, "'max_sessions' is 0, expected 1 or more"),
        ({"rtc_execution_horizon": 0}, "'rtc_execution_horizon' is 0, expected 1 or more"),
        ({"max_image_bytes": 0}, "'max_image_bytes' is 0, expected 1 or more"),
        ({"noise_seed": -2}, "'noise_seed' is -2, expected -1 (off) or a seed >= 0"),
        ({"inject_delay_s": -0.5}, "'inject_delay_s' is -0.5, expected 0 or more"),
        ({"heartbeat_period_s": 0.0}, "'heartbeat_period_s' is 0.0, expected more than 0"),
        (
            {"session_idle_timeout_s": -1.0},
            "'session_idle_timeout_s' is -1.0, expected more than 0",
        ),
        ({"http_port": 65536}, "'http_port' is 65536, expected 0 (off) or a port number"),
        ({"http_port": -1}, "'http_port' is -1, expected 0 (off) or a port number"),
        ({"max_sessions": 2.5}, "'max_sessions' is 2.5, expected an integer"),
    ],
)
def test_each_check_names_the_parameter_the_value_and_what_was_expected(overrides, expected):
    assert problems(**overrides) == [expected]


def test_values_at_the_edges_pass():
    assert (
        problems(
            device="cuda:1",
            service_name="act_so101",
            pin_task=True,
            default_task="pick",
            warmup_inferences=0,
            capture_max_mb=0,
            max_sessions=1,
            noise_seed=0,
            http_port=65535,
            session_idle_timeout_s=float("inf"),
        )
        == []
    )
    assert problems(device="mps", serving_mode="exclusive", dtype="bfloat16") == []


def test_every_problem_is_reported_at_once():
    with pytest.raises(InvalidParameters) as raised:
        ServerSettings.from_values(
            {"checkpoint": "", "dtype": "int8", "http_port": 70000, "pin_task": True}
        )
    text = str(raised.value)
    assert len(raised.value.problems) == 4
    for name in ("'checkpoint'", "'dtype'", "'http_port'", "'pin_task'"):
        assert name in text


def test_the_settings_module_imports_without_torch_or_rclpy():
    code = (
        "import sys; import lerobot_ros.server.settings; "
        "assert 'torch' not in sys.modules and 'rclpy' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
