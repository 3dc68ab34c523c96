"""docs/reference/protocol_mac_vectors.json against a MAC written from docs/reference/protocol.md
alone (standard library only).

independent_mac.py imports nothing from lerobot_ros (checked below): it
reads the field lists from msg/*.msg and the standard nested messages from
the document's own ``msg`` blocks, and walks the vector values by the
document's rules. Every expected MAC and every recorded byte stream must
come out; plausible mistakes (the hex-decoded key, no domain prefix, a field
order swap, integers as binary, 4-byte lengths) must not.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import re
import struct
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import independent_mac  # noqa: E402

REPO = HERE.parents[1]
DOC = REPO / "docs" / "reference" / "protocol.md"
VECTORS = json.loads(
    (REPO / "docs" / "reference" / "protocol_mac_vectors.json").read_text(encoding="utf-8")
)
CASES = VECTORS["cases"]
SIGNED = [
    case
    for case in CASES
    if case["type"] in ("lerobot_ros/msg/Observation", "lerobot_ros/msg/ActionChunk")
]


def _ids(cases):
    return [case["name"] for case in cases]


def hashed_stream(case: dict, definitions=None) -> bytes:
    """What the independent walk feeds the HMAC after the key, recorded."""

    class Recorder:
        data = b""

        def update(self, chunk):
            self.data += bytes(chunk)

    recorder = Recorder()
    short_name = case["type"].split("/")[-1]
    recorder.update(independent_mac.DOMAIN + short_name.encode("ascii") + b"\x00")
    independent_mac.feed_message(
        recorder,
        case["type"],
        case["fields"],
        definitions or independent_mac.Definitions(),
        skip=independent_mac.MAC_FIELD,
    )
    return recorder.data


def test_the_independent_implementation_uses_the_standard_library_only():
    for path in (HERE / "independent_mac.py", Path(__file__)):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        imported |= {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        }
        foreign = (
            imported - set(sys.stdlib_module_names) - {"__future__", "pytest", "independent_mac"}
        )
        assert not foreign, f"{path.name} imports {sorted(foreign)}"


def test_the_documents_nested_message_definitions_are_the_ones_implemented():
    """The ``msg`` blocks of docs/reference/protocol.md that spell out a standard message are what
    the walk uses."""
    blocks = re.findall(r"```msg\n# (\S+)\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    documented = {
        name: [
            (t, n)
            for t, n in (
                line.split()[:2]
                for line in body.strip().splitlines()
                if line.strip() and not line.startswith("#")
            )
        ]
        for name, body in blocks
    }
    assert documented == independent_mac.STANDARD_MESSAGES


def test_the_document_states_the_domain_prefix_the_vectors_use():
    assert VECTORS["domain_prefix_hex"] == independent_mac.DOMAIN.hex()
    assert 'b"lerobot_ros data plane MAC v1\\x00"' in DOC.read_text(encoding="utf-8")


def test_msg_files_are_parsed_with_constants_comments_and_arrays():
    fields = independent_mac.parse_msg(
        "# a comment\nuint8 STATUS_OK=0\nstring PHASE = RUNNING\n\nuint64 seq  # "
        "trailing\nfloat32[] state\n"
        "pkg/Thing[] things\nThing one\nfloat64[2] pair\nint32[<=3] bounded\nstring<=8 short "
        "'default'\n",
        "mypkg",
    )
    F = independent_mac.FieldType
    assert fields == [
        (F("uint64"), "seq"),
        (F("float32", sequence=True), "state"),
        (F("pkg/Thing", sequence=True), "things"),
        (F("mypkg/Thing"), "one"),
        (F("float64", fixed_size=2), "pair"),
        (F("int32", sequence=True), "bounded"),
        (F("string"), "short"),
    ]


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_the_walk_gives_the_recorded_bytes_and_the_expected_mac(case):
    stream = hashed_stream(case)
    assert stream.hex() == case["hashed_bytes_hex"]
    assert independent_mac.mac(case["type"], case["fields"], case["secret"]).hex() == case["mac"]
    assert (
        hmac.new(case["secret"].encode("ascii"), stream, hashlib.sha256).hexdigest() == case["mac"]
    )
    assert independent_mac.verify(
        case["type"], {**case["fields"], "mac": case["mac"]}, case["secret"]
    )


@pytest.mark.parametrize("case", SIGNED, ids=_ids(SIGNED))
def test_plausible_misreadings_give_another_mac(case, monkeypatch):
    expected, secret, type_name, values = case["mac"], case["secret"], case["type"], case["fields"]
    stream = bytes.fromhex(case["hashed_bytes_hex"])
    prefix_length = len(independent_mac.DOMAIN) + len(type_name.split("/")[-1]) + 1
    misreadings = {
        "hex-decoded key": hmac.new(bytes.fromhex(secret), stream, hashlib.sha256).hexdigest(),
        "upper-case key": hmac.new(
            secret.upper().encode("ascii"), stream, hashlib.sha256
        ).hexdigest(),
        "no domain prefix": hmac.new(
            secret.encode("ascii"), stream[prefix_length:], hashlib.sha256
        ).hexdigest(),
        "plain SHA-256, no key": hashlib.sha256(stream).hexdigest(),
        "another secret": independent_mac.mac(type_name, values, "0" * 32).hex(),
        "the other type's name": hmac.new(
            secret.encode("ascii"),
            independent_mac.DOMAIN
            + (b"Observation" if "Chunk" in type_name else b"ActionChunk")
            + b"\x00"
            + stream[prefix_length:],
            hashlib.sha256,
        ).hexdigest(),
    }
    definitions = independent_mac.Definitions()
    fields = definitions.fields(type_name)
    swapped = [fields[1], fields[0], *fields[2:]]  # schema_version <-> session_id
    misreadings["first two fields swapped"] = independent_mac.mac(
        type_name, values, secret, definitions.with_fields(type_name, swapped)
    ).hex()
    with_mac = definitions.with_fields(type_name, fields)  # the mac field walked too (empty)
    digest = hmac.new(secret.encode("ascii"), stream[:prefix_length], hashlib.sha256)
    independent_mac.feed_message(digest, type_name, {**values, "mac": ""}, with_mac)
    misreadings["mac field included (empty)"] = digest.hexdigest()

    with monkeypatch.context() as patch:
        patch.setattr(
            independent_mac,
            "_length",
            lambda digest, count: digest.update(struct.pack("<I", count)),
        )
        misreadings["4-byte lengths"] = independent_mac.mac(type_name, values, secret).hex()
    original = independent_mac._feed_scalar

    def binary_integers(digest, element, value, definitions):
        if element in independent_mac.INTEGER_TYPES:
            digest.update(struct.pack("<q" if element.startswith("int") else "<Q", value))
        else:
            original(digest, element, value, definitions)

    with monkeypatch.context() as patch:
        patch.setattr(independent_mac, "_feed_scalar", binary_integers)
        misreadings["integers as 8-byte binary"] = independent_mac.mac(
            type_name, values, secret
        ).hex()
    same = [name for name, mac in misreadings.items() if mac == expected]
    assert not same, (
        f"these misreadings give the expected MAC, so the vector cannot tell them apart: {same}"
    )
    assert len(set(misreadings.values())) == len(misreadings)
