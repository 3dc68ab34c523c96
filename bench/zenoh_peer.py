"""LeRobot's remote-inference draft server (Zenoh), driven with its own wire schema and codec.

The server is the draft's ``lerobot.policy_server`` (``../shared/peers/lerobot_zenoh_server``,
not part of LeRobot 0.6.1 or of this project): it is run, never copied in, from an
overlay made as its README says, a copy of the installed ``lerobot`` package with
the draft's ``policy_server/`` added, first on ``PYTHONPATH`` of the peer process
only. The process is this script in ``serve`` mode: it builds the draft's
``PolicyServerManifest`` (CPU, Zenoh peer listening on loopback TCP, no health
port), then ``PolicyServer(manifest)``, ``load_policy()``, ``start()`` and
``serve_forever()``. For the benchmark's split it wraps the policy's
``predict_action_chunk`` with a timer and appends one JSON line per request
(seq, model seconds) to a file: the draft reports only ``inference_ms``, which
spans its prepare + preprocess + forward + postprocess.

The client side (``ZenohPeer``, in the benchmark's process) speaks the draft's
protocol with the draft's own ``schema`` and ``codec`` modules, as its
``remote_engine_remote.py`` does: the status and session queryables, a
liveliness token, one observation published (msgpack body, JPEG q90 frames,
the packed header as attachment) and the chunk awaited on its action key.

What it does with frames: they reach the policy at the resolution they
arrive (``prepare_observation_for_inference`` does not resize), so a
96x128 ACT sent 480x640 frames runs its ResNet on 480x640.

usage (serve mode, started by ZenohPeer): PYTHONPATH=<overlay> python -m bench.zenoh_peer serve
       CKPT PORT TIMES_FILE [DEVICE]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

PEER_SOURCE = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "peers"
    / "lerobot_zenoh_server"
    / "policy_server"
)
SERVICE_TASK = "bench"


def peer_source() -> Path:
    """The draft's policy_server folder: $LEROBOT_ZENOH_PEER, or ../shared/peers/... beside the
    checkout."""
    configured = os.environ.get("LEROBOT_ZENOH_PEER")
    for candidate in filter(
        None,
        (configured, PEER_SOURCE, Path("/work/shared/peers/lerobot_zenoh_server/policy_server")),
    ):
        if (Path(candidate) / "server.py").is_file():
            return Path(candidate)
    raise FileNotFoundError(
        "the LeRobot Zenoh draft server is not here: set LEROBOT_ZENOH_PEER to its policy_server "
        "folder"
    )


def make_overlay(directory: Path) -> Path:
    """A copy of the installed lerobot package with the draft's policy_server added (the peer
    README's recipe)."""
    import lerobot

    overlay = directory / "overlay"
    if not (overlay / "lerobot" / "policy_server" / "server.py").is_file():
        shutil.copytree(Path(lerobot.__file__).parent, overlay / "lerobot", dirs_exist_ok=True)
        shutil.copytree(peer_source(), overlay / "lerobot" / "policy_server", dirs_exist_ok=True)
    return overlay


