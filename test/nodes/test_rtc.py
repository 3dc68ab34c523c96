"""Real-time chunking across the network, against LeRobot's own local RTC.

The golden parity test drives the executor's real code (``ExecutorCore``,
``RosServerLink``, the handshake, the wire encoding) step by step against a
real policy_server_node process serving the tiny SmolVLA, and runs the same
observation sequence through LeRobot's local RTC path in this process
(``prepare_observation_for_inference``, the processors,
``predict_action_chunk`` with ``inference_delay``/``prev_chunk_left_over``,
``lerobot.policies.rtc.ActionQueue.merge``). The server seeds each request's
flow-matching noise from its ``noise_seed`` and the request id, and the local
run draws the same noise, so the two merged queues must agree. The only thing
the test chooses is time: how many actions the robot consumed before and
during each inference (the measured delay), which it applies to both.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch
from sensor_msgs.msg import Image

from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.executor.session.handshake import RobotDeclaration, handshake
from lerobot_ros.executor.session.server_link import RosServerLink
from lerobot_ros.executor.settings import PARAMETERS, ExecutorSettings
from lerobot_ros.node_shell.parameters import defaults
from lerobot_ros.server.policy.inference import request_noise_seed
from lerobot_ros.sim.default_policy import VLM_DIR
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, FRONT_CAMERA, SO101_JOINT_NAMES
from support.jsonl import read_jsonl
from support.servers import start_server

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_rtc")

NOISE_SEED = 1234
HORIZON = 10
FPS = 30.0
TASK = "pick up the cube"
#: The server's torch_threads, and the local references' thread count: a forward summed over a
#: different number of threads can differ in the last bit, and these tests compare bit for bit.
TORCH_THREADS = 1
# Actions the robot plays between one merge and the next request, and while
# each request is being inferred (the measured delay, in control steps).
PLAYED_BEFORE_REQUEST = (0, 20, 25, 18, 30, 22)
# The first is 0: with an empty queue the robot plays nothing while it waits
# (where LeRobot would trim anyway; lerobot_ros clamps the trim to what was played).
PLAYED_DURING_INFERENCE = (0, 3, 5, 4, 2, 6)


@pytest.fixture(scope="module")
def rtc_server(smolvla_checkpoint, tmp_path_factory, ros_node):
    from lerobot_ros.processes import stop

    directory = tmp_path_factory.mktemp("rtc_server")
    server = start_server(
        smolvla_checkpoint,
        directory,
        ros_node,
        capture_dir=str(directory / "rtc_capture"),
        node_name="rtc",
        rtc_enabled=True,
        rtc_execution_horizon=HORIZON,
        noise_seed=NOISE_SEED,
        warmup_inferences=1,
        default_task=TASK,
        torch_threads=TORCH_THREADS,
    )
    yield server
    stop(server.process)


def _observations(count: int, seed: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    height, width = DEFAULT_IMAGE_SHAPE
    return [
        (
            rng.uniform(-1, 1, len(SO101_JOINT_NAMES)).astype(np.float32),
            rng.integers(0, 256, (height, width, 3), np.uint8),
        )
        for _ in range(count)
    ]


def _raw_image(rgb: np.ndarray) -> Image:
    height, width, _ = rgb.shape
    return Image(height=height, width=width, encoding="rgb8", step=width * 3, data=rgb.tobytes())


class SteppedExecutor:
    """The executor's own core and ROS link on a node of this test process, driven one step at a
    time.

    What the network worker and the control timer do, minus their threads:
    the test decides when a request is sent and how long its answer took.
    """

    def __init__(self, server_namespace: str, client_id: str, jpeg_quality: int) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        params = defaults(PARAMETERS)
        params.update(
            server_namespace=server_namespace,
            client_id=client_id,
            task=TASK,
            fps=FPS,
            joint_names=list(SO101_JOINT_NAMES),
            camera_names=[FRONT_CAMERA],
            camera_topics=["/unused_camera"],
            jpeg_quality=jpeg_quality,
            rtc_requested=True,
            # The local reference inference pauses the loop for seconds and no
            # heartbeat subscription exists here: liveness is not under test.
            max_action_age_s=600.0,
            degraded_after_s=600.0,
            max_offline_s=600.0,
            heartbeat_timeout_s=600.0,
            max_step_per_tick=0.0,
        )
        self.settings = ExecutorSettings.from_values(params, node_namespace="/", hostname="host")
        self.core = ExecutorCore(self.settings, time.monotonic())
        self.node = rclpy.create_node(f"stepped_executor_{client_id}")
        self.link = RosServerLink(self.node, self.settings, self.core)
        robot = RobotDeclaration(
            self.settings.joint_names, self.settings.camera_names, self.settings.state_dim
        )
        result = handshake(self.core, self.link, robot, time.monotonic)
        assert result.accepted, result.reason
        self.link.session.spinning = True
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(self.node)
        self._spinner = threading.Thread(target=self._executor.spin, daemon=True)
        self._spinner.start()

    def observe(self, state: np.ndarray, rgb: np.ndarray) -> None:
        now = time.monotonic()
        self.core.on_joint_state(list(SO101_JOINT_NAMES), state.tolist(), [], now)
        self.core.on_camera(FRONT_CAMERA, _raw_image(rgb), now)

    def send(self) -> PendingRequest:
        prepared = self.core.start_request(time.monotonic(), time.monotonic_ns())
        assert isinstance(prepared, PendingRequest), prepared
        assert self.link.send_observation(prepared) is None
        return prepared

    def receive(self, timeout_s: float = 30.0):
        answer = self.core.wait_for_answer(timeout_s)
        assert answer.chunk is not None, (
            f"no chunk: refusal={answer.refusal!r}, timed out={answer.timed_out}"
        )
        return answer.chunk

    def merge(self, prepared: PendingRequest, chunk, delay_steps: int) -> None:
        # A latency just under `delay_steps` control periods: the executor measures exactly that
        # delay.
        latency_ns = max(0, int((delay_steps - 0.5) / FPS * 1e9))
        assert self.core.merge(
            prepared, chunk, prepared.request.sent_monotonic_ns + latency_ns, time.monotonic()
        )

    def telemetry(self):
        return self.core.snapshot(time.monotonic()).telemetry

    def drops(self) -> dict[str, int]:
        return self.core.snapshot(time.monotonic()).drops.counts

    def play(self, count: int) -> None:
        for _ in range(count):
            assert self.core.control_tick(time.monotonic()) is not None

    def close(self) -> None:
        self._executor.shutdown()
        self._spinner.join(timeout=5)
        self.node.destroy_node()


def _lerobot_policy(checkpoint):
    """The checkpoint loaded by LeRobot alone (its VLM folder travels inside the checkpoint)."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.policies.rtc import RTCConfig

    config = PreTrainedConfig.from_pretrained(checkpoint)
    config.vlm_model_name = str((checkpoint / VLM_DIR).resolve())
    policy = get_policy_class(config.type).from_pretrained(checkpoint, config=config)
    preprocessor, postprocessor = make_pre_post_processors(
        config,
        pretrained_path=str(checkpoint),
        preprocessor_overrides={"tokenizer_processor": {"tokenizer_name": config.vlm_model_name}},
    )
    policy.config.rtc_config = RTCConfig(enabled=True, execution_horizon=HORIZON)
    policy.init_rtc_processor()
    policy.eval()
    return policy, preprocessor, postprocessor


