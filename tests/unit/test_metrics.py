"""Reading progress: the text format, validation, and real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from decor.metrics import (
    MetricsError,
    observation_from_progress,
    parse_exposition,
    progress_from_samples,
    prometheus_progress,
    scrape_observation,
    scrape_progress,
)

EXPOSITION = """\
# HELP decor_steps_completed_total Mini-batches completed.
# TYPE decor_steps_completed_total counter
decor_steps_completed_total 120.0
decor_steps_created 1.7e9
decor_steps_planned 400.0
decor_last_step_timestamp_seconds 1795860000.25
decor_epochs_completed 1.0
python_info{implementation="CPython"} 1.0
"""


def test_parse_exposition_keeps_unlabelled_samples() -> None:
    samples = parse_exposition(EXPOSITION)
    assert samples["decor_steps_completed_total"] == 120.0
    assert samples["decor_steps_planned"] == 400.0
    assert "python_info" not in samples and not any("{" in k for k in samples)


@pytest.mark.parametrize(
    ("samples", "reason"),
    [
        ({"decor_steps_planned": 4.0}, "decor_steps_completed_total"),
        ({"decor_steps_completed_total": 1.0}, "decor_steps_planned"),
        ({"decor_steps_completed_total": 1.0, "decor_steps_planned": 0.0}, "implausible"),
        ({"decor_steps_completed_total": -1.0, "decor_steps_planned": 5.0}, "implausible"),
        ({"decor_steps_completed_total": float("nan"), "decor_steps_planned": 5.0}, "implausible"),
    ],
)
def test_malformed_progress_is_rejected_with_a_reason(
    samples: dict[str, float], reason: str
) -> None:
    with pytest.raises(MetricsError, match=reason):
        progress_from_samples(samples)


def test_observation_is_stamped_with_the_last_step_time() -> None:
    progress = progress_from_samples(parse_exposition(EXPOSITION))
    obs = observation_from_progress(progress, now_s=1795860001.0, allocation=1.5)
    assert obs.time_s == 1795860000.25
    assert (obs.steps_done, obs.steps_total, obs.allocation) == (120.0, 400.0, 1.5)
    # a clock skew that puts the stamp in the future is clipped to now
    assert (
        observation_from_progress(progress, now_s=1795859999.0, allocation=1).time_s == 1795859999.0
    )


class _Server:
    def __init__(self, routes: dict[str, tuple[int, str]]) -> None:
        self.routes = routes
        self.queries: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                url = urlparse(self.path)
                if url.path == "/api/v1/query":
                    query = parse_qs(url.query)["query"][0]
                    outer.queries.append(query)
                    status, body = outer.routes.get(query, (200, _prom([])))
                else:
                    status, body = outer.routes.get(url.path, (404, "not found"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _prom(result: list[dict[str, object]]) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server({"/metrics": (200, EXPOSITION), "/broken": (200, "garbage\n")})
    yield srv
    srv.close()


def test_scrape_a_real_endpoint(server: _Server) -> None:
    progress = scrape_progress(server.url + "/metrics")
    assert progress.steps_done == 120 and progress.steps_planned == 400
    assert scrape_observation(server.url + "/metrics", allocation=2.0) is not None


def test_scrape_failures_are_metrics_errors(server: _Server) -> None:
    with pytest.raises(MetricsError, match="missing"):
        scrape_progress(server.url + "/broken")
    with pytest.raises(MetricsError, match="cannot read"):
        scrape_progress(server.url + "/absent")
    assert scrape_observation(server.url + "/broken", allocation=1.0) is None


def test_prometheus_queries_select_the_pod(server: _Server) -> None:
    selector = '{namespace="ns",pod="job-trainer"}'
    for name, value in [
        ("decor_steps_completed_total", "50"),
        ("decor_steps_planned", "200"),
        ("decor_last_step_timestamp_seconds", "1795860000"),
    ]:
        server.routes[f"max({name}{selector})"] = (
            200,
            _prom([{"metric": {}, "value": [0, value]}]),
        )
    progress = prometheus_progress(server.url, "ns", "job-trainer")
    assert (progress.steps_done, progress.steps_planned) == (50, 200)
    assert progress.last_step_time_s == 1795860000
    assert all(selector in q for q in server.queries)


def test_prometheus_without_series_is_an_error(server: _Server) -> None:
    with pytest.raises(MetricsError, match="missing"):
        prometheus_progress(server.url, "ns", "nothing-here")


def test_prometheus_down_is_an_error() -> None:
    with pytest.raises(MetricsError, match="cannot read"):
        prometheus_progress("http://127.0.0.1:9", "ns", "pod", timeout_s=0.5)
