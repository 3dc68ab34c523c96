"""Bounded capture of request/response records for offline replay.

Invariants protected here:
- the capture directory never holds more than ``max_bytes`` of segment files:
  the oldest segments are deleted before a write would cross the bound, and
  a single record larger than the bound is refused;
- records are plain msgpack (strings, numbers, bools, None, bytes, lists,
  str-keyed dicts) plus numpy arrays of numeric dtypes stored as raw bytes
  with dtype and shape; nothing is pickled and nothing read back can run
  code, so a capture from an untrusted machine is safe to replay;
- records written by concurrent threads are whole and in write order.

Layout: ``capture-<NNNNNN>.msgpack`` segment files, each a stream of msgpack
objects, numbered in write order. A writer opened on an existing directory
continues numbering after the highest segment there (and counts it toward
the bound). One writer per directory.

Not the standard library's RotatingFileHandler: that handler writes
formatted text lines (a msgpack stream is neither), bounds one file rather
than a directory that already holds segments from earlier runs, and rotates
by renaming ``name.1``..``name.N`` on every roll-over, so a segment would
change its name while a reader replays the directory in order.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
import numpy as np

__all__ = ["NDARRAY_EXT_CODE", "CaptureError", "CaptureWriter", "encode_record", "read_capture"]

# msgpack ext type code for numpy arrays (application codes are 0..127).
NDARRAY_EXT_CODE = 42

# Booleans, signed/unsigned integers, floats, complex: fixed-size numbers
# whose bytes mean the same on every machine once the byte order is recorded.
_ALLOWED_DTYPE_KINDS = "biufc"

_SEGMENT_PATTERN = re.compile(r"^capture-(\d{6,})\.msgpack$")

# Reading refuses a single msgpack object larger than this; well above any
# sensible capture record (a few camera frames), well below memory trouble.
_MAX_RECORD_BYTES = 1 << 30


class CaptureError(ValueError):
    """A record that cannot be captured, or capture data that cannot be read back."""


def _segment_path(directory: Path, number: int) -> Path:
    return directory / f"capture-{number:06d}.msgpack"


def _list_segments(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for path in directory.iterdir():
        match = _SEGMENT_PATTERN.match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


# ---------------------------------------------------------------------------
# encoding


def _check_dtype(dtype: np.dtype, where: str) -> None:
    if (
        dtype.kind not in _ALLOWED_DTYPE_KINDS
        or dtype.fields is not None
        or dtype.subdtype is not None
    ):
        raise CaptureError(
            f"{where}: expected a numpy array of a plain numeric dtype (bool, int, uint, float, "
            "complex), "
            f"got dtype {dtype.str!r} ({dtype})"
        )


def _encode_array(array: np.ndarray, where: str) -> msgpack.ExtType:
    _check_dtype(array.dtype, where)
    # dtype.str carries the byte order ("<f4"), so captures move between machines.
    payload = msgpack.packb(
        [array.dtype.str, list(array.shape), array.tobytes(order="C")], use_bin_type=True
    )
    return msgpack.ExtType(NDARRAY_EXT_CODE, payload)


def _to_packable(value: Any, where: str) -> Any:
    """``value`` with numpy arrays as ext types, after checking every type.

    One walk both converts and validates, so a bad record is refused before
    a byte of it reaches the segment file.
    """
    if value is None or isinstance(value, (str, bytes, bool, int, float)):
        return value
    if isinstance(value, np.ndarray):
        return _encode_array(value, where)
    if isinstance(value, np.generic):
        _check_dtype(value.dtype, where)
        return value.item()
    if isinstance(value, dict):
        packed = {}
        for key, item in value.items():
            # The reader uses strict_map_key: only str keys read back.
            if not isinstance(key, str):
                raise CaptureError(
                    f"{where}: expected str dict keys, got {type(key).__name__} key {key!r}"
                )
            packed[key] = _to_packable(item, f"{where}.{key}")
        return packed
    if isinstance(value, (list, tuple)):
        return [_to_packable(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise CaptureError(
        f"{where}: expected str, int, float, bool, None, bytes, list, dict or numeric numpy "
        "array, "
        f"got {type(value).__name__}"
    )


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as msgpack bytes (what ``CaptureWriter.write`` appends)."""
    if not isinstance(record, dict):
        raise CaptureError(f"expected a dict record, got {type(record).__name__}")
    packable = _to_packable(record, "record")
    try:
        return msgpack.packb(packable, use_bin_type=True)
    except (OverflowError, ValueError, TypeError) as error:
        # e.g. an int beyond 64 bits, a str/bytes over 4 GiB
        raise CaptureError(
            f"record: expected values msgpack can hold, got one it refused: {error}"
        ) from None


# ---------------------------------------------------------------------------
# decoding


