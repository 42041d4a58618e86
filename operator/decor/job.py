"""One DeadlineTrainingJob's part of a control period, in two halves around the planner.

:meth:`JobController.prepare` reads what the period's snapshot says about the job and its
trainer pod, keeps the pod lifecycle going (create, replace, suspend, complete, fail), and
when the trainer runs asks the job's own law what it needs (``control.decide``). It returns
the job's :class:`planner.Demand`, or None when the job takes no part in this period's plan.
:meth:`JobController.commit` takes the planner's :class:`planner.Grant` and acts on it:
follows the grant in the law's state, resizes in place (CPU) or restarts with a new count
(GPU) as far as the node has room now, admits or queues, and writes status when something a
user sees has changed.

Status is kept in memory (``self.status``, the operator-owned status as last written); a new
controller (operator restart) starts from the status stored in the job, so nothing is lost.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from decor import build, control, group, metrics, planner, policy
from decor.kube import Kube, KubeError
from decor.model import JobSpec, ManifestError, format_time, parse_job, parse_time

if TYPE_CHECKING:  # pragma: no cover
    from decor.handlers import OperatorConfig, OperatorMetrics

log = logging.getLogger("decor.operator")

CPU_EPSILON_CORES = 0.0005
"""CPU allocations closer than half a millicore are the same (pods store millicores)."""
MIN_PERIOD_S = 0.2
"""Shortest control period a job runs (protects the API server from a tiny spec value)."""
CREATE_REFUSALS = frozenset({400, 403, 422})
"""API answers to a pod create that retrying at once cannot change (an invalid object, an
admission webhook or Pod Security, a ResourceQuota): reported on the job, tried next period."""
BEST_EFFORT_HORIZON_S = 30 * 86400.0
"""The horizon a best-effort job's law plans over (it has no deadline)."""
STATUS_HEARTBEAT_S = 30.0
"""Status is written at least this often while a job runs (it carries the controller's state
for an operator restart), and otherwise only when something a user sees changes."""
PROGRESS_WRITE_PERIODS = 3.0
"""Progress and ETA alone are written at most once per this many control periods (capped by
the heartbeat): at a 10 s period a running job costs one status write per 30 s, not one per
period, while phase, allocation, admission and conditions are written the period they
change."""

# Kinds of actuation counted by decor_operator_actuations_total.
ACTUATION_RESIZE = "resize"  # in-place CPU resize requested
ACTUATION_RESTART = "restart"  # trainer pod deleted to change the GPU count
ACTUATION_CREATE = "create"  # trainer pod created (first start, resume, recreation)
ACTUATION_SUSPEND = "suspend"  # trainer pod deleted because of spec.suspend
ACTUATION_PREEMPT = "preempt"  # trainer pod deleted because a higher priority job needs room
ACTUATIONS = (
    ACTUATION_RESIZE,
    ACTUATION_RESTART,
    ACTUATION_CREATE,
    ACTUATION_SUSPEND,
    ACTUATION_PREEMPT,
)

# What prepare() found; commit() acts on it.
STEP_CREATE = "create"  # no trainer pod: create one once admitted and there is room
STEP_HOLD = "hold"  # a pod exists but is not controllable yet (pending, starting, replaced)
STEP_RUN = "run"  # the law decided; act on the grant


@dataclass(frozen=True)
class PodView:
    """What one period learned about the trainer pod's allocation."""

    applied: float | None  # in effect (cores or GPUs); None while unknown
    desired: float | None  # what the pod's spec asks for
    pending: bool  # a resize is being applied (asked, not yet in effect)
    refused: bool = False  # the kubelet answered Deferred or Infeasible
    refusal: str = ""


class Room:
    """Capacity left on each node this period for growing DECOR's trainers.

    Starts at what the node can give DECOR minus what its trainers hold now (each at
    max(requested, applied)); shrinks asked for this period free nothing until they land,
    so a grow never meets a node that is still full (no Deferred resize by design).
    ``None`` capacity: the operator cannot see nodes; nothing is limited.
    """

    def __init__(self, free: Mapping[str, tuple[float, float]] | None) -> None:
        self.free = None if free is None else {k: list(v) for k, v in free.items()}
        self._lock = threading.Lock()  # jobs commit concurrently

    def take(self, node: str | None, cpu: float = 0.0, gpus: float = 0.0) -> bool:
        """Reserve ``cpu`` cores and ``gpus`` on ``node``; False (nothing taken) if they do
        not fit. A pod not yet on a node (None) is the scheduler's to place: any node with
        room will do."""
        if self.free is None:
            return True
        with self._lock:
            names = [node] if node is not None else sorted(self.free)
            for name in names:
                slot = self.free.get(name)
                if slot is None:
                    continue
                if cpu <= slot[0] + 1e-9 and gpus <= slot[1] + 1e-9:
                    slot[0] -= cpu
                    slot[1] -= gpus
                    return True
            return False

    def take_pods(self, gpus: Sequence[int]) -> bool:
        """Reserve a GPU count per pod (``planner.pod_gpu_counts``), each on any node with
        room (the scheduler places them), packed as the planner packs them
        (``planner.pack_pods``, exact); all or nothing."""
        if self.free is None:
            return True
        with self._lock:
            free = {name: float(math.floor(slot[1] + 1e-6)) for name, slot in self.free.items()}
            pods = planner.pack_pods(sorted(gpus, reverse=True), free, sorted(free), {})
            if pods is None:
                return False
            for name, count in pods:
                self.free[name][1] -= count
            return True

    def take_placement(self, pods: planner.Pods) -> bool:
        """Reserve the planner's own placement (``Grant.pods``: GPUs per pod and its node), as
        it is; all or nothing. Jobs commit in any order: the plan placed them all at once."""
        if self.free is None:
            return True
        with self._lock:
            need: dict[str, float] = {}
            for name, count in pods:
                need[name] = need.get(name, 0.0) + count
            if any(name not in self.free or self.free[name][1] < count - 1e-9
                   for name, count in need.items()):  # fmt: skip
                return False
            for name, count in need.items():
                self.free[name][1] -= count
            return True

    def take_up_to(self, node: str | None, cpu: float) -> float:
        """Reserve as much of ``cpu`` cores on ``node`` as is free; returns what was taken."""
        if self.free is None:
            return cpu
        with self._lock:
            slot = self.free.get(node) if node is not None else None
            if slot is None:
                return 0.0
            taken = max(0.0, min(cpu, slot[0]))
            slot[0] -= taken
            return taken