def _local_rtc_chunk(lerobot, state, rgb, prepared: PendingRequest, left_over):
    """One chunk the way LeRobot's own RTC loop computes it, with the request's noise."""
    from lerobot.policies.utils import prepare_observation_for_inference

    policy, preprocessor, postprocessor = lerobot
    observation = prepare_observation_for_inference(
        {"observation.state": state.copy(), FRONT_CAMERA: rgb.copy()}, torch.device("cpu"), TASK
    )
    batch = preprocessor(observation)
    torch.manual_seed(request_noise_seed(NOISE_SEED, prepared.request))
    threads_before = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    try:
        with torch.no_grad():
            actions = policy.predict_action_chunk(
                batch,
                inference_delay=prepared.inference_delay_steps,
                prev_chunk_left_over=left_over,
            )
    finally:
        torch.set_num_threads(threads_before)
    return actions.squeeze(0).clone(), postprocessor(actions).squeeze(0)


def _run_both(rtc_server, smolvla_checkpoint, client_id: str, jpeg_quality: int):
    """The same observations and timing through the remote path and LeRobot's local RTC."""
    from lerobot.policies.rtc import ActionQueue as LeRobotActionQueue
    from lerobot.policies.rtc import RTCConfig

    lerobot = _lerobot_policy(smolvla_checkpoint)
    local = LeRobotActionQueue(RTCConfig(enabled=True, execution_horizon=HORIZON))
    remote = SteppedExecutor(rtc_server.namespace, client_id, jpeg_quality)
    steps = []
    try:
        assert remote.core.identity.rtc_active, "the server must grant RTC for the tiny SmolVLA"
        for (state, rgb), before, during in zip(
            _observations(len(PLAYED_BEFORE_REQUEST)),
            PLAYED_BEFORE_REQUEST,
            PLAYED_DURING_INFERENCE,
            strict=False,
        ):
            remote.play(before)
            for _ in range(before):
                local.get()
            remote.observe(state, rgb)
            prepared = remote.send()
            local_index, local_left_over = local.get_action_index(), local.get_left_over()
            chunk = remote.receive()
            original, processed = _local_rtc_chunk(lerobot, state, rgb, prepared, local_left_over)
            remote.play(during)  # the robot keeps playing while the server infers
            for _ in range(during):
                local.get()
            remote.merge(prepared, chunk, during)
            local.merge(
                original, processed, real_delay=during, action_index_before_inference=local_index
            )
            queued = remote.core.queued_actions()
            steps.append(
                (
                    prepared,
                    chunk,
                    queued.left_over_model,
                    queued.left_over_robot,
                    local.get_left_over().numpy(),
                    local.get_processed_left_over().numpy(),
                )
            )
    finally:
        remote.close()
    return steps


