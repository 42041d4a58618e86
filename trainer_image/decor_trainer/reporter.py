"""Training-progress reporter: the metrics of ``docs/contract.md``, published two ways.

The training loop calls :meth:`ProgressReporter.step_done` after every mini-batch and
:meth:`ProgressReporter.epoch_done` after every epoch. The reporter keeps the progress in
plain attributes and publishes it through one of two sinks with the same metric names:

* in-process: an HTTP endpoint (``/metrics``, Prometheus text format) served from a daemon
  thread of the training process;
* progress file: a small JSON file replaced atomically after every mini-batch, served by the
  sidecar (:mod:`decor_trainer.sidecar`).

Reporting must never break training: every public method swallows its own errors and logs
them once per kind, then at most once per :data:`ERROR_LOG_INTERVAL_S`.

This module imports no PyTorch, so the sidecar image does not need it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

DEFAULT_METRICS_PORT = 9100
"""Port of the metrics endpoint when neither the caller nor ``DECOR_METRICS_PORT`` says."""
DEFAULT_BIND_ADDRESS = "0.0.0.0"
"""Address the in-process endpoint binds to: all IPv4 interfaces, so a pod IP reaches it."""
DEFAULT_PROGRESS_FILE = "/var/run/decor/progress.json"
"""Progress-file path of the sidecar when neither the caller nor ``DECOR_PROGRESS_FILE`` says."""
ERROR_LOG_INTERVAL_S = 60.0
"""Seconds between two log lines about the same kind of reporting error."""

ENV_EPOCHS = "DECOR_EPOCHS"
ENV_STEPS_PER_EPOCH = "DECOR_STEPS_PER_EPOCH"
ENV_METRICS_PORT = "DECOR_METRICS_PORT"
ENV_PROGRESS_FILE = "DECOR_PROGRESS_FILE"
ENV_CHECKPOINT_DIR = "DECOR_CHECKPOINT_DIR"

# Metric names (counters without the ``_total`` suffix that prometheus_client appends).
STEPS_COMPLETED = "decor_steps_completed"
SAMPLES_COMPLETED = "decor_samples_completed"
STEPS_PLANNED = "decor_steps_planned"
EPOCHS_COMPLETED = "decor_epochs_completed"
EPOCHS_PLANNED = "decor_epochs_planned"
STEP_DURATION = "decor_step_duration_seconds"
EPOCH_DURATION = "decor_epoch_duration_seconds"
LAST_STEP_TIMESTAMP = "decor_last_step_timestamp_seconds"


@dataclass(frozen=True)
class ProgressSnapshot:
    """Progress of a training job at one instant; the content of the progress file.

    Attributes use the progress file's short keys (``docs/contract.md``):
    ``steps``/``samples`` completed since the job started (resumes included),
    ``steps_planned``/``epochs_planned`` (0 = unknown), ``epochs`` whole epochs completed,
    ``step_s``/``epoch_s`` wall time of the latest mini-batch/epoch in seconds (0 = none yet),
    ``t`` Unix time in seconds at which the latest mini-batch completed (0 = none yet).
    """

    steps: int
    samples: int
    steps_planned: int
    epochs: int
    epochs_planned: int
    step_s: float
    epoch_s: float
    t: float

    def to_json(self) -> str:
        """The progress file's content: one JSON object, no trailing newline."""
        return json.dumps(asdict(self), separators=(", ", ": "))

    @classmethod
    def from_mapping(cls, data: object) -> ProgressSnapshot:
        """Parse a decoded progress file; raise ``ValueError`` if a field is missing or bad.

        Integers must be non-negative whole numbers; durations and time non-negative numbers.
        Unknown keys are ignored so that newer trainers can add fields.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"progress must be a JSON object, not {type(data).__name__}")
        values: dict[str, Any] = {}
        for key in ("steps", "samples", "steps_planned", "epochs", "epochs_planned"):
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"progress field {key!r} must be a number, got {value!r}")
            if value < 0 or value != int(value):
                raise ValueError(f"progress field {key!r} must be a whole number >= 0: {value!r}")
            values[key] = int(value)
        for key in ("step_s", "epoch_s", "t"):
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"progress field {key!r} must be a number, got {value!r}")
            if not value >= 0 or value == float("inf"):
                raise ValueError(f"progress field {key!r} must be finite and >= 0: {value!r}")
            values[key] = float(value)
        return cls(**values)


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
        GaugeMetricFamily(
            EPOCHS_COMPLETED, "Whole epochs completed.", value=snapshot.epochs
        ),
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


class ErrorLog:
    """Logs errors once per kind, then at most once per ``interval_s`` seconds per kind.

    A kind is a short string chosen by the caller (e.g. ``"file:PermissionError"``).
    """

    def __init__(
        self,
        logger: logging.Logger = log,
        interval_s: float = ERROR_LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._last_logged: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def report(self, kind: str, message: str, level: int = logging.WARNING) -> None:
        """Log ``message`` unless the same ``kind`` was logged less than the interval ago."""
        try:
            with self._lock:
                now = self._clock()
                last = self._last_logged.get(kind)
                if last is not None and now - last < self._interval_s:
                    self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                    return
                suppressed = self._suppressed.pop(kind, 0)
                self._last_logged[kind] = now
            if suppressed:
                message = f"{message} ({suppressed} more like it not logged)"
            self._logger.log(level, "%s", message)
        except Exception:  # noqa: BLE001 - logging itself must not break training either
            pass


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

        self._server = make_server(
            address, port, make_wsgi_app(registry), _Server, handler_class=_SilentHandler
        )
        self.address = address
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"decor-metrics-{self.port}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port; waits for the serving thread to end."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def write_progress_file(path: Path, snapshot: ProgressSnapshot) -> None:
    """Atomically replace ``path`` with ``snapshot``: write a temporary file, then rename.

    Readers see the old or the new content, never a partial one. No fsync: the file is a
    live view, not a record that must survive a machine crash. Raises ``OSError``.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(snapshot.to_json())
    os.replace(tmp, path)


