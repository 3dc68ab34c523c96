"""lerobot_ros.server.observability.http_endpoint against a real socket on an ephemeral port."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request

import pytest

from lerobot_ros.server.observability.http_endpoint import (
    PROMETHEUS_CONTENT_TYPE,
    HealthEndpoint,
    HealthSnapshot,
    Metric,
    render_prometheus,
)

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda match: {"n": "\n"}.get(match.group(1), match.group(1)), text)


def parse_exposition(
    text: str,
) -> tuple[dict[str, tuple[str, str]], list[tuple[str, dict[str, str], float]]]:
    """A strict little parser of text format 0.0.4: (families, samples)."""
    families: dict[str, tuple[str, str]] = {}
    helps: dict[str, str] = {}
    samples = []
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP ") :].partition(" ")
            helps[name] = _unescape(help_text)
        elif line.startswith("# TYPE "):
            name, metric_type = line[len("# TYPE ") :].split(" ")
            assert name in helps and name not in families, (
                f"TYPE for {name} without HELP, or repeated"
            )
            families[name] = (helps[name], metric_type)
        else:
            match = _SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            assert match["name"] in families, f"sample {match['name']} before its TYPE line"
            labels_text = match["labels"] or ""
            labels = {key: _unescape(value) for key, value in _LABEL.findall(labels_text)}
            assert ",".join(f'{k}="{v}"' for k, v in _LABEL.findall(labels_text)) == labels_text
            samples.append((match["name"], labels, float(match["value"])))
    return families, samples


class Snapshots:
    """A mutable snapshot source standing in for the server's state."""

    def __init__(self) -> None:
        self.ready = True
        self.draining = False
        self.fail_with: Exception | None = None
        self.metrics: list[Metric] = []

    def __call__(self) -> HealthSnapshot:
        if self.fail_with is not None:
            raise self.fail_with
        return HealthSnapshot(
            ready=self.ready,
            draining=self.draining,
            detail={"model_id": "act_so101", "queue_depth": 2, "latency_ms": float("nan")},
            metrics=self.metrics,
        )


@pytest.fixture
def served():
    snapshots = Snapshots()
    endpoint = HealthEndpoint("127.0.0.1", 0, snapshots)
    endpoint.start()
    yield endpoint, snapshots
    endpoint.stop()


def _get(endpoint: HealthEndpoint, path: str) -> tuple[int, str, str]:
    url = f"http://127.0.0.1:{endpoint.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return (
                response.status,
                response.headers["Content-Type"],
                response.read().decode("utf-8"),
            )
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode("utf-8")


def test_healthz_ok_when_ready(served):
    endpoint, _ = served
    assert endpoint.port > 0
    status, content_type, body = _get(endpoint, "/healthz")
    assert status == 200 and content_type == "application/json"
    assert json.loads(body) == {
        "status": "ok",
        "model_id": "act_so101",
        "queue_depth": 2,
        "latency_ms": None,
    }


def test_healthz_503_not_ready_and_draining(served):
    endpoint, snapshots = served
    snapshots.ready = False
    status, _, body = _get(endpoint, "/healthz?verbose=1")
    assert status == 503 and json.loads(body)["status"] == "not_ready"
    snapshots.ready, snapshots.draining = True, True
    status, _, body = _get(endpoint, "/healthz")
    assert status == 503 and json.loads(body)["status"] == "draining"
    assert json.loads(body)["model_id"] == "act_so101"


@pytest.mark.parametrize(
    ("ready", "draining", "readiness"),
    [(True, False, "ok"), (False, False, "not_ready"), (True, True, "draining")],
)
def test_livez_is_200_in_every_state_the_server_reports(served, ready, draining, readiness):
    endpoint, snapshots = served
    snapshots.ready, snapshots.draining = ready, draining
    status, content_type, body = _get(endpoint, "/livez")
    assert status == 200 and content_type == "application/json"
    assert json.loads(body) == {
        "status": "alive",
        "readiness": readiness,
        "model_id": "act_so101",
        "queue_depth": 2,
        "latency_ms": None,
    }
    # The readiness probe of the same state: only "ok" is 200, so the two probes must not share a
    # path.
    assert _get(endpoint, "/healthz")[0] == (200 if readiness == "ok" else 503)


def test_livez_is_500_when_the_state_cannot_be_read(served):
    endpoint, snapshots = served
    snapshots.fail_with = RuntimeError("sessions lock wedged")
    status, _, body = _get(endpoint, "/livez")
    assert status == 500
    assert json.loads(body) == {
        "status": "error",
        "error": "health snapshot failed: RuntimeError: sessions lock wedged",
    }
    snapshots.fail_with = None
    assert _get(endpoint, "/livez")[0] == 200


def test_livez_detail_cannot_override_status():
    def claims_dead() -> HealthSnapshot:
        return HealthSnapshot(
            ready=True, draining=False, detail={"status": "dead", "readiness": "bogus"}
        )

    with HealthEndpoint("127.0.0.1", 0, claims_dead) as endpoint:
        status, _, body = _get(endpoint, "/livez")
    assert status == 200 and json.loads(body) == {"status": "alive", "readiness": "ok"}


def test_detail_cannot_override_status():
    def claims_ok() -> HealthSnapshot:
        return HealthSnapshot(ready=False, draining=False, detail={"status": "ok"})

    with HealthEndpoint("127.0.0.1", 0, claims_ok) as endpoint:
        status, _, body = _get(endpoint, "/healthz")
    assert status == 503 and json.loads(body) == {"status": "not_ready"}


