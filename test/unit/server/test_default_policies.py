"""The generated default policies: the tiny SmolVLA (RTC) and the cache both kinds share.

The SmolVLA checkpoint is real LeRobot SmolVLA with random weights; its VLM
config, processor and tokenizer are generated in code, so nothing is
downloaded. RTC is checked by its visible effect: with the guidance on, the
first ``inference_delay`` actions of a chunk stay on the prefix it was given.
"""

import json
import shutil
import time

import numpy as np
import pytest
import torch

from lerobot_ros.protocol.checkpoint_layout import VLM_DIR
from lerobot_ros.protocol.contract import SCHEMA_VERSION
from lerobot_ros.protocol.wire.data_plane import ObservationFrame, RequestId
from lerobot_ros.server.policy.checkpoint import load_policy
from lerobot_ros.server.policy.inference import PolicyRunner
from lerobot_ros.server.policy.policy_families import SHARED
from lerobot_ros.sim import default_policy
from lerobot_ros.sim.default_policy import DEFAULT_POLICY_NAMES, default_checkpoint
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, FRONT_CAMERA, HOME_POSE, SO101_JOINT_NAMES

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_default_policies")

TASK = "pick up the cube"
DELAY = 4


@pytest.fixture(scope="module")
def smolvla(smolvla_checkpoint):
    return load_policy(str(smolvla_checkpoint), device="cpu")


@pytest.fixture(scope="module")
def rtc_runner(smolvla):
    return PolicyRunner(smolvla, rtc_enabled=True, rtc_execution_horizon=10)


def _frame(prefix_model=None, delay=0, state=None):
    rgb = np.random.default_rng(0).integers(0, 255, (*DEFAULT_IMAGE_SHAPE, 3), np.uint8)
    prefix_robot = (
        None if prefix_model is None else prefix_model * 0.3 + np.asarray(HOME_POSE, np.float32)
    )
    return ObservationFrame(
        request=RequestId("session", "arm", 1, 0, 0, time.monotonic_ns()),
        schema_version=SCHEMA_VERSION,
        task=TASK,
        state=np.zeros(6, np.float32) if state is None else state,
        images={FRONT_CAMERA: rgb},
        inference_delay_steps=delay,
        prefix_model=prefix_model,
        prefix_robot=prefix_robot,
    )


def _run(runner, frame, rtc, seed=7):
    torch.manual_seed(seed)  # the same starting noise, so only RTC differs
    return runner.run(frame, runner.new_session_processors(), TASK, rtc=rtc)


@pytest.fixture
def policy_calls(rtc_runner, monkeypatch):
    """The keyword arguments of every predict_action_chunk call."""
    policy = rtc_runner.loaded.policy
    original = policy.predict_action_chunk
    calls = []

    def spy(batch, **kwargs):
        calls.append(kwargs)
        return original(batch, **kwargs)

    monkeypatch.setattr(policy, "predict_action_chunk", spy)
    return calls


def test_smolvla_checkpoint_is_described_as_an_rtc_policy(smolvla, smolvla_checkpoint):
    capabilities = smolvla.capabilities
    assert (capabilities.policy_type, capabilities.serving_mode) == ("smolvla", SHARED)
    assert capabilities.rtc_supported and capabilities.rtc_enabled
    assert (capabilities.chunk_size, capabilities.state_dim, capabilities.trained_fps) == (
        50,
        6,
        30.0,
    )
    assert capabilities.action_names == capabilities.state_names == SO101_JOINT_NAMES
    assert [(c.name, c.height, c.width) for c in capabilities.cameras] == [
        (FRONT_CAMERA, *DEFAULT_IMAGE_SHAPE)
    ]
    # tiny: a CPU answers in tens of ms
    assert sum(p.numel() for p in smolvla.policy.parameters()) < 1_000_000
    assert smolvla.config.vlm_model_name == str((smolvla_checkpoint / VLM_DIR).resolve())


def test_a_moved_checkpoint_still_loads_and_predicts(tmp_path):
    original, moved = tmp_path / "original", tmp_path / "moved"
    default_policy.build_smolvla_checkpoint(original)
    shutil.copytree(original, moved)
    shutil.rmtree(original)
    # The files still name the deleted folder; only the one inside can serve.
    assert json.loads((moved / "config.json").read_text())["vlm_model_name"] == str(
        original / VLM_DIR
    )
    assert str(original / VLM_DIR) in (moved / "policy_preprocessor.json").read_text()

    loaded = load_policy(str(moved), device="cpu")
    assert loaded.config.vlm_model_name == str(moved / VLM_DIR)
    tokenizer = next(
        step
        for step in loaded.preprocessor.steps
        if type(step).__name__ == "TokenizerProcessorStep"
    )
    assert tokenizer.tokenizer_name == str(moved / VLM_DIR)
    runner = PolicyRunner(loaded)
    result = runner.run(_frame(), runner.new_session_processors(), TASK, rtc=False)
    assert result.actions_robot.shape == (50, 6) and np.isfinite(result.actions_robot).all()


