"""The ROS 2 floor under our request path: a node that answers every Observation with a ready
ActionChunk.

It does nothing a server does (no session, no MAC, no decoding, no model):
each Observation taken from ``/bench_echo/observation`` is answered at once
on ``/bench_echo/action_chunk`` with a prepared chunk of ``--chunk`` x
``--dim`` actions in both spaces that echoes the observation's header. It
uses the server's QoS profiles and spins the server's executor (rclpy's
events executor on the main thread), so bench/server_request_latency.py can
time the same messages' round trip through rclpy and Fast DDS alone, in the
same run as the stacks: what of our overhead the transport costs by itself.

usage: python -m bench.ros_echo [--chunk 50] [--dim 6] (stops on SIGINT/SIGTERM; started by
       server_request_latency.py, in its ROS domain)
"""

from __future__ import annotations

import argparse
import signal

# No ``import common`` here: it would pick a ROS domain of this process's own; started by
# server_request_latency.py, this process inherits that script's isolated environment.
import numpy as np
import rclpy
from rclpy.experimental import EventsExecutor

from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.protocol.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS
from lerobot_ros.protocol.wire.data_plane import ChunkReply, chunk_to_msg, request_id_of

OBSERVATION_TOPIC = "/bench_echo/observation"
CHUNK_TOPIC = "/bench_echo/action_chunk"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--dim", type=int, default=6)
    args = parser.parse_args()
    rclpy.init()
    node = rclpy.create_node("bench_ros_echo")
    actions = np.zeros((args.chunk, args.dim), np.float32)
    names = tuple(f"joint_{index}" for index in range(args.dim))
    publisher = node.create_publisher(ActionChunk, CHUNK_TOPIC, ACTION_CHUNK_QOS)

    def answer(msg: Observation) -> None:
        reply = ChunkReply(
            request=request_id_of(msg),
            status=ActionChunk.STATUS_OK,
            action_names=names,
            actions_model=actions,
            actions_robot=actions,
        )
        publisher.publish(chunk_to_msg(reply))

    node.create_subscription(Observation, OBSERVATION_TOPIC, answer, OBSERVATION_QOS)
    executor = EventsExecutor()
    executor.add_node(node)
    stopping = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.append(True))
    print("echo ready", flush=True)
    while not stopping:
        executor.spin_once(timeout_sec=0.1)
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    main()
