"""The pipelined worker with a torch-free runner: stages overlap, and every invariant of the serial
path holds.

Gates (test/support/fake_runner.py) hold a stage until the test opens it, so
each ordering below is forced, not hoped for from sleeps.
"""

import threading
import time

import numpy as np
import pytest

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.telemetry import ServerStats
from lerobot_ros.server.requests.pipeline import PipelinedWorker, PreparedQueue, admission_workers
from lerobot_ros.server.requests.scheduler import RoundRobinScheduler
from lerobot_ros.server.requests.serial_worker import DRAINING
from support.fake_runner import FakeRunner
from support.request_harness import Harness


class Log:
    def __init__(self):
        self.lines = []

    def warning(self, text):
        self.lines.append(("warning", text))

    def error(self, text):
        self.lines.append(("error", text))


class Rig:
    """A pipeline over a fake runner, sessions ``arm``, ``b``, ``c``, ``d`` open."""

    def __init__(self, workers=1, max_batch_size=8, window_s=0.0):
        self.runner = FakeRunner()
        self.harness = Harness(self.runner)
        self.sessions = {
            "arm": self.harness.session,
            **{key: self.harness.open(key) for key in "bcd"},
        }
        self.scheduler = RoundRobinScheduler(
            max_batch_size=max_batch_size, batch_window_s=window_s
        )
        self.stats, self.log = ServerStats(), Log()
        self.worker = PipelinedWorker(
            self.scheduler, self.harness.handler, self.stats, self.log, workers
        )
        self.worker.start()

    def send(self, client, seq=0, value=None):
        state = np.full(6, float(seq) if value is None else value, np.float32)
        self.scheduler.deposit(
            client, self.harness.observation(self.sessions[client], seq=seq, state=state)
        )

    def audited(self, client, seq):
        return [
            line for line in self.harness.audit if line["client"] == client and line["seq"] == seq
        ]

    def wait_audited(self, client, seq):
        self.runner.wait_for(lambda: self.audited(client, seq))
        return self.audited(client, seq)[0]

    def audit_times(self) -> dict:
        """(client, seq) -> when its audit line was written, filled from now on."""
        written_at = {}
        audit = self.harness.handler.audit

        def timed_audit(line):
            written_at[(line["client"], line["seq"])] = time.monotonic()
            audit(line)

        self.harness.handler.audit = timed_audit
        return written_at

    def chunks(self, client):
        return [chunk for key, chunk in self.harness.published if key == client]

    def stop(self):
        self.worker.stop()
        self.worker.join(10.0)
        assert not self.worker.is_alive()


@pytest.fixture
def rig():
    rigs = []

    def make(**kwargs):
        rigs.append(Rig(**kwargs))
        return rigs[-1]

    yield make
    for made in rigs:
        for gate in made.runner.gates.values():
            gate.set()
        made.stop()


def test_the_next_request_is_prepared_while_a_forward_runs(rig):
    r = rig()
    gate = r.runner.close_gate("forward", "arm")
    r.send("arm")
    r.runner.wait_for(lambda: r.runner.happened("forward", "start", "arm"))
    r.send("b")
    r.runner.wait_for(lambda: r.runner.happened("prepare", "end", "b"))
    assert not r.runner.happened("forward", "end", "arm")  # b was prepared during arm's forward
    gate.set()
    assert r.wait_audited("b", 0)["outcome"] == "ok"
    prepare_threads = {e.thread for e in r.runner.events if e.stage == "prepare"}
    forward_threads = {e.thread for e in r.runner.events if e.stage == "forward"}
    assert forward_threads == {"lerobot_ros-inference"} and not prepare_threads & forward_threads


def test_a_slow_publish_does_not_delay_the_next_forward(rig):
    r = rig()
    publish_gate = threading.Event()
    publish = r.harness.handler.publish

    def slow_publish(client, chunk):
        if client == "arm":
            assert publish_gate.wait(10.0)
        publish(client, chunk)

    r.harness.handler.publish = slow_publish
    r.send("arm")
    r.runner.wait_for(lambda: r.runner.happened("finish", "end", "arm"))
    r.send("b")
    # while arm's publish is still held
    r.runner.wait_for(lambda: r.runner.happened("forward", "end", "b"))
    assert not r.chunks("arm")
    publish_gate.set()
    assert (
        r.wait_audited("b", 0)["outcome"] == "ok" and r.wait_audited("arm", 0)["outcome"] == "ok"
    )


