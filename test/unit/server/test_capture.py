"""lerobot_ros.server.observability.capture: exact round trips, a hard bound on disk use,
no pickling."""

from __future__ import annotations

import threading

import msgpack
import numpy as np
import pytest

from lerobot_ros.server.observability.capture import (
    NDARRAY_EXT_CODE,
    CaptureError,
    CaptureWriter,
    encode_record,
    read_capture,
)


def _segments(directory):
    return sorted(path.name for path in directory.glob("capture-*.msgpack"))


def _directory_bytes(directory) -> int:
    return sum(path.stat().st_size for path in directory.glob("capture-*.msgpack"))


def test_round_trip_keeps_types_values_and_arrays(tmp_path):
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    record = {
        "request_id": 12,
        "ok": True,
        "latency_ms": 1.25,
        "task": "pick the cube",
        "missing": None,
        "jpeg": b"\xff\xd8\xff\x00binary",
        "state": np.array([0.5, -1.0, 3.25], dtype=np.float32),
        "chunk": np.linspace(0, 1, 12, dtype=np.float64).reshape(4, 3),
        "image": image,
        "fortran": np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
        "big_endian": np.array([1, 2, 3], dtype=">i4"),
        "flags": np.array([True, False]),
        "empty": np.zeros((0, 5), dtype=np.float32),
        "scalar": np.float32(2.5),
        "nested": {"cameras": [{"name": "wrist", "frame": image[0]}], "tuple": (1, "two")},
    }
    with CaptureWriter(tmp_path, max_bytes=1 << 20) as writer:
        writer.write(record)
        writer.write({"request_id": 13})
    first, second = list(read_capture(tmp_path))
    assert second == {"request_id": 13}
    for key in ("request_id", "ok", "latency_ms", "task", "missing", "jpeg"):
        assert first[key] == record[key] and type(first[key]) is type(record[key])
    for key in ("state", "chunk", "image", "fortran", "big_endian", "flags", "empty"):
        restored = first[key]
        assert isinstance(restored, np.ndarray)
        assert restored.dtype == record[key].dtype and restored.shape == record[key].shape
        np.testing.assert_array_equal(restored, record[key])
        assert restored.flags.writeable
    assert first["scalar"] == 2.5
    np.testing.assert_array_equal(first["nested"]["cameras"][0]["frame"], image[0])
    assert first["nested"]["tuple"] == [1, "two"]  # msgpack has no tuple


def test_arrays_are_an_ext_type_not_a_dict_a_record_could_forge(tmp_path):
    forged = {"__ndarray__": True, "dtype": "<f4", "shape": [1], "data": b"\x00\x00\x80?"}
    with CaptureWriter(tmp_path, max_bytes=1 << 20) as writer:
        writer.write({"forged": forged, "real": np.ones(1, np.float32)})
    (record,) = read_capture(tmp_path)
    assert record["forged"] == forged
    raw = msgpack.unpackb(encode_record({"real": np.ones(1, np.float32)}), raw=False)
    assert isinstance(raw["real"], msgpack.ExtType) and raw["real"].code == NDARRAY_EXT_CODE


def test_bound_is_respected_oldest_deleted_newest_kept(tmp_path):
    max_bytes, segment_bytes = 20_000, 4_000
    payload = np.zeros(100, dtype=np.float64)  # ~830 bytes a record
    with CaptureWriter(tmp_path, max_bytes=max_bytes, segment_bytes=segment_bytes) as writer:
        for request_id in range(500):
            writer.write({"request_id": request_id, "payload": payload})
            assert _directory_bytes(tmp_path) <= max_bytes
            assert writer.total_bytes == _directory_bytes(tmp_path)
    segments = _segments(tmp_path)
    assert "capture-000000.msgpack" not in segments
    assert all((tmp_path / name).stat().st_size <= segment_bytes for name in segments)
    ids = [record["request_id"] for record in read_capture(tmp_path)]
    assert ids[-1] == 499
    assert ids == list(range(ids[0], 500)), (
        "kept records must be the newest, contiguous and in order"
    )
    assert len(ids) >= (max_bytes - segment_bytes) // 900