def test_remote_rtc_builds_the_same_queue_as_lerobot_local_rtc(rtc_server, smolvla_checkpoint):
    steps = _run_both(rtc_server, smolvla_checkpoint, "parity_raw", jpeg_quality=0)
    guided = [prepared for prepared, chunk, *_ in steps if chunk.rtc_applied]
    assert len(guided) == len(steps) - 1, (
        "every request after the first carries a prefix and is guided"
    )
    # The delay hint is the executor's windowed latency estimate; the first
    # measured delay was 0 (nothing queued), every later one is more.
    assert all(prepared.inference_delay_steps > 0 for prepared in guided[1:]), (
        "the executor sends its measured delay"
    )
    assert all(len(prepared.snapshot.left_over_model) <= HORIZON for prepared in guided), (
        "prefix capped to the horizon"
    )
    for prepared, chunk, remote_model, remote_robot, local_model, local_robot in steps:
        assert chunk.inference_delay_steps == (
            prepared.inference_delay_steps if chunk.rtc_applied else 0
        )
        assert remote_model.shape == local_model.shape
        # Same inputs, same noise, same math: bit for bit.
        np.testing.assert_array_equal(remote_model, local_model)
        np.testing.assert_array_equal(remote_robot, local_robot)


def test_jpeg_frames_keep_the_remote_queue_close_to_local_rtc(rtc_server, smolvla_checkpoint):
    steps = _run_both(rtc_server, smolvla_checkpoint, "parity_jpeg", jpeg_quality=90)
    differences = [float(np.max(np.abs(remote - local))) for _, _, _, remote, _, local in steps]
    spread = max(float(np.ptp(local)) for *_, local in steps)
    # JPEG changes the pixels the policy sees, so chunks differ, but only by a
    # small fraction of the actions' own range (measured 0.3 % of it here).
    assert 0 < max(differences) < 0.02 * spread, (differences, spread)


def test_executor_node_streams_in_replace_mode_with_measured_delays(rtc_server, launched):
    """The real chunk_executor_node process against the RTC server: replace mode, delays > 0,
    trims."""
    robot = launched("/rtc_robot")
    executor = launched.executor(
        "rtc_executor", robot.executor_parameters(rtc_server.namespace, rtc_requested=True)
    )
    # A chunk that lands after the queue ran dry has nothing to trim (the robot executed nothing
    # of the old chunk meanwhile), and a loaded CI machine starves the queue now and then: so
    # wait, bounded, for eight merges of which at least one trimmed, rather than for eight only.
    trims_seen = []

    def merged_eight_and_trimmed_once(status):
        trims_seen.append(status.last_trimmed_rows)
        return status.chunks_merged >= 8 and max(trims_seen) > 0

    executor.wait(merged_eight_and_trimmed_once, 90, "eight merged chunks, one of them trimmed")
    history = [status for _, status in executor.statuses]
    last = history[-1]
    assert last.rtc_active and last.state_name in ("STREAMING", "DEGRADED"), (
        last.state_name,
        last.reason,
    )
    assert max(status.last_delay_steps for status in history) > 0, (
        "latency measured in control steps"
    )
    assert max(status.last_trimmed_rows for status in history) > 0, (
        "replace mode skipped rows already executed"
    )
    assert last.chunk_boundaries >= 5
    # Each new chunk continues the actions executed while it was inferred (without guidance
    # this policy's chunks start ~0.7 rad away: bench/rtc_smoothness.py). Steps played beyond
    # the delay hint are guided more softly, so a loaded machine raises the figure a little.
    assert 0 < last.prefix_deviation_mean < 0.1, last.prefix_deviation_mean
    audit = read_jsonl(rtc_server.audit)
    answered = [
        record for record in audit if record["client"] == "rtc_robot" and record["outcome"] == "ok"
    ]
    guided = [record for record in answered if record["rtc_applied"]]
    # A request sent while the queue is empty has no prefix (a loaded CI machine can starve the
    # queue now and then), every other one is guided.
    assert len(guided) >= 5, f"{len(guided)} of {len(answered)} chunks guided by a prefix"
    assert all(record["inference_delay_steps"] > 0 for record in guided), (
        "the executor's delay hint reached the policy"
    )


