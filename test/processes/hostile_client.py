"""A hostile process on the ROS graph: its own rclpy node, none of the executor's code.

It knows what any process on a plain DDS graph can learn: the server's
namespace, a victim robot's client id and session id (from the victim's
public ~/status), and whatever the victim publishes on its observation topic
or receives on its chunk topic. It tries, against the live victim session:
replace (open with its client id), close, reset, replaying and forging
observations, forging chunks, and squatting the server's capacity; then it
prints one JSON line per attempt with what the server answered (services)
or how many messages it sent (topics: the test reads the outcome from the
server's audit log and the victim's status).

usage: hostile_client.py SERVER_NAMESPACE VICTIM_CLIENT_ID VICTIM_SESSION_ID
"""

import array
import json
import os
import sys
import time

import numpy as np
import rclpy

from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.protocol.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
from lerobot_ros.srv import CloseSession, GetStatus, OpenSession, ResetEpisode

CALL_TIMEOUT_S = 15.0
FORGED_CHUNKS = 6
OBSERVATION_GAP_S = 0.2
OBSERVATION_SENDS = 3
#: Actions a forged chunk carries: far from the arm's home pose, so a merged one would show in the
#: commands.
FORGED_ACTION = 1.5


def report(attempt: str, **outcome) -> None:
    print(json.dumps({"attempt": attempt, **outcome}), flush=True)