def test_reopening_continues_numbering_and_counts_old_segments(tmp_path):
    with CaptureWriter(tmp_path, max_bytes=10_000, segment_bytes=2_000) as writer:
        writer.write({"run": 1, "blob": b"x" * 1500})
    with CaptureWriter(tmp_path, max_bytes=10_000, segment_bytes=2_000) as writer:
        writer.write({"run": 2, "blob": b"x" * 1500})
    assert _segments(tmp_path) == ["capture-000000.msgpack", "capture-000001.msgpack"]
    with CaptureWriter(tmp_path, max_bytes=3_500, segment_bytes=2_000) as writer:
        writer.write({"run": 3, "blob": b"x" * 1500})
    assert [record["run"] for record in read_capture(tmp_path)] == [2, 3]
    assert _directory_bytes(tmp_path) <= 3_500


def test_segment_as_large_as_the_bound_still_keeps_the_bound(tmp_path):
    with CaptureWriter(tmp_path, max_bytes=2_000, segment_bytes=2_000) as writer:
        for run in range(5):
            writer.write({"run": run, "blob": b"x" * 900})
            assert _directory_bytes(tmp_path) <= 2_000
    assert [record["run"] for record in read_capture(tmp_path)] == [4]


def test_record_larger_than_the_bound_is_refused(tmp_path):
    with CaptureWriter(tmp_path, max_bytes=1_000, segment_bytes=500) as writer:
        with pytest.raises(CaptureError, match=r"at most 1000 bytes \(max_bytes\), got \d+ bytes"):
            writer.write({"blob": b"x" * 2_000})
    assert list(read_capture(tmp_path)) == []


@pytest.mark.parametrize(
    "value, message",
    [
        (np.array([{"a": 1}, None], dtype=object), "dtype '|O'"),
        (np.array(["text"]), "dtype '<U4'"),
        (np.array(["2024-01-01"], dtype="datetime64[D]"), "dtype '<M8"),
        (np.zeros(2, dtype=[("x", "<f4")]), "plain numeric dtype"),
        (object(), "got object"),
        ({1: "int key"}, "expected str dict keys, got int"),
        (2**70, "msgpack can hold"),
    ],
)
def test_unsupported_values_are_refused_and_nothing_is_written(tmp_path, value, message):
    with CaptureWriter(tmp_path, max_bytes=1 << 20) as writer:
        with pytest.raises(CaptureError, match=message):
            writer.write({"request_id": 1, "bad": {"inner": value}})
        writer.write({"request_id": 2})
    assert [record["request_id"] for record in read_capture(tmp_path)] == [2]


def test_object_dtype_error_names_the_field(tmp_path):
    with CaptureWriter(tmp_path, max_bytes=1 << 20) as writer:
        with pytest.raises(
            CaptureError,
            match=r"record\.observation\.state: expected a numpy array of a plain numeric dtype",
        ):
            writer.write({"observation": {"state": np.array([1, "a"], dtype=object)}})


def test_reading_an_empty_or_missing_directory_yields_nothing(tmp_path):
    assert list(read_capture(tmp_path)) == []
    assert list(read_capture(tmp_path / "does_not_exist")) == []
    (tmp_path / "notes.txt").write_text("not a segment")
    assert list(read_capture(tmp_path)) == []


def test_truncated_tail_is_skipped_with_a_warning(tmp_path):
    with CaptureWriter(tmp_path, max_bytes=1 << 20) as writer:
        writer.write({"request_id": 1})
        writer.write({"request_id": 2, "blob": b"y" * 100})
    (segment,) = tmp_path.glob("capture-*.msgpack")
    segment.write_bytes(segment.read_bytes()[:-10])
    with pytest.warns(UserWarning, match="truncated record"):
        assert [record["request_id"] for record in read_capture(tmp_path)] == [1]


