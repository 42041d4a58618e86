"""Reading training progress over HTTP: the only module that talks to Prometheus or a /metrics endpoint.

Two sources, one result per trainer pod (:class:`Progress`, or the :class:`MetricsError`
saying why there is none), read once per control period for every job at once:
* :func:`prometheus_progress_all`: one instant query to a Prometheus server's HTTP API for
  the series of every pod the period reads;
* :class:`Scraper`: the trainers' (or sidecars') ``/metrics`` endpoints in the text
  exposition format, a bounded number in flight, waited on for a bounded time.

Every read is bounded (:func:`_http_get`): one total deadline, a size cap, no redirects, so a
slow, dripping or huge answer costs one worker for a bounded time, and the period waits for
no read longer than :data:`READ_WAIT_S` (:class:`Scraper`), so it never stalls the loop.
Missing or malformed metrics make the controller hold the allocation. Metric names are in
docs/contract.md.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait

from decor.core.progress import (
    PROGRESS_NAMES,
    MetricsError,
    PodKey,
    Progress,
    ProgressRead,
    parse_exposition,
    progress_by_pod,
    progress_from_samples,
)

DEFAULT_TIMEOUT_S = 2.0
"""Total time one read may take (connect, headers and the whole body)."""
DEFAULT_MAX_BYTES = 1 << 20
"""Largest /metrics answer read (a trainer's endpoint is a few KiB)."""
PROMETHEUS_MAX_BYTES = 256 << 20
"""Largest Prometheus answer read: the one query returns about 0.6 KiB per trainer pod."""
READ_CHUNK_BYTES = 65536
DEFAULT_SCRAPE_WORKERS = 16
"""Scrapes in flight at once when reading progress without Prometheus."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A progress endpoint that redirects is refused: the operator reads only the URL it
    built (a redirect could point it anywhere)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        fp.close()
        raise urllib.error.URLError(f"redirect refused ({code} {msg} to {newurl})")


_OPENER = urllib.request.build_opener(_NoRedirect)


def _http_get(url: str, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """GET ``url`` within ``timeout_s`` in total (connect, headers and body: a server that
    drips its answer is cut off), at most ``max_bytes`` of body, no redirects."""
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    size = 0
    try:
        with _OPENER.open(url, timeout=timeout_s) as response:  # noqa: S310 (our URL)
            while True:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    raise MetricsError(f"cannot read {url}: no complete answer in {timeout_s:g}s")
                sock = getattr(getattr(response, "fp", None), "raw", None)
                sock = getattr(sock, "_sock", None)
                if sock is not None:
                    sock.settimeout(left_s)
                chunk = response.read1(READ_CHUNK_BYTES)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise MetricsError(f"cannot read {url}: answer larger than {max_bytes} bytes")
                chunks.append(chunk)
    except MetricsError:
        raise
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the response's socket
        raise MetricsError(f"cannot read {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as exc:
        if time.monotonic() >= deadline:
            raise MetricsError(
                f"cannot read {url}: no complete answer in {timeout_s:g}s ({exc})"
            ) from exc
        raise MetricsError(f"cannot read {url}: {exc}") from exc
    return b"".join(chunks).decode("utf-8", errors="replace")


def scrape_progress(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Progress:
    """Progress from a /metrics endpoint (raises MetricsError)."""
    return progress_from_samples(parse_exposition(_http_get(url, timeout_s)))


def prometheus_progress_all(
    base_url: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    pod_ips: Mapping[PodKey, str] | None = None,
) -> dict[PodKey, ProgressRead]:
    """Trainer pods' progress from one instant query (all four metric names), by (namespace,
    pod); with ``pod_ips``, only those pods' series (:func:`progress_query`), each counted only
    when scraped from the pod itself (:func:`progress_by_pod`); without, every pod's. Raises
    MetricsError when Prometheus cannot answer."""
    if pod_ips is not None and not pod_ips:
        return {}
    query = progress_query(None if pod_ips is None else list(pod_ips))
    url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        body = json.loads(_http_get(url, timeout_s, PROMETHEUS_MAX_BYTES))
    except json.JSONDecodeError as exc:
        raise MetricsError(f"Prometheus answered with malformed JSON: {exc}") from exc
    if body.get("status") != "success":
        raise MetricsError(f"Prometheus query failed: {body.get('error', body)}")
    return progress_by_pod(body.get("data", {}).get("result", []), pod_ips)


QUERY_MAX_PODS = 200
"""A query names at most this many pods; for more it asks for every pod's series (a period
reads the pods of at most ``loop.LAGGING_PERIOD_JOBS`` jobs)."""


def progress_query(pods: list[PodKey] | None = None) -> str:
    """The PromQL selector of the progress series of ``pods`` (every pod's for none or more
    than :data:`QUERY_MAX_PODS`). A period reads only its due jobs' pods: the answer grows with
    them, not with every trainer Prometheus scrapes (four series a pod; at 1,000 jobs the
    whole answer is about 0.6 MiB, parsed by the operator and encoded by Prometheus twice a
    second). Namespace and pod are matched apart (a pod named like another namespace's pod
    comes back too; :func:`progress_by_pod` keys by both)."""
    names = "|".join(PROGRESS_NAMES)
    if not pods or len(pods) > QUERY_MAX_PODS:
        return f'{{__name__=~"{names}",pod!=""}}'
    namespaces = _promql_alternatives(ns for ns, _ in pods)
    pod_names = _promql_alternatives(pod for _, pod in pods)
    return f'{{__name__=~"{names}",namespace=~"{namespaces}",pod=~"{pod_names}"}}'


def _promql_alternatives(values: Iterable[str]) -> str:
    """``a|b|c`` matching exactly these strings (a PromQL label regex is anchored), escaped
    for the regex and then for the PromQL string it sits in."""
    escaped = sorted({re.escape(v) for v in values})
    return "|".join(escaped).replace("\\", "\\\\").replace('"', '\\"')


READ_WAIT_S = 0.5
"""How long a control period waits for its trainers' endpoints (half the shortest period)."""


