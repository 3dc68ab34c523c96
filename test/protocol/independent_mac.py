"""The data plane MAC written from docs/reference/protocol.md alone, with the standard library
only.

What a client that is not ours implements: it imports nothing from
``lerobot_ros`` (a test checks its imports), reads the field lists of the
package's messages from the repository's ``msg/*.msg`` files, spells out the
standard nested messages as the document does, and walks plain values (the
JSON of docs/reference/protocol_mac_vectors.json, or a client's own dicts) by the
document's rules:

* key: the ASCII bytes of the session secret as OpenSession returned it
  (32 hex digits), not the hex-decoded 16 bytes;
* HMAC-SHA256 fed first with ``b"lerobot_ros data plane MAC v1\\x00"`` +
  the message type's short name + ``b"\\x00"``;
* then every top-level field but ``mac`` in declaration order, nested
  messages recursively; strings u64-LE byte length + UTF-8; bool one byte;
  integers of any width u64-LE length + decimal ASCII; float32 4 bytes LE,
  float64 8 bytes LE; sequences of strings, bools or messages u64-LE count
  then each element; numeric sequences and fixed-size numeric arrays u64-LE
  byte length + the raw little-endian elements.

Values: a message is a dict by field name (every field present; ``mac`` may
be left out); ``uint8[]`` is ``bytes`` or a hex string; numeric sequences
are lists of numbers.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import struct
from dataclasses import dataclass
from pathlib import Path

DOMAIN = b"lerobot_ros data plane MAC v1\x00"
MAC_FIELD = "mac"
PACKAGE = "lerobot_ros"
MSG_DIR = Path(__file__).resolve().parents[2] / "msg"

INTEGER_TYPES = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"}
#: struct codes of the raw little-endian elements of a numeric sequence or fixed-size array.
ELEMENT_FORMATS = {
    "int8": "b",
    "uint8": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
    "float32": "f",
    "float64": "d",
}
FLOAT_FORMATS = {"float32": "<f", "float64": "<d"}

#: The standard nested messages, as docs/reference/protocol.md spells them (type, name) in
#: declaration order.
STANDARD_MESSAGES: dict[str, list[tuple[str, str]]] = {
    "builtin_interfaces/Time": [("int32", "sec"), ("uint32", "nanosec")],
    "builtin_interfaces/Duration": [("int32", "sec"), ("uint32", "nanosec")],
    "std_msgs/Header": [("builtin_interfaces/Time", "stamp"), ("string", "frame_id")],
    "sensor_msgs/CompressedImage": [
        ("std_msgs/Header", "header"),
        ("string", "format"),
        ("uint8[]", "data"),
    ],
    "sensor_msgs/Image": [
        ("std_msgs/Header", "header"),
        ("uint32", "height"),
        ("uint32", "width"),
        ("string", "encoding"),
        ("uint8", "is_bigendian"),
        ("uint32", "step"),
        ("uint8[]", "data"),
    ],
}

_ARRAY = re.compile(r"^(?P<element>[^\[\]]+)\[(?P<bound><=)?(?P<size>\d*)\]$")


@dataclass(frozen=True)
class FieldType:
    """A field's type: ``element`` (a primitive or "pkg/Type"), and whether and how it repeats."""

    element: str
    sequence: bool = False  # T[] or T[<=N]
    fixed_size: int | None = None  # T[N]

    @classmethod
    def parse(cls, text: str, package: str) -> FieldType:
        match = _ARRAY.match(text)
        if match:
            element = cls._element(match["element"], package)
            if match["size"] and not match["bound"]:
                return cls(element, fixed_size=int(match["size"]))
            return cls(element, sequence=True)
        return cls(cls._element(text, package))

    @staticmethod
    def _element(text: str, package: str) -> str:
        text = re.sub(r"<=\d+$", "", text)  # bounded string: string<=N
        if text in {"byte", "char", "wstring"}:
            raise NotImplementedError(
                f"{text} appears in no signed message; docs/reference/protocol.md leaves it out"
            )
        if text in INTEGER_TYPES or text in FLOAT_FORMATS or text in {"bool", "string"}:
            return text
        if text == "Header":  # ROS 1 spelling still accepted by rosidl
            return "std_msgs/Header"
        return text if "/" in text else f"{package}/{text}"


_LINE = re.compile(r"^(?P<type>\S+)\s+(?P<name>[A-Za-z][A-Za-z0-9_]*)\s*(?P<constant>=)?")


def parse_msg(text: str, package: str = PACKAGE) -> list[tuple[FieldType, str]]:
    """The fields of a .msg file in declaration order.

    Skipped: blank lines, comments (``#`` to the end of a line) and constants
    (``TYPE NAME=VALUE``). What follows a field's name (a default value, a
    trailing comment) does not change its type or its place.
    """
    fields = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"cannot read the .msg line {line!r}")
        if match["constant"]:
            continue
        fields.append((FieldType.parse(match["type"], package), match["name"]))
    return fields


