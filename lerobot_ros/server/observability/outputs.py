"""The policy server's records and probes: audit log, request capture, HTTP health endpoint.

Invariants: each is opened only when its parameter asks for it, and says
where it writes or listens as it opens; ``close`` releases all three, may be
called any number of times (drain and node destruction both call it), and
writes arriving afterwards are dropped by the writers themselves.

Plain Python: the node passes plain values and its logger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lerobot_ros.server.observability.audit import AuditLog
from lerobot_ros.server.observability.capture import CaptureWriter
from lerobot_ros.server.observability.http_endpoint import HealthEndpoint, HealthSnapshot


@dataclass
class Observability:
    audit: AuditLog
    capture: CaptureWriter | None
    http: HealthEndpoint | None

    @classmethod
    def open(
        cls,
        *,
        audit_log: str,
        instance_id: str,
        capture_dir: str,
        capture_max_mb: int,
        http_host: str,
        http_port: int,
        snapshot: Callable[[], HealthSnapshot],
        log,
    ) -> Observability:
        """``audit_log`` as AuditLog.open takes it; empty ``capture_dir`` and ``http_port`` 0 are
        off."""
        audit = AuditLog.open(audit_log, instance_id)
        if audit.path is not None:
            log.info(f"audit log: {audit.path}")
        capture = None
        if capture_dir:
            capture = CaptureWriter(Path(capture_dir).expanduser(), capture_max_mb << 20)
            log.info(f"capturing request/response pairs into {capture_dir}")
        http = None
        if http_port:
            http = HealthEndpoint(http_host, http_port, snapshot)
            http.start()
            log.info(f"health and metrics on http://{http_host}:{http.port}/")
        return cls(audit, capture, http)

    @property
    def capture_write(self) -> Callable[[dict], None] | None:
        return self.capture.write if self.capture is not None else None

    def standby_promoted(self, session, now_s: float, log) -> None:
        """A standby's first observation was admitted: it is an ordinary session now (sessions.py);
        logged and audited with how long it waited."""
        from lerobot_ros.server.requests.request_records import standby_promotion_record

        waited_s = now_s - session.opened_at
        log.info(
            f"standby session of {session.client_id} promoted ({session.session_id}, "
            f"after {waited_s:.1f} s as a standby)"
        )
        self.audit.write(standby_promotion_record(session.session_id, session.client_id, waited_s))

    def close(self) -> None:
        self.audit.close()
        if self.capture is not None:
            self.capture.close()
        if self.http is not None:
            self.http.stop()
