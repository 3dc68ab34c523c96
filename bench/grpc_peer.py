"""LeRobot 0.6.1's gRPC async inference, driven the way its RobotClient drives it.

The server is LeRobot's own process, ``python -m lerobot.async_inference.policy_server
--host=127.0.0.1 --inference_latency=0`` (so it never sleeps), started in a
scratch folder because it writes ``logs/policy_server_<time>.log`` into its
working directory. That file holds its DEBUG lines, from which the server's
own split (deserialize, prepare, preprocess, inference, postprocess) is read.

The client side uses LeRobot's stubs, messages and helpers exactly as
``RobotClient`` does: ``Ready`` + ``SendPolicyInstructions`` with a pickled
``RemotePolicyConfig``; per request a pickled ``TimedObservation`` (raw
frames, ``must_go=True`` so nothing is filtered) streamed with
``send_bytes_in_chunks`` through ``SendObservations``, while a ``GetActions``
call is already pending (RobotClient keeps one outstanding in its receiver
thread); the answer is unpickled and merged with RobotClient's own
``_aggregate_action_queues`` (weighted_average, its default).

Their server unpickles what it receives: that is their design; here it runs
on loopback only, fed by this benchmark.
"""

from __future__ import annotations

import os
import pickle  # nosec - LeRobot's wire format; loopback only, our own data
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from queue import Queue

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class GrpcPeer:
    def __init__(
        self, directory: Path, fps: int = 30, timeout_s: float = 240.0, env: dict | None = None
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        previous = os.getcwd()
        # importing LeRobot's client module creates logs/ in the working directory
        os.chdir(directory)
        try:
            import grpc
            from lerobot.async_inference.configs import get_aggregate_function
            from lerobot.async_inference.robot_client import RobotClient
        finally:
            os.chdir(previous)
        from lerobot.transport import services_pb2, services_pb2_grpc
        from lerobot.transport.utils import grpc_channel_options

        self.directory = directory
        self.port = free_port()
        self.console = directory / "console.log"
        with self.console.open("w") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lerobot.async_inference.policy_server",
                    "--host=127.0.0.1",
                    f"--port={self.port}",
                    f"--fps={fps}",
                    "--inference_latency=0",
                    "--obs_queue_timeout=60",
                ],
                cwd=directory,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
        self.timeout_s = timeout_s
        self.connected = False
        self.pb = services_pb2
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}", grpc_channel_options())
        self.stub = services_pb2_grpc.AsyncInferenceStub(self.channel)
        # RobotClient's merge, on a client without a robot or threads: only the queue state it
        # uses.
        self.client = RobotClient.__new__(RobotClient)
        self.aggregate = get_aggregate_function("weighted_average")
        self.fps = fps

    def wait_started(self) -> None:
        """The server process starts in the background; wait (bounded) until it listens."""
        if not self.connected:
            common.wait_for_log(self.process, self.console, "PolicyServer started", self.timeout_s)
            self.connected = True

    def load(
        self,
        checkpoint: Path,
        joint_names,
        cameras: dict[str, tuple[int, int]],
        chunk: int = 50,
        device: str = "cpu",
    ) -> None:
        """Ready + SendPolicyInstructions for an ACT checkpoint; ``cameras`` maps raw keys to
        (height, width)."""
        from lerobot.async_inference.helpers import RemotePolicyConfig
        from lerobot.utils.feature_utils import hw_to_dataset_features

        hardware = {f"{name}.pos": float for name in joint_names} | {
            key: (h, w, 3) for key, (h, w) in cameras.items()
        }
        features = hw_to_dataset_features(hardware, "observation", use_video=False)
        self.joint_keys = [f"{name}.pos" for name in joint_names]
        self.wait_started()
        self.stub.Ready(self.pb.Empty())
        config = RemotePolicyConfig("act", str(checkpoint), features, chunk, device)
        self.stub.SendPolicyInstructions(self.pb.PolicySetup(data=pickle.dumps(config)))
        self.client.action_queue = Queue()
        self.client.action_queue_lock = threading.Lock()
        self.client.latest_action_lock = threading.Lock()
        self.client.latest_action = -1

    def request(self, timestep: int, state, frames: dict) -> dict:
        """One observation -> its chunk, merged; client-side durations in seconds."""
        from lerobot.async_inference.helpers import TimedObservation
        from lerobot.transport.utils import send_bytes_in_chunks

        raw = {
            key: float(value) for key, value in zip(self.joint_keys, state, strict=False)
        } | dict(frames)
        # RobotClient's receiver always has one waiting
        pending = self.stub.GetActions.future(self.pb.Empty())
        started = time.perf_counter()
        data = pickle.dumps(
            TimedObservation(
                timestamp=time.time(), timestep=timestep, observation=raw, must_go=True
            )
        )
        pickled = time.perf_counter()
        self.stub.SendObservations(send_bytes_in_chunks(data, self.pb.Observation, silent=True))
        sent = time.perf_counter()
        answer = pending.result(timeout=120)
        received = time.perf_counter()
        timed_actions = pickle.loads(answer.data)  # nosec
        with self.client.latest_action_lock:
            self.client.latest_action = timestep - 1  # the robot has executed up to here
        self.client._aggregate_action_queues(timed_actions, self.aggregate)
        merged = time.perf_counter()
        if len(timed_actions) == 0:
            raise RuntimeError("LeRobot's server answered with no actions")
        return {
            "encode": pickled - started,
            "send_rpc": sent - pickled,
            "wait_actions": received - sent,
            "merge": merged - received,
            "round_trip": merged - started,
            "bytes": len(data),
        }

    def server_split(self) -> dict[int, dict]:
        """The server's own DEBUG split per observation timestep, in seconds."""
        split: dict[int, dict] = {}
        for path in sorted((self.directory / "logs").glob("policy_server_*.log")):
            text = path.read_text(errors="replace")
            for match in re.finditer(
                r"Observation (\d+) \| Prepare time: ([\d.]+)ms \| Preprocessing time: ([\d.]+)ms "
                r"\| "
                r"Inference time: ([\d.]+)ms \| Postprocessing time: ([\d.]+)ms",
                text,
            ):
                step = int(match.group(1))
                split[step] = {
                    k: float(match.group(i)) / 1000
                    for i, k in (
                        (2, "prepare"),
                        (3, "preprocess"),
                        (4, "inference"),
                        (5, "postprocess"),
                    )
                }
            pending = []
            for line in text.splitlines():
                found = re.search(r"Received observation #(\d+) \|", line)
                if found:
                    pending.append(int(found.group(1)))
                found = re.search(r"Deserialization time: ([\d.]+)s", line)
                if found and pending:
                    split.setdefault(pending.pop(0), {})["deserialize"] = float(found.group(1))
        return split

    def close(self) -> None:
        from lerobot_ros.processes import stop

        self.channel.close()
        stop(self.process)
