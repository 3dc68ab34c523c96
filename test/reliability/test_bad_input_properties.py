"""Bad input, property-based: every malformed observation is refused by the
server and every malformed chunk by the executor, with a counted, logged
reason, while the node keeps running and a healthy client keeps streaming.

Breadth runs in-process against the real request path (a real ACT
checkpoint, ``RequestHandler``) and the executor's real chunk validation
(``session_client.deliver_chunk`` -> ``chunk_from_msg`` -> ``ExecutorCore.offer_chunk``);
depth runs across processes: malformed observations into the suite's
``policy_server_node`` while a second robot streams, and forged chunks onto
a running ``chunk_executor_node``'s chunk topic while the real server
serves it. Each class records its figures for docs/reference/reliability.md
(``test/reliability_log.py``).

Hypothesis runs derandomized (the same examples every run, so CI is
reproducible) and without its example database (nothing written to the tree).
"""

from __future__ import annotations

import math
import time
import urllib.request
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sensor_msgs.msg import Image

from lerobot_ros.executor.session.session_client import deliver_chunk
from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.protocol.contract import SCHEMA_VERSION
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import RequestLimits
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
from support.executor_harness import CAPABILITIES, JOINTS, connected, feed
from support.jsonl import read_jsonl
from support.reliability_log import record
from support.request_harness import Harness
from support.robot_client import RobotClient
from support.ros import spin_until

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SERVER_IN_PROCESS = "bad input: server request path (in-process)"
SERVER_CROSS_PROCESS = "bad input: policy_server_node (cross-process)"
EXECUTOR_IN_PROCESS = "bad input: executor chunk validation (in-process)"
EXECUTOR_CROSS_PROCESS = "bad input: chunk_executor_node (cross-process)"


def bounded(max_examples: int, shrink: bool = True):
    # Shrinking across processes would resend for minutes; there the first
    # failing example is reported as drawn.
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else []),
        report_multiple_bugs=False,
    )


@dataclass
class Case:
    """One malformed observation: how to build it for a session, and the text its refusal must
    contain."""

    build: Callable[[Harness | RobotClient, int], Observation]
    expected: str
    label: str = ""


# ------------------------------------------------------------------ strategies
# Each builds an observation for ``target`` (the in-process Harness or the
# cross-process RobotClient; both have ``observation(seq=..., state=..., **fields)``).


def _observe(target, seq, **kwargs):
    return target.observation(seq=seq, **kwargs)


def _jpeg(height: int, width: int, seed: int) -> bytes:
    rgb = np.random.default_rng(seed).integers(0, 255, (height, width, 3), np.uint8)
    return bytes(images.rgb_to_compressed(rgb, 80).data)


def _with_compressed(msg: Observation, data: bytes, fmt: str = "jpeg") -> Observation:
    msg.compressed_images[0].format, msg.compressed_images[0].data = fmt, data
    return msg


def _with_raw(msg: Observation, image: Image, name: str = FRONT_CAMERA) -> Observation:
    msg.compressed_camera_names, msg.compressed_images = [], []
    msg.raw_camera_names, msg.raw_images = [name], [image]
    return msg


def _raw_image(encoding: str, height: int, width: int, step: int, length: int) -> Image:
    return Image(encoding=encoding, height=height, width=width, step=step, data=bytes(length))


@st.composite
def wrong_state_length(draw):
    # Beyond 4096 values the size bound refuses it before decoding.
    size = draw(st.one_of(st.integers(0, 64), st.integers(4097, 20_000)).filter(lambda n: n != 6))
    return Case(
        lambda t, seq: _observe(t, seq, state=np.zeros(size)),
        f"state has {size} values",
        f"{size} values",
    )


@st.composite
def non_finite_state(draw):
    values = draw(st.lists(st.floats(-100, 100, width=32), min_size=6, max_size=6))
    bad = sorted(draw(st.sets(st.integers(0, 5), min_size=1)))
    for index in bad:
        values[index] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    return Case(
        lambda t, seq: _observe(t, seq, state=values), f"not finite at indices {bad}", str(values)
    )


@st.composite
def corrupt_jpeg(draw):
    fmt = draw(st.sampled_from(["jpeg", "png", "", "rgb8; jpeg compressed bgr8"]))
    body = draw(st.binary(min_size=0, max_size=2048))
    kind = draw(st.sampled_from(["garbage", "soi_garbage_eoi", "header_destroyed"]))
    if kind == "garbage":
        data = body if not body.startswith((b"\xff\xd8", PNG_SIGNATURE)) else b"\x00" + body
    elif kind == "soi_garbage_eoi":
        data = b"\xff\xd8" + body + b"\xff\xd9"
        fmt = "jpeg"
    else:
        # A real JPEG whose markers after SOI are overwritten: no frame header survives.
        real = _jpeg(
            draw(st.integers(8, 64)), draw(st.integers(8, 64)), draw(st.integers(0, 2**16))
        )
        data = b"\xff\xd8" + bytes(len(real) - 4) + b"\xff\xd9"
        fmt = "jpeg"
    return Case(
        lambda t, seq: _with_compressed(_observe(t, seq), data, fmt),
        f"camera '{FRONT_CAMERA}'",
        kind,
    )