def test_metrics_exposition_parses_with_escaped_labels(served):
    endpoint, snapshots = served
    awkward = 'say "hi"\\path\nnext'
    snapshots.metrics = [
        Metric(
            "lerobot_requests_total",
            "Requests served.\nBy result.",
            "counter",
            41,
            {"result": "ok"},
        ),
        Metric("lerobot_inference_latency_ms", "Last inference latency.", "gauge", 27.5),
        Metric(
            "lerobot_requests_total",
            "Requests served.\nBy result.",
            "counter",
            3,
            {"result": awkward},
        ),
        Metric(
            "lerobot_queue_depth",
            "Actions queued.",
            "gauge",
            float("nan"),
            {"robot": "arm1", "camera": "wrist"},
        ),
        Metric("lerobot_budget", "Unbounded budget.", "gauge", float("inf")),
    ]
    status, content_type, body = _get(endpoint, "/metrics")
    assert status == 200 and content_type == PROMETHEUS_CONTENT_TYPE
    families, samples = parse_exposition(body)
    assert families == {
        "lerobot_requests_total": ("Requests served.\nBy result.", "counter"),
        "lerobot_inference_latency_ms": ("Last inference latency.", "gauge"),
        "lerobot_queue_depth": ("Actions queued.", "gauge"),
        "lerobot_budget": ("Unbounded budget.", "gauge"),
    }
    assert samples[:3] == [
        ("lerobot_requests_total", {"result": "ok"}, 41.0),
        ("lerobot_requests_total", {"result": awkward}, 3.0),
        ("lerobot_inference_latency_ms", {}, 27.5),
    ]
    name, labels, value = samples[3]
    assert (name, labels) == (
        "lerobot_queue_depth",
        {"robot": "arm1", "camera": "wrist"},
    ) and value != value
    assert samples[4] == ("lerobot_budget", {}, float("inf"))
    assert 'result="say \\"hi\\"\\\\path\\nnext"' in body
    assert "lerobot_budget +Inf\n" in body and "NaN" in body


def test_empty_metrics_is_an_empty_body(served):
    endpoint, _ = served
    assert _get(endpoint, "/metrics")[:3:2] == (200, "")


def test_unknown_path_is_404(served):
    endpoint, _ = served
    status, _, body = _get(endpoint, "/favicon.ico")
    assert status == 404 and "expected /healthz, /livez, /metrics" in body


def test_snapshot_error_is_500_and_server_keeps_serving(served):
    endpoint, snapshots = served
    snapshots.fail_with = RuntimeError("queue lock timed out")
    status, _, body = _get(endpoint, "/healthz")
    assert status == 500
    assert json.loads(body) == {
        "status": "error",
        "error": "health snapshot failed: RuntimeError: queue lock timed out",
    }
    status, _, body = _get(endpoint, "/metrics")
    assert status == 500 and "RuntimeError: queue lock timed out" in body
    snapshots.fail_with = None
    assert _get(endpoint, "/healthz")[0] == 200


def test_conflicting_metric_family_is_500_naming_it(served):
    endpoint, snapshots = served
    snapshots.metrics = [
        Metric("lerobot_x_total", "one", "gauge", 1),
        Metric("lerobot_x_total", "one", "counter", 2),
    ]
    status, _, body = _get(endpoint, "/metrics")
    assert status == 500 and "one type and help text per metric family 'lerobot_x_total'" in body


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "bad-name"}, "metric name"),
        ({"name": "9lives"}, "metric name"),
        ({"type": "histogram"}, "'gauge' or 'counter'"),
        ({"labels": {"bad label": "x"}}, "label names"),
        ({"labels": {"__reserved": "x"}}, "label names"),
        ({"type": "counter"}, "counter name ending in '_total'"),
    ],
)
def test_metric_validation(kwargs, message):
    arguments = {"name": "lerobot_ok", "help": "h", "type": "gauge", "value": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        Metric(**arguments)


def test_render_prometheus_formats_integers_as_floats():
    assert (
        render_prometheus([Metric("a_total", "h", "counter", 3)])
        == "# HELP a_total h\n# TYPE a_total counter\na_total 3.0\n"
    )


def test_stop_releases_the_port_and_start_twice_is_refused():
    endpoint = HealthEndpoint("127.0.0.1", 0, Snapshots())
    endpoint.start()
    port = endpoint.port
    with pytest.raises(RuntimeError, match="already serving"):
        endpoint.start()
    endpoint.stop()
    endpoint.stop()  # idempotent
    with pytest.raises(RuntimeError, match="only after start"):
        _ = endpoint.port
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind(("127.0.0.1", port))  # would raise EADDRINUSE if still held
    finally:
        probe.close()
    again = HealthEndpoint("127.0.0.1", port, Snapshots())
    with again:
        assert again.port == port
        assert _get(again, "/healthz")[0] == 200


def test_invalid_port_is_refused():
    with pytest.raises(ValueError, match="TCP port in 0..65535"):
        HealthEndpoint("127.0.0.1", 70000, Snapshots())


def test_requests_are_not_logged_to_stderr(served, capfd):
    endpoint, _ = served
    _get(endpoint, "/healthz")
    _get(endpoint, "/missing")
    assert capfd.readouterr().err == ""