@dataclass
class _Period:
    """A period's facts about the job between prepare() and commit()."""

    step: str
    body: Mapping[str, Any]
    spec: JobSpec
    generation: int | None
    start_s: float
    deadline_s: float
    settings: control.Settings
    state: control.State
    conditions: list[dict[str, Any]]
    deadline_was_past: bool
    now_s: float
    pod: Mapping[str, Any] | None = None
    workers: Sequence[Mapping[str, Any]] = ()  # the other pods of a several-pod trainer
    view: PodView | None = None
    observation: control.Observation | None = None
    epochs_done: float | None = None
    decision: control.Decision | None = None


class JobController:
    """The control of one DeadlineTrainingJob across periods (see the module docstring)."""

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
        self.written_at_s = -math.inf
        self.loaded = False
        self.period_s = 1.0
        self.next_due_s = -math.inf
        self.done = False
        self.first_running_s: dict[str, float] = {}  # pod -> when first seen running
        self.progress_seen: set[str] = set()  # pods that produced a progress sample
        self.invalid_generation: int | None = None
        self.create_refused_generation: int | None = None
        self.overhead_cpu_cores = build.sidecar_cpu_cores()
        """Cores a trainer pod holds beside its trainer (read by the loop's planner)."""
        self._judged: tuple[tuple[str, int | None], JobSpec, list[policy.Violation]] | None = None
        self.refusal_warned: str | None = None
        self.metrics_reason = ""
        self.demand: planner.Demand | None = None  # the last demand (kept between periods)
        self.last_steps: float | None = None  # steps at the last change (stall detection)
        self.last_progress_s: float | None = None  # when the steps last changed
        # After an unschedulable pod: (the allocation fallen back to, until when it caps).
        self.ceiling: tuple[float, float] | None = None
        self._period: _Period | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def plan_key(self) -> str:
        return f"{self.namespace}/{self.name}"

    # ========================================================================================
    # Phase 1: read, keep the pod going, ask the law

    def prepare(
        self,
        body: Mapping[str, Any],
        pods: Sequence[Mapping[str, Any]],
        progress: Mapping[str, metrics.Progress | metrics.MetricsError],
        now: float,
    ) -> planner.Demand | None:
        """This period up to the law's decision. ``pods``: the job's trainer pods from the
        snapshot; ``progress``: the period's batched progress read, by pod name. Returns the
        job's demand, or None when it takes no part in this period's plan (finished, failed,
        suspended, invalid; ``self.done`` says whether it needs periods any more)."""
        self._period = None
        if not self.loaded:
            self.status = copy.deepcopy(dict(body.get("status") or {}))
            self.loaded = True
        if self.status.get("phase") in build.TERMINAL_PHASES:
            self.metrics.job_phase(self.key, self.status["phase"])
            return self._finish_period(False)
        generation = (body.get("metadata") or {}).get("generation")
        try:
            spec, violations = self._judged_spec(body, generation)
        except ManifestError as exc:
            return self._finish_period(self._invalid_spec(body, exc, now, generation))
        self.period_s = max(self.config.min_period_s, MIN_PERIOD_S, spec.control.period_s)
        if violations:
            return self._finish_period(self._refused(body, violations, now, generation))
        period = self._times_and_state(body, spec, generation, now)
        if period is None:
            return self._finish_period(False)
        return self._pod_lifecycle(period, pods, progress, now)

    def _judged_spec(
        self, body: Mapping[str, Any], generation: int | None
    ) -> tuple[JobSpec, list[policy.Violation]]:
        """The job's spec and what the policy refuses in it, worked out once per generation
        (the spec changes only with it): a period costs the same whatever the template."""
        key = (str((body.get("metadata") or {}).get("uid")), generation)
        if generation is None or self._judged is None or self._judged[0] != key:
            spec = parse_job(dict(body))
            violations = policy.check_template(
                spec.template, self.config.template_policy, spec.resources.mode
            ) + policy.check_claims(spec, self.config.template_policy)
            if not violations:  # the pods it would make, judged now (and again at create)
                violations = build.judge_pods(
                    self._build_pods(body, spec, spec.resources.max, group.LEADER_ADDRESS),
                    self.config.template_policy,
                    self.config.checkpoint_storage,
                )
            self.overhead_cpu_cores = build.job_overhead_cpu_cores(spec)
            self._judged = (key, spec, violations)
        return self._judged[1], self._judged[2]

    def _build_pods(
        self,
        body: Mapping[str, Any],
        spec: JobSpec,
        allocation: float,
        rendezvous_ip: str | None,
        name: str | None = None,
    ) -> list[dict[str, Any]]:
        """The trainer pods for ``allocation`` as this operator builds them."""
        return group.build_trainer_group(
            body,
            spec,
            allocation,
            name or build.pod_name(self.name, 0),
            rendezvous_ip=rendezvous_ip,
            sidecar_image=self.config.sidecar_image,
            checkpoint_storage=self.config.checkpoint_storage,
        )

    def _finish_period(self, keep_going: bool) -> planner.Demand | None:
        """End the period without a demand; ``keep_going`` False: the job needs no more."""
        self.done = not keep_going
        self.demand = None
        return None

    def _times_and_state(
        self, body: Mapping[str, Any], spec: JobSpec, generation: int | None, now: float
    ) -> _Period | None:
        """Start time, effective deadline, settings and the law's state; the first period
        records the start (and a deadline move is announced). None: the job is gone."""
        status = self.status
        first = not status.get("startTime")
        start_s = (
            float(math.floor(now))
            if first
            else parse_time(status["startTime"], "startTime").timestamp()
        )
        deadline_s = build.effective_deadline_s(spec, start_s)
        # A best-effort job's law only learns its speed (for the planner's marginal gains).
        law_deadline_s = start_s + BEST_EFFORT_HORIZON_S if spec.best_effort else deadline_s
        settings = build.build_settings(spec, start_s, law_deadline_s)
        deadline_text = format_time(deadline_s) if not spec.best_effort else None
        if first:
            deadline_was_past = deadline_s <= now
            start = control.start_allocation(
                settings,
                spec.resources.initial,
                spec.resources.initial_given,
                spec.planned_steps,
                spec.estimate,
            )
            state = control.initial_state(
                settings, settings.max_allocation if deadline_was_past else start
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
                    body, build.EVENT_WARNING, build.EVENT_DEADLINE_IN_PAST,
                    f"deadline {deadline_text} had already passed; running at max "
                    f"({build.format_allocation(spec.resources.mode, settings.max_allocation)})",
                    now,
                )  # fmt: skip
            status["conditions"] = build.conditions_at_admission(
                deadline_was_past, now_s=now, generation=generation
            )
            if not self._write(force=True):  # record the start before acting on it
                return None
        else:
            state = self._load_state(status, settings)
            if status.get("deadline") != deadline_text:
                deadline_was_past = self._deadline_moved(
                    body, status, deadline_text, deadline_s, generation, now
                )
            else:
                infeasible = build.get_condition(status.get("conditions") or [], "Infeasible")
                deadline_was_past = (infeasible or {}).get("status") == "True" and (
                    infeasible or {}
                ).get("reason") == build.REASON_DEADLINE_IN_PAST
        return _Period(
            step=STEP_HOLD,
            body=body,
            spec=spec,
            generation=generation,
            start_s=start_s,
            deadline_s=deadline_s,
            settings=settings,
            state=state,
            conditions=list(status.get("conditions") or []),
            deadline_was_past=deadline_was_past,
            now_s=now,
        )

    def _deadline_moved(
        self,
        body: Mapping[str, Any],
        status: dict[str, Any],
        deadline_text: str | None,
        deadline_s: float,
        generation: int | None,
        now: float,
    ) -> bool:
        deadline_was_past = deadline_s <= now
        self._event(
            body, build.EVENT_NORMAL, build.EVENT_DEADLINE_CHANGED,
            f"deadline moved from {status.get('deadline')} to {deadline_text}", now,
        )  # fmt: skip
        if deadline_was_past:
            self._event(
                body, build.EVENT_WARNING, build.EVENT_DEADLINE_IN_PAST,
                f"new deadline {deadline_text} has already passed; running at max", now,
            )  # fmt: skip
        status["deadline"] = deadline_text
        status["conditions"] = build.conditions_for_deadline(
            status.get("conditions") or [], deadline_was_past, now_s=now, generation=generation
        )
        return deadline_was_past

    def _pod_lifecycle(
        self,
        period: _Period,
        pods: Sequence[Mapping[str, Any]],
        progress: Mapping[str, metrics.Progress | metrics.MetricsError],
        now: float,
    ) -> planner.Demand | None:
        status, spec, body = self.status, period.spec, period.body
        container = spec.trainer_container["name"]
        active = [p for p in pods if not build.is_terminating(p)]
        terminating = [p for p in pods if build.is_terminating(p)]
        current = self._pick_current([p for p in active if not group.is_worker(p)])
        leader = current["metadata"]["name"] if current is not None else None
        workers = [p for p in active if leader is not None and group.leader_of(p) == leader]
        for extra in active:
            if extra is not current and not any(extra is w for w in workers):
                # only one trainer (one pod, or one group of pods) at a time
                self.kube.delete_pod(self.namespace, extra["metadata"]["name"])

        if spec.suspend:
            return self._finish_period(self._suspend(body, current, now))
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
                build.PHASE_QUEUED,
            ):
                # The trainer is going or gone without us asking (evicted, deleted, node lost).
                if not self._pod_lost(body, str(previous), now):
                    return self._finish_period(False)
            if terminating:  # the previous trainer is still saving its checkpoint
                period.step = STEP_HOLD
                return self._demand(period, current=None, node=_node_of(terminating[0]))
            period.step = STEP_CREATE
            return self._demand(period, current=None, node=None)

        pod_name = current["metadata"]["name"]
        phase = build.pod_phase(current)
        if phase == "Succeeded":
            early = self._exited_early(current, container)
            if early is not None:
                return self._finish_period(self._pod_failed(body, current, container, now, early))
            finished_s = build.container_finished_s(current, container) or now
            return self._finish_period(self._complete(period, finished_s, None, now))
        if phase == "Failed":
            return self._finish_period(self._pod_failed(body, current, container, now))
        period.pod, period.workers = current, workers
        trainer_status = build.container_status(current, container) or {}
        crashes = max(
            int((build.container_status(p, container) or {}).get("restartCount") or 0)
            for p in [current, *workers]
        )
        if crashes > self.config.max_pod_failures:
            # Past the budget the pod would crash on, holding its node's capacity: deleted.
            self._delete_trainer(current, grace_period_s=0)
            return self._finish_period(
                self._give_up(
                    body,
                    f"trainer crashed {crashes} times in pod {pod_name} "
                    f"({build.REASON_CRASH_LOOP}: {build.pod_failure_reason(current, container)}); "
                    "pod deleted",
                    now,
                )
            )
        broken = self._broken_worker(current, workers, container)
        if broken is not None:
            return self._finish_period(self._pod_failed(body, current, container, now, broken))
        for pod in [current, *workers]:
            if build.pod_phase(pod) == "Pending" and self._unschedulable_too_long(period, pod, now):
                return self._finish_period(self._fall_back(period, pod, now))
        # A replacement pod, or a trainer the kubelet restarts in place after a crash.
        recreated = (
            int(status.get("podsCreated") or 0) > 1
            or int(trainer_status.get("restartCount") or 0) > 0
        )
        held = self._group_allocation(current, workers, container, spec.resources.mode)
        if phase != "Running" or not build.container_running(current, container):
            status["phase"] = build.PHASE_RESTARTING if recreated else build.PHASE_PENDING
            status["podName"] = pod_name
            return self._demand(period, current=held, node=_node_of(current))

        first_running_s = self.first_running_s.setdefault(pod_name, now)
        view = self._read_allocation(period, current, container, now)
        period.view = view
        if view.applied is not None:
            status["ranWith"] = build.format_allocation(spec.resources.mode, view.applied)
        observation, epochs_done = self._observe(current, spec, view, progress.get(pod_name), now)
        period.observation, period.epochs_done = observation, epochs_done
        if observation is not None and pod_name not in self.progress_seen:
            # A new trainer (replacement, resume): the time it was away is not a slow step.
            period.state = replace(period.state, last_time_s=None, last_steps=None)
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
                    spec.resources.mode, view.applied or period.state.allocation
                ),
            )
            return self._demand(period, current=held, node=_node_of(current))
        if observation is not None and observation.complete:
            return self._finish_period(self._complete(period, observation.time_s, observation, now))

        # The law plans with what is in effect: a refused or pending resize is not assumed.
        state = period.state
        if view.applied is not None and view.refused:
            state = replace(state, allocation=view.applied)
            period.state = state
        period.decision = control.decide(state, observation, period.settings, now)
        if spec.best_effort:
            period.decision = replace(
                period.decision,
                allocation=period.settings.max_allocation,
                condition=control.ON_TRACK
                if observation is not None
                else period.decision.condition,
                message="best effort: trains on capacity no deadline job needs",
                eta_s=None,
            )
        period.step = STEP_RUN
        return self._demand(
            period,
            current=view.applied if view.applied is not None else held,
            node=_node_of(current),
            need=period.decision.allocation,
        )

    def _demand(
        self,
        period: _Period,
        *,
        current: float | None,
        node: str | None,
        need: float | None = None,
    ) -> planner.Demand:
        spec, state = period.spec, period.state
        curve = control.step_time_curve(state, period.settings)
        planned = float(self.status.get("stepsTotal") or spec.planned_steps)
        remaining = planned - float(self.status.get("stepsDone") or 0)
        if period.observation is not None:
            remaining = period.observation.steps_total - period.observation.steps_done
        if curve is None and spec.estimate is not None:
            curve = _estimated_curve(*spec.estimate)
        most = self._capped(spec.resources.max, period.now_s)
        if need is None and period.step == STEP_CREATE and curve is not None and remaining > 0:
            # Not running yet: what it needs from now on, by its curve (its estimate).
            need = _need_from_curve(
                curve, remaining, period.deadline_s - period.now_s, spec.resources.min, most
            )
        admitted = self.status.get("admission") not in (None, planner.QUEUED, planner.PREEMPTED)
        if period.step != STEP_CREATE:
            admitted = True  # it holds a pod
        self._period = period
        self.demand = planner.Demand(
            key=self.plan_key,
            mode=spec.resources.mode,
            need=min(most, state.allocation if need is None else need),
            min_allocation=spec.resources.min,
            max_allocation=most,
            current=current or 0.0,
            steps_remaining=max(0.0, remaining),
            deadline_s=None if spec.best_effort else period.deadline_s,
            arrival_s=_created_s(period.body, period.start_s),
            priority=spec.priority,
            admitted=admitted,
            node=node,
            gpus_per_pod=spec.resources.gpus_per_pod,
            nodes=_pod_nodes(period.pod, period.workers),
            step_time_s=curve,
            restart_cost_s=state.restart_cost_s or period.settings.restart_cost_s,
        )
        return self.demand

    # ========================================================================================
    # Phase 2: act on the planner's grant

    def commit(self, grant: planner.Grant | None, room: Room, now: float) -> bool:
        """Act on ``grant`` (None: the planner was not consulted: grant the need). False when
        the job needs no more periods."""
        period = self._period
        self._period = None
        if period is None:
            return not self.done
        if period.step == STEP_CREATE:
            return self._commit_create(period, grant, room, now)
        if period.step == STEP_HOLD:
            self._note_admission(period, grant, now)
            return self._write()
        return self._commit_run(period, grant, room, now)

    def _commit_create(
        self, period: _Period, grant: planner.Grant | None, room: Room, now: float
    ) -> bool:
        spec = period.spec
        allocation = grant.allocation if grant is not None else period.state.allocation
        allocation = self._capped(allocation, now)
        waiting = grant is not None and (
            grant.verdict in (planner.QUEUED, planner.PREEMPTED) or allocation <= 0
        )
        if not waiting:
            if spec.resources.mode == "gpu" and grant is not None and grant.pods:
                fits = room.take_placement(grant.pods)  # where the planner placed them
            elif spec.resources.mode == "gpu":
                fits = room.take_pods(group.pod_counts(spec, allocation))
            else:
                fits = room.take(None, cpu=allocation + build.job_overhead_cpu_cores(spec))
            if not fits:
                waiting = True
                if grant is not None:
                    grant = replace(
                        grant, reason=f"{grant.reason}; waiting for the node to free room"
                    )
        before = list(self.status.get("conditions") or period.conditions)
        self._note_admission(period, grant, now)
        if waiting:
            if grant is not None and grant.verdict in (planner.QUEUED, planner.PREEMPTED):
                self.status["phase"] = build.PHASE_QUEUED
            return self._write()
        state = replace(period.state, allocation=allocation)
        self.status["controller"] = state.to_dict()
        try:
            return self._create_pod(period.body, spec, state, now)
        except KubeError as exc:
            if exc.status not in CREATE_REFUSALS:
                raise
            return self._create_refused(period, exc, before, now)

    def _create_refused(
        self, period: _Period, exc: KubeError, before: Sequence[Mapping[str, Any]], now: float
    ) -> bool:
        """The API server refused the trainer's pod (admission, quota, an invalid object):
        not a log line but a False Admitted condition naming the API's answer, and one
        Warning Event per generation; the next periods try again (quota may free up)."""
        message = f"the API server refused the trainer pod: {exc.status} {exc.message}"
        if self.create_refused_generation != period.generation:
            self.create_refused_generation = period.generation
            self._event(period.body, build.EVENT_WARNING, build.REASON_CREATE_REFUSED, message, now)
        self.status["conditions"] = build.set_condition(
            before,  # as the period found them: a refusal that goes on keeps its time
            build.CONDITION_ADMITTED,
            False,
            build.REASON_CREATE_REFUSED,
            message,
            now_s=now,
            generation=period.generation,
        )
        return self._write()

    def _commit_run(
        self, period: _Period, grant: planner.Grant | None, room: Room, now: float
    ) -> bool:
        spec, decision, view, pod = period.spec, period.decision, period.view, period.pod
        assert decision is not None and view is not None and pod is not None
        pod_name = pod["metadata"]["name"]
        if grant is not None and grant.verdict == planner.PREEMPTED:
            return self._preempt(period, grant, now)
        target = self._capped(decision.allocation if grant is None else grant.allocation, now)
        # A running trainer keeps at least its minimum (a best-effort job squeezed to
        # nothing keeps its minimum; only preemption takes a pod away).
        target = max(spec.resources.min, target)
        target, desired, phase_after = self._actuate(period, target, room, now)
        followed = control.follow_grant(decision, target, period.state, period.settings, now)
        if spec.best_effort:  # less than max is what best effort means, not a risk
            followed = replace(
                followed,
                condition=decision.condition,
                message=f"best effort: {target:g} of up to {spec.resources.max:g} "
                "(capacity no deadline job needs)",
            )
        self._note_admission(period, grant, now)
        message = followed.message
        if period.observation is None:
            message = f"{self.metrics_reason or 'no progress sample'}; holding {target:g}"
        conditions = list(self.status.get("conditions") or period.conditions)
        new_conditions = build.conditions_for_decision(
            conditions,
            followed.condition,
            message,
            now_s=now,
            generation=period.generation,
            deadline_was_past=period.deadline_was_past,
        )
        new_conditions = self._stall_conditions(period, new_conditions, now)
        self._transition_events(period.body, conditions, new_conditions, now)
        self.status.update(
            build.build_status(
                phase=phase_after,
                mode=spec.resources.mode,
                start_s=period.start_s,
                deadline_s=period.deadline_s,
                state=followed.state,
                applied=view.applied,
                desired=desired,
                observation=period.observation,
                eta_s=followed.eta_s,
                generation=period.generation,
                conditions=new_conditions,
                pod=pod_name,
                epochs_done=period.epochs_done,
            )
        )
        return self._write()

    def _actuate(
        self, period: _Period, target: float, room: Room, now: float
    ) -> tuple[float, float | None, str]:
        """Move the pod towards ``target`` as far as the node has room now. Returns the
        allocation the law should remember, the pod's desired allocation, and the phase."""
        spec, decision, view, pod = period.spec, period.decision, period.view, period.pod
        assert decision is not None and view is not None and pod is not None
        pod_name = pod["metadata"]["name"]
        container = spec.trainer_container["name"]
        node = _node_of(pod)
        desired = view.desired
        if view.applied is None or desired is None:
            return decision.allocation, desired, build.PHASE_RUNNING
        if view.refused:
            # Never leave a resize waiting: take the refused request back to what runs.
            self._warn_refusal(period.body, desired, view, now)
            self.kube.resize_pod_cpu(self.namespace, pod_name, container, view.applied)
            return view.applied, view.applied, build.PHASE_RUNNING
        if view.pending:  # a change is landing: stack nothing on it
            return decision.allocation, desired, build.PHASE_RUNNING
        if spec.resources.mode == "gpu":
            if abs(target - desired) < 0.5:
                return desired, desired, build.PHASE_RUNNING
            if target > desired and not self._room_to_grow(spec, room, node, target - desired):
                return desired, desired, build.PHASE_RUNNING
            self._restart_for_gpus(period.body, pod, desired, target, decision, now)
            return target, target, build.PHASE_RESTARTING
        if abs(target - desired) < CPU_EPSILON_CORES:
            return target, desired, build.PHASE_RUNNING
        held = max(desired, view.applied)
        if target > held:  # a grow: only as far as the node has room now
            target = max(desired, held + room.take_up_to(node, target - held))
        if abs(target - desired) >= CPU_EPSILON_CORES:
            self._resize(period.body, pod_name, container, desired, target, decision, now)
        return target, target, build.PHASE_RUNNING

    def _note_admission(self, period: _Period, grant: planner.Grant | None, now: float) -> None:
        """Record the planner's verdict in ``status.admission`` and the Admitted condition;
        announce a job queued, admitted after waiting, displaced or shorted."""
        if grant is None:
            return
        before = self.status.get("admission")
        self.status["admission"] = grant.verdict
        admitted = grant.verdict in (planner.ADMITTED, planner.SHORTED, planner.BEST_EFFORT)
        message = grant.reason
        if grant.earliest_deadline_s is not None and "earliest deadline" not in message:
            message = f"{message}; earliest deadline it could meet now: {format_time(grant.earliest_deadline_s)}"
        conditions = list(self.status.get("conditions") or period.conditions)
        self.status["conditions"] = build.set_condition(
            conditions,
            build.CONDITION_ADMITTED,
            admitted,
            grant.verdict,
            message,
            now_s=now,
            generation=period.generation,
        )
        if before == grant.verdict:
            return
        if grant.verdict == planner.QUEUED:
            self._event(period.body, build.EVENT_WARNING, build.EVENT_QUEUED, message, now)
        elif grant.verdict == planner.PREEMPTED:
            self._event(period.body, build.EVENT_WARNING, build.EVENT_PREEMPTED, message, now)
        elif grant.verdict == planner.SHORTED:
            self._event(period.body, build.EVENT_WARNING, build.EVENT_SHORTED, message, now)
        elif before in (planner.QUEUED, planner.PREEMPTED):
            self._event(period.body, build.EVENT_NORMAL, build.EVENT_ADMITTED, message, now)

    # ========================================================================================
    # Pieces of a period

    def _load_state(self, status: Mapping[str, Any], settings: control.Settings) -> control.State:
        raw = status.get("controller")
        try:
            state = control.State.from_dict(dict(raw)) if isinstance(raw, Mapping) else None
        except (TypeError, ValueError) as exc:
            log.warning("%s/%s: unreadable controller state (%s); starting afresh", *self.key, exc)
            state = None
        if state is None:
            # Not MAX: what the trainer holds now (the speed model is learned again).
            held = build.parse_allocation(settings.mode, status.get("allocation"))
            return control.initial_state(settings, held)
        if state.policy != settings.policy:  # spec.control.policy changed mid-run
            current = control.clamp(state.allocation, settings)
            fresh = control.initial_state(settings, current)
            return replace(fresh, allocation=current, integral=current)
        return state

    def _pick_current(self, active: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
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
        claim = build.build_checkpoint_claim(body, spec, self.config.checkpoint_storage)
        if claim is not None and index == 0 and not self.kube.create_claim(claim):
            name = claim["metadata"]["name"]
            existing = self.kube.get_claim(self.namespace, name)
            if existing is not None and not build.claim_is_jobs(existing, body):
                # a kept claim of an earlier job of this name, or anyone's: not silently ours
                taken = policy.Violation(
                    "spec.checkpoint",
                    f"the claim {name} exists and was not made for this job (a kept claim of "
                    f"an earlier job, or another's); delete it, or name it in "
                    f"spec.checkpoint.claimName where the admin allows it "
                    f"({policy.ENV_ALLOWED_CLAIMS})",
                )
                generation = (body.get("metadata") or {}).get("generation")
                return self._refused(body, [taken], now, generation)
        counts = group.pod_counts(spec, allocation)
        rendezvous_ip = None
        if len(counts) > 1:  # several pods: they meet through the job's rendezvous Service
            rendezvous_ip = self.kube.ensure_service(group.build_rendezvous_service(body))
        pods: list[dict[str, Any]] = []
        for attempt in range(5):
            name = build.pod_name(self.name, index)
            pods = self._build_pods(body, spec, allocation, rendezvous_ip, name)
            if attempt == 0 and (
                refused := build.judge_pods(
                    pods, self.config.template_policy, self.config.checkpoint_storage
                )
            ):
                generation = (body.get("metadata") or {}).get("generation")
                return self._refused(body, refused, now, generation)
            try:
                self.kube.create_pod(pods[0])
                break
            except KubeError as exc:
                if exc.status != 409:  # a leftover pod with that name (e.g. a crash mid-period)
                    raise
                index += 1
                pods = []
        if not pods:
            raise KubeError(f"create pod for {self.namespace}/{self.name}", 409, "no free pod name")
        for worker in pods[1:]:
            self.kube.create_pod(worker)
        self.metrics.actuations.labels(kind=ACTUATION_CREATE).inc()
        quantity = build.format_allocation(spec.resources.mode, allocation)
        noun = "pods" if len(pods) > 1 else "pod"
        what = (
            f"first trainer {noun}"
            if index == 0
            else f"trainer {noun} (resuming from the checkpoint)"
        )
        names = ", ".join(p["metadata"]["name"] for p in pods)
        shares = "+".join(str(c) for c in counts) if len(pods) > 1 else quantity
        self._event(
            body, build.EVENT_NORMAL, build.EVENT_POD_CREATED,
            f"created {what} {names} with {shares} {_unit(spec)}", now,
        )  # fmt: skip
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
            body, build.EVENT_WARNING, build.EVENT_POD_LOST,
            f"trainer pod {pod_name} is gone; recreating it from the last checkpoint", now,
        )  # fmt: skip
        return True

    def _read_allocation(
        self, period: _Period, pod: Mapping[str, Any], container: str, now: float
    ) -> PodView:
        if period.spec.resources.mode == "gpu":
            count = self._group_allocation(pod, period.workers, container, "gpu")
            return PodView(applied=count, desired=count, pending=False)
        desired = build.desired_cpu_cores(pod, container)
        applied = build.applied_cpu_cores(pod, container)
        resize = build.resize_state(pod)
        if applied is None:  # a kubelet that does not report it: trust the spec when quiet
            applied = desired if not resize.waiting else None
        refused = resize.deferred or resize.infeasible
        pending = resize.in_progress or (
            not refused
            and (applied is None or desired is None or abs(applied - desired) >= CPU_EPSILON_CORES)
        )
        return PodView(
            applied=applied,
            desired=desired,
            pending=pending,
            refused=refused,
            refusal=("Infeasible" if resize.infeasible else "Deferred") + f": {resize.message}",
        )

    def _warn_refusal(
        self, body: Mapping[str, Any], desired: float, view: PodView, now: float
    ) -> None:
        quantity = build.format_allocation("cpu", desired)
        if self.refusal_warned == quantity:
            return
        self.refusal_warned = quantity
        self._event(
            body, build.EVENT_WARNING, build.EVENT_RESIZE_INFEASIBLE,
            f"the node did not apply {quantity} CPU ({view.refusal}); back to "
            f"{build.format_allocation('cpu', view.applied or 0.0)}", now,
        )  # fmt: skip

    def _observe(
        self,
        pod: Mapping[str, Any],
        spec: JobSpec,
        view: PodView,
        read: metrics.Progress | metrics.MetricsError | None,
        now: float,
    ) -> tuple[control.Observation | None, float | None]:
        """A progress sample (and epochs done) or (None, None) with ``metrics_reason`` set."""
        if view.applied is None:
            self.metrics_reason = "allocation in effect is not known yet"
            return None, None
        if read is None:
            self.metrics_reason = f"no progress read for pod {pod['metadata']['name']}"
            return None, None
        if isinstance(read, metrics.MetricsError):
            self.metrics_reason = str(read)
            return None, None
        self.metrics_reason = ""
        observation = metrics.observation_from_progress(read, now, view.applied, view.pending)
        return observation, read.epochs_done

    def _resize(
        self,
        body: Mapping[str, Any],
        pod_name: str,
        container: str,
        current: float,
        target: float,
        decision: control.Decision,
        now: float,
    ) -> None:
        self.kube.resize_pod_cpu(self.namespace, pod_name, container, target)
        self.status["resizes"] = int(self.status.get("resizes") or 0) + 1
        self.metrics.actuations.labels(kind=ACTUATION_RESIZE).inc()
        self._event(
            body, build.EVENT_NORMAL, build.EVENT_RESIZED,
            f"cpu {build.format_allocation('cpu', current)} -> "
            f"{build.format_allocation('cpu', target)} in place: {decision.message}", now,
        )  # fmt: skip

    def _restart_for_gpus(
        self,
        body: Mapping[str, Any],
        pod: Mapping[str, Any],
        current: float,
        target: float,
        decision: control.Decision,
        now: float,
    ) -> None:
        # Deleting sends SIGTERM: the trainer checkpoints and exits; the next periods see the
        # pods terminating, then gone, and create them with the new count (state.allocation).
        self._delete_trainer(pod)
        self.status["restarts"] = int(self.status.get("restarts") or 0) + 1
        self.metrics.actuations.labels(kind=ACTUATION_RESTART).inc()
        self._event(
            body, build.EVENT_NORMAL, build.EVENT_RESTARTING,
            f"nvidia.com/gpu {current:g} -> {target:g}: checkpoint, restart and resume "
            f"({decision.message})", now,
        )  # fmt: skip

    def _preempt(self, period: _Period, grant: planner.Grant, now: float) -> bool:
        """Give the node back to a higher-priority job: the trainer checkpoints and goes; the
        job waits (Queued) and resumes from its checkpoint when admitted again."""
        assert period.pod is not None
        self._delete_trainer(period.pod)
        self.metrics.actuations.labels(kind=ACTUATION_PREEMPT).inc()
        self._note_admission(period, grant, now)
        self.status["phase"] = build.PHASE_QUEUED
        return self._write()

    def _suspend(
        self, body: Mapping[str, Any], current: Mapping[str, Any] | None, now: float
    ) -> bool:
        status = self.status
        if current is not None:
            self._delete_trainer(current)
            self.metrics.actuations.labels(kind=ACTUATION_SUSPEND).inc()
        if status.get("phase") != build.PHASE_SUSPENDED:
            self._event(
                body, build.EVENT_NORMAL, build.EVENT_SUSPENDED,
                "spec.suspend: trainer pod deleted (it checkpoints); controller state kept", now,
            )  # fmt: skip
        status["phase"] = build.PHASE_SUSPENDED
        return self._write()

    def _pod_failed(
        self,
        body: Mapping[str, Any],
        pod: Mapping[str, Any],
        container: str,
        now: float,
        reason: str | None = None,
    ) -> bool:
        status = self.status
        pod_name = pod["metadata"]["name"]
        reason = reason or build.pod_failure_reason(pod, container)
        failures = int(status.get("podFailures") or 0) + 1
        status["podFailures"] = failures
        if failures > self.config.max_pod_failures:
            return self._give_up(
                body, f"trainer pod {pod_name} failed ({reason}); {failures} failures", now
            )
        self._event(
            body, build.EVENT_WARNING, build.EVENT_POD_LOST,
            f"trainer pod {pod_name} failed ({reason}); recreating it from the last checkpoint",
            now,
        )  # fmt: skip
        self._delete_trainer(pod, grace_period_s=0)
        status["phase"] = build.PHASE_RESTARTING
        return self._write()

    def _exited_early(self, pod: Mapping[str, Any], container: str) -> str | None:
        """Why a trainer that exited 0 is not done (None: it is). Its termination message
        (``steps=DONE/PLANNED``, written by decor_trainer) decides; without one, the last
        progress read must have covered every planned step."""
        steps = build.termination_steps(pod, container)
        if steps is None:
            done = float(self.status.get("stepsDone") or 0)
            planned = float(self.status.get("stepsTotal") or 0)
            if planned > 0 and done >= planned:
                return None
            seen = f"{done:.0f} of {planned:.0f}" if planned > 0 else "no progress"
            return f"{build.REASON_EXITED_EARLY}: exited 0 with {seen} steps seen"
        done, planned = steps
        if done >= planned:
            return None
        return f"{build.REASON_EXITED_EARLY}: exited 0 at step {done:.0f} of {planned:.0f}"

    def _delete_trainer(self, leader: Mapping[str, Any], grace_period_s: int | None = None) -> None:
        """Delete the trainer: its pod, and the other pods of its group (all get SIGTERM at
        once, so the workers agree on the last step and rank 0 checkpoints it), with the
        pod's grace period but never more than the admin's cap (a pod made before the cap
        was set, or by an older operator, gives its resources back in bounded time too)."""
        if grace_period_s is None:
            grace_period_s = build.grace_period_s(leader, self.config.template_policy)
        name = leader["metadata"]["name"]
        self.kube.delete_pod(self.namespace, name, grace_period_s=grace_period_s)
        for index in range(1, group.group_size(leader)):
            self.kube.delete_pod(
                self.namespace, group.worker_pod_name(name, index), grace_period_s=grace_period_s
            )

    @staticmethod
    def _group_allocation(
        leader: Mapping[str, Any], workers: Sequence[Mapping[str, Any]], container: str, mode: str
    ) -> float | None:
        """The allocation the trainer's pods hold together (None while unknown)."""
        held = [build.pod_allocation(p, container, mode) for p in [leader, *workers]]
        return None if any(h is None for h in held) else sum(h or 0.0 for h in held)

    @staticmethod
    def _broken_worker(
        leader: Mapping[str, Any], workers: Sequence[Mapping[str, Any]], container: str
    ) -> str | None:
        """Why a running group cannot go on (a worker pod failed or vanished), or None. A
        world with a rank missing cannot take a step: the whole group is replaced."""
        for pod in workers:
            if build.pod_phase(pod) == "Failed":
                return (
                    f"worker pod {pod['metadata']['name']} failed "
                    f"({build.pod_failure_reason(pod, container)})"
                )
        name = leader["metadata"]["name"]
        expected = {group.worker_pod_name(name, i) for i in range(1, group.group_size(leader))}
        gone = sorted(expected - {p["metadata"]["name"] for p in workers})
        # Checked once the leader runs: its workers were created in the same period as it.
        if gone and build.pod_phase(leader) == "Running":
            return f"its worker pod {', '.join(gone)} is gone"
        return None

    def _room_to_grow(self, spec: JobSpec, room: Room, node: str | None, gpus: float) -> bool:
        """Room now for ``gpus`` more GPUs: on the pod's node, or, for a job that spans
        pods, in pods of at most ``gpusPerPod`` on any nodes."""
        if spec.resources.gpus_per_pod > 0:
            return room.take_pods(group.pod_counts(spec, gpus))
        return room.take(node, gpus=gpus)

    def _capped(self, allocation: float, now: float) -> float:
        """``allocation``, no more than the fallback of an unschedulable pod while it holds."""
        if self.ceiling is None or now >= self.ceiling[1]:
            self.ceiling = None
            return allocation
        return min(allocation, self.ceiling[0])

    def _unschedulable_too_long(self, period: _Period, pod: Mapping[str, Any], now: float) -> bool:
        since = build.unschedulable_since_s(pod)
        return since is not None and now - since > self.config.unschedulable_wait_s

    def _fall_back(self, period: _Period, pod: Mapping[str, Any], now: float) -> bool:
        """A pod the scheduler could not place for too long (a GPU count the cluster cannot
        give): delete it and go back to the allocation that last ran (MIN if none did), which
        then caps the job for ``unschedulable_hold_s`` so that it does not ask again at once."""
        spec = period.spec
        last = build.parse_allocation(spec.resources.mode, self.status.get("ranWith"))
        fallback = last if last is not None else spec.resources.min
        leader = period.pod or pod
        asked = self._group_allocation(
            leader, period.workers, spec.trainer_container["name"], spec.resources.mode
        )
        state = replace(period.state, allocation=fallback, change_pending_since_s=None)
        hold_s = self.config.unschedulable_hold_s
        self.ceiling = (fallback, now + hold_s)
        why = (
            f"pod {pod['metadata']['name']} asking {asked:g} could not be scheduled for "
            f"{self.config.unschedulable_wait_s:.0f}s; back to {fallback:g}, "
            f"asking no more for {hold_s:.0f}s"
        )
        self._delete_trainer(leader, grace_period_s=0)
        self._event(period.body, build.EVENT_WARNING, build.EVENT_UNSCHEDULABLE, why, now)
        self.status["controller"] = state.to_dict()
        self.status["phase"] = build.PHASE_RESTARTING
        self.status["conditions"] = build.set_condition(
            self.status.get("conditions") or period.conditions,
            control.AT_RISK,
            True,
            build.REASON_UNSCHEDULABLE,
            why,
            now_s=now,
            generation=period.generation,
        )
        return self._write()

    def _stall_conditions(
        self,
        period: _Period,
        conditions: list[dict[str, Any]],
        now: float,
    ) -> list[dict[str, Any]]:
        """Stalled: the trainer runs but its steps have not moved for the stall timeout.
        DeadlineMissed: the deadline passed while steps remain, even with no progress read."""
        observation = period.observation
        if observation is not None:
            if observation.steps_done != self.last_steps:
                self.last_steps = observation.steps_done
                self.last_progress_s = now
        stalled_for = now - self.last_progress_s if self.last_progress_s is not None else 0.0
        stalled = observation is not None and stalled_for > self.config.stall_timeout_s
        before = build.condition_is_true(conditions, build.CONDITION_STALLED)
        if stalled or before:
            conditions = build.set_condition(
                conditions,
                build.CONDITION_STALLED,
                stalled,
                build.REASON_NO_NEW_STEPS if stalled else build.REASON_STEPS_MOVING,
                f"no step completed for {stalled_for:.0f}s" if stalled else "steps complete again",
                now_s=now,
                generation=period.generation,
            )
            if stalled and not before:
                self._event(
                    period.body, build.EVENT_WARNING, build.EVENT_STALLED,
                    f"the trainer runs but completed no step for {stalled_for:.0f}s", now,
                )  # fmt: skip
        if (
            observation is None
            and not period.spec.best_effort
            and now > period.deadline_s
            and not build.condition_is_true(conditions, control.DEADLINE_MISSED)
        ):
            conditions = build.set_condition(
                conditions,
                control.DEADLINE_MISSED,
                True,
                build.REASON_DEADLINE_PASSED,
                "the deadline passed and no progress can be read",
                now_s=now,
                generation=period.generation,
            )
        return conditions

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
        self._write(force=True)
        return False

    def _complete(
        self,
        period: _Period,
        finished_s: float,
        observation: control.Observation | None,
        now: float,
    ) -> bool:
        status, body = self.status, period.body
        before = list(status.get("conditions") or [])
        conditions = build.conditions_for_completion(
            before, finished_s, period.deadline_s, now_s=now, generation=period.generation
        )
        outcome = build.build_outcome(finished_s, period.deadline_s, period.start_s)
        total = observation.steps_total if observation is not None else status.get("stepsTotal")
        status.update(
            phase=build.PHASE_SUCCEEDED,
            conditions=conditions,
            outcome=outcome,
            progress=1.0,
            eta=None,
            observedGeneration=period.generation,
        )
        if total:
            status.update(stepsDone=int(total), stepsTotal=int(total))
        if observation is not None:
            status["controller"] = replace(
                period.state, last_time_s=observation.time_s, last_steps=observation.steps_done
            ).to_dict()
        if period.spec.best_effort:
            self._event(
                body, build.EVENT_NORMAL, build.EVENT_COMPLETED,
                f"finished at {outcome['finishedAt']} (best effort), "
                f"{status.get('resizes', 0)} resizes, {status.get('restarts', 0)} restarts", now,
            )  # fmt: skip
            self._write(force=True)
            return False
        delta = finished_s - period.deadline_s
        deviation = outcome.get("deviationPercent")
        relative = (
            f"deviation {deviation:+.2f}%"
            if deviation is not None
            else "the deadline was before the start"
        )
        self._event(
            body, build.EVENT_NORMAL, build.EVENT_COMPLETED,
            f"finished at {outcome['finishedAt']}, {abs(delta):.1f}s "
            f"{'after' if delta > 0 else 'before'} the deadline ({relative}), "
            f"{status.get('resizes', 0)} resizes, {status.get('restarts', 0)} restarts", now,
        )  # fmt: skip
        if build.became_true(before, conditions, control.DEADLINE_MISSED):
            self._event(
                body, build.EVENT_WARNING, build.EVENT_DEADLINE_MISSED,
                f"finished {delta:.1f}s after the deadline", now,
            )  # fmt: skip
        self._write(force=True)
        return False

    def _refused(
        self,
        body: Mapping[str, Any],
        violations: Sequence[policy.Violation],
        now: float,
        generation: int | None,
    ) -> bool:
        """The template asks for what the admin did not allow: no pod (a running one is
        left to finish: it was created under an earlier spec the policy accepted), a False
        Admitted condition and a Warning Event naming each field."""
        message = policy.describe(violations)
        if self.invalid_generation != generation:
            self.invalid_generation = generation
            self._event(body, build.EVENT_WARNING, policy.REASON_TEMPLATE_REFUSED, message, now)
        self.status["conditions"] = build.set_condition(
            self.status.get("conditions") or [],
            build.CONDITION_ADMITTED,
            False,
            policy.REASON_TEMPLATE_REFUSED,
            message,
            now_s=now,
            generation=generation,
        )
        self._write()
        return True

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
                body, build.EVENT_NORMAL, build.EVENT_METRICS_RECOVERED,
                "progress is readable again", now,
            )  # fmt: skip

    # --- I/O helpers --------------------------------------------------------------------------

    def _event(
        self, body: Mapping[str, Any], event_type: str, reason: str, message: str, now: float
    ) -> None:
        log.info("%s/%s: %s %s", self.namespace, self.name, reason, message)
        self.kube.post_event(
            build.build_event(
                body, event_type, reason, message, now_s=now, instance=self.config.instance
            )
        )

    def _write(self, force: bool = False) -> bool:
        """Merge-patch status when something a user acts on changed (or ``force``); progress
        and ETA at most every PROGRESS_WRITE_PERIODS; anything else with the heartbeat. False
        when the job no longer exists."""
        self.metrics.job_phase(self.key, self.status.get("phase"))
        if self.written == self.status:
            return True
        if not force and self.written is not None:
            since_s = self.clock() - self.written_at_s
            if build.visible_status(self.written) == build.visible_status(self.status):
                due_s = STATUS_HEARTBEAT_S
                if build.shown_progress(self.written) != build.shown_progress(self.status):
                    due_s = min(due_s, PROGRESS_WRITE_PERIODS * self.period_s)
                if since_s < due_s:
                    return True
        snapshot = copy.deepcopy(self.status)
        if not self.kube.patch_job_status(self.namespace, self.name, snapshot):
            self.metrics.job_phase(self.key, None)
            return False
        self.written = snapshot
        self.written_at_s = self.clock()
        return True


