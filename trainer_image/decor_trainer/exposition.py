"""Prometheus exposition of training progress: the metric set and an HTTP endpoint.

The only module of the package that imports ``prometheus_client``; the progress-file sink of
:mod:`decor_trainer.reporter` (and so :mod:`decor_trainer.progress`) works without it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .contract import (
    EPOCH_DURATION,
    EPOCHS_COMPLETED,
    EPOCHS_PLANNED,
    LAST_STEP_TIMESTAMP,
    RESTART_DURATION,
    SAMPLES_COMPLETED,
    STEP_DURATION,
    STEPS_COMPLETED,
    STEPS_PLANNED,
    THREADS_FOLLOW_LIMIT,
)
from .reporter import ProgressSnapshot

# Metric names (counters without the ``_total`` suffix that prometheus_client appends).


def metric_families(snapshot: ProgressSnapshot) -> list[Metric]:
    """The contract's metric set for one snapshot (no labels)."""
    families: list[Metric] = [
        CounterMetricFamily(
            STEPS_COMPLETED,
            "Mini-batches completed since the job started (a resumed run starts at the "
            "checkpoint's step).",
            value=snapshot.steps,
        ),
        CounterMetricFamily(
            SAMPLES_COMPLETED,
            "Training samples completed since the job started.",
            value=snapshot.samples,
        ),
        GaugeMetricFamily(
            STEPS_PLANNED,
            "Mini-batches the whole job will run (epochs x steps per epoch); 0 if unknown.",
            value=snapshot.steps_planned,
        ),
        GaugeMetricFamily(EPOCHS_COMPLETED, "Whole epochs completed.", value=snapshot.epochs),
        GaugeMetricFamily(
            EPOCHS_PLANNED, "Epochs the job will run; 0 if unknown.", value=snapshot.epochs_planned
        ),
        GaugeMetricFamily(
            STEP_DURATION,
            "Wall time of the most recent mini-batch in seconds; 0 before the first one.",
            value=snapshot.step_s,
        ),
        GaugeMetricFamily(
            EPOCH_DURATION,
            "Wall time of the most recent complete epoch in seconds; 0 before the first one.",
            value=snapshot.epoch_s,
        ),
        GaugeMetricFamily(
            LAST_STEP_TIMESTAMP,
            "Unix time in seconds at which the most recent mini-batch completed; 0 before "
            "the first one in this process.",
            value=snapshot.t,
        ),
        GaugeMetricFamily(
            RESTART_DURATION,
            "Seconds from the save of the checkpoint this process resumed from to its first "
            "completed mini-batch (the cost of a restart); 0 if it did not resume.",
            value=snapshot.restart_s,
        ),
        GaugeMetricFamily(
            THREADS_FOLLOW_LIMIT,
            "1 when the trainer runs one compute thread per whole core of its CPU limit (a "
            "limit between whole cores runs as the whole cores below it); 0 when not said.",
            value=1.0 if snapshot.threads_follow_limit else 0.0,
        ),
    ]
    return families


class SnapshotCollector(Collector):
    """A prometheus_client collector that exposes whatever ``source()`` returns.

    ``source`` returns the current snapshot, or ``None`` to expose nothing.
    """

    def __init__(self, source: Callable[[], ProgressSnapshot | None]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        snapshot = self._source()
        if snapshot is not None:
            yield from metric_families(snapshot)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _SilentHandler(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        pass


class MetricsServer:
    """``/metrics`` of a registry over HTTP, served from a daemon thread.

    Equivalent to ``prometheus_client.start_http_server`` but keeps the handle so that it can
    be closed, reports the port actually bound (pass ``port=0`` for a free one), and works
    the same on every prometheus_client version (Debian bookworm ships 0.16).
    Raises ``OSError`` if the address cannot be bound.
    """

    def __init__(self, registry: CollectorRegistry, port: int, address: str) -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET

        class _Server(_ThreadingWSGIServer):
            address_family = family

        # Each response is numbered as its request comes, before its body is made (it reads
        # the progress then); ``served_through``: the highest number sent in full (a scrape
        # counts once its body is out). A response begun before the last step and sent after
        # it holds the step before: only one numbered after the last step has shown it.
        self.begun = 0
        self.served_through = 0
        self._count_lock = threading.Lock()
        self._server = make_server(
            address, port, self._counted(make_wsgi_app(registry)), _Server,
            handler_class=_SilentHandler,
        )  # fmt: skip
        self.address = address
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"decor-metrics-{self.port}", daemon=True
        )
        self._thread.start()

    def _counted(self, app: Callable[..., Any]) -> Callable[..., Any]:
        """``app``, numbering every response in ``begun`` as it begins and moving
        ``served_through`` to its number once the server has written it (WSGI closes the
        body after the last byte)."""
        server = self

        class _Body:
            def __init__(self, body: Any, number: int) -> None:
                self._body, self._number = body, number

            def __iter__(self) -> Iterator[bytes]:
                return iter(self._body)

            def close(self) -> None:
                close = getattr(self._body, "close", None)
                if close is not None:
                    close()
                with server._count_lock:
                    server.served_through = max(server.served_through, self._number)

        def counted(environ: Any, start_response: Any) -> _Body:
            with server._count_lock:
                server.begun += 1
                number = server.begun
            return _Body(app(environ, start_response), number)

        return counted

    def close(self) -> None:
        """Stop serving and release the port; waits for the serving thread to end."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
