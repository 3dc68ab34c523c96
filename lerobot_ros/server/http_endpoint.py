"""Optional HTTP health and metrics endpoint for the policy server.

Invariants protected here:
- ``GET /healthz`` answers 200 only when the server is ready and not
  draining, so a load balancer or orchestrator never routes to a server
  that would refuse or drop the request; any other state is a 503 naming it;
- ``GET /metrics`` is valid Prometheus text exposition format 0.0.4: names
  and label names are checked, label values and help text escaped, one
  HELP/TYPE pair per metric family;
- the endpoint never takes the server down: a snapshot callback that raises
  becomes a 500 with the error text, and requests are served on daemon
  threads outside the ROS executor.

Standard library only (http.server), so it adds no dependency.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

from lerobot_ros.server.audit import json_safe

__all__ = ["HealthEndpoint", "HealthSnapshot", "Metric", "PROMETHEUS_CONTENT_TYPE", "render_prometheus"]

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

# A client that opens a connection and sends nothing must not hold a thread forever.
_REQUEST_TIMEOUT_S = 5.0


@dataclasses.dataclass(frozen=True)
class Metric:
    """One Prometheus sample; metrics sharing a name form one family."""

    name: str
    help: str
    type: Literal["gauge", "counter"]
    value: float
    labels: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _METRIC_NAME.match(self.name):
            raise ValueError(f"expected a Prometheus metric name matching {_METRIC_NAME.pattern}, got {self.name!r}")
        if self.type not in ("gauge", "counter"):
            raise ValueError(f"expected metric type 'gauge' or 'counter' for {self.name}, got {self.type!r}")
        for label in self.labels:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError(
                    f"expected label names matching {_LABEL_NAME.pattern} and not starting with '__' "
                    f"for {self.name}, got {label!r}"
                )


@dataclasses.dataclass(frozen=True)
class HealthSnapshot:
    """What the endpoint reports; built fresh by the callback on every request."""

    ready: bool
    draining: bool
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)
    metrics: list[Metric] = dataclasses.field(default_factory=list)

    @property
    def status(self) -> str:
        # Draining wins: a server shutting down is not coming back ready.
        if self.draining:
            return "draining"
        return "ok" if self.ready else "not_ready"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _format_value(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def render_prometheus(metrics: list[Metric]) -> str:
    """Metrics as Prometheus text format 0.0.4, families in first-seen order."""
    families: dict[str, list[Metric]] = {}
    for metric in metrics:
        family = families.setdefault(metric.name, [])
        if family and (family[0].type, family[0].help) != (metric.type, metric.help):
            raise ValueError(
                f"expected one type and help text per metric family {metric.name!r}, got "
                f"{family[0].type}/{family[0].help!r} and {metric.type}/{metric.help!r}"
            )
        family.append(metric)
    lines = []
    for name, family in families.items():
        lines.append(f"# HELP {name} {_escape_help(family[0].help)}")
        lines.append(f"# TYPE {name} {family[0].type}")
        for metric in family:
            labels = ",".join(f'{key}="{_escape_label_value(str(value))}"' for key, value in metric.labels.items())
            selector = f"{{{labels}}}" if labels else ""
            lines.append(f"{name}{selector} {_format_value(metric.value)}")
    return "\n".join(lines) + "\n" if lines else ""


def _make_handler(snapshot: Callable[[], HealthSnapshot]) -> type[BaseHTTPRequestHandler]:
    class HealthHandler(BaseHTTPRequestHandler):
        timeout = _REQUEST_TIMEOUT_S
        server_version = "lerobot_ros"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base class signature
            # Probes hit this every few seconds; stderr is the ROS log, keep it clean.
            pass

        def _send(self, status: int, body: str, content_type: str) -> None:
            payload = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(payload)

        def _send_json(self, status: int, document: dict[str, Any]) -> None:
            body = json.dumps(json_safe(document), allow_nan=False, default=str)
            self._send(status, body, "application/json")

        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            path = urlsplit(self.path).path
            if path not in ("/healthz", "/metrics"):
                self._send(404, f"not found: {path}; expected /healthz or /metrics\n", "text/plain; charset=utf-8")
                return
            try:
                current = snapshot()
                if not isinstance(current, HealthSnapshot):
                    raise TypeError(f"snapshot callback must return a HealthSnapshot, returned {type(current).__name__}")
                if path == "/metrics":
                    self._send(200, render_prometheus(current.metrics), PROMETHEUS_CONTENT_TYPE)
                    return
                status = current.status
                # "status" last so detail cannot claim "ok" for a 503.
                self._send_json(200 if status == "ok" else 503, {**current.detail, "status": status})
            except Exception as error:  # noqa: BLE001 - any failure is reported, never fatal
                message = f"health snapshot failed: {type(error).__name__}: {error}"
                if path == "/healthz":
                    self._send_json(500, {"status": "error", "error": message})
                else:
                    self._send(500, message + "\n", "text/plain; charset=utf-8")

    return HealthHandler


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never blocks process exit


class _Server6(_Server):
    address_family = socket.AF_INET6


class HealthEndpoint:
    """Serves /healthz and /metrics from ``snapshot()`` on a daemon thread."""

    def __init__(self, host: str, port: int, snapshot: Callable[[], HealthSnapshot]) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"expected a TCP port in 0..65535 (0 = ephemeral), got {port}")
        self._host = host
        self._requested_port = port
        self._snapshot = snapshot
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one when constructed with 0)."""
        if self._server is None:
            raise RuntimeError("HealthEndpoint.port is known only after start()")
        return int(self._server.server_address[1])

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"HealthEndpoint already serving on {self._host}:{self.port}")
        server_class = _Server6 if ":" in self._host else _Server  # "::", "::1"
        self._server = server_class((self._host, self._requested_port), _make_handler(self._snapshot))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="lerobot_ros_health_http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and release the port; safe to call twice or before start."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5.0)

    def __enter__(self) -> HealthEndpoint:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
