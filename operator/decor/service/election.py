"""Leader election between operator replicas: the Lease's reads and writes around the pure
steps of :mod:`decor.core.leader`, in a thread of their own.

Every replica watches and keeps its views warm; :meth:`LeaderElection.acting` says whether
this one may write now. The control loop asks it before each period (a standby runs no
period), and the Kubernetes facade asks it before every write it sends (``Kube.may_write``),
so a leader whose renewals fail stops writing when its fence closes, even in the middle of a
period. :meth:`LeaderElection.term` changes each time this replica begins to act, so that the
loop forgets what it remembered from an earlier term and reloads each job from its status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from decor.adapter.kube import Kube, KubeError
from decor.core import leader
from decor.service.operator_metrics import OperatorMetrics

log = logging.getLogger("decor.operator")

CONFLICT = 409


def micro_time(wall_s: float) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds, UTC) for ``wall_s`` seconds since
    the epoch."""
    return datetime.fromtimestamp(wall_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElection:
    """One replica's part in the election for the Lease ``namespace/name``."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        timings: leader.LeaseTimings,
        operator_metrics: OperatorMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_acting: Callable[[], None] | None = None,
    ) -> None:
        """``clock``: monotonic seconds (durations, the fence); ``wall_clock``: epoch seconds
        (the Lease's stamps only); ``on_acting``: called (from the election's thread) when a
        term begins, to wake the control loop."""
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings
        self.metrics = operator_metrics
        self.clock = clock
        self.wall_clock = wall_clock
        self.on_acting = on_acting
        self.state = leader.ElectorState()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- what the loop and the facade ask ----------------------------------------------------

    def acting(self) -> bool:
        """Whether this replica may write to the cluster now."""
        with self._lock:
            return leader.acting(self.state, self.clock())

    def term(self) -> int | None:
        """The current term's number while this replica acts, else None."""
        with self._lock:
            return self.state.term if leader.acting(self.state, self.clock()) else None

    # --- one step -------------------------------------------------------------------------------

    def step(self) -> float:
        """Read the Lease, write it if this replica holds or may take it. Returns seconds
        until the next step. API errors are logged; the fence closes on its own."""
        try:
            body = self.kube.get_lease(self.namespace, self.name)
        except KubeError as exc:
            log.warning("leader election: cannot read the Lease: %s", exc)
            with self._lock:
                self._publish()  # the fence closes on its own: the gauge follows it
            return self.timings.retry_period_s
        read = None if body is None else leader.record_from_lease(body)
        with self._lock:
            now_s = self.clock()
            self.state = leader.observe(self.state, read, now_s)
            stopped = self._stop.is_set()  # stopped meanwhile: read, but write nothing more
            sent = None if stopped else leader.attempt(
                self.state, self.identity, self.timings, now_s, micro_time(self.wall_clock())
            )  # fmt: skip
        if sent is not None:
            self._write(sent)
        with self._lock:
            self._publish()
            return leader.next_step_s(self.state, self.identity, self.timings, self.clock())

    def _write(self, sent: leader.Attempt) -> None:
        """Send one Lease write and take in its result."""
        lease = leader.build_lease(self.namespace, self.name, sent.record)
        try:
            stored = (
                self.kube.create_lease(lease) if sent.create else self.kube.replace_lease(lease)
            )
        except KubeError as exc:
            if exc.status == CONFLICT:
                with self._lock:
                    was_acting = leader.acting(self.state, self.clock())
                    self.state = leader.stop_acting(self.state)
                if was_acting:
                    log.warning("leader election: another replica wrote the Lease; standing by")
            else:
                log.warning("leader election: cannot write the Lease: %s", exc)
            return
        with self._lock:
            before = self.state.term
            self.state = leader.written(
                self.state, sent, leader.record_from_lease(stored), self.timings, self.clock()
            )
            if self._stop.is_set():  # stopped while the write was in flight: keep what it
                self.state = leader.stop_acting(self.state)  # stored (release frees it)
                return
            began = self.state.term != before
        if began:
            self.metrics.leader_takeovers.inc()
            log.info(
                "leader election: %s acts now (Lease %s/%s, term %d, transitions %d)",
                self.identity,
                self.namespace,
                self.name,
                self.state.term,
                sent.record.transitions,
            )
            if self.on_acting is not None:
                self.on_acting()

    def _publish(self) -> None:
        self.metrics.leader.set(1.0 if leader.acting(self.state, self.clock()) else 0.0)

    # --- the thread -----------------------------------------------------------------------------

    def start(self) -> None:
        """Step in a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, name="decor-leader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        was_acting = False
        while not self._stop.is_set():
            try:
                wait_s = self.step()
            except Exception:  # noqa: BLE001 - the election must outlive anything; the fence
                log.exception("leader election: step failed")  # closes on its own
                wait_s = self.timings.retry_period_s
            now_acting = self.acting()
            if was_acting and not now_acting and not self._stop.is_set():
                log.warning("leader election: %s stopped acting (no renewal)", self.identity)
            was_acting = now_acting
            # retry period < renew deadline: a leader renews before its fence closes.
            self._stop.wait(wait_s)

    def stop(self) -> None:
        """Stop acting (the fence closes: no write is sent from now) and stepping."""
        with self._lock:  # under the lock: a step sees the stop before it writes, or after
            self._stop.set()
            self.state = leader.stop_acting(self.state)
            self._publish()
        if self._thread is not None:
            self._thread.join(timeout=self.timings.retry_period_s + self.kube.timeout_s)

    def release(self) -> None:
        """Free the Lease (after :meth:`stop`, once no period of ours is in flight), so a
        standby takes it at its next step instead of waiting for it to expire."""
        with self._lock:
            freeing = leader.release(self.state, self.identity, micro_time(self.wall_clock()))
        if freeing is None:
            return
        try:
            self.kube.replace_lease(leader.build_lease(self.namespace, self.name, freeing.record))
            log.info("leader election: Lease %s/%s released", self.namespace, self.name)
        except KubeError as exc:
            log.warning("leader election: could not release the Lease: %s", exc)