def _chunk_arrived_and_dropped(
    stepped: SteppedExecutor, code: str, timeout_s: float = 30.0
) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if stepped.drops().get(code):
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("reset_while", ["chunk_on_its_way", "chunk_received_not_merged"])
def test_a_reset_during_an_rtc_request_never_merges_the_old_episode(rtc_server, reset_while):
    stepped = SteppedExecutor(rtc_server.namespace, f"reset_{reset_while}", jpeg_quality=0)
    try:
        (state, rgb), (state2, rgb2) = _observations(2, seed=11)
        stepped.observe(state, rgb)
        first = stepped.send()
        stepped.merge(first, stepped.receive(), 0)
        stepped.play(30)
        stepped.observe(state2, rgb2)
        old = stepped.send()
        assert old.snapshot.left_over_model is not None and len(old.snapshot.left_over_model), (
            "an RTC prefix is on its way"
        )
        merged = stepped.telemetry().chunks_merged
        if reset_while == "chunk_on_its_way":
            stepped.core.reset_episode()  # what ~/reset_episode does first
            answer = stepped.core.wait_for_answer(0.0)
            assert answer.chunk is None and answer.cancelled
            assert _chunk_arrived_and_dropped(stepped, "late"), (
                "the old episode's chunk still arrives, and is dropped"
            )
        else:
            chunk = stepped.receive()
            assert chunk.request.episode == 0
            stepped.core.reset_episode()
            latency_ns = int(0.05e9)
            assert not stepped.core.merge(
                old, chunk, old.request.sent_monotonic_ns + latency_ns, time.monotonic()
            )
            assert stepped.drops().get("stale_episode", 0) == 1
        telemetry = stepped.telemetry()
        assert telemetry.chunks_merged == merged and telemetry.queue_depth == 0, (
            "nothing of it was queued"
        )

        stepped.observe(state2, rgb2)
        fresh = stepped.send()
        assert fresh.request.episode == 1
        assert fresh.snapshot.left_over_model is None, (
            "the old episode's actions never guide the new one"
        )
        chunk = stepped.receive()
        assert chunk.request.episode == 1 and not chunk.rtc_applied
        stepped.merge(fresh, chunk, 1)
        assert stepped.telemetry().chunks_merged == merged + 1
    finally:
        stepped.close()


def test_rtc_asked_of_a_policy_without_it_is_downgraded_to_append_mode(policy_server, launched):
    """ACT cannot condition on a prefix: the session is accepted, RTC is off, chunks are
    appended."""
    robot = launched("/append_robot")
    executor = launched.executor(
        "append_executor", robot.executor_parameters(policy_server.namespace, rtc_requested=True)
    )
    executor.wait(lambda s: s.chunks_merged >= 3, 60, "three merged chunks")
    history = [status for _, status in executor.statuses]
    assert not any(status.rtc_active for status in history)
    assert all(status.last_trimmed_rows == 0 for status in history), "append mode never trims"
    assert "RTC requested but act cannot condition on a prefix" in executor.log.read_text()
    audit = read_jsonl(policy_server.audit)
    assert not any(record["rtc_applied"] for record in audit if record["client"] == "append_robot")


def test_rtc_traffic_replays_offline_exactly_with_the_servers_noise_seed(
    rtc_server, smolvla_checkpoint
):
    """Everything the server captured, prefixes and delays included, reproduced by the replay tool.

    The test sends its own RTC traffic first, so it replays something however
    it is selected or ordered; whatever other tests of this module sent to the
    same server is replayed too.
    """
    import subprocess
    import sys

    from lerobot_ros.server.observability.capture import read_capture

    _run_both(rtc_server, smolvla_checkpoint, "replayed", jpeg_quality=0)
    # The server writes a capture record just after publishing its chunk.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sum(
        record["request"]["client_id"] == "replayed" for record in read_capture(rtc_server.capture)
    ) < len(PLAYED_BEFORE_REQUEST):
        time.sleep(0.1)

    def replay(*extra):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "lerobot_ros.server.replay",
                str(rtc_server.capture),
                "--checkpoint",
                str(smolvla_checkpoint),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])

    code, summary = replay(
        "--noise-seed",
        str(NOISE_SEED),
        "--default-task",
        TASK,
        "--torch-threads",
        str(TORCH_THREADS),
    )
    assert (
        code == 0
        and summary["compared"] >= len(PLAYED_BEFORE_REQUEST)
        and summary["max_abs_difference"] == 0.0
    ), summary
    code, summary = replay("--default-task", TASK)  # fresh noise: the sampled chunks differ
    assert code == 1 and summary["differing"] == summary["compared"], summary
