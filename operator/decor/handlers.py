"""The kopf layer: watch DeadlineTrainingJobs and run one control loop per job.

read (pod, progress) -> model (parse_job) -> control (decide) -> kube (resize / restart)
-> status. Everything that decides lives in ``control.py``; everything that talks to the
API server lives in ``kube.py``; progress comes from ``metrics.py``; pod bodies, patches,
conditions and events are built by ``build.py``. This module only sequences them.

One kopf *daemon* per job runs :meth:`JobReconciler.tick` every ``spec.control.periodSeconds``
(the daemon sees kopf's live view of the job, so a new deadline is picked up on the next
tick; field handlers on ``spec.deadline``/``spec.duration``/``spec.suspend``/``spec.resources``
wake the daemon at once). The first tick initialises the job (start time, effective deadline,
controller state, first pod), so creation and resumption after an operator restart are the
same code path.

Where status goes, on purpose: the daemon writes ``status`` itself through the status
subresource (every field is declared in the CRD); handlers return None, so kopf writes no
``status.<handler_id>``; kopf's progress and diff-base bookkeeping go to ``decor.dev/``
annotations, never to status (a strict schema would prune them).

Operator metrics (prometheus_client, no per-job labels): ``decor_operator_actuations_total``
{kind}, ``decor_operator_reconcile_errors_total``, ``decor_operator_jobs`` {phase},
``decor_operator_reconcile_duration_seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import kopf
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from decor import build, control, metrics
from decor.kube import Kube, KubeError
from decor.model import (
    API_GROUP,
    API_VERSION,
    PLURAL,
    JobSpec,
    ManifestError,
    format_time,
    parse_job,
    parse_time,
)

log = logging.getLogger("decor.operator")

# --- configuration (environment) -----------------------------------------------------------

ENV_PROMETHEUS_URL = "DECOR_PROMETHEUS_URL"
"""Base URL of a Prometheus server to read progress from; unset: scrape pods directly."""
ENV_METRICS_PORT = "DECOR_METRICS_PORT"
"""Port of the operator's own /metrics (0 disables it)."""
ENV_LOG_LEVEL = "DECOR_LOG_LEVEL"
"""DEBUG, INFO (default), WARNING or ERROR."""
ENV_SIDECAR_IMAGE = "DECOR_SIDECAR_IMAGE"
"""Image of the metrics sidecar; unset: the trainer's own image."""
ENV_CHECKPOINT_HOST_ROOT = "DECOR_CHECKPOINT_HOST_ROOT"
"""hostPath root for default checkpoint volumes (default /var/lib/decor/checkpoints)."""
ENV_HEALTH_PORT = "DECOR_HEALTH_PORT"
"""Port of kopf's liveness endpoint /healthz (unset: none)."""
ENV_SCRAPE_VIA = "DECOR_SCRAPE_VIA"
"""How to reach a trainer's /metrics without Prometheus: ``direct`` (pod IP, the default) or
``apiserver`` (the API server's pod proxy: for an operator outside the pod network)."""
SCRAPE_DIRECT = "direct"
SCRAPE_APISERVER = "apiserver"
ENV_WATCH_NAMESPACE = "DECOR_WATCH_NAMESPACE"
"""Serve only this namespace when run_operator is given none (empty: all namespaces)."""

DEFAULT_OPERATOR_METRICS_PORT = 8080
STARTUP_GRACE_S = 180.0
"""How long a new trainer pod may run without a progress sample before MetricsUnavailable.

Importing PyTorch and building the model takes tens of seconds on a small VM; until the
first sample the allocation stays where the pod started, which is what the law wants.
"""
MAX_POD_FAILURES = 5
"""Trainer pods lost or failed that are recreated before the job is marked Failed."""
MIN_PERIOD_S = 0.2
"""Shortest control period the daemon runs (protects the API server from a tiny spec value)."""
CPU_EPSILON_CORES = 0.0005
"""CPU allocations closer than half a millicore are the same (pods store millicores)."""
FINALIZER = "decor.dev/finalizer"
ANNOTATION_PREFIX = "decor.dev"

# Kinds of actuation counted by decor_operator_actuations_total.
ACTUATION_RESIZE = "resize"  # in-place CPU resize requested
ACTUATION_RESTART = "restart"  # trainer pod deleted to change the GPU count
ACTUATION_CREATE = "create"  # trainer pod created (first start, resume, recreation)
ACTUATION_SUSPEND = "suspend"  # trainer pod deleted because of spec.suspend


