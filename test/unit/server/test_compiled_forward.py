"""A compiled forward (compile_mode) through the real request path, no ROS graph.

torch.compile runs for real with the ``aot_eager`` backend: dynamo captures
the policy's forward and AOTAutograd traces it, with eager kernels, in
seconds; inductor's code generation (the production backend) takes 40 s for
this ACT on these 2 cores and is measured in bench/compiled_forward.py, not
here. What is pinned: compilation happens during the warm-up, for a batch of
one and a batch of two; afterwards no batch size compiles again; and every
chunk equals the eager forward's within 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.wire.data_plane import chunk_from_msg
from support.request_harness import Harness, act_runner

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_compiled_forward")

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def compiled(act_checkpoint):
    """A freshly loaded ACT runner whose forward is compiled and warmed up, and the compilations
    the warm-up ran."""
    from torch._dynamo.utils import counters

    from lerobot_ros.server.policy.warmup import warm_up

    runner = act_runner(act_checkpoint)
    runner.compile_forward("default", "aot_eager")
    before = counters["stats"]["unique_graphs"]
    durations = warm_up(runner, 2)
    return runner, counters["stats"]["unique_graphs"] - before, len(durations)


def _chunks(harness, count):
    return [chunk_from_msg(msg) for _, msg in harness.published[-count:]]


def test_the_warm_up_compiles_single_and_batched_forwards(compiled):
    runner, graphs, forwards = compiled
    assert runner.compiled == "aot_eager, mode default"
    assert forwards == 3, "two requests alone, then one forward pass of two sessions"
    assert graphs >= 2, (
        "expected a graph for a batch of one and one for a dynamic batch, dynamo compiled "
        f"{graphs}"
    )


def test_compiled_chunks_equal_eager_ones_alone_and_in_batches_without_compiling_again(
    compiled, runner
):
    from torch._dynamo.utils import counters

    compiled_runner, _, _ = compiled
    fast, eager = Harness(compiled_runner), Harness(runner)
    rng = np.random.default_rng(3)
    observations = [
        (rng.uniform(-1, 1, 6), rng.integers(0, 255, (96, 128, 3), np.uint8)) for _ in range(3)
    ]
    before = counters["stats"]["unique_graphs"]
    sessions = [fast.session, fast.open("arm_2"), fast.open("arm_3")]
    answered = fast.send_batch(
        [
            fast.observation(s, seq=1, state=state, frame=frame)
            for s, (state, frame) in zip(sessions, observations, strict=False)
        ]
    )
    assert answered.forwards == [3]
    batched = _chunks(fast, 3)
    fast.send(fast.observation(seq=2, state=observations[0][0], frame=observations[0][1]))
    alone = _chunks(fast, 1)[0]
    assert counters["stats"]["unique_graphs"] == before, (
        "a batch of three or one request alone compiled again"
    )
    for (state, frame), chunk in zip(observations, batched, strict=False):
        eager.send(eager.observation(seq=1, state=state, frame=frame))
        reference = _chunks(eager, 1)[0]
        assert chunk.status == reference.status == ActionChunk.STATUS_OK, chunk.error
        for space in ("actions_model", "actions_robot"):
            difference = float(np.abs(getattr(chunk, space) - getattr(reference, space)).max())
            assert difference <= TOLERANCE, f"{space}: compiled differs from eager by {difference}"
    difference = float(np.abs(alone.actions_robot - batched[0].actions_robot).max())
    assert difference <= TOLERANCE, (
        f"the compiled forward alone differs from its batch of three by {difference}"
    )


def test_an_unknown_backend_is_refused_naming_the_known_ones(act_checkpoint, runner):
    with pytest.raises(
        ValueError,
        match=r"compile_backend 'tensorrt_typo' is not a torch.compile backend .*'inductor'",
    ):
        runner.compile_forward("default", "tensorrt_typo")
    assert runner.compiled == ""