def test_requests_ready_when_the_forward_frees_share_the_next_one(rig):
    r = rig(workers=2)
    gate = r.runner.close_gate("forward", "arm")
    r.send("arm")
    r.runner.wait_for(lambda: r.runner.happened("forward", "start", "arm"))
    for client in "bcd":
        r.send(client)
    r.runner.wait_for(lambda: all(r.runner.happened("prepare", "end", c) for c in "bcd"))
    gate.set()
    for client in "bcd":
        line = r.wait_audited(client, 0)
        assert line["batch_size"] == 3 and line["forward_wait_ms"] > 0
    assert [sorted(clients) for clients in r.runner.forwards()] == [["arm"], ["b", "c", "d"]]
    assert r.stats.forwards == 2 and r.stats.batch_size_mean() == 2.0


def test_an_observation_overtaken_while_prepared_is_never_forwarded(rig):
    r = rig()
    gate = r.runner.close_gate("prepare", "arm")
    r.send("arm", seq=0)
    r.runner.wait_for(lambda: r.runner.happened("prepare", "start", "arm", 0))
    r.send("arm", seq=1)
    gate.set()
    first, second = r.wait_audited("arm", 0), r.wait_audited("arm", 1)
    assert first["outcome"] == "superseded" and second["outcome"] == "ok"
    assert not r.runner.happened("forward", "start", "arm", 0)
    chunks = r.chunks("arm")
    assert [chunk.seq for chunk in chunks] == [1] and chunks[0].superseded == 1
    assert r.stats.observations_superseded == 1 and r.stats.requests_served == 1


def test_one_session_is_never_twice_in_the_pipeline(rig):
    r = rig(workers=3)
    audited_at = r.audit_times()
    flood = threading.Thread(target=lambda: [r.send("arm", seq=seq) for seq in range(400)])
    flood.start()
    for seq in range(20):
        r.send("b", seq=seq)
        r.runner.wait_for(lambda seq=seq: r.audited("b", seq))
    flood.join(10.0)
    r.stop()
    # From its prepare's start to its audit line, no other request of the same session is prepared.
    for client in ("arm", "b"):
        intervals = sorted(
            (event.at, audited_at[(client, event.seqs[0])])
            for event in r.runner.events
            if event.stage == "prepare" and event.phase == "start" and event.clients == (client,)
        )
        assert len(intervals) > (1 if client == "arm" else 19)
        assert all(
            end <= next_start
            for (_, end), (next_start, _) in zip(intervals, intervals[1:], strict=False)
        ), client
    # The stop drains: under load, flood observations still in the mailbox are answered REJECTED
    # without actions.
    answered = [chunk for chunk in r.chunks("arm") if chunk.status == ActionChunk.STATUS_OK]
    assert answered and all(chunk.actions_robot[0] == chunk.seq for chunk in answered)


def test_stop_delivers_what_every_stage_holds_and_refuses_what_waits(rig):
    r = rig(workers=1)
    forward_gate = r.runner.close_gate("forward", "arm")
    prepare_gate = r.runner.close_gate("prepare", "c")
    r.send("arm")
    r.runner.wait_for(lambda: r.runner.happened("forward", "start", "arm"))
    r.send("b")
    # prepared, waiting for the forward
    r.runner.wait_for(lambda: r.runner.happened("prepare", "end", "b"))
    r.send("c")
    r.runner.wait_for(lambda: r.runner.happened("prepare", "start", "c"))  # in the admission stage
    r.send("d")  # waits in its mailbox: the one admission thread is busy
    stopper = threading.Thread(target=r.worker.stop)
    stopper.start()
    stopper.join(10.0)
    forward_gate.set()
    prepare_gate.set()
    r.worker.join(10.0)
    assert not r.worker.is_alive()
    outcomes = {client: r.wait_audited(client, 0)["outcome"] for client in ["arm", "b", "c", "d"]}
    assert outcomes == {"arm": "ok", "b": "ok", "c": "ok", "d": "rejected"}
    assert r.audited("d", 0)[0]["error"] == DRAINING
    assert all(
        chunk.status == ActionChunk.STATUS_OK for c in ["arm", "b", "c"] for chunk in r.chunks(c)
    )


