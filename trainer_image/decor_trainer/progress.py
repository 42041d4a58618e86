"""Two-line progress reporting for your own training loop.

::

    from decor_trainer import progress
    ...
        progress.step(samples=len(batch))   # after every mini-batch

Optionally call ``progress.epoch()`` after every epoch. The first call creates a
:class:`~decor_trainer.reporter.ProgressReporter` from the environment DECOR gives the
trainer (``DECOR_EPOCHS``, ``DECOR_STEPS_PER_EPOCH``, and ``DECOR_PROGRESS_FILE`` for the
sidecar or ``DECOR_METRICS_PORT`` for the in-process endpoint). Call :func:`init` first to
set the plan or the resume point yourself. None of these functions ever raises.

When the process exits after the last planned step, the endpoint stays up
``DECOR_METRICS_LINGER_S`` seconds or until SIGTERM (the local runtime sets it, and stops
the trainer as soon as it has seen the final step; the process then exits with the status
it had), so the finish is stamped with the last step's own time, not with the end of the
interpreter's shutdown.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

from .contract import ENV_METRICS_LINGER_S
from .reporter import ProgressReporter

log = logging.getLogger(__name__)

_lock = threading.Lock()
_reporter: ProgressReporter | None = None
_initialized = False  # True after the first init(), even a failed one: no retry per step


def init(**kwargs: Any) -> ProgressReporter | None:
    """(Re)create the module's reporter; arguments as :meth:`ProgressReporter.from_env`.

    E.g. ``progress.init(start_step=ckpt_step, start_samples=ckpt_samples)`` after resuming.
    Returns the reporter, or None if it could not be created (the error is logged).
    """
    global _reporter, _initialized
    with _lock:
        if not _initialized:
            atexit.register(_linger_at_exit)
        _initialized = True
        try:
            if _reporter is not None:
                _reporter.close()
            _reporter = ProgressReporter.from_env(**kwargs)
        except Exception as exc:  # noqa: BLE001 - reporting never breaks training
            log.warning("progress reporting disabled: %r", exc)
            _reporter = None
        return _reporter


def _get() -> ProgressReporter | None:
    return _reporter if _initialized else init()


def step(samples: int = 0) -> None:
    """Record one completed mini-batch of ``samples`` training samples."""
    reporter = _get()
    if reporter is not None:
        reporter.step_done(samples)


def epoch() -> None:
    """Record one completed epoch."""
    reporter = _get()
    if reporter is not None:
        reporter.epoch_done()


def close() -> None:
    """Stop the module's reporter (its endpoint, if any); the next :func:`step` starts anew."""
    global _reporter, _initialized
    with _lock:
        if _reporter is not None:
            _reporter.close()
        _reporter, _initialized = None, False


def linger_seconds(environ: Mapping[str, str] = os.environ) -> float:
    """``DECOR_METRICS_LINGER_S`` as seconds (0 when unset or malformed, which is logged)."""
    raw = environ.get(ENV_METRICS_LINGER_S, "").strip()
    try:
        return max(0.0, float(raw)) if raw else 0.0
    except ValueError:
        log.warning(
            "$%s must be a number of seconds, got %r; not lingering", ENV_METRICS_LINGER_S, raw
        )
        return 0.0


def _linger_at_exit() -> None:
    """At exit after the last planned step, linger; SIGTERM (the controller has seen the
    final step) ends it with the exit status the loop had, not a kill by signal."""
    reporter = _reporter
    seconds = linger_seconds()
    if reporter is None or seconds <= 0 or not reporter.finished:
        return
    stopped = threading.Event()
    try:
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    except ValueError:  # not the main thread: a SIGTERM kills as before
        pass
    reporter.linger(seconds, stopped.is_set)