@dataclass(frozen=True)
class OperatorConfig:
    """How the operator reads progress and builds pods (from the environment by default)."""

    prometheus_url: str | None = None
    sidecar_image: str | None = None
    checkpoint_host_root: str = build.DEFAULT_CHECKPOINT_HOST_ROOT
    startup_grace_s: float = STARTUP_GRACE_S
    max_pod_failures: int = MAX_POD_FAILURES
    scrape_via: str = SCRAPE_DIRECT
    instance: str = field(default_factory=socket.gethostname)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> OperatorConfig:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            "prometheus_url": env.get(ENV_PROMETHEUS_URL) or None,
            "sidecar_image": env.get(ENV_SIDECAR_IMAGE) or None,
            "checkpoint_host_root": env.get(ENV_CHECKPOINT_HOST_ROOT)
            or build.DEFAULT_CHECKPOINT_HOST_ROOT,
            "scrape_via": env.get(ENV_SCRAPE_VIA) or SCRAPE_DIRECT,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class OperatorMetrics:
    """The operator's own Prometheus metrics, in ``registry``. No per-job labels."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.actuations = Counter(
            "decor_operator_actuations",
            "Allocation changes and pod lifecycle actions the operator carried out, by kind "
            "(resize, restart, create, suspend).",
            ["kind"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "decor_operator_reconcile_errors",
            "Control periods that ended in an error (API or unexpected); the job is retried "
            "next period.",
            registry=registry,
        )
        self.jobs = Gauge(
            "decor_operator_jobs",
            "DeadlineTrainingJobs this operator serves, by phase.",
            ["phase"],
            registry=registry,
        )
        self.reconcile_seconds = Histogram(
            "decor_operator_reconcile_duration_seconds",
            "Wall time of one control period of one job (read, decide, actuate, write).",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=registry,
        )
        for kind in (ACTUATION_RESIZE, ACTUATION_RESTART, ACTUATION_CREATE, ACTUATION_SUSPEND):
            self.actuations.labels(kind=kind)
        self._phases: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._publish()

    def job_phase(self, key: tuple[str, str], phase: str | None) -> None:
        """Record a job's phase (None: the job is gone)."""
        with self._lock:
            if phase is None:
                self._phases.pop(key, None)
            else:
                self._phases[key] = phase
            self._publish()

    def _publish(self) -> None:
        counts = dict.fromkeys(build.PHASES, 0)
        for phase in self._phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        for phase, count in counts.items():
            self.jobs.labels(phase=phase).set(count)


