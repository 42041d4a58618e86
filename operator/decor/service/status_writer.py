"""Jobs' status writes and Events, off the control period's path.

A period commits its due jobs on several workers and waits for all of them (the planner's
room is shared, and the next period's plan must see what this one did). A job's status write
and its Events change no capacity, so with several commit workers
(``OperatorConfig.commit_workers`` > 1) the period hands them here and goes on:
:class:`StatusWriter` sends them on workers of its own. Without that, the API server's
latency for every job's status patch and Event (most of a period's calls) was added to the
period: a thousand jobs at a 10 s period fell behind their periods on a slow API server (a
stack sample of the leader at 1,000 jobs: Events were 43 % of the commit workers' time, and
the prepare step's Events, posted one after another in the loop's thread, 20 % of its wall
time, while status writes were already sent here).

What stays true of the writes:

* **Order, per job.** One write of a job is in flight at a time; a write or Event the job
  makes meanwhile waits, in the order made, so its status never shows what an Event it
  posted before has not said yet. Two waiting status writes become one when that is exactly
  the same as sending both (:func:`compose`: a merge patch after a merge patch).
* **The job's own object.** Each status write carries the job's uid as a precondition
  (``Kube.patch_job_status``).
* **Gone is told.** A job the API server no longer has (404, or another uid) is remembered;
  the controller learns it at its next write (:meth:`StatusWriter.gone`) and stops.
* **A failed write is written again.** Any other error is logged, and the controller's next
  period writes its whole status again (:meth:`StatusWriter.take_failed`). An Event is
  advisory: one the API server refuses is logged (``Kube.post_event``), not sent again.
* **Fenced.** A write or Event made in one leader term is never sent in another (``term``);
  a write the fence refuses is dropped (the new leader reads the job from the status it
  finds).
* **Bounded Events.** At most :data:`MAX_EVENTS_WAITING` Events wait; one more is dropped,
  logged and counted (``on_event_dropped``). Status writes need no bound: a job's waiting
  writes compose into one.

With one commit worker (tests, the scenario records) every write and Event is sent at once,
in the period, as before; :meth:`StatusWriter.close` sends what is waiting when the operator
stops.
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
STATUS, EVENT = "status", "event"
Entry = tuple[str, str, dict[str, Any], int | None]
"""A waiting write: its kind (STATUS or EVENT), the job's uid, the patch or Event, the term."""

MAX_EVENTS_WAITING = 10_000
"""Events waiting at most, all jobs together; more are dropped (and counted)."""

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
    """Sends jobs' status merge patches and Events (see the module docstring). ``workers``: 0 sends
    each write at once, in the caller's thread; more sends them in the background."""

    def __init__(
        self,
        kube: Kube,
        workers: int,
        term: Term | None = None,
        on_event_dropped: Callable[[], None] | None = None,
    ) -> None:
        self.kube = kube
        self.term = term
        self.on_event_dropped = on_event_dropped
        self._lock = threading.Lock()
        self._waiting: dict[Key, deque[Entry]] = {}
        self._events_waiting = 0
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
        entry = (STATUS, uid, dict(status), self.term() if self.term is not None else None)
        with self._lock:
            waiting = self._waiting.get(key)
            if waiting and waiting[-1][:2] == entry[:2] and waiting[-1][3] == entry[3]:
                merged = compose(waiting[-1][2], entry[2])
                if merged is not None:
                    waiting[-1] = (STATUS, uid, merged, entry[3])
                    return True
            self._put(key, entry)
        return True

    def post_event(self, key: Key, event: Mapping[str, Any]) -> None:
        """Post ``event`` (``build.build_event``) about job ``key``, after the job's writes
        and Events made before it."""
        if self._pool is None:
            self.kube.post_event(event)
            return
        entry = (EVENT, "", dict(event), self.term() if self.term is not None else None)
        with self._lock:
            dropped = self._events_waiting >= MAX_EVENTS_WAITING
            if not dropped:
                self._events_waiting += 1
                self._put(key, entry)
        if dropped:
            log.warning("%s/%s: Event %s dropped: %d Events wait for the API server",
                        key[0], key[1], event.get("reason"), MAX_EVENTS_WAITING)  # fmt: skip
            if self.on_event_dropped is not None:
                self.on_event_dropped()

    def _put(self, key: Key, entry: Entry) -> None:
        """Queue ``entry`` behind ``key``'s waiting ones; a worker takes the job's queue
        when none has it (the lock held)."""
        self._waiting.setdefault(key, deque()).append(entry)
        if key not in self._busy:
            self._busy.add(key)
            assert self._pool is not None
            self._pool.submit(self._send_all, key)

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
        """Writes and Events waiting or in flight."""
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
                kind, uid, body, term = waiting.popleft()
                if kind == EVENT:
                    self._events_waiting -= 1
            if self.term is not None and self.term() != term:
                continue  # made in another term: the acting leader writes from what it read
            if kind == EVENT:
                self._post(body)
            else:
                self._send(key, uid, body)

    def _post(self, event: dict[str, Any]) -> None:
        try:
            self.kube.post_event(event)  # logs what the API server refuses
        except Exception:  # noqa: BLE001 - a worker must outlive anything
            log.exception("Event %s not posted", event.get("reason"))

    def _send(self, key: Key, uid: str, status: dict[str, Any]) -> None:
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