def test_corrupt_and_unknown_ext_data_raise(tmp_path):
    bad_ext = msgpack.packb({"x": msgpack.ExtType(7, b"??")}, use_bin_type=True)
    (tmp_path / "capture-000000.msgpack").write_bytes(bad_ext)
    with pytest.raises(
        CaptureError,
        match="capture-000000.msgpack: expected msgpack ext type 42 .* got ext type 7",
    ):
        list(read_capture(tmp_path))
    lying_shape = msgpack.ExtType(
        NDARRAY_EXT_CODE, msgpack.packb(["<f4", [10], b"\x00" * 4], use_bin_type=True)
    )
    (tmp_path / "capture-000000.msgpack").write_bytes(
        msgpack.packb({"x": lying_shape}, use_bin_type=True)
    )
    with pytest.raises(
        CaptureError, match=r"expected 40 bytes for a <f4 array of shape \[10\], got 4"
    ):
        list(read_capture(tmp_path))
    object_array = msgpack.ExtType(
        NDARRAY_EXT_CODE, msgpack.packb(["|O", [1], b"\x00" * 8], use_bin_type=True)
    )
    (tmp_path / "capture-000000.msgpack").write_bytes(
        msgpack.packb({"x": object_array}, use_bin_type=True)
    )
    with pytest.raises(CaptureError, match="plain numeric dtype"):
        list(read_capture(tmp_path))


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xc1\x00\x00", "expected a stream of msgpack records"),  # 0xc1 is never used by msgpack
        (msgpack.packb({1: "int key"}), "expected a stream of msgpack records"),  # strict_map_key
        (msgpack.packb([1, 2]), "expected each record to be a map, got list"),
    ],
)
def test_corrupt_segment_raises_naming_the_file(tmp_path, content, message):
    (tmp_path / "capture-000003.msgpack").write_bytes(content)
    with pytest.raises(CaptureError, match=f"capture-000003.msgpack: {message}"):
        list(read_capture(tmp_path))


def test_concurrent_writers_produce_whole_records(tmp_path):
    threads_count, per_thread = 6, 100
    with CaptureWriter(tmp_path, max_bytes=1 << 22, segment_bytes=8_000) as writer:

        def write_many(thread_index: int) -> None:
            for sequence in range(per_thread):
                writer.write(
                    {
                        "thread": thread_index,
                        "sequence": sequence,
                        "data": np.full(50, thread_index, np.int32),
                    }
                )

        threads = [
            threading.Thread(target=write_many, args=(index,)) for index in range(threads_count)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    records = list(read_capture(tmp_path))
    assert len(records) == threads_count * per_thread
    for thread_index in range(threads_count):
        mine = [record for record in records if record["thread"] == thread_index]
        assert [record["sequence"] for record in mine] == list(range(per_thread))
        assert all((record["data"] == thread_index).all() for record in mine)


def test_writes_after_close_are_dropped_and_sizes_validated(tmp_path):
    writer = CaptureWriter(tmp_path, max_bytes=1_000)
    writer.close()
    writer.write({"late": True})
    assert list(read_capture(tmp_path)) == []
    with pytest.raises(ValueError, match="sizes must be positive"):
        CaptureWriter(tmp_path, max_bytes=0)


def test_default_segment_size_larger_than_the_bound_is_lowered(tmp_path):
    # Default 16 MiB segments with a 4 KB bound: quarter-bound segments, so
    # hitting the bound drops a quarter of the history, not all of it.
    with CaptureWriter(tmp_path, max_bytes=4_000) as writer:
        for request_id in range(40):
            writer.write({"request_id": request_id, "blob": b"z" * 200})
            assert _directory_bytes(tmp_path) <= 4_000
    assert len(_segments(tmp_path)) >= 4
    assert len(list(read_capture(tmp_path))) >= 12
