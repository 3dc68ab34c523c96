"""The product's MAC (lerobot_ros.protocol.wire.data_plane.integrity) against the vectors and the
independent implementation.

Each case of docs/reference/protocol_mac_vectors.json is built as the real generated
message: ``mac_of`` must give the expected MAC and ``verify`` accept it; a
change to any one field (one byte of a string or a frame, one bit of a
number, one bool, one element added to an empty sequence) must make
``verify`` refuse, and the product and the independent implementation must
agree on the MAC of every such changed message too. The readings of the
documentation that the issue tried (over the CDR serialisation) must not
verify.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import independent_mac  # noqa: E402
from protocol_vectors import load_cases, message_class, to_message, to_values  # noqa: E402

from lerobot_ros.protocol.wire.data_plane import integrity  # noqa: E402

CASES = load_cases()
SIGNED = [
    case
    for case in CASES
    if case["type"] in ("lerobot_ros/msg/Observation", "lerobot_ros/msg/ActionChunk")
]
# rclpy's names for the primitive types, in .msg spelling.
_RCLPY_PRIMITIVES = {"boolean": "bool", "float": "float32", "double": "float64", "octet": "byte"}


def _ids(cases):
    return [case["name"] for case in cases]


def _msg_spelling(rclpy_type: str) -> str:
    if rclpy_type.startswith("sequence<"):
        return _msg_spelling(rclpy_type[len("sequence<") :].split(",")[0].rstrip(">")) + "[]"
    if rclpy_type.endswith("]"):
        element, size = rclpy_type[:-1].split("[")
        return f"{_msg_spelling(element)}[{size}]"
    return _RCLPY_PRIMITIVES.get(rclpy_type, rclpy_type)


def test_the_documented_standard_messages_are_the_generated_ones():
    for type_name, fields in independent_mac.STANDARD_MESSAGES.items():
        generated = message_class(type_name).get_fields_and_field_types()
        assert [(_msg_spelling(t), n) for n, t in generated.items()] == fields, type_name


def test_the_key_and_prefix_are_as_documented():
    assert integrity.session_key("00ff" * 8) == b"00ff" * 8
    assert integrity._DOMAIN == independent_mac.DOMAIN
    assert len(integrity.new_secret()) == 32


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_the_product_computes_the_expected_mac_and_verifies_it(case):
    msg = to_message(case["type"], case["fields"])
    key = integrity.session_key(case["secret"])
    assert integrity.mac_of(msg, key).hex() == case["mac"]
    if case not in SIGNED:
        return  # rule coverage: a message without a mac field is never signed
    integrity.sign(msg, key)
    assert bytes(msg.mac).hex() == case["mac"]
    assert integrity.verify(msg, key) is None


def _mutations(type_name: str, values: dict, definitions, path=()):
    """(path, mutated copy of ``values``) for every leaf field: one byte, bit or element
    changed."""
    for field_type, name in definitions.fields(type_name):
        if name == independent_mac.MAC_FIELD:
            continue
        value, where = values[name], (*path, name)
        element = field_type.element
        repeated = field_type.sequence or field_type.fixed_size is not None
        if "/" in element:  # nested message(s): each element's fields
            items = value if repeated else [value]
            if not items:  # an empty sequence of messages: one default element added
                yield where, {**values, name: [to_values(message_class(element)())]}
            for index, item in enumerate(items):
                for sub_path, changed in _mutations(element, item, definitions, (*where, index)):
                    new_items = list(items)
                    new_items[index] = changed
                    yield sub_path, {**values, name: new_items if repeated else changed}
            continue
        yield where, {**values, name: _changed(element, repeated, value)}


def _changed(element: str, repeated: bool, value):
    if repeated:
        if element == "uint8":
            data = bytearray(bytes.fromhex(value))
            if not data:
                return "00"
            data[len(data) // 2] ^= 0x01
            return data.hex()
        if not value:
            return ["x"] if element == "string" else [True] if element == "bool" else [1]
        changed = list(value)
        changed[0] = _changed(element, False, changed[0])
        return changed
    if element == "string":
        return chr(ord(value[0]) ^ 0x01) + value[1:] if value else "x"
    if element == "bool":
        return not value
    if element in independent_mac.INTEGER_TYPES:
        return value ^ 0x01
    return -value if value else 1.0  # a float: the sign bit (0.0 and -0.0 differ too)


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_changing_any_field_makes_verify_refuse_and_both_implementations_agree(case):
    definitions = independent_mac.Definitions()
    key = integrity.session_key(case["secret"])
    carried = bytes.fromhex(case["mac"])
    tried = 0
    for path, values in _mutations(case["type"], copy.deepcopy(case["fields"]), definitions):
        msg = to_message(case["type"], values)
        if case in SIGNED:
            msg.mac = carried
            assert integrity.verify(msg, key) is not None, f"changing {path} still verifies"
        product = integrity.mac_of(msg, key)
        assert product.hex() == independent_mac.mac(case["type"], values, case["secret"]).hex(), (
            path
        )
        assert product != carried
        tried += 1
    assert tried >= len(definitions.fields(case["type"])) - 1
    if case not in SIGNED:
        return
    msg = to_message(case["type"], case["fields"])
    for bad_mac in (carried[:-1] + bytes([carried[-1] ^ 1]), carried[:16], b""):
        msg.mac = bad_mac
        assert integrity.verify(msg, key) is not None


@pytest.mark.parametrize("case", SIGNED, ids=_ids(SIGNED))
def test_the_readings_of_the_old_documentation_do_not_verify(case):
    """The issue's three readings: HMAC over the CDR serialisation with an empty mac, keyed by the
    secret's UTF-8 bytes or by the hex-decoded secret, and over the CDR serialisation without the
    mac field."""
    from rclpy.serialization import serialize_message

    msg = to_message(case["type"], case["fields"])
    # mac empty: its length (4 bytes of zero) is the last thing serialised
    cdr = serialize_message(msg)
    assert cdr.endswith(b"\x00\x00\x00\x00")
    secret = case["secret"]
    readings = [
        hmac.new(secret.encode("utf-8"), cdr, hashlib.sha256).digest(),
        hmac.new(bytes.fromhex(secret), cdr, hashlib.sha256).digest(),
        hmac.new(secret.encode("utf-8"), cdr[:-4], hashlib.sha256).digest(),
    ]
    key = integrity.session_key(secret)
    for reading in readings:
        assert reading.hex() != case["mac"]
        msg.mac = reading
        assert integrity.verify(msg, key) is not None
