"""Authenticity of data plane messages: an HMAC-SHA256 keyed by the session's secret.

Invariant: a message's MAC covers every field but the MAC itself, header
(session, client, seq, episode, epoch, send time) and contents (state,
frames, actions...) alike, nested messages included, with the message type
as a domain separator; so an Observation or ActionChunk forged without the
session's secret, altered on the way, or passed off as the other type,
fails ``verify``. The bytes hashed come from walking the generated message's
fields in declaration order, not from the middleware's serialisation, so both
ends compute them the same way whatever RMW carries the message. Both ends
use this module: the executor signs observations and verifies chunks, the
server verifies observations and signs chunks.

What it cannot do: whoever learns the secret (a sniffer of the OpenSession
reply on an unencrypted network) can sign too; see docs/how-to/deployment.md, Security, and
docs/reference/protocol.md.
"""

from __future__ import annotations

import array
import functools
import hashlib
import hmac
import secrets
import struct

MAC_FIELD = "mac"
MAC_BYTES = hashlib.sha256().digest_size
_DOMAIN = b"lerobot_ros data plane MAC v1\x00"
_SCALAR_FORMATS = {"float": "<f", "double": "<d"}  # ints are hashed as decimal text, any width


def new_secret() -> str:
    """A fresh session secret (128 random bits, hex)."""
    return secrets.token_hex(16)


def session_key(secret: str) -> bytes:
    return secret.encode("ascii")


@functools.cache
def _fields(message_type: type) -> tuple[tuple[str, str], ...]:
    return tuple(message_type.get_fields_and_field_types().items())


def _length(digest, count: int) -> None:
    digest.update(struct.pack("<Q", count))


def _feed(digest, value, type_name: str) -> None:
    if hasattr(type(value), "get_fields_and_field_types"):
        for name, field_type in _fields(type(value)):
            _feed(digest, getattr(value, name), field_type)
    elif isinstance(value, str):
        encoded = value.encode("utf-8")
        _length(digest, len(encoded))
        digest.update(encoded)
    elif isinstance(value, bool):
        digest.update(b"\x01" if value else b"\x00")
    elif isinstance(value, int):
        text = str(value).encode("ascii")
        _length(digest, len(text))
        digest.update(text)
    elif isinstance(value, float):
        # A float32 field holds the sender's double until it crosses the wire: hash it at its
        # width.
        digest.update(struct.pack(_SCALAR_FORMATS.get(type_name, "<d"), value))
    elif isinstance(value, (list, tuple)):
        element_type = (
            type_name[len("sequence<") :].split(",")[0].rstrip(">")
            if type_name.startswith("sequence<")
            else ""
        )
        _length(digest, len(value))
        for element in value:
            _feed(digest, element, element_type)
    else:
        # Numeric sequences (array.array), bytes, and fixed-size arrays (numpy): their raw bytes.
        try:
            view = memoryview(value)
        except TypeError:
            raise TypeError(
                f"cannot authenticate a field of type {type(value).__name__} ({type_name})"
            ) from None
        _length(digest, view.nbytes)
        digest.update(view if view.c_contiguous else view.tobytes())


def mac_of(msg, key: bytes) -> bytes:
    """The MAC of ``msg`` under ``key``: every field but ``mac``, in declaration order."""
    digest = hmac.new(key, _DOMAIN + type(msg).__name__.encode("ascii") + b"\x00", hashlib.sha256)
    for name, field_type in _fields(type(msg)):
        if name != MAC_FIELD:
            _feed(digest, getattr(msg, name), field_type)
    return digest.digest()


def sign(msg, key: bytes) -> None:
    """Set ``msg.mac``; call it after the last change to the message."""
    msg.mac = array.array("B", mac_of(msg, key))


def verify(msg, key: bytes) -> str | None:
    """Why ``msg`` is not authentic under ``key``, or None when it is."""
    carried = bytes(msg.mac)
    if len(carried) != MAC_BYTES:
        return (
            f"{type(msg).__name__} carries a {len(carried)}-byte MAC; expected {MAC_BYTES} "
            "bytes keyed by the session secret"
        )
    if not hmac.compare_digest(carried, mac_of(msg, key)):
        return (
            f"{type(msg).__name__} MAC does not verify with the session's key (forged or altered)"
        )
    return None