class Definitions:
    """Field lists by full type name: the package's from its .msg files, the standard ones spelled
    out."""

    def __init__(self, msg_dir: Path = MSG_DIR, package: str = PACKAGE) -> None:
        self._fields: dict[str, list[tuple[FieldType, str]]] = {
            name: [
                (FieldType.parse(type_text, name.split("/")[0]), field)
                for type_text, field in spelled
            ]
            for name, spelled in STANDARD_MESSAGES.items()
        }
        for path in sorted(msg_dir.glob("*.msg")):
            self._fields[f"{package}/{path.stem}"] = parse_msg(
                path.read_text(encoding="utf-8"), package
            )

    def fields(self, type_name: str) -> list[tuple[FieldType, str]]:
        try:
            return self._fields[_short_form(type_name)]
        except KeyError:
            raise KeyError(f"no field list for {type_name}") from None

    def with_fields(self, type_name: str, fields: list[tuple[FieldType, str]]) -> Definitions:
        """A copy with ``type_name``'s field list replaced (tests use it to show an order swap
        matters)."""
        copy = object.__new__(Definitions)
        copy._fields = {**self._fields, _short_form(type_name): fields}
        return copy


def _short_form(type_name: str) -> str:
    """ "lerobot_ros/msg/Observation" -> "lerobot_ros/Observation"."""
    parts = type_name.split("/")
    return f"{parts[0]}/{parts[-1]}" if len(parts) == 3 else type_name


def _length(digest, count: int) -> None:
    digest.update(struct.pack("<Q", count))


def _numeric_bytes(element: str, values) -> bytes:
    if element == "uint8" and isinstance(values, str):
        return bytes.fromhex(values)
    if element == "uint8" and isinstance(values, (bytes, bytearray)):
        return bytes(values)
    return struct.pack(f"<{len(values)}{ELEMENT_FORMATS[element]}", *values)


def _feed_scalar(digest, element: str, value, definitions: Definitions) -> None:
    if element == "string":
        encoded = value.encode("utf-8")
        _length(digest, len(encoded))
        digest.update(encoded)
    elif element == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"expected a bool, got {value!r}")
        digest.update(b"\x01" if value else b"\x00")
    elif element in INTEGER_TYPES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected an integer for {element}, got {value!r}")
        text = str(value).encode("ascii")
        _length(digest, len(text))
        digest.update(text)
    elif element in FLOAT_FORMATS:
        digest.update(struct.pack(FLOAT_FORMATS[element], value))
    else:
        feed_message(digest, element, value, definitions)


def _feed(digest, field_type: FieldType, value, definitions: Definitions) -> None:
    element = field_type.element
    repeated = field_type.sequence or field_type.fixed_size is not None
    if not repeated:
        _feed_scalar(digest, element, value, definitions)
    elif element in ELEMENT_FORMATS:  # numeric: byte length + raw little-endian elements
        raw = _numeric_bytes(element, value)
        if field_type.fixed_size is not None and len(
            raw
        ) != field_type.fixed_size * struct.calcsize(ELEMENT_FORMATS[element]):
            raise ValueError(f"a {element}[{field_type.fixed_size}] array got {len(raw)} bytes")
        _length(digest, len(raw))
        digest.update(raw)
    else:  # strings, bools, messages: element count, then each element
        _length(digest, len(value))
        for item in value:
            _feed_scalar(digest, element, item, definitions)


def feed_message(
    digest, type_name: str, values: dict, definitions: Definitions, skip: str | None = None
) -> None:
    for field_type, name in definitions.fields(type_name):
        if name == skip:
            continue
        if name not in values:
            raise KeyError(f"{type_name} value has no field {name!r}")
        _feed(digest, field_type, values[name], definitions)


def session_key(secret: str) -> bytes:
    return secret.encode("ascii")


def mac(
    type_name: str, values: dict, secret: str, definitions: Definitions | None = None
) -> bytes:
    """HMAC-SHA256 of the message ``values`` of ``type_name`` (e.g.
    "lerobot_ros/msg/Observation")."""
    definitions = definitions or Definitions()
    short_name = type_name.split("/")[-1]
    digest = hmac.new(
        session_key(secret), DOMAIN + short_name.encode("ascii") + b"\x00", hashlib.sha256
    )
    feed_message(digest, type_name, values, definitions, skip=MAC_FIELD)
    return digest.digest()


def verify(
    type_name: str, values: dict, secret: str, definitions: Definitions | None = None
) -> bool:
    """Whether ``values["mac"]`` (bytes, a byte list or hex) is the MAC of the message under
    ``secret``."""
    carried = values.get(MAC_FIELD, b"")
    carried = bytes.fromhex(carried) if isinstance(carried, str) else bytes(carried)
    return len(carried) == hashlib.sha256().digest_size and hmac.compare_digest(
        carried, mac(type_name, values, secret, definitions)
    )