def test_rtc_holds_the_first_delay_actions_to_the_prefix(rtc_runner, policy_calls):
    prefix = np.random.default_rng(1).normal(size=(12, 6)).astype(np.float32)  # model space
    frame = _frame(prefix, delay=DELAY)
    guided = _run(rtc_runner, frame, rtc=True)
    unguided = _run(rtc_runner, frame, rtc=False)

    with_rtc, without_rtc = policy_calls
    assert with_rtc["inference_delay"] == DELAY
    assert tuple(with_rtc["prev_chunk_left_over"].shape) == (10, 6)  # cut to the execution horizon
    assert np.allclose(with_rtc["prev_chunk_left_over"].numpy(), prefix[:10])
    assert without_rtc == {}
    assert guided.rtc_applied and guided.inference_delay_steps == DELAY
    assert not unguided.rtc_applied and unguided.inference_delay_steps == 0

    deviation = np.abs(guided.actions_model[:DELAY] - prefix[:DELAY]).mean()
    free = np.abs(unguided.actions_model[:DELAY] - prefix[:DELAY]).mean()
    assert deviation < 0.05 < 0.3 < free, (deviation, free)
    # Robot space is the same chunk unnormalized (mean HOME_POSE, std 0.3).
    assert np.allclose(
        guided.actions_robot, guided.actions_model * 0.3 + np.asarray(HOME_POSE), atol=1e-4
    )


def test_a_prefix_shorter_than_the_horizon_is_not_padded(rtc_runner, policy_calls):
    prefix = np.random.default_rng(2).normal(size=(3, 6)).astype(np.float32)
    result = _run(rtc_runner, _frame(prefix, delay=3), rtc=True)
    assert tuple(policy_calls[0]["prev_chunk_left_over"].shape) == (3, 6)
    assert np.abs(result.actions_model[:3] - prefix).mean() < 0.05


def test_without_a_prefix_no_rtc_is_reported(rtc_runner, policy_calls):
    result = _run(rtc_runner, _frame(None, delay=DELAY), rtc=True)  # a session's first chunk
    assert policy_calls[0] == {"inference_delay": DELAY, "prev_chunk_left_over": None}
    assert not result.rtc_applied and result.inference_delay_steps == 0
    assert result.actions_model.shape == (50, 6)


def test_each_default_kind_is_cached_under_its_own_versioned_name(tmp_path, monkeypatch):
    built = []

    def fake_builder(directory):
        built.append(directory)
        (directory / "lerobot_ros.json").write_text("{}")

    monkeypatch.setenv("LEROBOT_ROS_CACHE", str(tmp_path))
    monkeypatch.setattr(
        default_policy, "_BUILDERS", {"act": fake_builder, "smolvla": fake_builder}
    )
    act, smolvla = default_checkpoint(), default_checkpoint("smolvla")
    assert act == tmp_path / "policies" / DEFAULT_POLICY_NAMES["act"] == default_checkpoint("act")
    assert smolvla == tmp_path / "policies" / DEFAULT_POLICY_NAMES["smolvla"] != act
    # built beside, then renamed
    assert len(built) == 2 and all(path.name.startswith(".") for path in built)
    assert sorted(path.name for path in (tmp_path / "policies").iterdir()) == sorted(
        DEFAULT_POLICY_NAMES.values()
    )
    with pytest.raises(
        ValueError, match="unknown default policy 'pi0'; choose one of \\['act', 'smolvla'\\]"
    ):
        default_checkpoint("pi0")


def test_warm_up_of_an_rtc_policy_runs_the_guidance_path(smolvla_checkpoint, monkeypatch):
    from lerobot_ros.server.policy.checkpoint import load_policy
    from lerobot_ros.server.policy.inference import PolicyRunner
    from lerobot_ros.server.policy.warmup import warm_up

    runner = PolicyRunner(
        load_policy(str(smolvla_checkpoint), device="cpu"),
        rtc_enabled=True,
        rtc_execution_horizon=10,
    )
    applied = []
    finish = runner.finish

    def recording_finish(*args):
        result = finish(*args)
        applied.append(result.rtc_applied)
        return result

    monkeypatch.setattr(runner, "finish", recording_finish)
    warm_up(runner, 3)
    assert applied == [False, True, True], (
        "the first warm-up has no prefix; the later ones condition on one"
    )
