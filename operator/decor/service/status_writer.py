"""Jobs' status writes, off the control period's path.

A period commits its due jobs on several workers and waits for all of them (the planner's
room is shared, and the next period's plan must see what this one did). A job's status write
changes no capacity, so with several commit workers (``OperatorConfig.commit_workers`` > 1)
the period hands it here and goes on: :class:`StatusWriter` sends it on workers of its own.
Without that, the API server's latency for every job's status patch (most of a period's
calls) was added to the period, and a thousand jobs at a 10 s period fell behind their
periods on a slow API server.

What stays true of the writes:

* **Order, per job.** One write of a job is in flight at a time; a write the job makes
  meanwhile waits, and two waiting writes become one when that is exactly the same as sending
  both (:func:`compose`: a merge patch after a merge patch).
* **The job's own object.** Each write carries the job's uid as a precondition
  (``Kube.patch_job_status``).
* **Gone is told.** A job the API server no longer has (404, or another uid) is remembered;
  the controller learns it at its next write (:meth:`StatusWriter.gone`) and stops.
* **A failed write is written again.** Any other error is logged, and the controller's next
  period writes its whole status again (:meth:`StatusWriter.take_failed`).
* **Fenced.** A write made in one leader term is never sent in another (``term``); a write
  the fence refuses is dropped (the new leader reads the job from the status it finds).

With one commit worker (tests, the scenario records) every write is sent at once, in the
period, as before; :meth:`StatusWriter.close` sends what is waiting when the operator stops.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from decor.adapter.kube import Fenced, Kube, KubeError

log = logging.getLogger("decor.operator")

Key = tuple[str, str]
Term = Callable[[], int | None]

CLOSE_WAIT_S = 5.0
"""How long :meth:`StatusWriter.close` waits for the writes still waiting or in flight."""


def compose(first: Mapping[str, Any], then: Mapping[str, Any]) -> dict[str, Any] | None:
    """One JSON merge patch (RFC 7386) that does what ``first`` then ``then`` do to any
    object, or None when there is none: ``first`` puts a non-object (a value, or null to
    delete) where ``then`` puts an object, which merging into the object still there would
    not undo."""
    out = dict(first)
    for key, value in then.items():
        before = out.get(key)
        if isinstance(value, Mapping):
            if isinstance(before, Mapping):
                inner = compose(before, value)
                if inner is None:
                    return None
                out[key] = inner
                continue
            if key in out:  # a value or a delete, then an object merged into what is there
                return None
        out[key] = value
    return out


class StatusWriter:
    """Sends jobs' status merge patches (see the module docstring). ``workers``: 0 sends
    each write at once, in the caller's thread; more sends them in the background."""

    def __init__(self, kube: Kube, workers: int, term: Term | None = None) -> None:
        self.kube = kube
        self.term = term
        self._lock = threading.Lock()
        self._waiting: dict[Key, deque[tuple[str, dict[str, Any], int | None]]] = {}
        self._busy: set[Key] = set()
        self._gone: dict[Key, str] = {}
        self._failed: set[Key] = set()
        self._forgotten: set[Key] = set()  # forgotten while a write of theirs was in flight
        self._idle = threading.Condition(self._lock)
        self._pool = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decor-status")
            if workers > 0
            else None
        )

    def write(self, key: Key, uid: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch job ``key``'s status. False when the job is known to be gone (this
        write, sent at once, found it gone; or an earlier one did)."""
        if self.gone(key, uid):
            return False
        if self._pool is None:
            found = self.kube.patch_job_status(key[0], key[1], status, uid=uid)
            if not found:
                with self._lock:
                    self._gone[key] = uid
            return found
        entry = (uid, dict(status), self.term() if self.term is not None else None)
        with self._lock:
            waiting = self._waiting.setdefault(key, deque())
            if waiting and waiting[-1][0] == uid and waiting[-1][2] == entry[2]:
                merged = compose(waiting[-1][1], entry[1])
                if merged is not None:
                    waiting[-1] = (uid, merged, entry[2])
                    return True
            waiting.append(entry)
            if key in self._busy:
                return True  # the worker sending this job's write sends this one next
            self._busy.add(key)
        self._pool.submit(self._send_all, key)
        return True

    def gone(self, key: Key, uid: str) -> bool:
        """Whether a write found job ``key`` (this uid) gone."""
        with self._lock:
            return self._gone.get(key) == uid

    def take_failed(self, key: Key) -> bool:
        """Whether a write of ``key`` failed since the last call (its status must be
        written again whole)."""
        with self._lock:
            if key in self._failed:
                self._failed.discard(key)
                return True
            return False

    def forget(self, key: Key) -> None:
        """Drop what is known of ``key`` (the loop forgot the job: it left the view), and
        what a write of it still in flight will learn."""
        with self._lock:
            self._gone.pop(key, None)
            self._failed.discard(key)
            if key in self._busy:
                self._forgotten.add(key)

    def backlog(self) -> int:
        """Writes waiting or in flight."""
        with self._lock:
            return sum(len(w) for w in self._waiting.values()) + len(self._busy)

    def flush(self, wait_s: float = CLOSE_WAIT_S) -> bool:
        """Wait (at most ``wait_s``) until every write was sent. Whether none is left."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._busy, timeout=wait_s)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Send what is waiting (at most ``wait_s``), then stop the workers."""
        if self._pool is None:
            return
        self.flush(wait_s)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- a worker ---------------------------------------------------------------------------

    def _send_all(self, key: Key) -> None:
        """Send ``key``'s waiting writes in order, until none is left."""
        while True:
            with self._lock:
                waiting = self._waiting.get(key)
                if not waiting:
                    self._waiting.pop(key, None)
                    self._busy.discard(key)
                    if key in self._forgotten:
                        self._forgotten.discard(key)
                        self._gone.pop(key, None)
                        self._failed.discard(key)
                    self._idle.notify_all()
                    return
                uid, status, term = waiting.popleft()
            self._send(key, uid, status, term)

    def _send(self, key: Key, uid: str, status: dict[str, Any], term: int | None) -> None:
        if self.term is not None and self.term() != term:
            return  # made in another term: the acting leader writes from what it read
        try:
            found = self.kube.patch_job_status(key[0], key[1], status, uid=uid)
        except Fenced:
            return
        except Exception as exc:  # noqa: BLE001 - a worker must outlive anything
            log.warning("%s/%s: status not written (%s); written again next period",
                        key[0], key[1], exc, exc_info=not isinstance(exc, KubeError))  # fmt: skip
            with self._lock:
                self._failed.add(key)
            return
        if not found:
            with self._lock:
                self._gone[key] = uid