@dataclass
class Runtime:
    """What every handler shares: configuration, API access, metrics, wake-up events."""

    config: OperatorConfig
    kube: Kube
    metrics: OperatorMetrics
    wakeups: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """The operator's Runtime, created from the environment on first use."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(
                config=OperatorConfig.from_env(),
                kube=Kube.from_environment(),
                metrics=OperatorMetrics(CollectorRegistry()),
            )
        return _runtime


def set_runtime(value: Runtime | None) -> None:
    """Install (or clear) the Runtime; run_operator and tests use this."""
    global _runtime
    with _runtime_lock:
        _runtime = value


# ============================================================================================
# One job's control loop (synchronous; the daemon runs it in a worker thread)


@dataclass
class _PodView:
    """What one period learned about the trainer pod."""

    applied: float | None
    desired: float | None
    pending: bool


class JobReconciler:
    """The control loop of one DeadlineTrainingJob; ``tick`` is one period.

    Keeps ``status`` (the operator-owned status, as last written) in memory and writes it
    back with a merge patch after each period. A fresh reconciler (operator restart) starts
    from the status stored in the job, so nothing is lost.
    """

    def __init__(
        self,
        namespace: str,
        name: str,
        uid: str,
        *,
        kube: Kube,
        config: OperatorConfig,
        operator_metrics: OperatorMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.kube = kube
        self.config = config
        self.metrics = operator_metrics
        self.clock = clock
        self.status: dict[str, Any] = {}
        self.written: dict[str, Any] | None = None
        self.loaded = False
        self.period_s = 1.0
        self.first_running_s: dict[str, float] = {}  # pod -> when first seen running
        self.progress_seen: set[str] = set()  # pods that produced a progress sample
        self.invalid_generation: int | None = None
        self.infeasible_resize_warned: str | None = None
        self.metrics_reason = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    # --- entry point ------------------------------------------------------------------------

    def tick(self, body: Mapping[str, Any]) -> bool:
        """One control period for the job ``body``. False: the job needs no more periods."""
        now = self.clock()
        meta = body.get("metadata") or {}
        generation = meta.get("generation")
        if not self.loaded:
            self.status = copy.deepcopy(dict(body.get("status") or {}))
            self.loaded = True
        if self.status.get("phase") in build.TERMINAL_PHASES:
            self.metrics.job_phase(self.key, self.status["phase"])
            return False
        try:
            spec = parse_job(dict(body))
        except ManifestError as exc:
            return self._invalid_spec(body, exc, now, generation)
        self.period_s = max(MIN_PERIOD_S, spec.control.period_s)
        status = self.status
        container = spec.trainer_container["name"]

        # Times and the controller's settings.
        first = not status.get("startTime")
        start_s = (
            float(math.floor(now))
            if first
            else parse_time(status["startTime"], "startTime").timestamp()
        )
        deadline_s = build.effective_deadline_s(spec, start_s)
        settings = build.build_settings(spec, start_s, deadline_s)
        conditions = list(status.get("conditions") or [])
        deadline_text = format_time(deadline_s)
        if first:
            deadline_was_past = deadline_s <= now
            state = control.initial_state(
                settings, settings.max_allocation if deadline_was_past else spec.resources.initial
            )
            status.update(
                phase=build.PHASE_PENDING,
                startTime=format_time(start_s),
                deadline=deadline_text,
                controller=state.to_dict(),
                podsCreated=0,
                resizes=0,
                restarts=0,
                podFailures=0,
            )
            if deadline_was_past:
                self._event(
                    body,
                    build.EVENT_WARNING,
                    build.EVENT_DEADLINE_IN_PAST,
                    f"deadline {deadline_text} had already passed; running at max "
                    f"({build.format_allocation(spec.resources.mode, settings.max_allocation)})",
                    now,
                )
            conditions = build.conditions_at_admission(
                deadline_was_past, now_s=now, generation=generation
            )
            status["conditions"] = conditions
            if not self._write():  # record the start before acting on it
                return False
        else:
            state = self._load_state(status, settings)
            if status.get("deadline") != deadline_text:
                deadline_was_past = deadline_s <= now
                self._event(
                    body,
                    build.EVENT_NORMAL,
                    build.EVENT_DEADLINE_CHANGED,
                    f"deadline moved from {status.get('deadline')} to {deadline_text}",
                    now,
                )
                if deadline_was_past:
                    self._event(
                        body,
                        build.EVENT_WARNING,
                        build.EVENT_DEADLINE_IN_PAST,
                        f"new deadline {deadline_text} has already passed; running at max",
                        now,
                    )
                status["deadline"] = deadline_text
                conditions = build.conditions_for_deadline(
                    conditions, deadline_was_past, now_s=now, generation=generation
                )
                status["conditions"] = conditions
            else:
                infeasible = build.get_condition(conditions, control.INFEASIBLE) or {}
                deadline_was_past = (
                    infeasible.get("status") == "True"
                    and infeasible.get("reason") == build.REASON_DEADLINE_IN_PAST
                )

        # The trainer pod(s).
        pods = self.kube.list_job_pods(self.namespace, self.name, self.uid)
        active = [p for p in pods if not build.is_terminating(p)]
        terminating = [p for p in pods if build.is_terminating(p)]
        current = self._pick_current(active)
        for extra in active:
            if extra is not current:  # only one trainer at a time
                self.kube.delete_pod(self.namespace, extra["metadata"]["name"])

        if spec.suspend:
            return self._suspend(body, current, now)
        if status.get("phase") == build.PHASE_SUSPENDED:
            self._event(
                body, build.EVENT_NORMAL, build.EVENT_RESUMED, "spec.suspend cleared; resuming", now
            )
            status["phase"] = build.PHASE_RESTARTING

        if current is None:
            previous = status.get("podName")
            if previous and status.get("phase") not in (
                build.PHASE_RESTARTING,
                build.PHASE_SUSPENDED,
            ):
                # The trainer is going or gone without us asking (evicted, deleted, node lost).
                if not self._pod_lost(body, str(previous), now):
                    return False
            if terminating:  # the previous trainer is still saving its checkpoint
                return self._write()
            return self._create_pod(body, spec, state, now)

        pod_name = current["metadata"]["name"]
        phase = build.pod_phase(current)
        if phase == "Succeeded":
            finished_s = build.container_finished_s(current, container) or now
            return self._complete(
                body, spec, start_s, deadline_s, finished_s, state, None, now, generation
            )
        if phase == "Failed":
            return self._pod_failed(body, current, container, now)
        trainer_status = build.container_status(current, container) or {}
        # A replacement pod, or a trainer the kubelet restarts in place after a crash.
        recreated = (
            int(status.get("podsCreated") or 0) > 1
            or int(trainer_status.get("restartCount") or 0) > 0
        )
        if phase != "Running" or not build.container_running(current, container):
            status["phase"] = build.PHASE_RESTARTING if recreated else build.PHASE_PENDING
            status["podName"] = pod_name
            return self._write()

        # Read back what is in effect, then progress.
        first_running_s = self.first_running_s.setdefault(pod_name, now)
        view = self._read_allocation(body, spec, current, container, state, now)
        observation, epochs_done = self._observe(current, spec, view)
        if observation is not None:
            self.progress_seen.add(pod_name)
        elif (
            pod_name not in self.progress_seen
            and now - first_running_s < self.config.startup_grace_s
        ):
            # Still starting (importing, building the model): nothing to control yet.
            status.update(
                phase=build.PHASE_RESTARTING if recreated else build.PHASE_RUNNING,
                podName=pod_name,
                allocation=build.format_allocation(
                    spec.resources.mode, view.applied or state.allocation
                ),
            )
            return self._write()
        if observation is not None and observation.complete:
            return self._complete(
                body,
                spec,
                start_s,
                deadline_s,
                observation.time_s,
                state,
                observation,
                now,
                generation,
            )

        # Decide and actuate.
        decision = control.decide(state, observation, settings, now)
        phase_after = build.PHASE_RUNNING
        desired = view.desired
        if not view.pending and desired is not None:
            if (
                spec.resources.mode == "cpu"
                and abs(decision.allocation - desired) >= CPU_EPSILON_CORES
            ):
                self._resize(body, pod_name, container, desired, decision, now)
                desired = decision.allocation
            elif spec.resources.mode == "gpu" and abs(decision.allocation - desired) >= 0.5:
                self._restart_for_gpus(body, pod_name, desired, decision, now)
                phase_after = build.PHASE_RESTARTING
                desired = decision.allocation

        # Conditions, events, status.
        message = decision.message
        if observation is None:
            message = (
                f"{self.metrics_reason or 'no progress sample'}; holding {decision.allocation:g}"
            )
        new_conditions = build.conditions_for_decision(
            conditions,
            decision.condition,
            message,
            now_s=now,
            generation=generation,
            deadline_was_past=deadline_was_past,
        )
        self._transition_events(body, conditions, new_conditions, now)
        status.update(
            build.build_status(
                phase=phase_after,
                mode=spec.resources.mode,
                start_s=start_s,
                deadline_s=deadline_s,
                state=decision.state,
                applied=view.applied,
                desired=desired,
                observation=observation,
                eta_s=decision.eta_s,
                generation=generation,
                conditions=new_conditions,
                pod=pod_name,
                epochs_done=epochs_done,
            )
        )
        return self._write()

    # --- pieces of a period -------------------------------------------------------------------

    def _load_state(self, status: Mapping[str, Any], settings: control.Settings) -> control.State:
        raw = status.get("controller")
        try:
            state = control.State.from_dict(dict(raw)) if isinstance(raw, Mapping) else None
        except (TypeError, ValueError):
            log.warning("%s/%s: unreadable controller state; starting afresh", *self.key)
            state = None
        if state is None:
            return control.initial_state(settings)
        if state.policy != settings.policy:  # spec.control.policy changed mid-run
            current = control.clamp(state.allocation, settings)
            fresh = control.initial_state(settings, current)
            return replace(fresh, allocation=current, integral=current)
        return state

    def _pick_current(self, active: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
        if not active:
            return None
        wanted = self.status.get("podName")
        for pod in active:
            if pod["metadata"]["name"] == wanted:
                return pod
        return max(active, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))

    def _create_pod(
        self, body: Mapping[str, Any], spec: JobSpec, state: control.State, now: float
    ) -> bool:
        status = self.status
        index = int(status.get("podsCreated") or 0)
        allocation = state.allocation
        created = None
        for _attempt in range(5):
            name = build.pod_name(self.name, index)
            pod = build.build_trainer_pod(
                body,
                spec,
                allocation,
                name,
                sidecar_image=self.config.sidecar_image,
                checkpoint_host_root=self.config.checkpoint_host_root,
            )
            try:
                created = self.kube.create_pod(pod)
                break
            except KubeError as exc:
                if exc.status != 409:  # a leftover pod with that name (e.g. a crash mid-period)
                    raise
                index += 1
        if created is None:
            raise KubeError(f"create pod for {self.namespace}/{self.name}", 409, "no free pod name")
        self.metrics.actuations.labels(kind=ACTUATION_CREATE).inc()
        quantity = build.format_allocation(spec.resources.mode, allocation)
        what = "first trainer pod" if index == 0 else "trainer pod (resuming from the checkpoint)"
        self._event(
            body,
            build.EVENT_NORMAL,
            build.EVENT_POD_CREATED,
            f"created {what} {name} with {quantity} {self._unit(spec)}",
            now,
        )
        status.update(
            podName=name,
            podsCreated=index + 1,
            desiredAllocation=quantity,
            phase=build.PHASE_PENDING if index == 0 else build.PHASE_RESTARTING,
        )
        return self._write()

    def _pod_lost(self, body: Mapping[str, Any], pod_name: str, now: float) -> bool:
        """Count a trainer pod that went away unasked; False once past the failure budget."""
        status = self.status
        failures = int(status.get("podFailures") or 0) + 1
        status["podFailures"] = failures
        status["phase"] = build.PHASE_RESTARTING
        if failures > self.config.max_pod_failures:
            return self._give_up(body, f"trainer pod lost {failures} times", now)
        self._event(
            body,
            build.EVENT_WARNING,
            build.EVENT_POD_LOST,
            f"trainer pod {pod_name} is gone; recreating it from the last checkpoint",
            now,
        )
        return True

    def _read_allocation(
        self,
        body: Mapping[str, Any],
        spec: JobSpec,
        pod: Mapping[str, Any],
        container: str,
        state: control.State,
        now: float,
    ) -> _PodView:
        if spec.resources.mode == "gpu":
            count = build.pod_gpu_count(pod, container)
            return _PodView(applied=count, desired=count, pending=False)
        desired = build.desired_cpu_cores(pod, container)
        applied = build.applied_cpu_cores(pod, container)
        resize = build.resize_state(pod)
        if applied is None:  # a kubelet that does not report it: trust the spec when quiet
            applied = desired if not resize.waiting else None
        if resize.infeasible:
            quantity = build.format_allocation("cpu", desired or 0.0)
            if self.infeasible_resize_warned != quantity:
                self.infeasible_resize_warned = quantity
                self._event(
                    body,
                    build.EVENT_WARNING,
                    build.EVENT_RESIZE_INFEASIBLE,
                    f"the node cannot fit {quantity} CPU: {resize.message}",
                    now,
                )
        pending = resize.waiting or (
            not resize.infeasible
            and (applied is None or desired is None or abs(applied - desired) >= CPU_EPSILON_CORES)
        )
        return _PodView(applied=applied, desired=desired, pending=pending)

    def _observe(
        self, pod: Mapping[str, Any], spec: JobSpec, view: _PodView
    ) -> tuple[control.Observation | None, float | None]:
        """A progress sample (and epochs done) or (None, None) with ``metrics_reason`` set."""
        if view.applied is None:
            self.metrics_reason = "allocation in effect is not known yet"
            return None, None
        pod_name = pod["metadata"]["name"]
        try:
            if self.config.prometheus_url:
                progress = metrics.prometheus_progress(
                    self.config.prometheus_url, self.namespace, pod_name
                )
            elif self.config.scrape_via == SCRAPE_APISERVER:
                try:
                    text = self.kube.pod_proxy_get(
                        self.namespace, pod_name, spec.metrics.port, spec.metrics.path
                    )
                except KubeError as exc:
                    raise metrics.MetricsError(str(exc)) from exc
                progress = metrics.progress_from_samples(metrics.parse_exposition(text))
            else:
                url = build.metrics_url(pod, spec.metrics.port, spec.metrics.path)
                if url is None:
                    self.metrics_reason = f"pod {pod_name} has no IP yet"
                    return None, None
                progress = metrics.scrape_progress(url)
        except metrics.MetricsError as exc:
            self.metrics_reason = str(exc)
            return None, None
        self.metrics_reason = ""
        observation = metrics.observation_from_progress(
            progress, self.clock(), view.applied, view.pending
        )
        return observation, progress.epochs_done

    def _resize(
        self,
        body: Mapping[str, Any],
        pod_name: str,
        container: str,
        current: float,
        decision: control.Decision,
        now: float,
    ) -> None:
        self.kube.resize_pod_cpu(self.namespace, pod_name, container, decision.allocation)
        self.status["resizes"] = int(self.status.get("resizes") or 0) + 1
        self.metrics.actuations.labels(kind=ACTUATION_RESIZE).inc()
        self._event(
            body,
            build.EVENT_NORMAL,
            build.EVENT_RESIZED,
            f"cpu {build.format_allocation('cpu', current)} -> "
            f"{build.format_allocation('cpu', decision.allocation)} in place: {decision.message}",
            now,
        )

    def _restart_for_gpus(
        self,
        body: Mapping[str, Any],
        pod_name: str,
        current: float,
        decision: control.Decision,
        now: float,
    ) -> None:
        # Deleting sends SIGTERM: the trainer checkpoints and exits; the next periods see the
        # pod terminating, then gone, and create one with the new count (state.allocation).
        self.kube.delete_pod(self.namespace, pod_name)
        self.status["restarts"] = int(self.status.get("restarts") or 0) + 1
        self.metrics.actuations.labels(kind=ACTUATION_RESTART).inc()
        self._event(
            body,
            build.EVENT_NORMAL,
            build.EVENT_RESTARTING,
            f"nvidia.com/gpu {current:g} -> {decision.allocation:g}: checkpoint, restart and "
            f"resume ({decision.message})",
            now,
        )

    def _suspend(
        self, body: Mapping[str, Any], current: Mapping[str, Any] | None, now: float
    ) -> bool:
        status = self.status
        if current is not None:
            self.kube.delete_pod(self.namespace, current["metadata"]["name"])
            self.metrics.actuations.labels(kind=ACTUATION_SUSPEND).inc()
        if status.get("phase") != build.PHASE_SUSPENDED:
            self._event(
                body,
                build.EVENT_NORMAL,
                build.EVENT_SUSPENDED,
                "spec.suspend: trainer pod deleted (it checkpoints); controller state kept",
                now,
            )
        status["phase"] = build.PHASE_SUSPENDED
        return self._write()

    def _pod_failed(
        self, body: Mapping[str, Any], pod: Mapping[str, Any], container: str, now: float
    ) -> bool:
        status = self.status
        pod_name = pod["metadata"]["name"]
        reason = build.pod_failure_reason(pod, container)
        failures = int(status.get("podFailures") or 0) + 1
        status["podFailures"] = failures
        if failures > self.config.max_pod_failures:
            return self._give_up(
                body, f"trainer pod {pod_name} failed ({reason}); {failures} failures", now
            )
        self._event(
            body,
            build.EVENT_WARNING,
            build.EVENT_POD_LOST,
            f"trainer pod {pod_name} failed ({reason}); recreating it from the last checkpoint",
            now,
        )
        self.kube.delete_pod(self.namespace, pod_name, grace_period_s=0)
        status["phase"] = build.PHASE_RESTARTING
        return self._write()

    def _give_up(self, body: Mapping[str, Any], why: str, now: float) -> bool:
        self.status["phase"] = build.PHASE_FAILED
        self.status["conditions"] = build.set_condition(
            self.status.get("conditions") or [],
            control.COMPLETE,
            False,
            build.REASON_TRAINER_FAILED,
            why,
            now_s=now,
            generation=(body.get("metadata") or {}).get("generation"),
        )
        self._event(body, build.EVENT_WARNING, build.EVENT_FAILED, why, now)
        self._write()
        return False

    def _complete(
        self,
        body: Mapping[str, Any],
        spec: JobSpec,
        start_s: float,
        deadline_s: float,
        finished_s: float,
        state: control.State,
        observation: control.Observation | None,
        now: float,
        generation: int | None,
    ) -> bool:
        status = self.status
        before = list(status.get("conditions") or [])
        conditions = build.conditions_for_completion(
            before, finished_s, deadline_s, now_s=now, generation=generation
        )
        outcome = build.build_outcome(finished_s, deadline_s, start_s)
        total = observation.steps_total if observation is not None else status.get("stepsTotal")
        status.update(
            phase=build.PHASE_SUCCEEDED,
            conditions=conditions,
            outcome=outcome,
            progress=1.0,
            eta=None,
            observedGeneration=generation,
        )
        if total:
            status.update(stepsDone=int(total), stepsTotal=int(total))
        if observation is not None:
            status["controller"] = replace(
                state, last_time_s=observation.time_s, last_steps=observation.steps_done
            ).to_dict()
        delta = finished_s - deadline_s
        deviation = outcome.get("deviationPercent")
        relative = (
            f"deviation {deviation:+.2f}%"
            if deviation is not None
            else "the deadline was before the start"
        )
        self._event(
            body,
            build.EVENT_NORMAL,
            build.EVENT_COMPLETED,
            f"finished at {outcome['finishedAt']}, {abs(delta):.1f}s "
            f"{'after' if delta > 0 else 'before'} the deadline ({relative}), "
            f"{status.get('resizes', 0)} resizes, {status.get('restarts', 0)} restarts",
            now,
        )
        if build.became_true(before, conditions, control.DEADLINE_MISSED):
            self._event(
                body,
                build.EVENT_WARNING,
                build.EVENT_DEADLINE_MISSED,
                f"finished {delta:.1f}s after the deadline",
                now,
            )
        self._write()
        return False

    def _invalid_spec(
        self, body: Mapping[str, Any], exc: ManifestError, now: float, generation: int | None
    ) -> bool:
        if self.invalid_generation != generation:
            self.invalid_generation = generation
            self._event(body, build.EVENT_WARNING, build.EVENT_INVALID_SPEC, str(exc), now)
        self.status["conditions"] = build.set_condition(
            self.status.get("conditions") or [],
            control.ON_TRACK,
            None,
            build.REASON_INVALID_SPEC,
            str(exc),
            now_s=now,
            generation=generation,
        )
        self._write()
        return True

    def _transition_events(
        self,
        body: Mapping[str, Any],
        before: Sequence[Mapping[str, Any]],
        after: Sequence[Mapping[str, Any]],
        now: float,
    ) -> None:
        for type_, reason in (
            (control.INFEASIBLE, build.EVENT_INFEASIBLE),
            (control.AT_RISK, build.EVENT_AT_RISK),
            (control.DEADLINE_MISSED, build.EVENT_DEADLINE_MISSED),
            (control.METRICS_UNAVAILABLE, build.EVENT_METRICS_UNAVAILABLE),
        ):
            if not build.became_true(before, after, type_):
                continue
            condition = build.get_condition(after, type_) or {}
            if condition.get("reason") == build.REASON_DEADLINE_IN_PAST:
                continue  # announced when the deadline was set
            if type_ == control.AT_RISK and build.condition_is_true(after, control.INFEASIBLE):
                continue  # Infeasible says more (and was announced when it turned True)
            self._event(body, build.EVENT_WARNING, reason, str(condition.get("message", "")), now)
        if build.condition_is_true(
            before, control.METRICS_UNAVAILABLE
        ) and not build.condition_is_true(after, control.METRICS_UNAVAILABLE):
            self._event(
                body,
                build.EVENT_NORMAL,
                build.EVENT_METRICS_RECOVERED,
                "progress is readable again",
                now,
            )

    # --- I/O helpers --------------------------------------------------------------------------

    @staticmethod
    def _unit(spec: JobSpec) -> str:
        return "CPU" if spec.resources.mode == "cpu" else "nvidia.com/gpu"

    def _event(
        self, body: Mapping[str, Any], event_type: str, reason: str, message: str, now: float
    ) -> None:
        log.info("%s/%s: %s %s", self.namespace, self.name, reason, message)
        self.kube.post_event(
            build.build_event(
                body, event_type, reason, message, now_s=now, instance=self.config.instance
            )
        )

    def _write(self) -> bool:
        """Merge-patch status if it changed. False when the job no longer exists."""
        self.metrics.job_phase(self.key, self.status.get("phase"))
        if self.written == self.status:
            return True
        snapshot = copy.deepcopy(self.status)
        if not self.kube.patch_job_status(self.namespace, self.name, snapshot):
            self.metrics.job_phase(self.key, None)
            return False
        self.written = snapshot
        return True


# ============================================================================================
# kopf handlers


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """Keep kopf's bookkeeping out of status; post only warnings as Events; no CRD scanning."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    # Our own Events describe what the controller did; kopf posts only handler failures.
    settings.posting.level = logging.WARNING
    # Serve only what exists at start-up: no list/watch on CRDs or namespaces (least RBAC).
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330