@pytest.mark.parametrize("stage", ["prepare", "forward", "finish"])
def test_an_exception_in_a_stage_answers_only_its_own_request(rig, stage):
    r = rig(workers=2)
    r.runner.raise_in[(stage, "b")] = RuntimeError(f"{stage} broke")
    gate = r.runner.close_gate("forward", "arm")
    r.send("arm")
    r.runner.wait_for(lambda: r.runner.happened("forward", "start", "arm"))
    r.send("b")
    r.send("c", value=7.0)
    r.runner.wait_for(lambda: all(r.runner.happened("prepare", "end", c) for c in "bc"))
    gate.set()
    failed, ok = r.wait_audited("b", 0), r.wait_audited("c", 0)
    assert failed["outcome"] == "failed" and f"{stage} broke" in failed["error"]
    assert ok["outcome"] == "ok" and r.chunks("c")[0].actions_robot[0] == 7.0
    # The stages outlive it: the failed session is served again.
    r.runner.raise_in.clear()
    r.send("b", seq=1)
    assert r.wait_audited("b", 1)["outcome"] == "ok"


def test_a_refused_observation_is_answered_without_a_forward(rig):
    r = rig()
    msg = r.harness.observation(r.sessions["arm"], seq=0)
    msg.state = [1.0, 2.0]
    r.scheduler.deposit("arm", msg)
    line = r.wait_audited("arm", 0)
    assert line["outcome"] == "rejected" and "state has 2 values" in line["error"]
    assert r.runner.forwards() == []


def test_the_continuous_batcher_waits_only_for_requests_being_admitted():
    prepared = PreparedQueue()
    assert prepared.take_all(8, 1.0, 0.01) == []
    prepared.put("first")
    assert prepared.take_all(8, 5.0, 0.01) == ["first"]  # nothing in admission: no window wait
    prepared.admitting(+1)
    prepared.put("second")

    def join_later():
        prepared.put("third")
        prepared.admitting(-1)

    timer = threading.Timer(0.05, join_later)
    timer.start()
    assert prepared.take_all(8, 5.0, 0.01) == ["second", "third"]
    timer.join()
    for item in range(5):
        prepared.put(item)
    assert prepared.take_all(3, 0.0, 0.01) == [0, 1, 2] and len(prepared) == 2


def test_admission_workers_default_from_the_usable_cores():
    import os

    cores = len(os.sched_getaffinity(0))
    assert admission_workers(3) == 3
    assert admission_workers(0) == max(1, min(4, cores - 1))
    with pytest.raises(ValueError, match="admission_workers must be >= 1"):
        PipelinedWorker(RoundRobinScheduler(), None, None, None, 0)


def test_a_robot_asking_far_faster_than_it_declared_cannot_starve_another():
    """An underestimated rate: ``arm`` floods valid observations back to back while ``b`` asks one
    at a time.
    ``arm`` gets at most one request per forward; every request of ``b`` is answered within the
    forward in
    progress and its own (plus one for its admission), never skipped."""
    r = Rig(workers=1)
    r.runner.forward_s = 0.01
    answered_at = r.audit_times()
    stop = threading.Event()

    def flood():
        seq = 0
        while not stop.is_set():
            r.send("arm", seq=seq)
            seq += 1
            time.sleep(0.0005)

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        sent_at = {}
        for seq in range(15):
            sent_at[seq] = time.monotonic()
            r.send("b", seq=seq)
            r.runner.wait_for(lambda seq=seq: ("b", seq) in answered_at)
    finally:
        stop.set()
        flooder.join(10.0)
        r.stop()
    forward_starts = [
        event.at
        for event in r.runner.events
        if event.stage == "forward" and event.phase == "start"
    ]
    waited = [
        sum(sent_at[seq] < start < answered_at[("b", seq)] for start in forward_starts)
        for seq in range(15)
    ]
    assert all(r.audited("b", seq)[0]["outcome"] == "ok" for seq in range(15))
    assert max(waited) <= 3, f"forwards b waited through: {waited}"
    flood_served = sum(
        1 for line in r.harness.audit if line["client"] == "arm" and line["outcome"] == "ok"
    )
    # it really flooded; newest won
    assert flood_served >= 5 and r.stats.observations_superseded > flood_served