class Scraper:
    """The trainers' ``/metrics`` endpoints read in parallel, ``max_workers`` in flight, for
    a control period that waits at most ``wait_s`` for them.

    A read still running then (a slow or dripping endpoint) is answered with a
    :class:`MetricsError` for this period and left to end in the background, bounded by its
    own total deadline; that pod is not read again until it has, so one bad endpoint holds
    one worker and the other jobs' periods stay on time. A read that could not even start
    within the wait (more endpoints than workers can read in ``wait_s``) is cancelled."""

    def __init__(self, max_workers: int = DEFAULT_SCRAPE_WORKERS, wait_s: float = READ_WAIT_S):
        self.wait_s = wait_s
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, max_workers), thread_name_prefix="decor-scrape"
        )
        self._running: dict[PodKey, Future[ProgressRead]] = {}

    def read(self, fetch: dict[PodKey, Callable[[], str]]) -> dict[PodKey, ProgressRead]:
        """Call every ``fetch`` (each returns a /metrics text, raising MetricsError)."""
        self._running = {k: f for k, f in self._running.items() if not f.done()}
        reads: dict[PodKey, ProgressRead] = {}
        started: dict[PodKey, Future[ProgressRead]] = {}
        for key, getter in fetch.items():
            if key in self._running:
                reads[key] = MetricsError(
                    f"no answer: the previous read of this endpoint is still running "
                    f"(slower than {self.wait_s:g}s)"
                )
            else:
                started[key] = self._pool.submit(_read_one, getter)
        wait(started.values(), timeout=self.wait_s)
        for key, future in started.items():
            if future.done():
                reads[key] = future.result()
            elif future.cancel():
                reads[key] = MetricsError(
                    f"not read: {len(started)} endpoints are more than the readers can read "
                    f"in {self.wait_s:g}s (use Prometheus, or more scrape workers)"
                )
            else:
                self._running[key] = future
                reads[key] = MetricsError(f"no answer within {self.wait_s:g}s")
        return reads

    def close(self) -> None:
        """Stop reading: queued reads are dropped, running ones end by their deadline."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _read_one(getter: Callable[[], str]) -> ProgressRead:
    try:
        return progress_from_samples(parse_exposition(getter()))
    except MetricsError as exc:
        return exc


def url_fetcher(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Callable[[], str]:
    """A fetch for :class:`Scraper`: GET ``url`` with the bounded reader."""
    return lambda: _http_get(url, timeout_s)