def serve(checkpoint: str, port: int, times_file: str, device: str = "cpu") -> None:
    """The draft's server on ``checkpoint`` (runs under the overlay), its forwards timed into
    ``times_file``."""
    import torch
    from lerobot.policy_server.manifest import ModelSpec, PolicyServerManifest, ZenohSpec
    from lerobot.policy_server.server import PolicyServer

    manifest = PolicyServerManifest(
        model=ModelSpec(repo_or_path=checkpoint, device=device),
        zenoh=ZenohSpec(mode="peer", listen_endpoints=[f"tcp/127.0.0.1:{port}"]),
        default_task=SERVICE_TASK,
        health_port=0,
        session_idle_timeout_s=3600.0,
    )
    server = PolicyServer(manifest)
    server.load_policy()
    log = open(times_file, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    current = {"seq": -1}
    run_request = server.run_inference_request

    def timed_request(session, header, obs):
        current["seq"] = header.seq_id
        return run_request(session, header, obs)

    forward = server._policy.predict_action_chunk

    def timed_forward(*args, **kwargs):
        started = time.perf_counter()
        actions = forward(*args, **kwargs)
        if actions.device.type == "cuda":
            torch.cuda.synchronize(actions.device)
        log.write(
            json.dumps({"seq": current["seq"], "model_s": time.perf_counter() - started}) + "\n"
        )
        return actions

    server.run_inference_request = timed_request
    server._policy.predict_action_chunk = timed_forward
    server.start()
    print("zenoh peer serving", flush=True)
    server.serve_forever()


class ZenohPeer:
    """The draft server as a process, and a client written from its schema and codec."""

    def __init__(self, directory: Path, timeout_s: float = 240.0, env: dict | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.overlay = make_overlay(directory)
        import lerobot

        # The client imports the draft's schema and codec from the same overlay.
        lerobot.__path__.append(str(self.overlay / "lerobot"))
        from lerobot.policy_server import codec, schema

        self.codec, self.schema = codec, schema
        self.timeout_s = timeout_s
        self.env = env if env is not None else dict(os.environ)
        self.process = None
        self.serving = ""  # the checkpoint the process was started on
        self.session = None

    def start(self, checkpoint: Path, device: str = "cpu") -> None:
        """Spawn a server process on ``checkpoint`` and return at once (it imports torch for
        seconds meanwhile)."""
        from bench.grpc_peer import free_port

        self.close()
        self.port = port = free_port()
        self.serving = str(checkpoint)
        self.times = self.directory / f"model_times_{port}.jsonl"
        self.console = self.directory / f"console_{port}.log"
        environment = {
            **self.env,
            "PYTHONPATH": os.pathsep.join((str(self.overlay), self.env.get("PYTHONPATH", ""))),
        }
        with self.console.open("w") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.zenoh_peer",
                    "serve",
                    str(checkpoint),
                    str(port),
                    str(self.times),
                    device,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                env=environment,
            )

    def load(
        self,
        checkpoint: Path,
        joint_names,
        cameras: list[str],
        fps: float = 30.0,
        device: str = "cpu",
    ) -> None:
        """A server process on ``checkpoint`` (the one ``start`` spawned, or a new one), serving;
        open a session
        for ``cameras`` (policy feature names)."""
        import zenoh

        from bench import common

        if self.process is None or self.serving != str(checkpoint):
            self.start(checkpoint, device)
        port = self.port
        common.wait_for_log(self.process, self.console, "zenoh peer serving", self.timeout_s)
        config = zenoh.Config()
        config.insert_json5("mode", json.dumps("peer"))
        config.insert_json5("scouting/multicast/enabled", "false")
        config.insert_json5("connect/endpoints", json.dumps([f"tcp/127.0.0.1:{port}"]))
        self.session = zenoh.open(config)
        schema, codec = self.schema, self.codec
        self.prefix = schema.service_prefix(str(checkpoint), "main", SERVICE_TASK)
        self.client = "bench"
        self.token = self.session.liveliness().declare_token(
            schema.client_alive_key(self.prefix, self.client)
        )
        opened = schema.SessionOpenMsg(
            client_uuid=self.client,
            policy_type="act",
            fps=fps,
            action_names=list(joint_names),
            camera_names=list(cameras),
            state_dim=len(joint_names),
            task=SERVICE_TASK,
        )
        ack = codec.decode_session_ack(
            self._query(schema.session_key(self.prefix), codec.encode_session_open(opened))
        )
        if not ack.accepted:
            raise RuntimeError(f"the Zenoh draft server refused the session: {ack.error}")
        self.answers: list = []
        self.answered = threading.Condition()
        self.subscriber = self.session.declare_subscriber(
            schema.action_key(self.prefix, self.client), self._on_chunk
        )
        self.publisher = self.session.declare_publisher(schema.obs_key(self.prefix, self.client))
        time.sleep(0.5)  # let the subscriber's declaration reach the server before the first put

    def _query(self, key: str, payload: bytes) -> bytes:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            for reply in self.session.get(key, payload=payload, timeout=5.0):
                if reply.ok is not None:
                    return reply.ok.payload.to_bytes()
            time.sleep(0.2)
        raise RuntimeError(f"no answer from the Zenoh draft server on {key}")

    def _answer_to(self, seq: int):
        return next(
            (
                answer
                for answer in self.answers
                if self.schema.MsgHeader.unpack(answer[1]).seq_id == seq
            ),
            None,
        )

    def _on_chunk(self, sample) -> None:
        with self.answered:
            self.answers.append(
                (time.perf_counter(), sample.attachment.to_bytes(), sample.payload.to_bytes())
            )
            self.answered.notify_all()

    def first_answer(self, state, frames: dict, timeout_s: float = 240.0) -> None:
        """Send seq-0 observations until one is answered: a chunk published before the server's
        action
        publisher has heard of our subscriber is lost, and the draft does not publish it again."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.request(0, state, frames, attempt_timeout_s=10.0)
                return
            except TimeoutError:
                continue
        raise RuntimeError(
            f"the Zenoh draft server answered nothing within {timeout_s:.0f} s\n"
            + self.console.read_text()[-2000:]
        )

    def request(
        self,
        seq: int,
        state,
        frames: dict,
        jpeg_quality: int = 90,
        attempt_timeout_s: float = 120.0,
    ) -> dict:
        """One observation -> its chunk, decoded; client-side durations in seconds (TimeoutError:
        no answer)."""
        schema, codec = self.schema, self.codec
        started = time.perf_counter()
        observation = schema.ObservationMsg(
            state=state, images=dict(frames), task=SERVICE_TASK, jpeg_quality=jpeg_quality
        )
        body = codec.encode_observation(observation)
        header = schema.MsgHeader(
            seq_id=seq, episode_id=0, client_mono_ns=time.monotonic_ns()
        ).pack()
        encoded = time.perf_counter()
        with self.answered:
            self.answers.clear()
        self.publisher.put(body, attachment=header)
        with self.answered:
            # A late answer to an earlier request (a retried seq 0) is skipped, not taken for this
            # one's.
            if not self.answered.wait_for(lambda: self._answer_to(seq), timeout=attempt_timeout_s):
                raise TimeoutError(
                    f"no chunk from the Zenoh draft server for request {seq}\n"
                    + self.console.read_text()[-2000:]
                )
            received, _, payload = self._answer_to(seq)
        chunk = codec.decode_action_chunk(payload)
        decoded = time.perf_counter()
        if chunk.chunk_robot is None:
            raise RuntimeError(f"the Zenoh draft server answered request {seq} without a chunk")
        return {
            "encode": encoded - started,
            "wire": received - encoded,
            "merge": decoded - received,
            "round_trip_client": decoded - started,
            "server_inference_ms": chunk.inference_ms,
            "queue_wait": chunk.queue_wait_ms / 1000,
            "bytes": len(body),
        }

    def model_times(self) -> dict[int, float]:
        """seq -> the policy forward's duration (s), as the serving process timed it."""
        lines = self.times.read_text().splitlines() if self.times.is_file() else []
        return {record["seq"]: record["model_s"] for record in map(json.loads, lines)}

    def close(self) -> None:
        from lerobot_ros.processes import stop

        if self.session is not None:
            self.session.close()
            self.session = None
        if self.process is not None:
            stop(self.process)
            self.process = None


if __name__ == "__main__" and len(sys.argv) in (5, 6) and sys.argv[1] == "serve":
    serve(sys.argv[2], int(sys.argv[3]), sys.argv[4], *sys.argv[5:])