@st.composite
def truncated_jpeg(draw):
    real = _jpeg(draw(st.integers(8, 96)), draw(st.integers(8, 128)), draw(st.integers(0, 2**16)))
    cut = draw(st.integers(0, len(real) - 1))
    return Case(
        lambda t, seq: _with_compressed(_observe(t, seq), real[:cut]),
        f"camera '{FRONT_CAMERA}'",
        f"{cut}/{len(real)}",
    )


@st.composite
def raw_wrong_byte_count(draw):
    encoding = draw(st.sampled_from(list(images.ACCEPTED_RAW_ENCODINGS)))
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}[encoding]
    height, width, padding = (
        draw(st.integers(1, 64)),
        draw(st.integers(1, 64)),
        draw(st.integers(0, 8)),
    )
    step = width * channels + padding
    length = draw(st.integers(0, 2 * step * height).filter(lambda n: n != step * height))
    image = _raw_image(encoding, height, width, step, length)
    return Case(
        lambda t, seq: _with_raw(_observe(t, seq), image),
        f"data bytes for a {width}x{height} {encoding} Image, got {length}",
    )


# ROS strings are C strings on the wire: no NUL (it could not cross a process boundary intact).
def ros_text(min_size=0, max_size=40):
    return st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        min_size=min_size,
        max_size=max_size,
    )


camera_names = ros_text(min_size=1).filter(lambda name: name != FRONT_CAMERA)


@st.composite
def camera_twice(draw):
    """The policy's camera sent twice (an extra camera the policy does not read is ignored:
    test_an_extra_camera_the_policy_does_not_read_is_ignored)."""
    quality = draw(st.integers(1, 100))

    def build(target, seq):
        msg = _observe(target, seq)
        extra = images.rgb_to_compressed(np.zeros((96, 128, 3), np.uint8), quality)
        msg.compressed_images = [msg.compressed_images[0], extra]
        msg.compressed_camera_names = [FRONT_CAMERA, FRONT_CAMERA]
        return msg

    return Case(build, f"camera '{FRONT_CAMERA}' appears twice", "twice")


@st.composite
def missing_camera(draw):
    names = draw(st.lists(camera_names, max_size=3, unique=True))

    def build(target, seq):
        msg = _observe(target, seq)
        frame = msg.compressed_images[0]
        msg.compressed_camera_names, msg.compressed_images = list(names), [frame] * len(names)
        return msg

    return Case(build, f"missing ['{FRONT_CAMERA}']", str(names))


