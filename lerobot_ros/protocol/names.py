"""Names of the server's ROS entities, relative to its namespace.

One place for them: the server node creates its entities from these, and the
zenoh access-control and QoS examples are tested against them, so a rename
cannot silently open or close a robot's data plane.
"""

from __future__ import annotations

GET_STATUS = "get_status"
OPEN_SESSION = "open_session"
CLOSE_SESSION = "close_session"
RESET_EPISODE = "reset_episode"
STATUS = "status"


def in_namespace(server_namespace: str, name: str) -> str:
    """The absolute name of a server entity, e.g. ("/lerobot", STATUS) -> "/lerobot/status"."""
    return server_namespace.rstrip("/") + "/" + name


def observation_topic(client_id: str) -> str:
    return f"clients/{client_id}/observation"


def action_chunk_topic(client_id: str) -> str:
    return f"clients/{client_id}/action_chunk"
