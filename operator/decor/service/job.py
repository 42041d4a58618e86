"""One DeadlineTrainingJob's part of a control period, in two halves around the planner.

:meth:`JobController.prepare` reads what the period's snapshot says about the job and its
trainer pods and runs the pure lifecycle (``lifecycle.begin``, ``lifecycle.pods``): the
pod lifecycle goes on (create, replace, suspend, complete, fail) and, when the trainer
runs, the job's own law decides what it needs. It returns the job's
:class:`planner.Demand`, or None when the job takes no part in this period's plan.
:meth:`JobController.commit` takes the planner's :class:`planner.Grant`, reserves what the
node has room for now (``capacity.Room``) and runs the lifecycle's step after the plan (hold,
create, run). Each step's actions are carried out by ``actuate.Actuator`` in the order
decided; status is written at the end of the step, when something a user sees changed.

Status is kept in memory (``self.status``, the operator-owned status as last written); a new
controller (operator restart) starts from the status stored in the job, so nothing is lost.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from decor.adapter.kube import Kube, KubeError
from decor.api import vocabulary
from decor.api.model import JobSpec, ManifestError, parse_job, parse_time, tree_copy
from decor.core import (
    build,
    group,
    jobperiod,
    lifecycle,
    limitrange,
    planner,
    policy,
    progress,
    quota,
)
from decor.core.capacity import Room, node_of
from decor.core.lifecycle import (
    LifecycleSettings,
    Memory,
    Outcome,
    Period,
    PlanRequest,
    WriteStatus,
)
from decor.service.actuate import REFUSALS, Actuator, ResizeRefused
from decor.service.config import OperatorConfig
from decor.service.operator_metrics import OperatorMetrics
from decor.service.status_writer import StatusWriter

MIN_PERIOD_S = 0.2
"""Shortest control period a job runs (protects the API server from a tiny spec value)."""
STATUS_HEARTBEAT_S = 30.0
"""Status is written at least this often while a job runs (it carries the controller's state
for an operator restart), and otherwise only when something a user sees changes."""
PROGRESS_WRITE_PERIODS = 3.0
"""Progress and ETA alone are written at most once per this many control periods (capped by
the heartbeat): at a 10 s period a running job costs one status write per 30 s, not one per
period, while phase, allocation, admission and conditions are written the period they
change."""
STATUS_WRITES_PER_S = 20.0
"""The routine status writes (progress, ETA, the heartbeat) of all of an operator's jobs
together stay near this rate: with more than ``STATUS_HEARTBEAT_S`` x this (600) jobs, each
job's progress and heartbeat wait ``jobs / STATUS_WRITES_PER_S`` seconds instead (50 s at
1,000 jobs), so that the API server's load stops growing with the fleet. What a user acts on
(phase, allocation, admission, conditions) is still written the period it changes. Below 600
jobs only a short period's progress writes are spread (100 jobs at a 1 s period: every 5 s,
not 3)."""


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
        status_writer: StatusWriter | None = None,
    ) -> None:
        """``status_writer``: the loop's (shared by its jobs; it also posts their Events);
        None writes and posts at once."""
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.kube = kube
        self.config = config
        self.metrics = operator_metrics
        self.clock = clock
        self.settings = LifecycleSettings(
            startup_grace_s=config.startup_grace_s,
            max_pod_failures=config.max_pod_failures,
            unschedulable_wait_s=config.unschedulable_wait_s,
            unschedulable_hold_s=config.unschedulable_hold_s,
            stall_timeout_s=config.stall_timeout_s,
            template_policy=config.template_policy,
        )
        self.status_writer = status_writer or StatusWriter(kube, workers=0)
        self.actuator = Actuator(
            namespace,
            name,
            kube=kube,
            config=config,
            operator_metrics=operator_metrics,
            writer=self.status_writer,
        )
        self.status: dict[str, Any] = {}
        self.memory = Memory()
        self.written: dict[str, Any] | None = None
        self.written_at_s = -math.inf
        self.loaded = False
        self.period_s = 1.0
        self.status_spread_s = 0.0
        """The fleet's share (set by the loop, :data:`STATUS_WRITES_PER_S`): the routine
        status writes wait at least this long."""
        self.next_due_s = -math.inf
        self.done = False
        self.overhead_cpu_cores = build.sidecar_cpu_cores()
        """Cores a trainer pod holds beside its trainer (read by the loop's planner)."""
        self.pod_charge: quota.Amounts = ()
        self.pod_facts = quota.PodFacts()
        """What a trainer pod charges a ResourceQuota beside its allocation (the planner's)."""
        self._judged: tuple[tuple[str, int | None], JobSpec, list[policy.Violation]] | None = None
        self.demand: planner.Demand | None = None  # the last demand (kept between periods)
        self._period: Period | None = None

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
        progress: Mapping[str, progress.Progress | progress.MetricsError],
        now: float,
        limit_ranges: Sequence[Mapping[str, Any]] = (),
    ) -> planner.Demand | None:
        """This period up to the law's decision. ``pods``: the job's trainer pods from the
        snapshot; ``progress``: the period's batched progress read, by pod name;
        ``limit_ranges``: the LimitRanges of the job's namespace (they clip the bounds the law
        and the planner use, or refuse the job: :mod:`decor.core.limitrange`). Returns the
        job's demand, or None when it takes no part in this period's plan (finished, failed,
        suspended, invalid; ``self.done`` says whether it needs periods any more)."""
        self._period = None
        if not self.loaded:
            self.status = tree_copy(dict(body.get("status") or {}))
            self.loaded = True
        if self.status.get("phase") in vocabulary.TERMINAL_PHASES:
            self.metrics.job_phase(self.key, self.status["phase"])
            return self._finish_period(False)
        generation = (body.get("metadata") or {}).get("generation")
        try:
            spec, violations = self._judged_spec(body, generation)
        except ManifestError as exc:
            invalid = lifecycle.invalid_spec(self.status, self.memory, str(exc), generation, now)
            return self._finish_period(self._perform(invalid, body, now))
        self.period_s = max(self.config.min_period_s, MIN_PERIOD_S, spec.control.period_s)
        if violations:
            refused = lifecycle.template_refused(
                self.status, self.memory, violations, generation, now
            )
            return self._finish_period(self._perform(refused, body, now))
        spec, bounds = _within_limit_ranges(spec, limit_ranges, self.overhead_cpu_cores)
        if bounds.refusal is not None:
            refused = lifecycle.limit_range_refused(
                self.status, self.memory, bounds.refusal, generation, now
            )
            return self._finish_period(self._perform(refused, body, now))
        clip_message = "; ".join(bounds.changes)
        self._perform(
            lifecycle.limit_range_clipped(self.status, self.memory, clip_message), body, now
        )
        opened, period = lifecycle.begin(self.status, self.memory, body, spec, generation, now)
        if not self._perform(opened, body, now):  # the first period records the start
            return self._finish_period(False)
        outcome = lifecycle.pods(period, self.status, self.memory, pods, progress, self.settings)
        keep_going = self._perform(outcome, body, now)
        if outcome.plan is None:
            return self._finish_period(keep_going)
        return self._demand(outcome.plan)

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
                built = self.actuator.build_pods(
                    body, spec, spec.resources.max, group.LEADER_ADDRESS
                )
                violations = build.judge_pods(
                    built, self.config.template_policy, self.config.checkpoint_storage
                )
                self.pod_charge = build.pod_charge_beside(built, spec.resources.mode)
                self.pod_facts = quota.pod_facts(built[0]) if built else quota.PodFacts()
            self.overhead_cpu_cores = build.job_overhead_cpu_cores(spec)
            self._judged = (key, spec, violations)
        return self._judged[1], self._judged[2]

    def _finish_period(self, keep_going: bool) -> planner.Demand | None:
        """End the period without a demand; ``keep_going`` False: the job needs no more."""
        self.done = not keep_going
        self.demand = None
        return None

    def _demand(self, request: PlanRequest) -> planner.Demand:
        """What the job asks of this period's planner (``jobperiod.job_demand``)."""
        period = request.period
        spec, now = period.spec, period.now_s
        creating = period.step == lifecycle.STEP_CREATE
        self._period = period
        self.demand = jobperiod.job_demand(
            spec,
            period.settings,
            period.state,
            now,
            key=self.plan_key,
            need=request.need,
            planned_peak=request.planned_peak,
            starting=creating,
            remaining=jobperiod.steps_left(self.status, spec, period.observation),
            current=request.current or 0.0,
            arrival_s=_created_s(period.body, period.start_s),
            admitted=jobperiod.admitted(creating, self.status.get("admission")),
            most=lifecycle.capped(spec.resources.max, self.memory, now),
            node=request.node,
            last_node=request.last_node,
            nodes=_pod_nodes(period.pod, period.workers),
            pod_charge=self.pod_charge,
            pod_facts=self.pod_facts,
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
        if period.step == lifecycle.STEP_CREATE:
            return self._commit_create(period, grant, room)
        if period.step == lifecycle.STEP_HOLD:
            held = lifecycle.hold(period, self.status, self.memory, grant)
            return self._perform(held, period.body, now)
        wanted = lifecycle.growth_wanted(period, self.memory, grant)
        grown_by = self._reserve_growth(period, wanted, room)
        before = self.status
        ran = lifecycle.run(period, before, self.memory, grant, grown_by, self.settings)
        try:
            return self._perform(ran, period.body, now)
        except ResizeRefused as refused:  # nothing after the resize was carried out
            answer = (refused.status, refused.message)
            outcome = lifecycle.resize_refused(
                period, before, ran.memory, grant, self.settings, refused.action, answer
            )
            return self._perform(outcome, period.body, now)

    def _commit_create(self, period: Period, grant: planner.Grant | None, room: Room) -> bool:
        """A new trainer once admitted and the node has room for it now."""
        allocation = lifecycle.new_trainer_allocation(period, self.memory, grant)
        fits = (
            allocation is not None
            and not lifecycle.create_backed_off(period, self.memory, allocation)
            and self._room_for_trainer(period.spec, grant, allocation, room)
        )
        outcome = lifecycle.create(period, self.status, self.memory, grant, allocation, fits)
        written = self._perform(outcome, period.body, period.now_s)
        if outcome.create is None:
            return written
        create = outcome.create
        try:
            placed = grant.pods if grant is not None else ()
            made = self.actuator.create_trainer(
                period.body,
                period.spec,
                create.allocation,
                create.index,
                group.planned_nodes(period.spec, create.allocation, placed),
            )
        except KubeError as exc:
            if exc.status not in REFUSALS:
                raise
            outcome = lifecycle.create_refused(
                period, self.status, self.memory, create, (exc.status, exc.message)
            )
            return self._perform(outcome, period.body, period.now_s)
        if isinstance(made, lifecycle.TrainerCreated):
            outcome = lifecycle.trainer_created(period, self.status, self.memory, made)
        else:
            outcome = lifecycle.template_refused(
                self.status, self.memory, made, period.generation, period.now_s
            )
        return self._perform(outcome, period.body, period.now_s)

    @staticmethod
    def _room_for_trainer(
        spec: JobSpec, grant: planner.Grant | None, allocation: float, room: Room
    ) -> bool:
        """Reserve a new trainer's pods: where the planner placed them, else anywhere."""
        placed = grant.pods if grant is not None else ()
        if spec.resources.mode == "gpu":
            return room.take_new(placed, gpu_counts=group.pod_counts(spec, allocation))
        return room.take_new(placed, cores=allocation + build.job_overhead_cpu_cores(spec))

    @staticmethod
    def _reserve_growth(period: Period, amount: float, room: Room) -> float:
        """Reserve ``amount`` more for a running trainer: GPUs all or nothing (on its node,
        or, for a job that spans pods, in pods of at most ``gpusPerPod`` on any nodes),
        cores as far as its node has room. Returns what was reserved."""
        if amount <= 0 or period.pod is None:
            return 0.0
        spec, node = period.spec, node_of(period.pod)
        if spec.resources.mode == "cpu":
            return room.take_up_to(node, amount)
        if spec.resources.gpus_per_pod > 0:
            fits = room.take_pods(group.pod_counts(spec, amount))
        else:
            fits = room.take(node, gpus=amount)
        return amount if fits else 0.0

    # --- carrying a step out ---------------------------------------------------------------------

    def _perform(self, outcome: Outcome, body: Mapping[str, Any], now: float) -> bool:
        """Keep the step's status and memory, and carry its actions out in order. Returns
        whether the job needs more periods (the outcome's say, else whether the status write
        found the job)."""
        self.status, self.memory = outcome.status, outcome.memory
        written = True
        for action in outcome.actions:
            if isinstance(action, WriteStatus):
                written = self._write(force=action.force)
            else:
                self.actuator.perform(action, body, now)
        return written if outcome.keep_going is None else outcome.keep_going

    def _write(self, force: bool = False) -> bool:
        """Merge-patch status when something a user acts on changed (or ``force``); progress
        and ETA at most every PROGRESS_WRITE_PERIODS; anything else with the heartbeat; the
        last two no sooner than the fleet's share (``status_spread_s``). Sent by the loop's
        :class:`StatusWriter` (in the background with several commit workers). False when the
        job no longer exists (a write found it gone)."""
        if self.status_writer.gone(self.key, self.uid):
            self.metrics.job_phase(self.key, None)
            return False
        self.metrics.job_phase(self.key, self.status.get("phase"))
        if self.status_writer.take_failed(self.key):
            self.written = None  # a write did not land: the whole status again
        if self.written == self.status:
            return True
        if not force and self.written is not None:
            since_s = self.clock() - self.written_at_s
            if build.visible_status(self.written) == build.visible_status(self.status):
                due_s = STATUS_HEARTBEAT_S
                if build.shown_progress(self.written) != build.shown_progress(self.status):
                    due_s = min(due_s, PROGRESS_WRITE_PERIODS * self.period_s)
                due_s = max(due_s, self.status_spread_s)
                if since_s < due_s:
                    return True
        snapshot = tree_copy(self.status)
        if not self.status_writer.write(self.key, self.uid, snapshot):
            self.metrics.job_phase(self.key, None)
            return False
        self.written = snapshot
        self.written_at_s = self.clock()
        return True


def _within_limit_ranges(
    spec: JobSpec, limit_ranges: Sequence[Mapping[str, Any]], beside_cores: float
) -> tuple[JobSpec, limitrange.Clip]:
    """``spec`` with ``resources.min``/``max`` clipped to what ``limit_ranges`` allow (the
    same spec when they change nothing), and the clip (its ``refusal`` when none is left)."""
    r = spec.resources
    bounds = limitrange.clip(limit_ranges, r.mode, r.min, r.max, beside_cores=beside_cores,
                             gpus_per_pod=r.gpus_per_pod)  # fmt: skip
    if bounds.refusal is not None or not bounds.changes:
        return spec, bounds
    clipped = dataclasses.replace(r, min=bounds.low, max=bounds.high)
    return dataclasses.replace(spec, resources=clipped), bounds


def _pod_nodes(
    leader: Mapping[str, Any] | None, workers: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """The node of each pod of a trainer, leader first, workers by index (the planner's
    order); empty unless every pod has one."""
    if leader is None:
        return ()
    ordered = sorted(workers, key=lambda p: group.worker_index(p["metadata"]["name"]))
    nodes = [node_of(p) for p in [leader, *ordered]]
    return tuple(n for n in nodes if n) if all(nodes) else ()


def _created_s(body: Mapping[str, Any], fallback_s: float) -> float:
    stamp = (body.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return fallback_s
    try:
        return parse_time(stamp, "creationTimestamp").timestamp()
    except ManifestError:
        return fallback_s