def _env_int(environ: Mapping[str, str], name: str, errors: ErrorLog) -> int | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        errors.report(f"env:{name}", f"ignoring {name}={raw!r}: not an integer")
        return None


class ProgressReporter:
    """Publishes training progress (the metrics of ``docs/contract.md``).

    Exactly one sink is started by the constructor: the progress file if ``progress_file``
    is given, else an HTTP endpoint if ``port`` is given (0 picks a free port, see
    :attr:`port`), else none (the metrics are only in :attr:`registry`, e.g. for tests).
    The metrics are always registered in :attr:`registry` (a private ``CollectorRegistry``
    unless one is passed), whichever the sink.

    Arguments:
        steps_planned: mini-batches the whole job will run, >= 0 (0 = unknown).
        epochs_planned: epochs the job will run, >= 0 (0 = unknown).
        start_step: mini-batches already completed (from a checkpoint), >= 0.
        start_samples: samples already completed (from a checkpoint), >= 0.
        start_epoch: whole epochs already completed (from a checkpoint), >= 0.
        port: TCP port of the in-process endpoint, 0..65535, or None for no endpoint.
        address: address the endpoint binds to (IPv4 or IPv6 literal or host name).
        progress_file: path of the JSON progress file (its directory is created if missing).
        registry: registry to register the metrics in; a fresh one if None.
        clock: monotonic clock in seconds, for durations.
        wall_clock: Unix time in seconds, for the last-step timestamp.

    Step and epoch durations are measured between consecutive calls (the first from the
    reporter's creation), so everything the loop does between two mini-batches counts.
    No method raises: errors are logged (see :class:`ErrorLog`) and reporting goes on.
    The reporter is a context manager; leaving it calls :meth:`close`.
    """

    def __init__(
        self,
        *,
        steps_planned: int,
        epochs_planned: int,
        start_step: int = 0,
        start_samples: int = 0,
        start_epoch: int = 0,
        port: int | None = None,
        address: str = DEFAULT_BIND_ADDRESS,
        progress_file: str | os.PathLike[str] | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._errors = ErrorLog(clock=clock)
        self._clock = clock
        self._wall_clock = wall_clock
        self._steps = max(0, int(start_step))
        self._samples = max(0, int(start_samples))
        self._epochs = max(0, int(start_epoch))
        self._steps_planned = max(0, int(steps_planned))
        self._epochs_planned = max(0, int(epochs_planned))
        self._step_s = 0.0
        self._epoch_s = 0.0
        self._t = 0.0
        now = clock()
        self._step_started = now
        self._epoch_started = now
        self._server: MetricsServer | None = None
        self._file: Path | None = None
        self.registry = registry if registry is not None else CollectorRegistry()
        try:
            self.registry.register(SnapshotCollector(self.snapshot))
        except Exception as exc:  # noqa: BLE001
            self._errors.report("register", f"cannot register progress metrics: {exc!r}")
        if progress_file is not None:
            self._file = Path(progress_file)
            try:
                self._file.parent.mkdir(parents=True, exist_ok=True)
            except Exception as exc:  # noqa: BLE001
                self._errors.report(
                    f"file-dir:{type(exc).__name__}",
                    f"cannot create the directory of progress file {self._file}: {exc!r}",
                )
            self._write_file()
        elif port is not None:
            try:
                self._server = MetricsServer(self.registry, port, address)
                log.info("serving progress metrics on http://%s:%d/metrics", address, self.port)
            except Exception as exc:  # noqa: BLE001
                self._errors.report(
                    "http",
                    f"cannot serve metrics on {address}:{port}: {exc!r}; training goes on "
                    "without them",
                    level=logging.ERROR,
                )

    @classmethod
    def from_env(
        cls,
        *,
        steps_planned: int | None = None,
        epochs_planned: int | None = None,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> ProgressReporter:
        """A reporter configured from the contract's environment variables.

        ``epochs_planned`` defaults to ``DECOR_EPOCHS``; ``steps_planned`` to
        ``DECOR_EPOCHS x DECOR_STEPS_PER_EPOCH`` (0 = unknown when either is missing). The
        sink is the progress file ``DECOR_PROGRESS_FILE`` when set, else an endpoint on
        ``DECOR_METRICS_PORT`` (default 9100). Explicit keyword arguments (``port``,
        ``progress_file``, ``start_step``, ...) win over the environment. Malformed
        variables are logged and ignored, never raised.
        """
        env = os.environ if environ is None else environ
        errors = ErrorLog()
        epochs = _env_int(env, ENV_EPOCHS, errors)
        steps_per_epoch = _env_int(env, ENV_STEPS_PER_EPOCH, errors)
        if epochs_planned is None:
            epochs_planned = epochs or 0
        if steps_planned is None:
            steps_planned = epochs_planned * steps_per_epoch if steps_per_epoch else 0
        if "progress_file" not in kwargs and "port" not in kwargs:
            progress_file = env.get(ENV_PROGRESS_FILE, "").strip()
            if progress_file:
                kwargs["progress_file"] = progress_file
            else:
                port = _env_int(env, ENV_METRICS_PORT, errors)
                kwargs["port"] = DEFAULT_METRICS_PORT if port is None else port
        return cls(steps_planned=steps_planned, epochs_planned=epochs_planned, **kwargs)

    @property
    def port(self) -> int | None:
        """TCP port the endpoint is bound to, or None without an endpoint."""
        return self._server.port if self._server is not None else None

    @property
    def progress_file(self) -> Path | None:
        """Path of the progress file, or None without one."""
        return self._file

    def snapshot(self) -> ProgressSnapshot:
        """The current progress (what a scrape or the progress file shows)."""
        return ProgressSnapshot(
            steps=self._steps,
            samples=self._samples,
            steps_planned=self._steps_planned,
            epochs=self._epochs,
            epochs_planned=self._epochs_planned,
            step_s=self._step_s,
            epoch_s=self._epoch_s,
            t=self._t,
        )

    def step_done(self, samples: int = 0) -> None:
        """Record one completed mini-batch of ``samples`` training samples (>= 0)."""
        try:
            now = self._clock()
            self._step_s = now - self._step_started
            self._step_started = now
            self._samples += samples
            self._steps += 1
            self._t = self._wall_clock()
            if self._file is not None:
                self._write_file()
        except Exception as exc:  # noqa: BLE001
            self._errors.report(f"step:{type(exc).__name__}", f"step_done failed: {exc!r}")

    def epoch_done(self) -> None:
        """Record one completed epoch (call after the epoch's last :meth:`step_done`)."""
        try:
            now = self._clock()
            self._epoch_s = now - self._epoch_started
            self._epoch_started = now
            self._epochs += 1
            if self._file is not None:
                self._write_file()
        except Exception as exc:  # noqa: BLE001
            self._errors.report(f"epoch:{type(exc).__name__}", f"epoch_done failed: {exc!r}")

    def close(self) -> None:
        """Stop the endpoint (if any). The progress file stays, with the final progress."""
        try:
            if self._server is not None:
                server, self._server = self._server, None
                server.close()
        except Exception as exc:  # noqa: BLE001
            self._errors.report("close", f"closing the metrics endpoint failed: {exc!r}")

    def __enter__(self) -> ProgressReporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _write_file(self) -> None:
        assert self._file is not None
        try:
            write_progress_file(self._file, self.snapshot())
        except Exception as exc:  # noqa: BLE001
            self._errors.report(
                f"file:{type(exc).__name__}",
                f"cannot write progress file {self._file}: {exc!r}; training goes on",
            )
