"""Metrics sidecar: serves ``/metrics`` from the trainer's progress file.

``python -m decor_trainer.sidecar --file /var/run/decor/progress.json --port 9100``

Meant for a native sidecar container (an init container with ``restartPolicy: Always``)
sharing an ``emptyDir`` with the trainer, so the training image needs no Prometheus code.
The file is re-read on every scrape. While it is missing or malformed the sidecar serves the
last good values, or nothing before the first good read; it never exits because of the file.
It exits 0 on SIGTERM or SIGINT. Imports no PyTorch.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from prometheus_client import CollectorRegistry

from .contract import (
    DEFAULT_METRICS_PORT,
    DEFAULT_PROGRESS_FILE,
    ENV_METRICS_PORT,
    ENV_PROGRESS_FILE,
)
from .exposition import MetricsServer, SnapshotCollector
from .reporter import DEFAULT_BIND_ADDRESS, ErrorLog, ProgressSnapshot

log = logging.getLogger(__name__)

MAX_PROGRESS_FILE_BYTES = 64 * 1024
"""A progress file is ~200 bytes; anything past this is not one and is not read whole."""


class ProgressFileSource:
    """Reads the progress file on demand and remembers the last good content.

    Call it to get the current snapshot: the file's content if it parses, else the last good
    one, else None. Never raises.
    """

    def __init__(self, path: str | os.PathLike[str], errors: ErrorLog | None = None) -> None:
        self.path = Path(path)
        self._errors = errors if errors is not None else ErrorLog(logger=log)
        self._last_good: ProgressSnapshot | None = None
        self._lock = threading.Lock()

    def __call__(self) -> ProgressSnapshot | None:
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_PROGRESS_FILE_BYTES + 1)
            if len(raw) > MAX_PROGRESS_FILE_BYTES:
                raise ValueError(f"larger than {MAX_PROGRESS_FILE_BYTES} bytes")
            snapshot = ProgressSnapshot.from_mapping(json.loads(raw))
        except FileNotFoundError:
            self._errors.report(
                "missing", f"progress file {self.path} does not exist (yet)", level=logging.INFO
            )
        except Exception as exc:  # noqa: BLE001 - a scrape must never fail on the file
            self._errors.report(
                f"bad:{type(exc).__name__}", f"ignoring progress file {self.path}: {exc!r}"
            )
        else:
            with self._lock:
                self._last_good = snapshot
            return snapshot
        with self._lock:
            return self._last_good


def build_registry(path: str | os.PathLike[str]) -> CollectorRegistry:
    """A fresh registry exposing the contract's metrics from the progress file at ``path``."""
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(ProgressFileSource(path)))
    return registry


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 0..65535, got {port}")
    return port


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Flags; defaults come from ``DECOR_PROGRESS_FILE`` and ``DECOR_METRICS_PORT``."""
    parser = argparse.ArgumentParser(
        prog="python -m decor_trainer.sidecar", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--file",
        default=os.environ.get(ENV_PROGRESS_FILE) or DEFAULT_PROGRESS_FILE,
        help=f"progress file to serve (default: ${ENV_PROGRESS_FILE} or %(default)s)",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=None,
        help=f"TCP port (default: ${ENV_METRICS_PORT} or {DEFAULT_METRICS_PORT})",
    )
    parser.add_argument(
        "--address", default=DEFAULT_BIND_ADDRESS, help="bind address (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.port is None:
        raw = os.environ.get(ENV_METRICS_PORT, "").strip()
        try:
            args.port = _port(raw) if raw else DEFAULT_METRICS_PORT
        except (ValueError, argparse.ArgumentTypeError):
            parser.error(f"{ENV_METRICS_PORT}={raw!r} is not a port number (0..65535)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; return the exit status (0, or 1 if the port is unusable)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s decor-sidecar %(message)s")
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _on_signal)
    try:
        server = MetricsServer(build_registry(args.file), args.port, args.address)
    except OSError as exc:
        log.error("cannot serve on %s:%d: %s", args.address, args.port, exc)
        return 1
    log.info("serving %s on http://%s:%d/metrics", args.file, args.address, server.port)
    while not stop.wait(1.0):  # the timeout lets Python run the signal handler promptly
        pass
    server.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
