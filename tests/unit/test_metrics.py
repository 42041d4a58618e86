"""Reading progress: the text format, validation, and real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from decor.adapter.scrape import (
    QUERY_MAX_PODS,
    Scraper,
    progress_query,
    prometheus_progress_all,
    scrape_progress,
    url_fetcher,
)
from decor.core.progress import (
    RESTART_SECONDS,
    STEPS_DONE,
    STEPS_PLANNED,
    THREADS_FOLLOW_LIMIT,
    MetricsError,
    Progress,
    observation_from_progress,
    parse_exposition,
    progress_from_samples,
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
    assert obs.anchors


def test_a_read_of_zero_steps_is_stamped_with_the_read_and_anchors_no_interval() -> None:
    progress = progress_from_samples(
        {"decor_steps_completed_total": 0.0, "decor_steps_planned": 400.0}
    )
    obs = observation_from_progress(progress, now_s=1795860001.0, allocation=1.5)
    assert (obs.time_s, obs.steps_done, obs.anchors) == (1795860001.0, 0.0, False)


class _Server:
    def __init__(self, routes: dict[str, tuple[int, str]]) -> None:
        self.routes = routes
        self.queries: list[str] = []
        self.default_query_answer = (200, _prom([]))
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                url = urlparse(self.path)
                if url.path == "/api/v1/query":
                    query = parse_qs(url.query)["query"][0]
                    outer.queries.append(query)
                    status, body = outer.routes.get(query, outer.default_query_answer)
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


def test_scrape_failures_are_metrics_errors(server: _Server) -> None:
    with pytest.raises(MetricsError, match="missing"):
        scrape_progress(server.url + "/broken")
    with pytest.raises(MetricsError, match="cannot read"):
        scrape_progress(server.url + "/absent")


def _series(name: str, namespace: str, pod: str, value: str) -> dict[str, object]:
    return {"metric": {"__name__": name, "namespace": namespace, "pod": pod}, "value": [0, value]}


def test_one_prometheus_query_reads_every_pod(server: _Server) -> None:
    result = [
        _series("decor_steps_completed_total", "ns", "a-0", "50"),
        _series("decor_steps_planned", "ns", "a-0", "200"),
        _series("decor_last_step_timestamp_seconds", "ns", "a-0", "1795860000"),
        _series("decor_steps_completed_total", "other", "b-0", "7"),
        _series("decor_steps_planned", "other", "b-0", "70"),
        # the same pod scraped twice (two scrape jobs): the larger counter wins
        _series("decor_steps_completed_total", "other", "b-0", "9"),
        _series("decor_steps_completed_total", "ns", "broken-0", "1"),
    ]
    names = "decor_steps_completed_total|decor_steps_planned|"
    server.default_query_answer = (200, _prom(result))
    reads = prometheus_progress_all(server.url)
    assert len(server.queries) == 1 and names in server.queries[0]
    a = reads[("ns", "a-0")]
    assert isinstance(a, Progress) and (a.steps_done, a.steps_planned) == (50, 200)
    assert a.last_step_time_s == 1795860000
    b = reads[("other", "b-0")]
    assert isinstance(b, Progress) and b.steps_done == 9
    assert isinstance(reads[("ns", "broken-0")], MetricsError)


def test_a_series_counts_only_for_the_pod_it_was_scraped_from(server: _Server) -> None:
    """A trainer that exposes another namespace's pod name (honor_labels, or a scrape
    configuration without pod labels) cannot finish that pod's job: its instance is its own."""

    def series(name: str, pod: str, value: str, instance: str) -> dict[str, object]:
        found = _series(name, "victims", pod, value)
        found["metric"]["instance"] = instance  # type: ignore[index]
        return found

    result = [
        series("decor_steps_completed_total", "victim-0", "100", "10.88.0.66:9100"),  # forged
        series("decor_steps_planned", "victim-0", "100", "10.88.0.66:9100"),
        series("decor_steps_completed_total", "victim-0", "10", "10.88.0.5:9100"),  # its own
        series("decor_steps_planned", "victim-0", "100", "10.88.0.5:9100"),
        series("decor_steps_completed_total", "v6-0", "3", "[fd00::5]:9100"),
        series("decor_steps_planned", "v6-0", "9", "[fd00::5]:9100"),
        series("decor_steps_completed_total", "no-ip-0", "9", "10.88.0.9:9100"),
        series("decor_steps_planned", "no-ip-0", "9", "10.88.0.9:9100"),
    ]
    server.default_query_answer = (200, _prom(result))
    ips = {("victims", "victim-0"): "10.88.0.5", ("victims", "v6-0"): "fd00::5",
           ("victims", "no-ip-0"): ""}  # fmt: skip
    reads = prometheus_progress_all(server.url, pod_ips=ips)
    victim = reads[("victims", "victim-0")]
    assert isinstance(victim, Progress) and victim.steps_done == 10
    assert isinstance(reads[("victims", "v6-0")], Progress)
    assert ("victims", "no-ip-0") not in reads  # no address yet: nothing counts
    # without the pods' addresses the forged count would have won
    forged = prometheus_progress_all(server.url)[("victims", "victim-0")]
    assert isinstance(forged, Progress) and forged.steps_done == 100