def _estimated_curve(step_s: float, allocation: float) -> Callable[[float], float]:
    """Seconds per step from ``spec.estimate``, assuming linear speed-up from it."""
    return lambda u: step_s * allocation / max(u, 1e-9)


def _need_from_curve(
    curve: Callable[[float], float],
    steps: float,
    time_left_s: float,
    low: float,
    high: float,
) -> float:
    """The least allocation in [low, high] whose curve finishes ``steps`` within
    ``time_left_s`` (``high`` when none does), to a thousandth."""
    if time_left_s <= 0 or steps * curve(high) > time_left_s:
        return high
    lo, hi = low, high
    if steps * curve(lo) <= time_left_s:
        return lo
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if steps * curve(mid) <= time_left_s:
            hi = mid
        else:
            lo = mid
    return math.ceil(hi * 1000.0) / 1000.0


def _pod_nodes(
    leader: Mapping[str, Any] | None, workers: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """The node of each pod of a trainer, leader first, workers by index (the planner's
    order); empty unless every pod has one."""
    if leader is None:
        return ()
    ordered = sorted(workers, key=lambda p: group.worker_index(p["metadata"]["name"]))
    nodes = [_node_of(p) for p in [leader, *ordered]]
    return tuple(n for n in nodes if n) if all(nodes) else ()


def _unit(spec: JobSpec) -> str:
    return "CPU" if spec.resources.mode == "cpu" else "nvidia.com/gpu"


def _node_of(pod: Mapping[str, Any]) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def _created_s(body: Mapping[str, Any], fallback_s: float) -> float:
    stamp = (body.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return fallback_s
    try:
        return parse_time(stamp, "creationTimestamp").timestamp()
    except ManifestError:
        return fallback_s