class Hostile:
    def __init__(self, namespace: str, victim: str) -> None:
        self.node = rclpy.create_node(f"hostile_{os.getpid()}")
        self.namespace, self.victim = namespace, victim
        self.observations: list[Observation] = []
        self.chunks: list[ActionChunk] = []
        self.forging, self.forged = False, 0
        topic = f"{namespace}/clients/{victim}"
        self.node.create_subscription(
            Observation, f"{topic}/observation", self.on_observation, OBSERVATION_QOS
        )
        self.node.create_subscription(
            ActionChunk, f"{topic}/action_chunk", self.chunks.append, ACTION_CHUNK_QOS
        )
        self.observation_pub = self.node.create_publisher(
            Observation, f"{topic}/observation", OBSERVATION_QOS
        )
        self.chunk_pub = self.node.create_publisher(
            ActionChunk, f"{topic}/action_chunk", ACTION_CHUNK_QOS
        )

    def call(self, kind, name: str, request):
        client = self.node.create_client(kind, f"{self.namespace}/{name}")
        try:
            if not client.wait_for_service(timeout_sec=CALL_TIMEOUT_S):
                raise SystemExit(f"{name} not available")
            future = client.call_async(request)
            rclpy.spin_until_future_complete(self.node, future, timeout_sec=CALL_TIMEOUT_S)
            if future.result() is None:
                raise SystemExit(f"{name} did not answer")
            return future.result()
        finally:
            self.node.destroy_client(client)

    def spin(self, seconds: float, until=lambda: False) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until():
                return True
            rclpy.spin_once(self.node, timeout_sec=0.02)
        return until()

    def open_request(self, client_id: str, **fields) -> OpenSession.Request:
        return OpenSession.Request(
            client_id=client_id,
            schema_version=Observation.CURRENT_SCHEMA_VERSION,
            action_names=list(SO101_JOINT_NAMES),
            state_dim=6,
            camera_names=[FRONT_CAMERA],
            fps=30.0,
            **fields,
        )

    # ------------------------------------------------------------ topics

    def on_observation(self, msg: Observation) -> None:
        self.observations.append(msg)
        if self.forging and self.forged < FORGED_CHUNKS:
            self.chunk_pub.publish(self.forged_chunk(msg))
            self.forged += 1

    def forged_chunk(self, answering: Observation) -> ActionChunk:
        """A well-formed chunk answering the victim's request, echoing every visible id; a MAC
        guessed or copied."""
        actions = np.full((50, 6), FORGED_ACTION, np.float32)
        msg = ActionChunk(
            schema_version=1,
            session_id=answering.session_id,
            client_id=answering.client_id,
            seq=answering.seq,
            episode=answering.episode,
            epoch=answering.epoch,
            sent_monotonic_ns=answering.sent_monotonic_ns,
            status=ActionChunk.STATUS_OK,
            action_names=list(SO101_JOINT_NAMES),
            model_fingerprint=self.chunks[-1].model_fingerprint if self.chunks else "",
        )
        msg.chunk_length, msg.action_dim = actions.shape
        msg.actions_model = msg.actions_robot = array.array("f", actions.tobytes())
        # Every other one carries the MAC of a real chunk the victim received.
        msg.mac = (
            self.chunks[-1].mac
            if self.chunks and self.forged % 2
            else array.array("B", os.urandom(32))
        )
        return msg

    # ---------------------------------------------------------- attempts

    def services(self, session_id: str) -> None:
        for attempt, request in (
            ("replace", self.open_request(self.victim)),
            ("replace_with_guessed_secret", self.open_request(self.victim, owner_secret="0" * 32)),
        ):
            answer = self.call(OpenSession, "open_session", request)
            report(
                attempt,
                accepted=answer.accepted,
                refusal=answer.refusal,
                message=answer.message,
                secret_leaked=bool(answer.session_secret),
            )
        for attempt, secret in (
            ("close", ""),
            ("close_with_guessed_secret", os.urandom(16).hex()),
        ):
            answer = self.call(
                CloseSession,
                "close_session",
                CloseSession.Request(
                    client_id=self.victim, session_id=session_id, session_secret=secret
                ),
            )
            report(attempt, success=answer.success, message=answer.message)
        answer = self.call(
            ResetEpisode,
            "reset_episode",
            ResetEpisode.Request(client_id=self.victim, session_id=session_id, episode=99),
        )
        report("reset", success=answer.success, message=answer.message)

    def observations_replayed_and_forged(self) -> None:
        assert self.spin(10.0, lambda: len(self.observations) >= 2), (
            "the victim publishes no observations"
        )
        older, latest = self.observations[-2], self.observations[-1]
        self.publish_observation(latest)  # exact copy, valid MAC: a replay
        self.publish_observation(older)  # older seq: out of order
        report("replay_observation", seqs=[latest.seq, older.seq])
        altered = self.observations[-1]
        altered.seq += (
            1_000_000  # far ahead: would pass the seq rule, and lock the victim out if admitted
        )
        altered.state = [0.9] * 6
        self.publish_observation(altered)
        unsigned = Observation(
            session_id=altered.session_id,
            client_id=self.victim,
            seq=altered.seq + 1,
            epoch=altered.epoch,
            schema_version=1,
            state=[0.0] * 6,
        )
        self.publish_observation(unsigned)
        report("forge_observation", seqs=[altered.seq, unsigned.seq])

    def publish_observation(self, msg: Observation) -> None:
        """Publish ``msg`` a few times, spaced: the topic keeps only its newest message (keep-last
        1),
        so one the victim's next observation overtakes before the server reads it is sent again."""
        for _ in range(OBSERVATION_SENDS):
            self.observation_pub.publish(msg)
            self.spin(OBSERVATION_GAP_S)

    def chunks_forged(self) -> None:
        self.spin(5.0, lambda: bool(self.chunks))
        self.forging = True
        self.spin(30.0, lambda: self.forged >= FORGED_CHUNKS)
        self.forging = False
        report("forge_chunks", sent=self.forged)

    def squat(self) -> None:
        """Open sessions for made-up robots, never stream, until the server is full."""
        opened, refusal, first_open = [], None, time.monotonic()
        for index in range(8):
            answer = self.call(
                OpenSession, "open_session", self.open_request(f"squatter_{os.getpid()}_{index}")
            )
            if not answer.accepted:
                refusal = answer
                break
            opened.append((answer.session_id, answer.session_secret))
        if not opened:
            report("squat", opened=0, message=refusal.message if refusal else "")
            return
        self.spin(2.5)
        # Re-open the first with its own secret: that must not extend a session that never
        # streamed.
        again = self.call(
            OpenSession,
            "open_session",
            self.open_request(f"squatter_{os.getpid()}_0", owner_secret=opened[0][1]),
        )

        def squatters() -> int:
            return self.call(GetStatus, "get_status", GetStatus.Request()).status.active_sessions

        full = squatters()
        self.spin(15.0, lambda: squatters() <= full - len(opened))
        report(
            "squat",
            opened=len(opened),
            refusal=refusal.refusal if refusal else None,
            message=refusal.message if refusal else "",
            reopened=again.accepted,
            collected_after_s=round(time.monotonic() - first_open, 2),
            active_after=squatters(),
            active_full=full,
        )


def main() -> None:
    namespace, victim, session_id = sys.argv[1:4]
    rclpy.init()
    hostile = Hostile(namespace, victim)
    try:
        hostile.services(session_id)
        hostile.observations_replayed_and_forged()
        hostile.chunks_forged()
        hostile.squat()
    finally:
        hostile.node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
