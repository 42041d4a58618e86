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

This module imports neither PyTorch nor (until a registry is needed) prometheus_client:
the sidecar image needs no PyTorch, and a training image that only writes the progress
file needs no Prometheus code.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .contract import (
    DEFAULT_METRICS_PORT,
    ENV_EPOCHS,
    ENV_METRICS_PORT,
    ENV_PROGRESS_FILE,
    ENV_STEPS_PER_EPOCH,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .exposition import MetricsServer

log = logging.getLogger(__name__)

DEFAULT_BIND_ADDRESS = "0.0.0.0"
"""Address the in-process endpoint binds to: all IPv4 interfaces, so a pod IP reaches it."""
ERROR_LOG_INTERVAL_S = 60.0
"""Seconds between two log lines about the same kind of reporting error."""


@dataclass(frozen=True)
class ProgressSnapshot:
    """Progress of a training job at one instant; the content of the progress file.

    Attributes use the progress file's short keys (``docs/contract.md``):
    ``steps``/``samples`` completed since the job started (resumes included),
    ``steps_planned``/``epochs_planned`` (0 = unknown), ``epochs`` whole epochs completed,
    ``step_s``/``epoch_s`` wall time of the latest mini-batch/epoch in seconds (0 = none yet),
    ``t`` Unix time in seconds at which the latest mini-batch completed (0 = none yet),
    ``restart_s`` seconds from the resumed checkpoint's save to this process's first step
    (0 = not measured: a fresh start, or an older trainer that does not write it),
    ``threads_follow_limit`` whether the trainer runs one compute thread per whole core of its
    CPU limit (False = not said: an older trainer, or a loop that does not).
    """

    steps: int
    samples: int
    steps_planned: int
    epochs: int
    epochs_planned: int
    step_s: float
    epoch_s: float
    t: float
    restart_s: float = 0.0
    threads_follow_limit: bool = False

    def to_json(self) -> str:
        """The progress file's content: one JSON object, no trailing newline."""
        # A literal dict, not dataclasses.asdict: this runs after every mini-batch.
        return json.dumps(
            {
                "steps": self.steps,
                "samples": self.samples,
                "steps_planned": self.steps_planned,
                "epochs": self.epochs,
                "epochs_planned": self.epochs_planned,
                "step_s": self.step_s,
                "epoch_s": self.epoch_s,
                "t": self.t,
                "restart_s": self.restart_s,
                "threads_follow_limit": self.threads_follow_limit,
            }
        )

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
        restart_s = data.get("restart_s", 0.0)  # optional: older trainers do not write it
        if isinstance(restart_s, int | float) and not isinstance(restart_s, bool):
            if 0 <= restart_s < float("inf"):
                values["restart_s"] = float(restart_s)
        values["threads_follow_limit"] = data.get("threads_follow_limit") is True  # optional
        return cls(**values)


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
    Whichever the sink, the metrics are registered in :attr:`registry` (a private
    ``CollectorRegistry`` unless one is passed). Only the registry and the endpoint need
    ``prometheus_client``; without it :attr:`registry` is None and the file sink still works.

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
        threads_follow_limit: the loop runs one compute thread per whole core of its CPU
            limit, re-read as it changes (the reference trainer without ``--threads``), so a
            limit between whole cores runs no faster than the whole cores below it; the
            controller then does not measure whether it does (docs/control-law.md).

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
        threads_follow_limit: bool = False,
    ) -> None:
        self._errors = ErrorLog(clock=clock)
        self._clock = clock
        self._wall_clock = wall_clock
        self._steps = max(0, int(start_step))
        self._samples = max(0, int(start_samples))
        self._epochs = max(0, int(start_epoch))
        self._steps_planned = max(0, int(steps_planned))
        self._begun_at_last_step = 0  # responses the endpoint had begun at the last step
        self._epochs_planned = max(0, int(epochs_planned))
        self._step_s = 0.0
        self._epoch_s = 0.0
        self._t = 0.0
        self._restart_s = 0.0
        self._threads_follow_limit = bool(threads_follow_limit)
        now = clock()
        self._step_started = now
        self._epoch_started = now
        self._server: MetricsServer | None = None
        self._file: Path | None = None
        self.registry: CollectorRegistry | None = None
        self._register(registry, quiet=progress_file is not None)
        if progress_file is not None:
            self._start_file(Path(progress_file))
        elif port is not None and self.registry is not None:
            self._start_server(self.registry, port, address)

    def _register(self, registry: CollectorRegistry | None, *, quiet: bool) -> None:
        """Register the metrics in ``registry`` (a fresh one if None); without
        ``prometheus_client`` there is none, an error unless ``quiet`` (a file sink)."""
        try:
            from . import exposition

            self.registry = registry if registry is not None else exposition.CollectorRegistry()
            self.registry.register(exposition.SnapshotCollector(self.snapshot))
        except Exception as exc:  # noqa: BLE001 - e.g. no prometheus_client in this image
            level = logging.DEBUG if quiet else logging.ERROR
            self._errors.report("registry", f"no Prometheus registry: {exc!r}", level=level)

    def _start_file(self, path: Path) -> None:
        """The progress file sink: create its directory, write the first snapshot."""
        self._file = path
        try:
            self._file.parent.mkdir(parents=True, exist_ok=True)
        except Exception as exc:  # noqa: BLE001
            self._errors.report(
                f"file-dir:{type(exc).__name__}",
                f"cannot create the directory of progress file {self._file}: {exc!r}",
            )
        self._write_file()

    def _start_server(self, registry: CollectorRegistry, port: int, address: str) -> None:
        """The in-process /metrics endpoint of ``registry`` on ``address:port`` (0 = a free
        port)."""
        from . import exposition

        try:
            self._server = exposition.MetricsServer(registry, port, address)
            log.info("serving progress metrics on http://%s:%d/metrics", address, self.port)
        except Exception as exc:  # noqa: BLE001
            self._errors.report(
                "http",
                f"cannot serve metrics on {address}:{port}: {exc!r}; training goes on without them",
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
            restart_s=self._restart_s,
            threads_follow_limit=self._threads_follow_limit,
        )

    def restart_done(self, seconds: float) -> None:
        """Record the restart cost: seconds from the resumed checkpoint's save to the first
        step of this process (``decor_training_restart_seconds``)."""
        try:
            self._restart_s = max(0.0, float(seconds))
            if self._file is not None:
                self._write_file()
        except Exception as exc:  # noqa: BLE001
            self._errors.report(f"restart:{type(exc).__name__}", f"restart_done failed: {exc!r}")

    def step_done(self, samples: int = 0) -> None:
        """Record one completed mini-batch of ``samples`` training samples (>= 0)."""
        try:
            now = self._clock()
            self._step_s = now - self._step_started
            self._step_started = now
            self._samples += int(samples)
            self._steps += 1
            self._t = self._wall_clock()
            if self._steps == self._steps_planned and self._server is not None:
                self._begun_at_last_step = self._server.begun
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

    @property
    def finished(self) -> bool:
        """Every planned step is done (False while the plan is unknown)."""
        return 0 < self._steps_planned <= self._steps

    def linger(self, seconds: float, stop: Callable[[], bool] = lambda: False) -> None:
        """After the last planned step, keep serving ``/metrics`` until a scrape has shown
        it (at most ``seconds``, or until ``stop()``), so that a controller scraping every
        period sees the final step and its time stamp before the process is gone: without
        it, a loop that exits between two scrapes is stamped with the time the controller
        noticed the exit. Returns at once without an endpoint or before the plan is done."""
        if seconds <= 0 or self._server is None or not self.finished:
            return
        until = time.monotonic() + seconds
        while not stop() and time.monotonic() < until:
            if self._server.served_through > self._begun_at_last_step:
                return
            time.sleep(0.02)

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
