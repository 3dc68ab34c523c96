"""Audit log: one complete JSON object per line, one line per request.

Invariants protected here:
- every line is a whole, valid JSON document (strict JSON: non-finite floats
  become null), so ``jq``/log shippers never meet NaN or half a record;
- lines written from concurrent request threads never interleave (one lock,
  one ``write`` call per line, flushed at once);
- disk use is bounded: before the write that would take the file past
  ``max_bytes`` it rotates once to ``<path>.1``, replacing the previous
  backup, so at most ~2x max_bytes are kept.

The file and its rotation are the standard library's RotatingFileHandler;
only its size test is ours (in bytes, not characters, and a file holds
exactly ``max_bytes`` before it rotates).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import threading
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

__all__ = ["AuditLog", "default_audit_path", "json_safe"]


def json_safe(value: Any) -> Any:
    """A copy of ``value`` that strict JSON accepts: NaN/±inf become None.

    Objects with ``tolist()`` (numpy scalars and arrays) are converted to
    plain Python first; tuples become lists. Other types pass through
    unchanged for ``json.dumps`` to accept or refuse.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return json_safe(tolist())
    return value


def _safe_file_part(instance_id: str) -> str:
    # The id may be a ROS namespace ("/lab/arm1"); keep the file name flat.
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", instance_id).strip("._")
    return cleaned or "default"


def default_audit_path(instance_id: str) -> Path:
    """Where "auto" puts the log: the ROS log directory, as rcl_logging picks it."""
    log_dir = os.environ.get("ROS_LOG_DIR")
    if not log_dir:
        ros_home = os.environ.get("ROS_HOME")
        log_dir = os.path.join(ros_home, "log") if ros_home else os.path.join("~", ".ros", "log")
    return Path(log_dir).expanduser() / f"lerobot_ros_audit_{_safe_file_part(instance_id)}.jsonl"


class _JsonLinesFile(RotatingFileHandler):
    """Appends each record's message as one line, rotating to ``<path>.1``."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        super().__init__(path, maxBytes=max_bytes, backupCount=1, encoding="utf-8")
        self.setFormatter(logging.Formatter("%(message)s"))

    def shouldRollover(self, record: logging.LogRecord) -> bool:  # noqa: N802 - logging naming
        if not os.path.isfile(self.baseFilename):
            return False  # as the stdlib's test: never rotate a device or pipe
        size = self.stream.tell()
        line_bytes = len((self.format(record) + self.terminator).encode("utf-8"))
        # Never rotate an empty file: a single oversize record still gets written.
        return size > 0 and size + line_bytes > self.maxBytes

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging naming
        # Called inside the handler's except block: re-raise, so the caller
        # (the request path) reports a failed write instead of logging's
        # "--- Logging error ---" on stderr.
        raise  # noqa: PLE0704


class AuditLog:
    """Appends JSON lines to a file, to stdout, or nowhere ("off").

    Build it with ``AuditLog.open``. ``path`` is the file written to, or None
    for stdout and "off". Writes after ``close()`` are dropped: a request
    thread finishing during shutdown must not fail because of the audit log.
    """

    def __init__(self, path: Path | None, to_stdout: bool, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"audit max_bytes must be positive, got {max_bytes}")
        self.path = path
        self._to_stdout = to_stdout
        self._lock = threading.Lock()
        self._closed = False
        self._file: _JsonLinesFile | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = _JsonLinesFile(path, max_bytes)

    @classmethod
    def open(cls, destination: str, instance_id: str, max_bytes: int = 100 << 20) -> AuditLog:
        """``destination``: "off", "-" (stdout), "auto" (ROS log dir) or a file path."""
        if destination == "off":
            return cls(None, to_stdout=False, max_bytes=max_bytes)
        if destination == "-":
            return cls(None, to_stdout=True, max_bytes=max_bytes)
        if destination == "auto":
            return cls(default_audit_path(instance_id), to_stdout=False, max_bytes=max_bytes)
        if not destination.strip():
            raise ValueError(
                "audit destination must be 'off', '-', 'auto' or a file path, got an empty string"
            )
        return cls(Path(destination).expanduser(), to_stdout=False, max_bytes=max_bytes)

    @property
    def enabled(self) -> bool:
        return self.path is not None or self._to_stdout

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one JSON line (key order kept)."""
        if not self.enabled:
            return
        try:
            line = json.dumps(json_safe(record), separators=(",", ":"), allow_nan=False)
        except TypeError as error:
            raise TypeError(
                "audit record must hold only JSON types (str, numbers, bool, None, lists, "
                f"dicts): {error}"
            ) from None
        with self._lock:
            if self._closed:
                return
            if self._to_stdout:
                # Looked up per write so redirection (and pytest capture) applies.
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
                return
            assert self._file is not None
            # emit, not handle: this lock already orders writers, and the
            # handler writes and flushes each line at once.
            self._file.emit(logging.makeLogRecord({"msg": line}))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