def oversize_payload(max_image_bytes: int):
    @st.composite
    def strategy(draw):
        kind = draw(
            st.sampled_from(
                ["compressed", "raw", "task", "client_id", "session_id", "cameras", "camera_name"]
            )
        )
        if kind == "compressed":
            size = draw(st.integers(max_image_bytes + 1, max_image_bytes + 4096))
            data = b"\xff\xd8" + bytes(size - 4) + b"\xff\xd9"
            return Case(
                lambda t, seq: _with_compressed(_observe(t, seq), data),
                f"at most {max_image_bytes} bytes",
                kind,
            )
        if kind == "raw":
            width = draw(st.integers(max_image_bytes // 3 + 1, max_image_bytes // 3 + 1000))
            image = _raw_image("rgb8", 1, width, 3 * width, 3 * width)
            return Case(
                lambda t, seq: _with_raw(_observe(t, seq), image),
                f"at most {max_image_bytes} are accepted",
                kind,
            )
        if kind == "task":
            length = draw(st.integers(2049, 50_000))
            return Case(
                lambda t, seq: _observe(t, seq, task="x" * length),
                f"task is {length} characters long; at most 2048",
                kind,
            )
        if kind in ("client_id", "session_id"):
            length = draw(st.integers(129, 50_000))
            return Case(
                lambda t, seq: _observe(t, seq, **{kind: "a" * length}),
                f"{kind} is {length} characters long; at most 128",
                kind,
            )
        if kind == "cameras":
            count = draw(st.integers(257, 2000))

            def build(target, seq):
                msg = _observe(target, seq)
                msg.compressed_camera_names = [f"cam_{i}" for i in range(count)]
                msg.compressed_images = [msg.compressed_images[0]] * count
                return msg

            return Case(
                build, f"{count} camera names and {count} frames arrived; at most 256", kind
            )
        length = draw(st.integers(257, 20_000))

        def build_name(target, seq):
            msg = _observe(target, seq)
            msg.compressed_camera_names = ["c" * length]
            return msg

        return Case(build_name, f"a camera name is {length} characters long; at most 256", kind)

    return strategy()


@st.composite
def wrong_schema_version(draw):
    version = draw(st.integers(0, 65535).filter(lambda v: v != Observation.CURRENT_SCHEMA_VERSION))
    return Case(
        lambda t, seq: _observe(t, seq, schema_version=version),
        f"schema version {version}; expected "
        f"{Observation.CURRENT_SCHEMA_VERSION}..{Observation.CURRENT_SCHEMA_VERSION}",
    )


@st.composite
def unknown_client_or_session(draw, own_client: str):
    if draw(st.booleans()):
        other = draw(ros_text(max_size=128).filter(lambda name: name != own_client))
        return Case(
            lambda t, seq: _observe(t, seq, client_id=other),
            f"client id {other!r} arrived on the topic of client {own_client!r}",
            "client",
        )
    session = draw(ros_text(max_size=128))
    return Case(
        lambda t, seq: _observe(
            t, seq, session_id=session if session != t.session_id else session + "x"
        ),
        "is not this client's open session",
        "session",
    )


# ---------------------------------------------------------- in-process server

HEALTHY_EVERY = 10  # a healthy request after every 10th malformed one (each costs an inference)


class Tally:
    def __init__(self, case: str, category: str = SERVER_IN_PROCESS) -> None:
        self.case, self.category = case, category
        self.tried = self.survived = self.lost = 0
        self.healthy = 0
        self.labels: set[str] = set()

    def record(self, **details) -> None:
        record(
            self.category,
            self.case,
            self.tried,
            self.survived,
            self.lost,
            healthy_requests=self.healthy,
            variants=sorted(self.labels)[:20],
            **details,
        )


class InProcessServer(Harness):
    """The request-path Harness (support.request_harness) with a second, healthy session; the
    ``target`` the strategies build for is the broken session."""

    def __init__(self, runner) -> None:
        super().__init__(runner)
        self.healthy = self.open("healthy_arm")
        self.seq = 0

    @property
    def session_id(self):
        return self.session.session_id

    def observation(self, session=None, seq=0, **fields):
        return super().observation(session, seq, **fields)

    def healthy_request(self) -> bool:
        self.seq += 1
        outcome = self.send(super().observation(self.healthy, seq=self.seq), key="healthy_arm")
        client, msg = self.published[-1]
        return (
            outcome.outcome == "ok"
            and client == "healthy_arm"
            and msg.chunk_length == 50
            and msg.seq == self.seq
        )


@pytest.fixture
def server(runner):  # noqa: F811 - the imported fixture
    return InProcessServer(runner)


def _refused_in_process(server: InProcessServer, case: Case, tally: Tally) -> None:
    tally.tried += 1
    tally.labels.add(case.label)
    server.seq += 1
    audit_before = len(server.audit)
    outcome = server.send(case.build(server, server.seq))
    client, msg = server.published[-1]
    refused = (
        outcome.outcome == "rejected"
        and client == "arm"
        and msg.status == ActionChunk.STATUS_REJECTED
        and case.expected in msg.error
        and len(msg.actions_robot) == 0
        and len(server.audit) == audit_before + 1
        and server.audit[-1]["outcome"] == "rejected"
        and case.expected in server.audit[-1]["error"]
        # Ids echoed in the reply and the audit line are bounded whatever arrived.
        and len(msg.client_id) <= 200
        and len(msg.session_id) <= 200
    )
    if tally.tried % HEALTHY_EVERY == 0:
        tally.healthy += 1
        if not server.healthy_request():
            tally.lost += 1
    tally.survived += refused
    assert refused, (
        f"{tally.case} ({case.label}): expected a REJECTED chunk with {case.expected!r}, got "
        f"{outcome.outcome}: {msg.error[:500]!r}"
    )
    assert tally.lost == 0, "the healthy session lost a chunk"


SERVER_CLASSES = {
    "wrong state length": (wrong_state_length(), 40),
    "NaN/inf in state": (non_finite_state(), 40),
    "corrupt JPEG": (corrupt_jpeg(), 40),
    "truncated JPEG": (truncated_jpeg(), 40),
    "raw image with wrong byte count": (raw_wrong_byte_count(), 40),
    "camera sent twice": (camera_twice(), 15),
    "missing camera": (missing_camera(), 25),
    "oversize payload (frame, task, ids, camera list)": (oversize_payload(200_000), 40),
    "wrong schema version": (wrong_schema_version(), 30),
    "unknown client id or session id": (unknown_client_or_session(own_client="arm"), 40),
}


SERVER_CLASS_NOTES = {
    "unknown client id or session id": {
        "closed_session": "an observation for a session closed meanwhile is dropped, unanswered "
        "and audited: "
        "test_request_path.py::test_an_observation_for_a_closed_session_is_dropped_unanswered; a "
        "client with no "
        "session has no observation topic on the server at all",
    },
}


@pytest.mark.parametrize("case_name", list(SERVER_CLASSES))
def test_malformed_observations_are_refused_in_process_and_the_healthy_session_keeps_working(
    server, case_name
):
    strategy, examples = SERVER_CLASSES[case_name]
    tally = Tally(case_name)

    @bounded(examples)
    @given(strategy)
    def refused(case):
        _refused_in_process(server, case, tally)

    try:
        refused()
        server.seq += 1
        assert server.send(server.observation(seq=server.seq)).outcome == "ok", (
            "the broken session works afterwards"
        )
    finally:
        tally.record(**SERVER_CLASS_NOTES.get(case_name, {}))


def test_an_older_episode_is_refused_and_any_epoch_is_echoed_for_the_executor_to_check(server):
    tally = Tally("older episode")
    server.seq += 1
    assert server.send(server.observation(seq=server.seq, episode=1000)).outcome == "ok"

    @bounded(30)
    @given(st.integers(0, 999))
    def older(episode):
        case = Case(
            lambda t, seq: _observe(t, seq, episode=episode),
            f"episode {episode} is over; the session is at episode 1000",
        )
        _refused_in_process(server, case, tally)

    try:
        older()
    finally:
        tally.record(
            cross_process="test_server_sessions.py::test_reset_episode_refuses_the_old_episode"
        )

    # The server does not own connection epochs (the executor bumps them on
    # reconnect); it echoes whatever arrived and the executor refuses a chunk
    # whose epoch is not its own (stale_epoch, tested below).
    echoed = Tally("epoch (echoed, refused by the executor)")

    @bounded(4)
    @given(st.integers(0, 2**32 - 1))
    def epochs(epoch):
        echoed.tried += 1
        server.seq += 1
        outcome = server.send(server.observation(seq=server.seq, episode=1000, epoch=epoch))
        echoed.survived += outcome.outcome == "ok" and server.published[-1][1].epoch == epoch
        assert echoed.survived == echoed.tried

    try:
        epochs()
    finally:
        echoed.record()


# ----------------------------------------------------------- in-process executor


def _executor(**overrides):
    clock, core, link, worker = connected(**overrides)
    feed(core, clock)
    prepared = core.start_request(clock(), clock.ns())
    return clock, core, prepared


def _chunk_msg(
    request,
    actions_robot,
    actions_model=None,
    names=JOINTS,
    chunk_length=None,
    action_dim=None,
    **fields,
):
    """An ActionChunk message as it arrives on the wire; the declared shape may disagree with the
    data."""
    import array

    actions_robot = np.asarray(actions_robot, np.float32)
    actions_model = (
        actions_robot if actions_model is None else np.asarray(actions_model, np.float32)
    )
    msg = ActionChunk(
        schema_version=SCHEMA_VERSION,
        session_id=request.session_id,
        client_id=request.client_id,
        seq=request.seq,
        episode=request.episode,
        epoch=request.epoch,
        sent_monotonic_ns=request.sent_monotonic_ns,
        status=ActionChunk.STATUS_OK,
        model_fingerprint=CAPABILITIES.model_fingerprint,
        action_names=list(names),
    )
    msg.chunk_length = actions_robot.shape[0] if chunk_length is None else chunk_length
    msg.action_dim = (
        (actions_robot.shape[1] if actions_robot.ndim == 2 else 0)
        if action_dim is None
        else action_dim
    )
    msg.actions_robot = array.array("f", actions_robot.tobytes())
    msg.actions_model = array.array("f", actions_model.tobytes())
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


def _deliver(core, msg) -> None:
    """What the executor's chunk subscription does with a message: decode it, hand it to the
    core."""
    deliver_chunk(msg, core, time.monotonic_ns())


GOOD = np.tile(np.linspace(-0.5, 0.5, 10, dtype=np.float32)[:, None], (1, 3))


@st.composite
def malformed_chunk(draw, kind: str):
    """(build(request) -> ActionChunk message, expected drop code)."""
    if kind == "wrong shape":
        rows, columns = draw(st.integers(0, 60)), draw(st.integers(0, 8))
        if rows >= 1 and columns == 3:
            rows = 0
        values = np.zeros((rows, columns), np.float32)
        consistent = draw(st.booleans())
        if consistent and columns == 3:
            return (lambda request: _chunk_msg(request, values)), "bad_shape"
        if consistent:
            # Names that agree with the width: the columns do not match the validated joints.
            names = [f"j{i}" for i in range(columns)]
            return (lambda request: _chunk_msg(request, values, names=names)), "wrong_action_names"
        # Declared shape disagrees with the data: refused while decoding.
        extra = draw(st.integers(1, 7))
        return (
            lambda request: _chunk_msg(request, GOOD, chunk_length=10 + extra, action_dim=3)
        ), "malformed"
    if kind == "NaN/inf values":
        bad = GOOD.copy()
        row, column = draw(st.integers(0, 9)), draw(st.integers(0, 2))
        bad[row, column] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        in_model = draw(st.booleans())
        return (
            lambda request: _chunk_msg(
                request, GOOD if in_model else bad, bad if in_model else GOOD
            )
        ), "non_finite"
    if kind == "wrong joint names":
        names = draw(
            st.one_of(
                st.permutations(JOINTS).filter(lambda p: tuple(p) != JOINTS),
                st.lists(ros_text(max_size=20), min_size=3, max_size=3).filter(
                    lambda p: tuple(p) != JOINTS
                ),
            )
        )
        return (lambda request: _chunk_msg(request, GOOD, names=names)), "wrong_action_names"
    if kind == "wrong seq/epoch/episode/session/client":
        field_name, code = draw(
            st.sampled_from(
                [
                    ("seq", "stale_seq"),
                    ("epoch", "stale_epoch"),
                    ("episode", "stale_episode"),
                    ("session_id", "foreign_session"),
                    ("client_id", "foreign_client"),
                    ("sent_monotonic_ns", "stale_seq"),
                ]
            )
        )
        if field_name in ("session_id", "client_id"):
            value = draw(ros_text(max_size=64))
        else:
            value = draw(st.integers(0, 2**31))

        def build(request):
            current = getattr(request, field_name)
            different = (
                value
                if value != current
                else (current + "x" if isinstance(current, str) else current + 1)
            )
            return _chunk_msg(request, GOOD, **{field_name: different})

        return build, code
    if kind == "another model":
        fingerprint = draw(
            ros_text(max_size=64).filter(lambda f: f != CAPABILITIES.model_fingerprint)
        )
        return (
            lambda request: _chunk_msg(request, GOOD, model_fingerprint=fingerprint)
        ), "wrong_model"
    raise AssertionError(kind)


EXECUTOR_CLASSES = {
    "wrong shape": 40,
    "NaN/inf values": 30,
    "wrong joint names": 30,
    "wrong seq/epoch/episode/session/client": 40,
    "another model": 15,
}


@pytest.mark.parametrize("kind", list(EXECUTOR_CLASSES))
def test_malformed_chunks_are_dropped_with_their_reason_and_the_real_answer_still_merges(kind):
    tally = Tally(kind, EXECUTOR_IN_PROCESS)

    @bounded(EXECUTOR_CLASSES[kind])
    @given(malformed_chunk(kind))
    def dropped(generated):
        build, code = generated
        tally.tried += 1
        tally.labels.add(code)
        clock, core, prepared = _executor()
        _deliver(core, build(prepared.request))
        drops = core.snapshot(clock()).drops
        ok = drops.counts == {code: 1} and drops.last.startswith(code + ":")
        # The one request in flight is still open: the server's real answer merges.
        _deliver(core, _chunk_msg(prepared.request, GOOD))
        answer = core.wait_for_answer(0.0)
        merged = answer.chunk is not None and core.merge(
            prepared, answer.chunk, answer.received_ns, clock()
        )
        if not merged:
            tally.lost += 1
        tally.survived += ok and merged
        assert ok, f"{kind}: expected one drop {code!r}, got {drops.counts} ({drops.last})"
        telemetry = core.snapshot(clock()).telemetry
        assert merged and telemetry.chunks_merged == 1 and telemetry.queue_depth == 10

    try:
        dropped()
    finally:
        tally.record()


def test_a_forged_chunk_cannot_make_the_drop_reason_arbitrarily_long():
    from lerobot_ros.executor.requests.answer_rules import MAX_DROP_EXPLANATION_CHARS

    clock, core, prepared = _executor()
    _deliver(
        core,
        _chunk_msg(
            prepared.request, GOOD, status=ActionChunk.STATUS_REJECTED, error="e" * 1_000_000
        ),
    )
    drops = core.snapshot(clock()).drops
    assert drops.counts == {"refused": 1} and drops.last.startswith("refused:")
    assert len(drops.last) <= MAX_DROP_EXPLANATION_CHARS + 100
    clock, core, prepared = _executor()
    _deliver(core, _chunk_msg(prepared.request, GOOD, names=["n" * 100_000] * 3))
    drops = core.snapshot(clock()).drops
    assert drops.counts == {"wrong_action_names": 1}
    assert "(300" in drops.last and len(drops.last) <= MAX_DROP_EXPLANATION_CHARS + 100


LOWER, UPPER, MAX_STEP = -1.0, 1.0, 0.1


def test_out_of_limit_chunks_are_clamped_to_the_joint_limits_and_step():
    """Values beyond the limits are a policy's business, not malformed: the
    chunk merges and the safety envelope clamps every command (counted as
    safety_interventions) to the limits and the per-tick step."""
    tally = Tally("out-of-limit values (clamped, not refused)", EXECUTOR_IN_PROCESS)
    finite = st.floats(-1e6, 1e6, width=32)

    @bounded(40)
    @given(st.lists(st.lists(finite, min_size=3, max_size=3), min_size=1, max_size=30))
    def clamped(rows):
        tally.tried += 1
        actions = np.asarray(rows, np.float32)
        clock, core, prepared = _executor(
            joint_lower_limits=[LOWER] * 3,
            joint_upper_limits=[UPPER] * 3,
            max_step_per_tick=MAX_STEP,
        )
        _deliver(core, _chunk_msg(prepared.request, actions))
        answer = core.wait_for_answer(0.0)
        assert answer.chunk is not None and core.merge(
            prepared, answer.chunk, answer.received_ns, clock()
        )
        # the measured position feed() gives, joints mapped by name
        previous = np.array([0.1, 0.2, 0.3])
        commanded = []
        for _ in range(len(rows)):
            command = core.control_tick(clock())
            assert command is not None
            commanded.append(command)
        commanded = np.asarray(commanded)
        steps = np.abs(np.diff(np.vstack([previous, commanded]), axis=0))
        within = bool(
            (commanded >= LOWER - 1e-9).all()
            and (commanded <= UPPER + 1e-9).all()
            and (steps <= MAX_STEP + 1e-6).all()
        )
        outside = bool(((actions < LOWER) | (actions > UPPER)).any())
        tally.survived += within
        assert within, f"commands left the envelope: {commanded} (steps {steps.max()})"
        assert core.snapshot(clock()).telemetry.safety_interventions >= 1 or not outside

    try:
        clamped()
    finally:
        tally.record()


# ------------------------------------------------------------- cross-process server


def _metric(policy_server, name: str) -> float:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{policy_server.http_port}/metrics", timeout=5
    ) as response:
        text = response.read().decode()
    return float(
        next(line for line in text.splitlines() if line.startswith(name + " ")).split()[1]
    )


class HealthyStream:
    """A robot with one request in flight at all times; ``pump`` sends the next when its chunk is
    in.

    It shares the test's thread with the fuzzing robot, so it can only ask
    while the thread spins (not while it builds and publishes an 8 MB
    malformed message): its rate is chunks per second of that listening time.
    """

    def __init__(self, robot: RobotClient) -> None:
        self.robot, self.seq = robot, 0
        self.sent_at: dict[int, float] = {}
        self.answered: list[tuple[float, int, int]] = []  # (time, seq, status)
        self.listening: list[tuple[float, float]] = []  # spans of time it could ask and receive
        self._send()

    def _send(self) -> None:
        self.seq += 1
        self.sent_at[self.seq] = time.monotonic()
        self.robot.send(self.robot.observation(self.seq, state=np.full(6, 0.2)))

    def pump(self) -> None:
        for chunk in self.robot.chunks:
            if chunk.seq == self.seq and not any(seq == chunk.seq for _, seq, _ in self.answered):
                self.answered.append((time.monotonic(), chunk.seq, chunk.status))
                self._send()
                return
        if time.monotonic() - self.sent_at[self.seq] > 10.0:
            self._send()  # counted as lost: never answered within 10 s

    def rate(self, start: float, end: float) -> float:
        listened = sum(
            min(b, end) - max(a, start) for a, b in self.listening if b > start and a < end
        )
        return sum(1 for at, _, _ in self.answered if start <= at < end) / listened

    def lost(self) -> int:
        answered = {seq for _, seq, _ in self.answered}
        return sum(1 for seq in self.sent_at if seq not in answered and seq != self.seq)


def _spin_pumping(node, stream: HealthyStream, predicate, timeout_s: float) -> bool:
    import rclpy

    started = time.monotonic()
    deadline = started + timeout_s
    try:
        while time.monotonic() < deadline:
            if predicate():
                return True
            rclpy.spin_once(node, timeout_sec=0.01)
            stream.pump()
        return predicate()
    finally:
        stream.listening.append((started, time.monotonic()))


# the shared server's default max_image_bytes
CROSS_PROCESS_MAX_IMAGE_BYTES = RequestLimits().max_image_bytes
# The healthy robot keeps at least 40% of its rate (the mean of the quiet
# windows before and after) while malformed input floods the server. Measured
# on shared 2-core machines: 0.6-1.0; a server stalled by bad input gives ~0.
RATE_BOUND = 0.4


@pytest.mark.serial
def test_a_real_server_refuses_malformed_observations_while_a_second_robot_keeps_streaming(
    policy_server, ros_node
):
    healthy, broken = RobotClient(ros_node, "steady_arm"), RobotClient(ros_node, "fuzzed_arm")
    assert healthy.open().accepted
    cross = st.one_of(
        wrong_state_length(),
        non_finite_state(),
        corrupt_jpeg(),
        truncated_jpeg(),
        raw_wrong_byte_count(),
        # Another session id (oversize or not) is refused on arrival, before any chunk and
        # unanswered (its MAC cannot verify): test_hostile.py covers it across processes.
        camera_twice(),
        missing_camera(),
        oversize_payload(CROSS_PROCESS_MAX_IMAGE_BYTES).filter(
            lambda case: case.label != "session_id"
        ),
        wrong_schema_version(),
        unknown_client_or_session(own_client="fuzzed_arm").filter(
            lambda case: case.label == "client"
        ),
    )
    tally = Tally("all observation classes, mixed", SERVER_CROSS_PROCESS)
    try:
        stream = HealthyStream(healthy)
        _spin_pumping(ros_node, stream, lambda: len(stream.answered) >= 2, 30)  # warm
        baseline_start = time.monotonic()
        _spin_pumping(ros_node, stream, lambda: False, 6.0)
        baseline_end = time.monotonic()
        # Opened only now: the server closes sessions silent for 3 s.
        assert broken.open().accepted
        rejected_before = _metric(policy_server, "lerobot_ros_requests_rejected_total")
        seq = [0]

        @bounded(30, shrink=False)
        @given(cross)
        def refused(case):
            tally.tried += 1
            tally.labels.add(case.label)
            seq[0] += 1
            msg = case.build(broken, seq[0])
            broken.send(msg)
            answered = _spin_pumping(
                ros_node, stream, lambda: any(c.seq == seq[0] for c in broken.chunks), 15
            )
            chunk = next((c for c in broken.chunks if c.seq == seq[0]), None)
            ok = (
                answered
                and chunk.status == ActionChunk.STATUS_REJECTED
                and case.expected in chunk.error
            )
            tally.survived += ok
            assert ok, (
                f"{case.label}: expected REJECTED with {case.expected!r}, got "
                f"{chunk and (chunk.status, chunk.error[:300])}"
            )
            assert policy_server.process.poll() is None

        flood_start = time.monotonic()
        refused()
        flood_end = time.monotonic()
        # Before the session's 3 s idle timeout: the fuzzed session itself still works.
        assert broken.request(broken.observation(10_000)).status == ActionChunk.STATUS_OK, (
            "the fuzzed session still works"
        )
        # A second quiet window after the flood: the machine's other load drifts,
        # and the mean of before and after brackets the flood.
        _spin_pumping(ros_node, stream, lambda: False, 6.0)
        after_end = time.monotonic()
        rejected = _metric(policy_server, "lerobot_ros_requests_rejected_total") - rejected_before
        assert rejected == tally.tried, (
            f"{tally.tried} malformed observations, {rejected} counted as rejected"
        )
        # By session: a case claiming another (or an oversize) client id is audited under that
        # claim.
        audit = [
            line
            for line in read_jsonl(policy_server.audit)
            if line.get("session") == broken.session_id
        ]
        assert len([line for line in audit if line["outcome"] == "rejected"]) == tally.tried, (
            "one audit line each"
        )
        before, during = (
            stream.rate(baseline_start, baseline_end),
            stream.rate(flood_start, flood_end),
        )
        after = stream.rate(flood_end, after_end)
        normal = (before + after) / 2
        tally.lost = stream.lost() + sum(
            1 for _, _, status in stream.answered if status != ActionChunk.STATUS_OK
        )
        tally.record(
            healthy_chunks_per_s_before=round(before, 2),
            healthy_chunks_per_s_during=round(during, 2),
            healthy_chunks_per_s_after=round(after, 2),
            rate_bound=RATE_BOUND,
        )
        assert normal > 0 and during >= RATE_BOUND * normal, (
            f"healthy rate {during:.2f}/s during the flood vs {before:.2f}/s before and "
            f"{after:.2f}/s after"
        )
        assert tally.lost == 0
    finally:
        for robot in (healthy, broken):
            if robot.session_id:
                robot.close()  # the fuzzed one may be collected already: a refused close is fine


# ----------------------------------------------------------- cross-process executor

from lerobot_ros.standins.robot_io import POSITIONS  # noqa: E402

FORGED_KINDS = (
    "nan",
    "bad_shape",
    "malformed",
    "wrong_names",
    "wrong_model",
    "stale_seq",
    "stale_epoch",
    "out_of_limit",
)


class Forger:
    """A rogue publisher on a robot's chunk topic: answers each of the robot's
    observations at once (before the server can) with a forged chunk."""

    def __init__(self, node, client_id: str) -> None:
        from lerobot_ros.protocol.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS

        self.node, self.sent = node, {kind: 0 for kind in FORGED_KINDS}
        self.active = False
        self.fingerprint = ""
        self.publisher = node.create_publisher(
            ActionChunk, f"/lerobot/clients/{client_id}/action_chunk", ACTION_CHUNK_QOS
        )
        self.subscription = node.create_subscription(
            Observation,
            f"/lerobot/clients/{client_id}/observation",
            self.on_observation,
            OBSERVATION_QOS,
        )
        self.rng = np.random.default_rng(8)

    def on_observation(self, msg: Observation) -> None:
        if not self.active:
            return
        kind = FORGED_KINDS[sum(self.sent.values()) % len(FORGED_KINDS)]
        self.publisher.publish(self.forge(kind, msg))
        self.sent[kind] += 1

    def forge(self, kind: str, observation: Observation) -> ActionChunk:
        import array

        actions = np.zeros((50, 6), np.float32) + np.asarray(POSITIONS, np.float32)
        names = list(SO101_JOINT_NAMES)
        fields = dict(seq=observation.seq, epoch=observation.epoch)
        if kind == "nan":
            actions[self.rng.integers(50), self.rng.integers(6)] = np.nan
        elif kind == "bad_shape":
            actions = actions[:0]
        elif kind == "wrong_names":
            names = names[::-1]
        elif kind == "stale_seq":
            fields["seq"] = observation.seq - 1
        elif kind == "stale_epoch":
            fields["epoch"] = observation.epoch + 1
        elif kind == "out_of_limit":
            actions = self.rng.uniform(-50, 50, (50, 6)).astype(np.float32)
        msg = ActionChunk(
            schema_version=SCHEMA_VERSION,
            session_id=observation.session_id,
            client_id=observation.client_id,
            episode=observation.episode,
            sent_monotonic_ns=observation.sent_monotonic_ns,
            status=ActionChunk.STATUS_OK,
            action_names=names,
            model_fingerprint="forged" if kind == "wrong_model" else self.fingerprint,
            **fields,
        )
        msg.chunk_length, msg.action_dim = actions.shape
        msg.actions_model = array.array("f", actions.tobytes())
        msg.actions_robot = array.array("f", actions.tobytes())
        if kind == "malformed":
            msg.chunk_length = 51  # declares one row more than it carries
        return msg

    def close(self) -> None:
        self.node.destroy_publisher(self.publisher)
        self.node.destroy_subscription(self.subscription)


LIMIT_MARGIN = 0.4
STEP = 0.05


@pytest.mark.serial
def test_forged_chunks_on_a_running_executors_topic_are_dropped_and_commands_stay_in_limits(
    policy_server, ros_node, tmp_path
):
    from support.executor_processes import Executor, Robot

    robot = Robot(tmp_path, "/forged_arm", commands=[("forward_command", "/forged_arm/commands")])
    lower = [p - LIMIT_MARGIN for p in POSITIONS]
    upper = [p + LIMIT_MARGIN for p in POSITIONS]
    executor = Executor(
        ros_node,
        tmp_path,
        "exec_forged",
        robot.executor_parameters(
            joint_lower_limits=lower,
            joint_upper_limits=upper,
            max_step_per_tick=STEP,
        ),
    )
    forger = Forger(ros_node, "forged_arm")
    tally = Tally("forged chunks on a running executor's topic", EXECUTOR_CROSS_PROCESS)
    try:
        first = executor.wait(
            lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 2, 40, "streaming"
        )
        forger.fingerprint = _capabilities_fingerprint(ros_node)
        baseline = executor.status
        forger.active = True
        started = time.monotonic()
        # Append mode asks once per chunk (50 actions at 30 Hz): two rounds of every kind take ~25
        # s.
        assert spin_until(
            ros_node, lambda: sum(forger.sent.values()) >= 2 * len(FORGED_KINDS), 60
        ), forger.sent
        forger.active = False
        forging_s = time.monotonic() - started
        executor.spin(1.0)  # let the last forged chunk arrive and a status follow
        last = executor.status
        forged = sum(forger.sent.values())
        dropped = last.chunks_dropped - baseline.chunks_dropped
        tally.tried, tally.labels = forged, set(FORGED_KINDS)
        # Each forged chunk costs exactly one drop: itself, as unauthenticated
        # (its MAC is not the session's), before any other check.
        tally.survived = min(dropped, forged)
        commands = [c for c in robot.commands("/forged_arm/commands") if c["t"] >= started]
        values = np.asarray([c["values"] for c in commands])
        within = bool(
            (values >= np.asarray(lower) - 1e-6).all()
            and (values <= np.asarray(upper) + 1e-6).all()
        )
        # The stand-in driver may miss a command on a loaded machine: the step
        # bound holds per control tick, so allow one step per tick elapsed
        # between two recorded commands (plus one for receive-time jitter).
        ticks = np.maximum(1, np.round(np.diff([c["t"] for c in commands]) * 30)) + 1
        excess = (
            np.abs(np.diff(values, axis=0)).max(axis=1) - STEP * ticks
            if len(values) > 1
            else np.zeros(1)
        )
        steps = float(excess.max())
        rate = (last.commands_published - baseline.commands_published) / (
            time.monotonic() - started
        )
        tally.lost = forged - tally.survived
        tally.record(
            forged_by_kind=forger.sent,
            chunks_dropped=dropped,
            commands_checked=len(values),
            command_rate_hz=round(rate, 1),
            safety_interventions=last.safety_interventions - baseline.safety_interventions,
        )
        assert dropped == forged, (
            f"{forged} forged chunks ({forger.sent}) but chunks_dropped rose by {dropped}"
        )
        assert within and steps <= 1e-6, (
            f"a command left the envelope (step exceeds its bound by {steps})"
        )
        assert last.chunks_merged > first.chunks_merged and last.state_name in (
            "STREAMING",
            "DEGRADED",
        ), last.reason
        assert rate >= 0.8 * 30, f"{rate:.1f} commands/s while forged chunks arrived (fps 30)"
        assert forging_s < 60
    finally:
        forger.close()
        executor.stop()
        robot.stop()


def _capabilities_fingerprint(node) -> str:
    from lerobot_ros.srv import GetStatus
    from support.robot_client import call

    client = node.create_client(GetStatus, "/lerobot/get_status")
    try:
        return call(node, client, GetStatus.Request()).status.capabilities.model_fingerprint
    finally:
        node.destroy_client(client)
