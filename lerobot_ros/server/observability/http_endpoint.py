"""Optional HTTP health and metrics endpoint for the policy server.

Invariants protected here:
- ``GET /healthz`` (readiness) answers 200 only when the server is ready and
  not draining, so a load balancer or orchestrator never routes to a server
  that would refuse or drop the request; any other state is a 503 naming it;
- ``GET /livez`` (liveness) answers 200 whenever the server can report its
  state at all, whatever that state is (inactive, not ready, draining): an
  orchestrator restarts a process only for being wedged or broken, never for
  draining or for being switched inactive; a snapshot that raises is a 500;
- ``GET /metrics`` is valid Prometheus text exposition format 0.0.4, written
  by ``prometheus_client`` from a registry private to the endpoint (never the
  process-global one): names and label names are checked here, one type and
  help text per metric family, counters named ``*_total``;
- the endpoint never takes the server down: a snapshot callback that raises
  becomes a 500 with the error text, and requests are served by the
  standard library's http.server on daemon threads outside the ROS executor.
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric as MetricFamily

from lerobot_ros.server.observability.audit import json_safe

__all__ = [
    "LIVENESS_PATH",
    "METRICS_PATH",
    "PATHS",
    "PROMETHEUS_CONTENT_TYPE",
    "READINESS_PATH",
    "HealthEndpoint",
    "HealthSnapshot",
    "Metric",
    "render_prometheus",
]

#: Readiness (200 only when serving), liveness (200 in every state the server can report) and the
#: metrics.
READINESS_PATH, LIVENESS_PATH, METRICS_PATH = "/healthz", "/livez", "/metrics"
PATHS = (READINESS_PATH, LIVENESS_PATH, METRICS_PATH)

# What generate_latest writes (its default escaping keeps names in the 0.0.4 alphabet).
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_COUNTER_SUFFIX = "_total"

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
            raise ValueError(
                f"expected a Prometheus metric name matching {_METRIC_NAME.pattern}, got "
                f"{self.name!r}"
            )
        if self.type not in ("gauge", "counter"):
            raise ValueError(
                f"expected metric type 'gauge' or 'counter' for {self.name}, got {self.type!r}"
            )
        if self.type == "counter" and not self.name.endswith(_COUNTER_SUFFIX):
            # prometheus_client exposes every counter family as <name>_total.
            raise ValueError(
                f"expected a counter name ending in {_COUNTER_SUFFIX!r}, got {self.name!r}"
            )
        for label in self.labels:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError(
                    f"expected label names matching {_LABEL_NAME.pattern} and not starting with "
                    "'__' "
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


def _families(metrics: Iterable[Metric]) -> list[MetricFamily]:
    """Metrics grouped into prometheus_client families, in first-seen order."""
    families: dict[str, tuple[Metric, MetricFamily]] = {}
    for metric in metrics:
        if metric.name not in families:
            # prometheus_client names a counter family without its _total suffix and adds it back
            # on exposition.
            family_name = (
                metric.name.removesuffix(_COUNTER_SUFFIX)
                if metric.type == "counter"
                else metric.name
            )
            families[metric.name] = (metric, MetricFamily(family_name, metric.help, metric.type))
        first, family = families[metric.name]
        if (first.type, first.help) != (metric.type, metric.help):
            raise ValueError(
                f"expected one type and help text per metric family {metric.name!r}, got "
                f"{first.type}/{first.help!r} and {metric.type}/{metric.help!r}"
            )
        family.add_sample(
            metric.name,
            {key: str(value) for key, value in metric.labels.items()},
            float(metric.value),
        )
    return [family for _, family in families.values()]


class _Samples:
    """A prometheus_client collector over what ``metrics()`` returns at each scrape."""

    def __init__(self, metrics: Callable[[], Iterable[Metric]]) -> None:
        self._metrics = metrics

    def collect(self) -> list[MetricFamily]:
        return _families(self._metrics())


def _registry(metrics: Callable[[], Iterable[Metric]]) -> CollectorRegistry:
    # auto_describe off: registering must not take a snapshot.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Samples(metrics))
    return registry


def render_prometheus(metrics: list[Metric]) -> str:
    """Metrics as Prometheus text format 0.0.4, families in first-seen order."""
    return generate_latest(_registry(lambda: metrics)).decode("utf-8")


def _checked(snapshot: Callable[[], HealthSnapshot]) -> HealthSnapshot:
    current = snapshot()
    if not isinstance(current, HealthSnapshot):
        raise TypeError(
            f"snapshot callback must return a HealthSnapshot, returned {type(current).__name__}"
        )
    return current


def _make_handler(
    snapshot: Callable[[], HealthSnapshot], registry: CollectorRegistry
) -> type[BaseHTTPRequestHandler]:
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
            if path not in PATHS:
                self._send(
                    404,
                    f"not found: {path}; expected {', '.join(PATHS)}\n",
                    "text/plain; charset=utf-8",
                )
                return
            try:
                if path == METRICS_PATH:
                    self._send(
                        200, generate_latest(registry).decode("utf-8"), PROMETHEUS_CONTENT_TYPE
                    )
                    return
                current = _checked(snapshot)
                status = current.status
                if path == LIVENESS_PATH:
                    # Alive in every state; "readiness" says which, "status" last so detail cannot
                    # override it.
                    self._send_json(
                        200, {**current.detail, "readiness": status, "status": "alive"}
                    )
                    return
                # "status" last so detail cannot claim "ok" for a 503.
                self._send_json(
                    200 if status == "ok" else 503, {**current.detail, "status": status}
                )
            except Exception as error:  # noqa: BLE001 - any failure is reported, never fatal
                message = f"health snapshot failed: {type(error).__name__}: {error}"
                if path == METRICS_PATH:
                    self._send(500, message + "\n", "text/plain; charset=utf-8")
                else:
                    self._send_json(500, {"status": "error", "error": message})

    return HealthHandler


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never blocks process exit


class _Server6(_Server):
    address_family = socket.AF_INET6


class HealthEndpoint:
    """Serves /healthz, /livez and /metrics from ``snapshot()`` on a daemon thread."""

    def __init__(self, host: str, port: int, snapshot: Callable[[], HealthSnapshot]) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"expected a TCP port in 0..65535 (0 = ephemeral), got {port}")
        self._host = host
        self._requested_port = port
        self._snapshot = snapshot
        self._registry = _registry(lambda: _checked(snapshot).metrics)
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
        self._server = server_class(
            (self._host, self._requested_port), _make_handler(self._snapshot, self._registry)
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="lerobot_ros_health_http",
            daemon=True,
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