def _decode_ext(code: int, payload: bytes) -> np.ndarray:
    if code != NDARRAY_EXT_CODE:
        raise CaptureError(
            f"expected msgpack ext type {NDARRAY_EXT_CODE} (numpy array), got ext type {code}"
        )
    try:
        dtype_str, shape, data = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        dtype = np.dtype(dtype_str)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise CaptureError(
            f"expected a numpy array payload [dtype, shape, bytes], got an unreadable one: {error}"
        ) from None
    _check_dtype(dtype, "captured array")
    if not isinstance(shape, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise CaptureError(f"expected a captured array shape of non-negative ints, got {shape!r}")
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not isinstance(data, bytes) or len(data) != expected:
        actual = len(data) if isinstance(data, bytes) else type(data).__name__
        raise CaptureError(
            f"expected {expected} bytes for a {dtype_str} array of shape {shape}, got {actual}"
        )
    # copy(): a writable array that does not pin the segment's read buffer.
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _read_segment(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as stream:
        unpacker = msgpack.Unpacker(
            stream,
            raw=False,
            strict_map_key=True,
            ext_hook=_decode_ext,
            max_buffer_size=_MAX_RECORD_BYTES,
        )
        while True:
            try:
                record = unpacker.unpack()
            except msgpack.OutOfData:
                break
            except CaptureError as error:
                raise CaptureError(f"{path.name}: {error}") from None
            except (ValueError, msgpack.UnpackException) as error:
                raise CaptureError(
                    f"{path.name}: expected a stream of msgpack records, unreadable after byte "
                    f"{unpacker.tell()}: {error}"
                ) from None
            if not isinstance(record, dict):
                raise CaptureError(
                    f"{path.name}: expected each record to be a map, got {type(record).__name__}"
                )
            yield record
        size = path.stat().st_size
        if unpacker.tell() != size:
            # A writer killed mid-record leaves a partial tail; everything
            # before it is intact, so report and go on rather than fail.
            warnings.warn(
                f"{path}: ignored a truncated record at the end ({size - unpacker.tell()} bytes "
                f"after byte {unpacker.tell()})",
                stacklevel=2,
            )


def read_capture(directory: Path | str) -> Iterator[dict[str, Any]]:
    """Every record in ``directory``, oldest first, numpy arrays restored.

    A missing or empty directory yields nothing. Corrupt data raises
    ``CaptureError``; a truncated final record of a segment (a crashed
    writer) is skipped with a warning.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return
    for _, path in _list_segments(directory):
        yield from _read_segment(path)


# ---------------------------------------------------------------------------
# writing


class CaptureWriter:
    """Appends records to size-bounded segment files; thread-safe.

    ``segment_bytes`` larger than ``max_bytes`` is lowered to max_bytes // 4.

    Writes after ``close()`` are dropped: a request finishing during shutdown
    must not fail because capture has stopped.
    """

    def __init__(self, directory: Path, max_bytes: int, segment_bytes: int = 16 << 20) -> None:
        if segment_bytes <= 0 or max_bytes <= 0:
            raise ValueError(
                f"capture sizes must be positive, got max_bytes {max_bytes} segment_bytes "
                f"{segment_bytes}"
            )
        if segment_bytes > max_bytes:
            # A small bound with the default segment size: use quarter-bound
            # segments, so deleting the oldest keeps ~3/4 of the history
            # instead of all of it vanishing at once.
            segment_bytes = max(1, max_bytes // 4)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._max_bytes = max_bytes
        self._segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._closed = False
        # Oldest first; the last entry is the segment being written.
        self._segments: list[tuple[Path, int]] = [
            (path, path.stat().st_size) for _, path in _list_segments(self.directory)
        ]
        self._total = sum(size for _, size in self._segments)
        existing_numbers = [number for number, _ in _list_segments(self.directory)]
        self._next_number = (max(existing_numbers) + 1) if existing_numbers else 0
        self._file: BinaryIO | None = None

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._total

    def _start_segment(self) -> None:
        if self._file is not None:
            self._file.close()
        path = _segment_path(self.directory, self._next_number)
        self._next_number += 1
        self._file = path.open("xb")  # "x": never overwrite an earlier capture
        self._segments.append((path, 0))

    def _delete_oldest(self) -> None:
        path, size = self._segments.pop(0)
        path.unlink(missing_ok=True)
        self._total -= size

    def write(self, record: dict[str, Any]) -> None:
        """Append one record; raises ``CaptureError`` for unsupported values."""
        encoded = encode_record(record)
        size = len(encoded)
        if size > self._max_bytes:
            raise CaptureError(
                f"expected a capture record of at most {self._max_bytes} bytes (max_bytes), got "
                f"{size} bytes"
            )
        with self._lock:
            if self._closed:
                return
            current_size = self._segments[-1][1] if self._file is not None else 0
            if self._file is None or (
                current_size > 0 and current_size + size > self._segment_bytes
            ):
                self._start_segment()
            while self._total + size > self._max_bytes:
                if len(self._segments) == 1:
                    # Only the open segment is left and it is in the way:
                    # start a fresh one so the full one can go.
                    self._start_segment()
                self._delete_oldest()
            assert self._file is not None
            self._file.write(encoded)
            # Flushed per record: a crash loses at most the record in flight.
            self._file.flush()
            path, current_size = self._segments[-1]
            self._segments[-1] = (path, current_size + size)
            self._total += size

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