def test_the_query_names_only_the_pods_read_and_matches_them_exactly(server: _Server) -> None:
    """A period asks Prometheus for its due jobs' pods, not every trainer's series; each name
    is a literal in the anchored label regex ('.' of a pod name matches only '.')."""
    pods = [("ns-a", "job.v2-0"), ("ns-b", "other-0"), ("ns-a", "third-0")]
    server.default_query_answer = (200, _prom([]))
    assert prometheus_progress_all(server.url, pod_ips=dict.fromkeys(pods, "10.0.0.1")) == {}
    (query,) = server.queries
    assert query == progress_query(pods)
    selectors = dict(re.findall(r'(\w+)=~"((?:[^"\\]|\\.)*)"', query))
    pod_regex = selectors["pod"].replace("\\\\", "\\")  # the PromQL string, unescaped
    namespace_regex = selectors["namespace"].replace("\\\\", "\\")
    for _, pod in pods:
        assert re.fullmatch(pod_regex, pod)
    for name in ("jobxv2-0", "job.v2-00", "other", "x-other-0", ""):
        assert not re.fullmatch(pod_regex, name), name
    assert re.fullmatch(namespace_regex, "ns-a") and not re.fullmatch(namespace_regex, "ns-c")
    # no pods: no query; more pods than a query names: every pod's series
    assert prometheus_progress_all(server.url, pod_ips={}) == {} and len(server.queries) == 1
    many = [("ns", f"p-{i}") for i in range(QUERY_MAX_PODS + 1)]
    assert progress_query(many) == progress_query(None)
    assert 'pod!=""' in progress_query(None)


def test_prometheus_down_is_an_error() -> None:
    with pytest.raises(MetricsError, match="cannot read"):
        prometheus_progress_all("http://127.0.0.1:9", timeout_s=0.5)


def test_scraper_reads_each_endpoint_and_reports_each_failure(server: _Server) -> None:
    scraper = Scraper(max_workers=2, wait_s=5.0)
    try:
        reads = scraper.read(
            {
                ("ns", "good"): url_fetcher(server.url + "/metrics"),
                ("ns", "broken"): url_fetcher(server.url + "/broken"),
                ("ns", "absent"): url_fetcher(server.url + "/absent"),
            }
        )
    finally:
        scraper.close()
    assert isinstance(reads[("ns", "good")], Progress)
    assert isinstance(reads[("ns", "broken")], MetricsError)
    assert "cannot read" in str(reads[("ns", "absent")])


