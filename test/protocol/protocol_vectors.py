"""The MAC test vectors (docs/reference/protocol_mac_vectors.json) as real generated messages, and
back.

Product side of the vectors: the generator (make_mac_vectors.py) and the
agreement test (test_mac_product_agrees.py) turn a case's JSON values into
the rclpy message the product signs, and a message into the JSON values the
file holds. JSON values: a message is an object by field name in declaration
order, ``uint8[]`` a hex string, other numeric sequences and fixed-size
arrays lists of numbers, everything else its JSON scalar. ``mac`` is never
among the values (a case carries its expected MAC apart).
"""

from __future__ import annotations

import array
import importlib
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "docs" / "reference" / "protocol_mac_vectors.json"
MAC_FIELD = "mac"


def load_cases() -> list[dict]:
    return json.loads(VECTORS.read_text(encoding="utf-8"))["cases"]


def message_class(type_name: str):
    """ "lerobot_ros/msg/Observation" or "sensor_msgs/CompressedImage" -> the generated class."""
    parts = type_name.split("/")
    return getattr(importlib.import_module(f"{parts[0]}.msg"), parts[-1])


def _element_type(field_type: str) -> str:
    """ "sequence<sensor_msgs/Image>" -> "sensor_msgs/Image"; "double[2]" -> "double";
    "sequence<float, 5>" -> "float"."""
    if field_type.startswith("sequence<"):
        return field_type[len("sequence<") :].split(",")[0].rstrip(">")
    return field_type.split("[")[0]


def _is_message_type(type_name: str) -> bool:
    return "/" in type_name


def to_message(type_name: str, values: dict):
    """The generated message of ``type_name`` holding ``values`` (every field but ``mac``
    expected)."""
    cls = message_class(type_name)
    msg = cls()
    for name, field_type in cls.get_fields_and_field_types().items():
        if name == MAC_FIELD and name not in values:
            continue
        setattr(msg, name, _to_field(field_type, values[name]))
    return msg


def _to_field(field_type: str, value):
    element = _element_type(field_type)
    repeated = field_type.startswith("sequence<") or field_type.endswith("]")
    if not repeated:
        return to_message(element, value) if _is_message_type(element) else value
    if _is_message_type(element):
        return [to_message(element, item) for item in value]
    if element in ("uint8", "octet") and isinstance(value, str):
        return bytes.fromhex(value)
    if element == "float" and field_type.startswith("sequence<"):
        return array.array("f", value)
    return value  # strings, bools and other numbers: the generated setter converts


def to_values(msg) -> dict:
    """The JSON values of ``msg``, every field but ``mac``, in declaration order."""
    values = {}
    for name, field_type in type(msg).get_fields_and_field_types().items():
        if name != MAC_FIELD:
            values[name] = _to_value(field_type, getattr(msg, name))
    return values


def _to_value(field_type: str, value):
    element = _element_type(field_type)
    repeated = field_type.startswith("sequence<") or field_type.endswith("]")
    if _is_message_type(element):
        return [to_values(item) for item in value] if repeated else to_values(value)
    if not repeated:
        return value
    if element in ("uint8", "octet"):
        return bytes(value).hex()
    if element in ("string", "boolean"):
        return list(value)
    return [float(x) if element in ("float", "double") else int(x) for x in value]