@kopf.on.startup()
def dtj_operator_startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure_kopf(settings)
    current = runtime()
    log.info(
        "decor operator: progress from %s",
        current.config.prometheus_url or "the pods' /metrics endpoints (no Prometheus)",
    )


async def _sleep(seconds: float, wake: asyncio.Event, stopped: kopf.DaemonStopped) -> None:
    """Sleep ``seconds``, or until ``wake`` is set (then clear it) or the daemon is stopped."""

    async def until_stopped() -> None:
        await stopped.wait()

    tasks = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(until_stopped())}
    try:
        await asyncio.wait(tasks, timeout=max(0.0, seconds), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    wake.clear()


# On deletion (or operator shutdown) kopf sets ``stopped``; the loop notices within its sleep
# and returns. Only if a period hangs past the backoff is the task cancelled.
@kopf.daemon(
    API_GROUP,
    API_VERSION,
    PLURAL,
    id="controller",
    cancellation_backoff=5.0,
    cancellation_timeout=10.0,
)
async def dtj_controller(
    *,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    uid: str,
    stopped: kopf.DaemonStopped,
    **_: Any,
) -> None:
    """Run the job's control loop until it finishes or is deleted (one per job)."""
    namespace = namespace or "default"
    current = runtime()
    key = (namespace, name)
    wake = asyncio.Event()
    current.wakeups[key] = wake
    reconciler = JobReconciler(
        namespace,
        name,
        uid,
        kube=current.kube,
        config=current.config,
        operator_metrics=current.metrics,
    )
    loop = asyncio.get_running_loop()
    next_tick = loop.time()
    try:
        while not stopped:
            snapshot = copy.deepcopy(dict(body))  # kopf's live view, frozen for this period
            started = time.perf_counter()
            try:
                keep_going = await loop.run_in_executor(None, reconciler.tick, snapshot)
            except Exception as exc:  # noqa: BLE001 - one bad period must not end the loop
                current.metrics.reconcile_errors.inc()
                log.warning(
                    "%s/%s: control period failed: %s",
                    namespace,
                    name,
                    exc,
                    exc_info=not isinstance(exc, KubeError),
                )
                keep_going = True
            current.metrics.reconcile_seconds.observe(time.perf_counter() - started)
            if not keep_going:
                return
            next_tick = max(next_tick + reconciler.period_s, loop.time())
            await _sleep(next_tick - loop.time(), wake, stopped)
    finally:
        current.wakeups.pop(key, None)
        if stopped:
            current.metrics.job_phase(key, None)


@kopf.on.update(API_GROUP, API_VERSION, PLURAL, field="spec.deadline")
@kopf.on.update(API_GROUP, API_VERSION, PLURAL, field="spec.duration")
@kopf.on.update(API_GROUP, API_VERSION, PLURAL, field="spec.suspend")
@kopf.on.update(API_GROUP, API_VERSION, PLURAL, field="spec.resources")
async def dtj_spec_changed(*, name: str, namespace: str | None, **_: Any) -> None:
    """Wake the job's control loop now (a moved deadline is acted on within a second)."""
    wake = runtime().wakeups.get((namespace or "default", name))
    if wake is not None:
        wake.set()


# ============================================================================================
# Entry point


def _setup_logging(level: str | None) -> None:
    name = (level or os.environ.get(ENV_LOG_LEVEL) or "INFO").upper()
    logging.basicConfig(
        level=getattr(logging, name, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if name != "DEBUG":  # kopf's per-event chatter is debugging material
        logging.getLogger("kopf").setLevel(max(logging.INFO, getattr(logging, name, logging.INFO)))
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def start_metrics_server(port: int, registry: CollectorRegistry, address: str = "0.0.0.0") -> Any:
    """Serve the operator's metrics on ``port`` (0: not at all). Returns the server or None."""
    if port <= 0:
        return None
    from prometheus_client import start_http_server

    started = start_http_server(port, addr=address, registry=registry)
    log.info("operator metrics on http://%s:%d/metrics", address, port)
    # prometheus_client >= 0.17 returns (server, thread); older ones (Debian's) return None
    # and serve from a daemon thread that ends with the process.
    return started[0] if isinstance(started, tuple) else None


def run_operator(
    namespace: str | None = None,
    prometheus_url: str | None = None,
    *,
    metrics_port: int | None = None,
    health_port: int | None = None,
    log_level: str | None = None,
    standalone: bool = True,
    priority: int = 0,
    kubeconfig: str | None = None,
    stop_flag: Any = None,
    ready_flag: Any = None,
) -> None:
    """Run the operator until it is stopped (blocking).

    ``namespace``: serve only this namespace (a Role is enough); None: ``$DECOR_WATCH_NAMESPACE``,
    and when that is empty too, all namespaces.
    ``prometheus_url``: read progress from this Prometheus (default ``$DECOR_PROMETHEUS_URL``;
    unset: scrape each trainer pod's /metrics). ``metrics_port``: the operator's own /metrics
    (default ``$DECOR_METRICS_PORT`` or 8080; 0 disables). ``health_port``: kopf's liveness
    endpoint /healthz (default ``$DECOR_HEALTH_PORT``; unset: none). ``standalone``: no kopf
    peering (one replica; no peering CRDs or RBAC needed); otherwise peering with ``priority``.
    """
    _setup_logging(log_level)
    namespace = namespace or os.environ.get(ENV_WATCH_NAMESPACE) or None
    config = OperatorConfig.from_env(prometheus_url=prometheus_url)
    registry = CollectorRegistry()
    set_runtime(
        Runtime(
            config=config, kube=Kube.from_environment(kubeconfig), metrics=OperatorMetrics(registry)
        )
    )
    if metrics_port is None:
        metrics_port = int(os.environ.get(ENV_METRICS_PORT) or DEFAULT_OPERATOR_METRICS_PORT)
    server = start_metrics_server(metrics_port, registry)
    if health_port is None and os.environ.get(ENV_HEALTH_PORT):
        health_port = int(os.environ[ENV_HEALTH_PORT])
    liveness = f"http://0.0.0.0:{health_port}/healthz" if health_port else None
    try:
        kopf.run(
            standalone=standalone,
            priority=priority,
            clusterwide=namespace is None,
            namespaces=[namespace] if namespace else (),
            liveness_endpoint=liveness,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        if server is not None:
            server.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m decor.handlers [--namespace NS] [--prometheus-url URL]`` (tests, debugging)."""
    parser = argparse.ArgumentParser(
        prog="python -m decor.handlers", description="Run the DECOR operator."
    )
    parser.add_argument(
        "--namespace", "-n", default=None, help="serve one namespace (default: all)"
    )
    parser.add_argument("--prometheus-url", default=None, help=f"default ${ENV_PROMETHEUS_URL}")
    parser.add_argument(
        "--metrics-port", type=int, default=None, help=f"default ${ENV_METRICS_PORT} or 8080"
    )
    parser.add_argument("--health-port", type=int, default=None, help=f"default ${ENV_HEALTH_PORT}")
    parser.add_argument("--log-level", default=None, help=f"default ${ENV_LOG_LEVEL} or INFO")
    args = parser.parse_args(argv)
    run_operator(
        args.namespace,
        args.prometheus_url,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        log_level=args.log_level,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