class _Misbehaving:
    """A raw socket server: answers every request the same misbehaving way."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/metrics"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(4096)
                if self.mode == "drip":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                    while not self.stop.is_set():
                        conn.sendall(b"#")
                        time.sleep(0.1)
                elif self.mode == "huge":
                    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
                    chunk = b"# padding\n" * 10000
                    while not self.stop.is_set():
                        conn.sendall(chunk)
                elif self.mode == "redirect":
                    conn.sendall(
                        b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/x\r\n"
                        b"Content-Length: 0\r\n\r\n"
                    )
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("drip", "no complete answer"), ("huge", "larger than"), ("redirect", "redirect refused")],
)
def test_reads_are_bounded(mode: str, reason: str) -> None:
    bad = _Misbehaving(mode)
    try:
        started = time.monotonic()
        with pytest.raises(MetricsError, match=reason):
            scrape_progress(bad.url, timeout_s=1.0)
        assert time.monotonic() - started < 3.0  # one total deadline, not one per byte
    finally:
        bad.close()


def test_a_dripping_endpoint_does_not_hold_up_the_period(server: _Server) -> None:
    bad = _Misbehaving("drip")
    scraper = Scraper(max_workers=2, wait_s=0.5)
    fetch = {
        ("ns", "drip"): url_fetcher(bad.url, timeout_s=2.0),
        **{("ns", f"ok-{i}"): url_fetcher(server.url + "/metrics") for i in range(6)},
    }
    try:
        for answer in ("no answer within 0.5s", "still running"):
            started = time.monotonic()
            reads = scraper.read(fetch)
            assert time.monotonic() - started < 1.0  # the wait, not the read's 2 s deadline
            assert all(isinstance(reads[("ns", f"ok-{i}")], Progress) for i in range(6))
            assert answer in str(reads[("ns", "drip")])
        time.sleep(2.0)  # the first read has ended at its deadline: the endpoint is read again
        assert "no answer within" in str(scraper.read(fetch)[("ns", "drip")])
    finally:
        bad.close()
        scraper.close()


def test_reads_that_cannot_start_within_the_wait_are_cancelled() -> None:
    release = threading.Event()
    started: list[str] = []

    def blocked(name: str) -> str:
        started.append(name)
        release.wait(5)
        return f"{STEPS_DONE} 1\n{STEPS_PLANNED} 2\n"

    scraper = Scraper(max_workers=1, wait_s=0.2)
    try:
        reads = scraper.read({("ns", "a"): lambda: blocked("a"), ("ns", "b"): lambda: blocked("b")})
    finally:
        release.set()
        scraper.close()
    assert started == ["a"]
    assert "no answer within 0.2s" in str(reads[("ns", "a")])
    assert "not read: 2 endpoints" in str(reads[("ns", "b")])


def test_the_trainers_word_on_its_threads_reaches_the_observation() -> None:
    base = {STEPS_DONE: 5.0, STEPS_PLANNED: 10.0}
    for samples, said in (
        (base, False),  # an older trainer, or a loop that does not say
        ({**base, THREADS_FOLLOW_LIMIT: 0.0}, False),
        ({**base, THREADS_FOLLOW_LIMIT: 0.5}, False),
        ({**base, THREADS_FOLLOW_LIMIT: 1.0}, True),
    ):
        progress = progress_from_samples(samples)
        assert observation_from_progress(progress, 100.0, 2.0).threads_follow_limit is said


def test_the_trainers_restart_measure_is_read_when_it_resumed() -> None:
    base = {STEPS_DONE: 5.0, STEPS_PLANNED: 10.0}
    assert progress_from_samples({**base, RESTART_SECONDS: 7.5}).restart_s == 7.5
    assert progress_from_samples({**base, RESTART_SECONDS: 0.0}).restart_s is None  # no resume
    assert progress_from_samples(base).restart_s is None
    progress = progress_from_samples({**base, RESTART_SECONDS: 7.5})
    assert observation_from_progress(progress, 100.0, 2.0).restart_s == 7.5
