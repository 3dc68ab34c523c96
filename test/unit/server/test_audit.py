"""lerobot_ros.server.observability.audit: one whole JSON line per request, bounded on disk."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from lerobot_ros.server.observability.audit import AuditLog, default_audit_path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_one_json_line_per_write_in_key_order(tmp_path):
    path = tmp_path / "nested" / "dir" / "audit.jsonl"
    with AuditLog.open(str(path), "arm1") as log:
        assert log.path == path
        log.write({"request_id": 1, "zeta": "first", "alpha": [1, 2]})
        log.write({"request_id": 2, "text": "line\nbreak \u00e9"})
        # Already on disk before close: line-buffered and flushed.
        assert len(path.read_text(encoding="utf-8").splitlines()) == 2
    raw = path.read_text(encoding="utf-8")
    assert raw.endswith("\n") and raw.count("\n") == 2
    assert raw.splitlines()[0] == '{"request_id":1,"zeta":"first","alpha":[1,2]}'
    assert _lines(path)[1] == {"request_id": 2, "text": "line\nbreak \u00e9"}


def test_appends_to_an_existing_file(tmp_path):
    path = tmp_path / "audit.jsonl"
    for request_id in range(2):
        with AuditLog.open(str(path), "arm1") as log:
            log.write({"request_id": request_id})
    assert [line["request_id"] for line in _lines(path)] == [0, 1]


def test_non_finite_floats_become_null_and_numpy_is_converted(tmp_path):
    path = tmp_path / "audit.jsonl"
    with AuditLog.open(str(path), "arm1") as log:
        log.write(
            {
                "latency_ms": float("nan"),
                "nested": {"values": [1.5, float("inf"), -float("inf")]},
                "tuple": (np.float32(2.5), np.int64(3)),
                "array": np.array([[1.0, np.nan]]),
            }
        )
    (record,) = _lines(path)
    assert record == {
        "latency_ms": None,
        "nested": {"values": [1.5, None, None]},
        "tuple": [2.5, 3],
        "array": [[1.0, None]],
    }
    assert "NaN" not in path.read_text()


def test_unserialisable_value_is_refused_with_the_accepted_types(tmp_path):
    with AuditLog.open(str(tmp_path / "audit.jsonl"), "arm1") as log:
        with pytest.raises(TypeError, match="only JSON types.*object"):
            log.write({"bad": object()})


def test_concurrent_writes_never_interleave(tmp_path):
    path = tmp_path / "audit.jsonl"
    threads_count, per_thread = 8, 200
    # Long lines make a torn write likely if the lock were missing.
    payload = "x" * 5000
    with AuditLog.open(str(path), "arm1") as log:
        barrier = threading.Barrier(threads_count)

        def writer(thread_index: int) -> None:
            barrier.wait()
            for sequence in range(per_thread):
                log.write({"thread": thread_index, "sequence": sequence, "payload": payload})

        threads = [
            threading.Thread(target=writer, args=(index,)) for index in range(threads_count)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    records = _lines(path)
    assert len(records) == threads_count * per_thread
    for thread_index in range(threads_count):
        mine = [record["sequence"] for record in records if record["thread"] == thread_index]
        assert mine == list(range(per_thread))
    assert all(record["payload"] == payload for record in records)


def test_rotates_once_replacing_the_older_backup(tmp_path):
    path = tmp_path / "audit.jsonl"
    backup = tmp_path / "audit.jsonl.1"
    line_bytes = len('{"n":"0000"}\n')
    with AuditLog.open(str(path), "arm1", max_bytes=10 * line_bytes) as log:
        for n in range(35):
            log.write({"n": f"{n:04d}"})
    assert path.stat().st_size <= 10 * line_bytes
    assert backup.stat().st_size <= 10 * line_bytes
    assert not (tmp_path / "audit.jsonl.2").exists()
    # 35 records, 10 per file: the current file holds the last 5, the backup
    # the 10 before them; the oldest 20 are gone.
    assert [int(r["n"]) for r in _lines(path)] == list(range(30, 35))
    assert [int(r["n"]) for r in _lines(backup)] == list(range(20, 30))


def test_off_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    log = AuditLog.open("off", "arm1")
    assert log.path is None and not log.enabled
    log.write({"request_id": 1})
    log.close()
    assert list(tmp_path.iterdir()) == []
    assert capsys.readouterr().out == ""


def test_dash_writes_to_stdout(capsys):
    log = AuditLog.open("-", "arm1")
    assert log.path is None and log.enabled
    log.write({"request_id": 7, "ok": True})
    log.close()
    assert capsys.readouterr().out == '{"request_id":7,"ok":true}\n'


def test_auto_uses_ros_log_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ROS_LOG_DIR", str(tmp_path / "roslogs"))
    with AuditLog.open("auto", "/lab/arm 1") as log:
        log.write({"request_id": 1})
    expected = tmp_path / "roslogs" / "lerobot_ros_audit_lab_arm_1.jsonl"
    assert log.path == expected
    assert _lines(expected) == [{"request_id": 1}]


def test_auto_falls_back_to_ros_home_then_home(tmp_path, monkeypatch):
    monkeypatch.delenv("ROS_LOG_DIR", raising=False)
    monkeypatch.setenv("ROS_HOME", str(tmp_path / "ros_home"))
    assert (
        default_audit_path("arm1")
        == tmp_path / "ros_home" / "log" / "lerobot_ros_audit_arm1.jsonl"
    )
    monkeypatch.delenv("ROS_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert (
        default_audit_path("arm1")
        == tmp_path / "home" / ".ros" / "log" / "lerobot_ros_audit_arm1.jsonl"
    )


def test_writes_after_close_are_dropped(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = AuditLog.open(str(path), "arm1")
    log.write({"n": 1})
    log.close()
    log.write({"n": 2})
    assert _lines(path) == [{"n": 1}]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux /dev/full")
def test_a_failed_write_reaches_the_caller(capsys):
    # /dev/full fails every write with ENOSPC, as a full disk does.
    log = AuditLog.open("/dev/full", "arm1")
    with pytest.raises(OSError, match="No space left"):
        log.write({"n": 1})
    with contextlib.suppress(OSError):  # the line still buffered fails once more
        log.close()
    assert "Logging error" not in capsys.readouterr().err
