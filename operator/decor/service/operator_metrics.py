"""The operator's own Prometheus metrics (prometheus_client, no per-job labels).

``decor_operator_actuations_total`` {kind}, ``decor_operator_reconcile_errors_total``,
``decor_operator_jobs`` {phase}, ``decor_operator_jobs_tracked``,
``decor_operator_reconcile_duration_seconds``, ``decor_operator_period_lateness_seconds``,
``decor_operator_plan_duration_seconds``, ``decor_operator_period_duration_seconds``,
``decor_operator_period_step_duration_seconds`` {step}, ``decor_operator_gc_pause_seconds``
{generation},
``decor_operator_status_writes_waiting``, ``decor_operator_events_dropped_total``,
``decor_operator_leader``,
``decor_operator_leader_takeovers_total``.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from decor.api import vocabulary


class OperatorMetrics:
    """The operator's own Prometheus metrics, in ``registry``. No per-job labels."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        # (registered in this order: the order of the exposition)
        self._add_activity(registry)
        self._add_timings(registry)
        self._add_view_and_leadership(registry)
        for kind in vocabulary.ACTUATIONS:
            self.actuations.labels(kind=kind)
        for step in vocabulary.PERIOD_STEPS:
            self.period_steps.labels(step=step)
        for generation in range(3):
            self.gc_pauses.labels(generation=str(generation))
        self._phases: dict[tuple[str, str], str] = {}
        self._counts = dict.fromkeys(vocabulary.PHASES, 0)  # jobs per phase in ``_phases``
        self._lock = threading.Lock()
        for phase, count in self._counts.items():
            self.jobs.labels(phase=phase).set(count)

    def _add_activity(self, registry: CollectorRegistry) -> None:
        """What the operator did: actuations by kind, failed periods, jobs by phase."""
        self.actuations = Counter(
            vocabulary.METRIC_ACTUATIONS,
            "Allocation changes and pod lifecycle actions the operator carried out, by kind "
            "(resize, restart, create, suspend).",
            ["kind"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            vocabulary.METRIC_RECONCILE_ERRORS,
            "Control periods that ended in an error (API or unexpected); the job is retried "
            "next period.",
            registry=registry,
        )
        self.jobs = Gauge(
            vocabulary.METRIC_JOBS,
            "DeadlineTrainingJobs this operator serves, by phase.",
            ["phase"],
            registry=registry,
        )

    def _add_timings(self, registry: CollectorRegistry) -> None:
        """How long a job's period and a planner call took, and how late periods ran
        (seconds)."""
        self.reconcile_seconds = Histogram(
            vocabulary.METRIC_RECONCILE_DURATION,
            "Wall time of one job's actuation and status write in a control period.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=registry,
        )
        self.period_lateness = Histogram(
            vocabulary.METRIC_PERIOD_LATENESS,
            "How late a job's control period ran after it was due.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=registry,
        )
        self.plan_seconds = Histogram(
            vocabulary.METRIC_PLAN_DURATION,
            "Wall time of one planner call over every active job.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )
        self.period_seconds = Histogram(
            vocabulary.METRIC_PERIOD_DURATION,
            "Wall time of one control period that ran jobs (from its snapshot to its last commit).",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=registry,
        )
        self.period_steps = Histogram(
            vocabulary.METRIC_PERIOD_STEP_DURATION,
            "Wall time of each step of a control period that ran jobs, by step (snapshot, "
            "read, prepare, plan, commit).",
            ["step"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=registry,
        )
        self.gc_pauses = Histogram(
            vocabulary.METRIC_GC_PAUSE,
            "Wall time of each of the Python garbage collector's collections in the operator "
            "process, by generation (every thread waits for it; counted once "
            "watch_garbage_collection has been called).",
            ["generation"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )

    def _add_view_and_leadership(self, registry: CollectorRegistry) -> None:
        """The jobs in view, and whether this replica acts (leader election)."""
        self.jobs_total = Gauge(
            vocabulary.METRIC_JOBS_TRACKED,
            "DeadlineTrainingJobs in the operator's view (any phase).",
            registry=registry,
        )
        self.status_writes_waiting = Gauge(
            vocabulary.METRIC_STATUS_WRITES_WAITING,
            "Jobs' status writes and Events waiting or in flight at the end of a control "
            "period (sent in the background with several commit workers; a backlog that "
            "grows: the API server answers them slower than the jobs make them).",
            registry=registry,
        )
        self.events_dropped = Counter(
            vocabulary.METRIC_EVENTS_DROPPED,
            "Jobs' Events dropped because too many were waiting for the API server.",
            registry=registry,
        )
        self.leader = Gauge(
            vocabulary.METRIC_LEADER,
            "1 while this replica is the one that acts (holds the leader Lease within its "
            "renew deadline, or runs without leader election), else 0 (a standby).",
            registry=registry,
        )
        self.leader_takeovers = Counter(
            vocabulary.METRIC_LEADER_TAKEOVERS,
            "Times this replica began to act: it created the leader Lease or took it over "
            "(free, released, expired, or its own after its renewals lapsed).",
            registry=registry,
        )

    def watch_garbage_collection(self) -> Callable[[], None]:
        """Time the process's garbage collections into ``gc_pauses`` (once per process: the
        collector's callbacks are global). Returns the function that stops it.

        The callback observes into children looked up here, not through ``labels()``: that
        takes the metric's lock, which the /metrics thread holds while it copies the children
        (an allocation that can start a collection in that thread: it would wait for itself)."""
        started: list[float] = []
        by_generation = {g: self.gc_pauses.labels(generation=str(g)) for g in range(3)}

        def on_collection(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                started[:] = [time.perf_counter()]
            elif started:
                pause_s = time.perf_counter() - started.pop()
                child = by_generation.get(info["generation"])
                if child is not None:
                    child.observe(pause_s)

        gc.callbacks.append(on_collection)
        return lambda: gc.callbacks.remove(on_collection)

    def job_phase(self, key: tuple[str, str], phase: str | None) -> None:
        """Record a job's phase (None: the job is gone)."""
        with self._lock:
            before = self._phases.pop(key, None) if phase is None else self._phases.get(key)
            if phase is not None:
                self._phases[key] = phase
            if before == phase:
                return
            if before is not None:
                self._counts[before] -= 1
                self._publish(before)
            if phase is not None:
                self._counts[phase] = self._counts.get(phase, 0) + 1
                self._publish(phase)

    def _publish(self, phase: str) -> None:
        """The gauge of ``phase`` (one of the vocabulary's, or any held by a job now)."""
        count = self._counts[phase]
        if count > 0 or phase in vocabulary.PHASES:
            self.jobs.labels(phase=phase).set(count)
