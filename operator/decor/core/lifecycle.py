"""What a control period decides about one DeadlineTrainingJob and its trainer pods.

Pure functions: each takes the job (its manifest and parsed spec, in a :class:`Period`),
its pods as the period's snapshot shows them, the operator-owned status as last kept, what
the controller remembers between periods (:class:`Memory`) and the clock (``Period.now_s``),
and returns an :class:`Outcome`: the actions to take, in order (delete or resize pods, post
Events, count actuations, write status), and the status and memory that follow. Nothing
here talks to the API server or reads a clock; ``job.JobController`` runs a period with
these functions and the planner, and ``actuate.Actuator`` carries the actions out.

A period, in the order the controller calls them:

1. :func:`begin`        start time, deadline, the law's settings and state (the first
                        period records the start; a moved deadline is announced);
2. :func:`pods`         the trainer's lifecycle: suspend, resume, replace a lost or failed
                        pod, fail past the budget, fall back from an unschedulable one,
                        complete; otherwise what the job asks of the planner
                        (a :class:`PlanRequest`, with the law's decision when it runs);
3. after the planner, by the request's step: :func:`hold` (a pod that is not controllable
   yet), :func:`create` then :func:`trainer_created` or :func:`create_refused` (a new
   trainer), :func:`run` (resize in place, restart with a new GPU count, preempt), then
   :func:`resize_refused` when the API server refuses the resize it asked for.

A create or resize the API server refuses (quota, admission) is tried again after a backoff
(:data:`REFUSAL_RETRY_FIRST_S` doubling up to :data:`REFUSAL_RETRY_MAX_S`), never every
period, and is announced once.

A spec the operator cannot read or the admin's policy refuses ends at
:func:`invalid_spec` or :func:`template_refused`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from decor.api import vocabulary
from decor.api.model import JobSpec, format_time, parse_time, tree_copy
from decor.core import build, control, group, jobperiod, planner, policy, progress
from decor.core.capacity import node_of

CPU_EPSILON_CORES = 0.0005
"""CPU allocations closer than half a millicore are the same (pods store millicores)."""
GPU_STEP = 0.5
"""GPU counts closer than half a GPU are the same count."""
FALLBACK_HOLD = "fallback"
"""Key in ``status.controller`` of the hold after an unschedulable pod, while it holds:
``{"allocation": the allocation fallen back to, "untilSeconds": Unix s it caps until}``
(kept in the status so that a restarted operator does not ask again at once)."""

# Kinds of actuation counted by decor_operator_actuations_total.

# What pods() found; the step after the planner acts on it.
STEP_CREATE = "create"  # no trainer pod: create one once admitted and there is room
STEP_HOLD = "hold"  # a pod exists but is not controllable yet (pending, starting, replaced)
STEP_RUN = "run"  # the law decided; act on the grant

WAITING = jobperiod.WAITING_VERDICTS
"""Verdicts under which a job holds no pod."""
REFUSAL_RETRY_FIRST_S = 10.0
"""A create or resize the API server refused is not asked again for this long, then twice
as long after each refusal in a row (the kubelet's CrashLoopBackOff does the same)."""
REFUSAL_RETRY_MAX_S = 300.0
"""The longest wait between two tries of a refused create or resize (5 minutes): a job
refused for good costs the API server one call per job in this time."""


# --- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostEvent:
    """A Kubernetes Event about the job."""

    type: str  # EVENT_NORMAL or EVENT_WARNING
    reason: str
    message: str


@dataclass(frozen=True)
class DeletePod:
    """Delete one of the job's pods; ``grace_period_s`` None: the API's default."""

    name: str
    grace_period_s: int | None = None


@dataclass(frozen=True)
class ResizeCpu:
    """Resize the trainer container's CPU in place to ``cores``."""

    pod: str
    container: str
    cores: float


@dataclass(frozen=True)
class CountActuation:
    """Count one actuation of ``kind`` (one of :data:`vocabulary.ACTUATIONS`)."""

    kind: str


@dataclass(frozen=True)
class LogWarning:
    """Something the operator's log should say (nothing a user of the job acts on)."""

    message: str


@dataclass(frozen=True)
class WriteStatus:
    """Write the status as the outcome leaves it: when something a user acts on changed, or
    always (``force``); always the last action."""

    force: bool = False


Action = PostEvent | DeletePod | ResizeCpu | CountActuation | LogWarning | WriteStatus


@dataclass(frozen=True)
class Refusal:
    """A create or resize the API server refused, waiting to be tried again.

    ``generation``: the spec's generation it was refused under (a new one tries at once);
    ``asked``: what was asked (a new trainer's allocation, or the CPU cores of a resize) and
    ``held``: what the pod held then (resize; the create's allocation again for a create);
    ``code``, ``answer``: the API's HTTP status and message; ``refusals``: how many in a row;
    ``retry_at_s``: not tried again before (Unix s)."""

    generation: int | None
    asked: float
    held: float
    code: int
    answer: str
    refusals: int
    retry_at_s: float

    def holds(self, now_s: float) -> bool:
        """Whether its backoff still runs at ``now_s``."""
        return now_s < self.retry_at_s

    @property
    def grow(self) -> bool:
        """A refused move to more than was held (what a quota refuses)."""
        return self.asked > self.held


def refusal_delay_s(refusals: int) -> float:
    """Seconds until a call refused ``refusals`` times in a row (1, 2...) is tried again:
    :data:`REFUSAL_RETRY_FIRST_S` doubling up to :data:`REFUSAL_RETRY_MAX_S`."""
    return min(REFUSAL_RETRY_MAX_S, REFUSAL_RETRY_FIRST_S * 2.0 ** max(0, refusals - 1))


def _refused_again(
    previous: Refusal | None,
    generation: int | None,
    asked: float,
    held: float,
    answer: tuple[int, str],
    now_s: float,
) -> Refusal:
    """The refusal that follows ``previous`` (None: the first) at ``now_s``."""
    refusals = 1
    if previous is not None and previous.generation == generation:
        refusals = previous.refusals + 1
    code, message = answer
    return Refusal(generation, asked, held, code, message, refusals,
                   now_s + refusal_delay_s(refusals))  # fmt: skip


@dataclass(frozen=True)
class CreateTrainer:
    """Create the trainer's pods with ``allocation``, the first name tried from ``index``
    (``status.podsCreated``); ``conditions_before``: the conditions as the period found them
    (a refused create keeps a refusal's time)."""

    allocation: float
    index: int
    conditions_before: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class TrainerCreated:
    """What the actuator created: the leader's name, its index, the allocation, and every
    pod's name and GPU count (a group's counts; one entry for a single pod)."""

    name: str
    index: int
    allocation: float
    pods: tuple[str, ...]
    counts: tuple[int, ...]


# --- inputs and results -----------------------------------------------------------------------


@dataclass(frozen=True)
class LifecycleSettings:
    """The operator's limits on a trainer's lifecycle (from its configuration)."""

    startup_grace_s: float  # a new trainer may run this long before progress is expected
    max_pod_failures: int  # lost, failed or crashed pods tolerated before the job Fails
    unschedulable_wait_s: float  # a pod unschedulable this long is given up (fall back)
    unschedulable_hold_s: float  # then the job asks no more than the fallback this long
    stall_timeout_s: float  # no step for this long while running: Stalled
    template_policy: policy.TemplatePolicy  # caps a deleted pod's grace period


@dataclass(frozen=True)
class Memory:
    """What a job's controller remembers between periods beside the job's status."""

    first_running_s: Mapping[str, float] = field(default_factory=dict)  # pod -> first run
    progress_seen: frozenset[str] = frozenset()  # pods that produced a progress sample
    invalid_generation: int | None = None  # generation whose refusal was announced
    clip_announced: str | None = None  # the LimitRanges' clip last announced (its message)
    create_refused_generation: int | None = None  # same, for a create the API refused
    refusal_warned: str | None = None  # CPU quantity whose refused resize was announced
    create_refusal: Refusal | None = None  # the last create the API refused, while retried
    resize_refusal: Refusal | None = None  # the last resize the API refused, while it goes on
    metrics_reason: str = ""  # why the period has no progress sample ("" when it has one)
    last_steps: float | None = None  # steps at the last change (stall detection)
    last_progress_s: float | None = None  # when the steps last changed
    # After an unschedulable pod: (the allocation fallen back to, until when it caps); kept
    # in the status too (FALLBACK_HOLD), read back by begin() after an operator restart.
    ceiling: tuple[float, float] | None = None
    last_node: str | None = None  # the node its trainer pod was last seen on


@dataclass(frozen=True)
class PodView:
    """What one period learned about the trainer pod's allocation."""

    applied: float | None  # in effect (cores or GPUs); None while unknown
    desired: float | None  # what the pod's spec asks for
    pending: bool  # a resize is being applied (asked, not yet in effect)
    refused: bool = False  # the kubelet answered Deferred or Infeasible
    refusal: str = ""


@dataclass(frozen=True)
class Period:
    """A period's facts about the job, from :func:`begin` to the step after the planner."""

    step: str
    body: Mapping[str, Any]
    spec: JobSpec
    generation: int | None
    start_s: float
    deadline_s: float
    settings: control.Settings
    state: control.State
    conditions: tuple[Mapping[str, Any], ...]
    deadline_was_past: bool
    now_s: float
    pod: Mapping[str, Any] | None = None
    workers: tuple[Mapping[str, Any], ...] = ()  # the other pods of a several-pod trainer
    view: PodView | None = None
    observation: control.Observation | None = None
    epochs_done: float | None = None
    decision: control.Decision | None = None


@dataclass(frozen=True)
class PlanRequest:
    """The job takes part in the plan: ``current`` it holds (None while unknown) on
    ``node``; ``need``: what the law asks (None: by its state or its estimate);
    ``planned_peak``: the GPUs of a switch up the law planned for later (0: none);
    ``last_node``: with no pod (``node`` None), the node its last pod was on."""

    period: Period
    current: float | None
    node: str | None
    need: float | None = None
    planned_peak: float = 0.0
    last_node: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What a step decided: the actions in order, the status and memory that follow.

    ``keep_going``: whether the job needs more periods; None: as long as the status write
    finds the job. ``plan``: the job asks the planner (the period goes on after it).
    ``create``: after the actions, create the trainer."""

    actions: tuple[Action, ...]
    status: dict[str, Any]
    memory: Memory
    keep_going: bool | None = None
    plan: PlanRequest | None = None
    create: CreateTrainer | None = None


class _Decision:
    """A step's working copy: the status and memory it changes and the actions it adds."""

    def __init__(self, status: Mapping[str, Any], memory: Memory) -> None:
        self.status: dict[str, Any] = tree_copy(dict(status))
        self.memory = memory
        self.actions: list[Action] = []
        self.hold_stored = stored_hold(self.status) is not None

    def remember(self, **changes: Any) -> None:
        self.memory = replace(self.memory, **changes)

    def event(self, event_type: str, reason: str, message: str) -> None:
        self.actions.append(PostEvent(event_type, reason, message))

    def delete_trainer(
        self, leader: Mapping[str, Any], settings: LifecycleSettings, grace_period_s: int | None
    ) -> None:
        """Delete the trainer: its pod, and the other pods of its group (all get SIGTERM at
        once, so the workers agree on the last step and rank 0 checkpoints it), with the
        pod's grace period (``grace_period_s`` None) but never more than the admin's cap (a
        pod made before the cap was set gives its resources back in bounded time too)."""
        if grace_period_s is None:
            grace_period_s = build.grace_period_s(leader, settings.template_policy)
        name = leader["metadata"]["name"]
        self.actions.append(DeletePod(name, grace_period_s))
        for index in range(1, group.group_size(leader)):
            self.actions.append(DeletePod(group.worker_pod_name(name, index), grace_period_s))

    def finish(
        self,
        *,
        write: WriteStatus | None = None,
        keep_going: bool | None = None,
        plan: PlanRequest | None = None,
        create: CreateTrainer | None = None,
    ) -> Outcome:
        self._store_hold()
        actions = [*self.actions, write] if write is not None else self.actions
        return Outcome(tuple(actions), self.status, self.memory, keep_going, plan, create)

    def _store_hold(self) -> None:
        """Keep the fallback's hold in ``status.controller`` while it holds; once over, a
        None deletes it (status is merge-patched)."""
        controller = self.status.get("controller")
        if not isinstance(controller, dict):
            return
        if self.memory.ceiling is not None:
            allocation, until_s = self.memory.ceiling
            controller[FALLBACK_HOLD] = {"allocation": allocation, "untilSeconds": until_s}
        elif self.hold_stored:
            controller[FALLBACK_HOLD] = None

    def plan(
        self,
        period: Period,
        *,
        current: float | None,
        node: str | None,
        need: float | None = None,
        planned_peak: float = 0.0,
    ) -> Outcome:
        if node is not None:
            self.remember(last_node=node)
        last = None if node is not None else self.memory.last_node
        return self.finish(plan=PlanRequest(period, current, node, need, planned_peak, last))


# --- a spec that cannot run -------------------------------------------------------------------


def invalid_spec(
    status: Mapping[str, Any], memory: Memory, message: str, generation: int | None, now_s: float
) -> Outcome:
    """The spec cannot be read: an OnTrack condition of unknown status naming why, and one
    Warning Event per generation; the job is looked at again (a patch may fix it)."""
    condition = (vocabulary.CONDITION_ON_TRACK, None, vocabulary.REASON_INVALID_SPEC)
    return _cannot_run(status, memory, condition, vocabulary.EVENT_INVALID_SPEC, message,
                       generation, now_s)  # fmt: skip


def template_refused(
    status: Mapping[str, Any],
    memory: Memory,
    violations: Sequence[policy.Violation],
    generation: int | None,
    now_s: float,
) -> Outcome:
    """The template asks for what the admin did not allow: no pod (a running one is left to
    finish: it was created under an earlier spec the policy accepted), a False Admitted
    condition and a Warning Event naming each field, once per generation."""
    condition = (vocabulary.CONDITION_ADMITTED, False, vocabulary.REASON_TEMPLATE_REFUSED)
    return _cannot_run(status, memory, condition, vocabulary.REASON_TEMPLATE_REFUSED,
                       policy.describe(violations), generation, now_s)  # fmt: skip


def limit_range_refused(
    status: Mapping[str, Any], memory: Memory, message: str, generation: int | None, now_s: float
) -> Outcome:
    """The namespace's LimitRanges leave no allocation within spec.resources.min..max
    (``message``: which bound of which LimitRange, ``limitrange.clip``): no pod (a running
    one is left to finish), a False Admitted condition and one Warning Event per generation."""
    condition = (vocabulary.CONDITION_ADMITTED, False, vocabulary.REASON_LIMIT_RANGE_REFUSED)
    return _cannot_run(status, memory, condition, vocabulary.EVENT_LIMIT_RANGE_REFUSED,
                       message, generation, now_s)  # fmt: skip


def limit_range_clipped(status: Mapping[str, Any], memory: Memory, message: str) -> Outcome:
    """The LimitRanges narrow the job's bounds (``message`` says how; "" when they do not):
    one Normal Event when the clip is new or changed, nothing else (the law and the planner
    use the clipped bounds quietly every period). The status is left as it is."""
    actions: tuple[Action, ...] = ()
    if message and memory.clip_announced != message:
        actions = (
            PostEvent(vocabulary.EVENT_NORMAL, vocabulary.EVENT_LIMIT_RANGE_CLIPPED, message),
        )
    return Outcome(actions, dict(status), replace(memory, clip_announced=message or None))


def _cannot_run(
    status: Mapping[str, Any],
    memory: Memory,
    condition: tuple[str, bool | None, str],
    event_reason: str,
    message: str,
    generation: int | None,
    now_s: float,
) -> Outcome:
    """``condition`` (type, status, reason) set with ``message``, and one Warning Event per
    generation; the job is looked at again."""
    d = _Decision(status, memory)
    if memory.invalid_generation != generation:
        d.remember(invalid_generation=generation)
        d.event(vocabulary.EVENT_WARNING, event_reason, message)
    type_, value, reason = condition
    d.status["conditions"] = build.set_condition(
        d.status.get("conditions") or [], type_, value, reason, message,
        now_s=now_s, generation=generation,
    )  # fmt: skip
    return d.finish(write=WriteStatus(), keep_going=True)


# --- 1. begin: times and the law's state ------------------------------------------------------


def begin(
    status: Mapping[str, Any],
    memory: Memory,
    body: Mapping[str, Any],
    spec: JobSpec,
    generation: int | None,
    now_s: float,
) -> tuple[Outcome, Period]:
    """Start time, effective deadline, settings and the law's state. The first period
    records the start (a forced status write the controller makes before going on); a later
    one announces a moved deadline."""
    d = _Decision(status, memory)
    _forget_refusals(d, generation)
    first = not d.status.get("startTime")
    start_s = (
        float(math.floor(now_s))
        if first
        else parse_time(d.status["startTime"], "startTime").timestamp()
    )
    deadline_s = build.effective_deadline_s(spec, start_s)
    settings = jobperiod.law_settings(spec, start_s)
    deadline_text = format_time(deadline_s) if not spec.best_effort else None
    if first:
        state, deadline_was_past = _record_start(d, spec, settings, start_s, deadline_s, now_s)
        d.status["conditions"] = build.conditions_at_admission(
            deadline_was_past, now_s=now_s, generation=generation
        )
    else:
        state = _loaded_state(d, settings)
        d.remember(ceiling=_hold_now(d.memory.ceiling or stored_hold(d.status), now_s))
        if d.status.get("deadline") != deadline_text:
            deadline_was_past = _deadline_moved(d, deadline_text, deadline_s, generation, now_s)
        else:
            deadline_was_past = build.deadline_was_past(d.status.get("conditions") or [])
    period = Period(
        step=STEP_HOLD,
        body=body,
        spec=spec,
        generation=generation,
        start_s=start_s,
        deadline_s=deadline_s,
        settings=settings,
        state=state,
        conditions=tuple(d.status.get("conditions") or []),
        deadline_was_past=deadline_was_past,
        now_s=now_s,
    )
    return d.finish(write=WriteStatus(force=True) if first else None), period


def _record_start(
    d: _Decision,
    spec: JobSpec,
    settings: control.Settings,
    start_s: float,
    deadline_s: float,
    now_s: float,
) -> tuple[control.State, bool]:
    """The first period: the law's starting state and the status's counters; a deadline
    already past runs at MAX and says so."""
    deadline_was_past = jobperiod.deadline_passed(spec, settings, now_s)
    deadline_text = format_time(deadline_s) if not spec.best_effort else None
    state = jobperiod.law_start(spec, settings, now_s)
    d.status.update(
        phase=vocabulary.PHASE_PENDING,
        startTime=format_time(start_s),
        deadline=deadline_text,
        controller=state.to_dict(),
        podsCreated=0,
        resizes=0,
        restarts=0,
        podFailures=0,
    )
    if deadline_was_past:
        d.event(
            vocabulary.EVENT_WARNING,
            vocabulary.EVENT_DEADLINE_IN_PAST,
            f"deadline {deadline_text} had already passed; running at max "
            f"({build.format_allocation(spec.resources.mode, settings.max_allocation)})",
        )
    return state, deadline_was_past


def _forget_refusals(d: _Decision, generation: int | None) -> None:
    """A new generation (the user changed the spec) tries a refused create or resize at
    once: the refusal was of the spec before."""
    for name in ("create_refusal", "resize_refusal"):
        refusal: Refusal | None = getattr(d.memory, name)
        if refusal is not None and refusal.generation != generation:
            d.remember(**{name: None})


def _loaded_state(d: _Decision, settings: control.Settings) -> control.State:
    """The law's state as the status keeps it; afresh (at what the trainer holds) when it
    cannot be read, and restarted at the current allocation when the policy changed."""
    raw = d.status.get("controller")
    try:
        state = control.State.from_dict(dict(raw)) if isinstance(raw, Mapping) else None
    except (TypeError, ValueError) as exc:
        d.actions.append(LogWarning(f"unreadable controller state ({exc}); starting afresh"))
        state = None
    if state is None:
        # Not MAX: what the trainer holds now (the speed model is learned again).
        held = build.parse_allocation(settings.mode, d.status.get("allocation"))
        return control.initial_state(settings, held)
    if state.policy != settings.policy:  # spec.control.policy changed mid-run
        current = control.clamp(state.allocation, settings)
        fresh = control.initial_state(settings, current)
        return replace(fresh, allocation=current, integral=current)
    return state


def stored_hold(status: Mapping[str, Any]) -> tuple[float, float] | None:
    """The fallback's hold as ``status.controller`` keeps it (None: none, or unreadable)."""
    raw = (status.get("controller") or {}).get(FALLBACK_HOLD)
    if not isinstance(raw, Mapping):
        return None
    try:
        return float(raw["allocation"]), float(raw["untilSeconds"])
    except (KeyError, TypeError, ValueError):
        return None


def _hold_now(hold: tuple[float, float] | None, now_s: float) -> tuple[float, float] | None:
    """``hold`` while it still caps at ``now_s``."""
    return hold if hold is not None and now_s < hold[1] else None


def _deadline_moved(
    d: _Decision,
    deadline_text: str | None,
    deadline_s: float,
    generation: int | None,
    now_s: float,
) -> bool:
    deadline_was_past = deadline_s <= now_s
    d.event(
        vocabulary.EVENT_NORMAL,
        vocabulary.EVENT_DEADLINE_CHANGED,
        f"deadline moved from {d.status.get('deadline')} to {deadline_text}",
    )
    if deadline_was_past:
        d.event(
            vocabulary.EVENT_WARNING,
            vocabulary.EVENT_DEADLINE_IN_PAST,
            f"new deadline {deadline_text} has already passed; running at max",
        )
    d.status["deadline"] = deadline_text
    d.status["conditions"] = build.conditions_for_deadline(
        d.status.get("conditions") or [], deadline_was_past, now_s=now_s, generation=generation
    )
    return deadline_was_past


# --- 2. pods: the trainer's lifecycle ---------------------------------------------------------


@dataclass(frozen=True)
class _Trainer:
    """The job's pods sorted out: the trainer (leader and workers), pods on their way out,
    and extra pods (only one trainer runs at a time)."""

    leader: Mapping[str, Any] | None
    workers: tuple[Mapping[str, Any], ...]
    terminating: tuple[Mapping[str, Any], ...]
    extras: tuple[Mapping[str, Any], ...]


def pods(
    period: Period,
    status: Mapping[str, Any],
    memory: Memory,
    trainer_pods: Sequence[Mapping[str, Any]],
    progress: Mapping[str, progress.Progress | progress.MetricsError],
    settings: LifecycleSettings,
) -> Outcome:
    """The trainer's lifecycle this period, given the job's pods and their progress read
    (by pod name). Ends the period (suspended, failed, complete, replaced, fallen back) or
    asks the planner (a :class:`PlanRequest`)."""
    d = _Decision(status, memory)
    trainer = _sort_pods(d.status, trainer_pods)
    for extra in trainer.extras:
        d.actions.append(DeletePod(extra["metadata"]["name"]))
    if period.spec.suspend:
        return _suspend(d, period, trainer.leader, settings)
    if d.status.get("phase") == vocabulary.PHASE_SUSPENDED:
        d.event(vocabulary.EVENT_NORMAL, vocabulary.EVENT_RESUMED, "spec.suspend cleared; resuming")
        d.status["phase"] = vocabulary.PHASE_RESTARTING
    if trainer.leader is None:
        return _no_trainer(d, period, trainer, settings)
    return _trainer_found(d, period, trainer.leader, trainer.workers, progress, settings)


def _sort_pods(status: Mapping[str, Any], trainer_pods: Sequence[Mapping[str, Any]]) -> _Trainer:
    active = [p for p in trainer_pods if not build.is_terminating(p)]
    leaders = [p for p in active if not group.is_worker(p)]
    leader = _pick_leader(status, leaders)
    name = leader["metadata"]["name"] if leader is not None else None
    workers = [p for p in active if name is not None and group.leader_of(p) == name]
    return _Trainer(
        leader=leader,
        workers=tuple(workers),
        terminating=tuple(p for p in trainer_pods if build.is_terminating(p)),
        extras=tuple(p for p in active if p is not leader and not any(p is w for w in workers)),
    )


def _pick_leader(
    status: Mapping[str, Any], leaders: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The pod the status names, else the newest."""
    if not leaders:
        return None
    wanted = status.get("podName")
    for pod in leaders:
        if pod["metadata"]["name"] == wanted:
            return pod
    return max(leaders, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))


def _suspend(
    d: _Decision, period: Period, leader: Mapping[str, Any] | None, settings: LifecycleSettings
) -> Outcome:
    """No trainer while ``spec.suspend``: the Suspended Event says by when the job must be
    training again for max to make the deadline; past that, Infeasible (SuspendedTooLong)."""
    if leader is not None:
        d.delete_trainer(leader, settings, None)
        d.actions.append(CountActuation(vocabulary.ACTUATION_SUSPEND))
    remaining = jobperiod.steps_left(d.status, period.spec, None)
    by_s = jobperiod.training_again_by_s(period.spec, period.settings, period.state, remaining)
    if d.status.get("phase") != vocabulary.PHASE_SUSPENDED:
        d.event(vocabulary.EVENT_NORMAL, vocabulary.EVENT_SUSPENDED, _suspended_message(by_s))
    _suspended_too_long(d, period, by_s)
    d.status["phase"] = vocabulary.PHASE_SUSPENDED
    return d.finish(write=WriteStatus())


def _suspended_too_long(d: _Decision, period: Period, by_s: float | None) -> None:
    """Infeasible (SuspendedTooLong) once the job is suspended past ``by_s``; cleared again
    (Feasible) where a later deadline moves ``by_s`` past now. Messages that stay the same
    while the job waits: one status write."""
    before = d.status.get("conditions") or []
    found = build.get_condition(before, vocabulary.CONDITION_INFEASIBLE) or {}
    ours = build.condition_is_true(before, vocabulary.CONDITION_INFEASIBLE) and (
        found.get("reason") == vocabulary.REASON_SUSPENDED_TOO_LONG
    )
    if by_s is not None and period.now_s > by_s:
        status, reason = True, vocabulary.REASON_SUSPENDED_TOO_LONG
        message = (
            f"suspended past {format_time(by_s)}: resumed after it, even max finishes after "
            "the deadline"
        )
    elif ours:
        status, reason, message = False, vocabulary.REASON_FEASIBLE, build.FEASIBLE_MESSAGE
    else:
        return
    after = build.set_condition(before, vocabulary.CONDITION_INFEASIBLE, status, reason, message,
                                now_s=period.now_s, generation=period.generation)  # fmt: skip
    _transition_events(d, before, after)
    d.status["conditions"] = after


def _suspended_message(by_s: float | None) -> str:
    """The Suspended Event's message; ``by_s``: when the job must be training again for max to
    make the deadline (None: no speed known)."""
    message = "spec.suspend: trainer pod deleted (it checkpoints); controller state kept"
    if by_s is None:
        return message
    return (
        f"{message}; to make the deadline at max it must be training again by "
        f"{format_time(by_s)} (the new pod's start-up not counted)"
    )


def _no_trainer(
    d: _Decision, period: Period, trainer: _Trainer, settings: LifecycleSettings
) -> Outcome:
    """No trainer runs: one went away unasked (lost), one is still saving its checkpoint
    (wait for it), or one is to be created."""
    previous = d.status.get("podName")
    if previous and d.status.get("phase") not in (
        vocabulary.PHASE_RESTARTING,
        vocabulary.PHASE_SUSPENDED,
        vocabulary.PHASE_QUEUED,
    ):
        # The trainer is going or gone without us asking (evicted, deleted, node lost).
        lost = _pod_lost(d, period, str(previous), settings)
        if lost is not None:
            return lost
    if trainer.terminating:  # the previous trainer is still saving its checkpoint
        node = node_of(trainer.terminating[0])
        return d.plan(replace(period, step=STEP_HOLD), current=None, node=node)
    return d.plan(replace(period, step=STEP_CREATE), current=None, node=None)


def _pod_lost(
    d: _Decision, period: Period, pod_name: str, settings: LifecycleSettings
) -> Outcome | None:
    """Count a trainer pod that went away unasked; the job's end once past the budget."""
    failures = int(d.status.get("podFailures") or 0) + 1
    d.status["podFailures"] = failures
    d.status["phase"] = vocabulary.PHASE_RESTARTING
    if failures > settings.max_pod_failures:
        return _give_up(d, period, f"trainer pod lost {failures} times")
    d.event(
        vocabulary.EVENT_WARNING,
        vocabulary.EVENT_POD_LOST,
        f"trainer pod {pod_name} is gone; recreating it from the last checkpoint",
    )
    return None


def _trainer_found(
    d: _Decision,
    period: Period,
    leader: Mapping[str, Any],
    workers: tuple[Mapping[str, Any], ...],
    progress: Mapping[str, progress.Progress | progress.MetricsError],
    settings: LifecycleSettings,
) -> Outcome:
    """A trainer exists: it ended, it is broken, it is not running yet, or it runs."""
    ended = _trainer_ended(d, period, leader, settings)
    if ended is not None:
        return ended
    period = replace(period, pod=leader, workers=workers)
    broken = _trainer_broken(d, period, leader, settings)
    if broken is not None:
        return broken
    spec, name = period.spec, leader["metadata"]["name"]
    container = spec.trainer_container["name"]
    restarts = int((build.container_status(leader, container) or {}).get("restartCount") or 0)
    # A replacement pod, or a trainer the kubelet restarts in place after a crash.
    recreated = int(d.status.get("podsCreated") or 0) > 1 or restarts > 0
    held = group_allocation(leader, workers, container, spec.resources.mode)
    if build.pod_phase(leader) != "Running" or not build.container_running(leader, container):
        d.status["phase"] = vocabulary.PHASE_RESTARTING if recreated else vocabulary.PHASE_PENDING
        d.status["podName"] = name
        return d.plan(period, current=held, node=node_of(leader))
    return _trainer_running(d, period, progress.get(name), recreated, held, settings)


def _trainer_ended(
    d: _Decision, period: Period, leader: Mapping[str, Any], settings: LifecycleSettings
) -> Outcome | None:
    """The trainer's pod ended: the job is complete, or the pod failed (exited 0 early)."""
    container = period.spec.trainer_container["name"]
    phase = build.pod_phase(leader)
    if phase == "Succeeded":
        early = _exited_early(d.status, leader, container)
        if early is not None:
            return _pod_failed(d, period, leader, early, settings)
        finished_s = build.container_finished_s(leader, container) or period.now_s
        return _complete(d, period, finished_s, None)
    if phase == "Failed":
        return _pod_failed(d, period, leader, None, settings)
    return None


def _trainer_broken(
    d: _Decision, period: Period, leader: Mapping[str, Any], settings: LifecycleSettings
) -> Outcome | None:
    """The trainer cannot go on: it crashed past the budget (the job Fails), a worker of its
    group is gone (replaced), or a pod stayed unschedulable too long (fall back)."""
    container = period.spec.trainer_container["name"]
    pods_ = [leader, *period.workers]
    crashes = max(
        int((build.container_status(p, container) or {}).get("restartCount") or 0) for p in pods_
    )
    if crashes > settings.max_pod_failures:
        # Past the budget the pod would crash on, holding its node's capacity: deleted.
        d.delete_trainer(leader, settings, 0)
        return _give_up(
            d,
            period,
            f"trainer crashed {crashes} times in pod {leader['metadata']['name']} "
            f"({vocabulary.REASON_CRASH_LOOP}: {build.pod_failure_reason(leader, container)}); "
            "pod deleted",
        )
    broken = _broken_worker(leader, period.workers, container)
    if broken is not None:
        return _pod_failed(d, period, leader, broken, settings)
    for pod in pods_:
        if build.pod_phase(pod) == "Pending":
            since = build.unschedulable_since_s(pod)
            if since is not None and period.now_s - since > settings.unschedulable_wait_s:
                return _fall_back(d, period, pod, settings)
    return None


def _trainer_running(
    d: _Decision,
    period: Period,
    read: progress.Progress | progress.MetricsError | None,
    recreated: bool,
    held: float | None,
    settings: LifecycleSettings,
) -> Outcome:
    """The trainer runs: read what it holds and its progress; still starting, complete, or
    the law decides."""
    pod = period.pod
    assert pod is not None
    name, now_s = pod["metadata"]["name"], period.now_s
    first_running_s = d.memory.first_running_s.get(name, now_s)
    if name not in d.memory.first_running_s:
        d.remember(first_running_s={**d.memory.first_running_s, name: now_s})
    view = read_allocation(period.spec, pod, period.workers)
    if view.applied is not None:
        d.status["ranWith"] = build.format_allocation(period.spec.resources.mode, view.applied)
    observation, epochs_done, metrics_reason = _observe(pod, view, read, now_s)
    d.remember(metrics_reason=metrics_reason)
    period = replace(period, view=view, observation=observation, epochs_done=epochs_done)
    seen = name in d.memory.progress_seen
    if observation is not None and not seen:
        # A new trainer (replacement, resume): the time it was away is not a slow step.
        period = replace(period, state=replace(period.state, last_time_s=None, last_steps=None))
    if observation is not None:
        d.remember(progress_seen=d.memory.progress_seen | {name})
    elif not seen and now_s - first_running_s < settings.startup_grace_s:
        # Still starting (importing, building the model): nothing to control yet.
        d.status.update(
            phase=vocabulary.PHASE_RESTARTING if recreated else vocabulary.PHASE_RUNNING,
            podName=name,
            allocation=build.format_allocation(
                period.spec.resources.mode, view.applied or period.state.allocation
            ),
        )
        return d.plan(period, current=held, node=node_of(pod))
    if observation is not None and observation.complete:
        return _complete(d, period, observation.time_s, observation)
    return _decide(d, period, held)


def _decide(d: _Decision, period: Period, held: float | None) -> Outcome:
    """The law decides; a best-effort job asks for MAX (what no deadline job needs)."""
    view, observation, pod = period.view, period.observation, period.pod
    assert view is not None and pod is not None
    # The law plans with what is in effect: a refused or pending resize is not assumed.
    state = period.state
    if view.applied is not None and view.refused:
        state = replace(state, allocation=view.applied)
    decision = control.decide(state, observation, period.settings, period.now_s)
    if period.spec.best_effort:
        decision = jobperiod.best_effort_decision(
            decision, period.settings, observation is not None
        )
    period = replace(period, state=state, decision=decision, step=STEP_RUN)
    return d.plan(
        period,
        current=view.applied if view.applied is not None else held,
        node=node_of(pod),
        need=decision.allocation,
        planned_peak=decision.planned_peak,
    )


def _pod_failed(
    d: _Decision,
    period: Period,
    pod: Mapping[str, Any],
    reason: str | None,
    settings: LifecycleSettings,
) -> Outcome:
    """A trainer pod failed: replaced from the last checkpoint, or the job Fails once past
    the budget."""
    pod_name = pod["metadata"]["name"]
    reason = reason or build.pod_failure_reason(pod, period.spec.trainer_container["name"])
    failures = int(d.status.get("podFailures") or 0) + 1
    d.status["podFailures"] = failures
    if failures > settings.max_pod_failures:
        return _give_up(d, period, f"trainer pod {pod_name} failed ({reason}); {failures} failures")
    d.event(
        vocabulary.EVENT_WARNING,
        vocabulary.EVENT_POD_LOST,
        f"trainer pod {pod_name} failed ({reason}); recreating it from the last checkpoint",
    )
    d.delete_trainer(pod, settings, 0)
    d.status["phase"] = vocabulary.PHASE_RESTARTING
    return d.finish(write=WriteStatus())


def _give_up(d: _Decision, period: Period, why: str) -> Outcome:
    d.status["phase"] = vocabulary.PHASE_FAILED
    d.status["conditions"] = build.conditions_for_failure(
        d.status.get("conditions") or [], why, now_s=period.now_s, generation=period.generation
    )
    d.event(vocabulary.EVENT_WARNING, vocabulary.EVENT_FAILED, why)
    return d.finish(write=WriteStatus(force=True), keep_going=False)


def _fall_back(
    d: _Decision, period: Period, pod: Mapping[str, Any], settings: LifecycleSettings
) -> Outcome:
    """A pod the scheduler could not place for too long (a GPU count the cluster cannot
    give): delete it and go back to the allocation that last ran (MIN if none did), which
    then caps the job for ``unschedulable_hold_s`` so that it does not ask again at once."""
    spec, now_s = period.spec, period.now_s
    last = build.parse_allocation(spec.resources.mode, d.status.get("ranWith"))
    fallback = last if last is not None else spec.resources.min
    leader = period.pod or pod
    asked = group_allocation(
        leader, period.workers, spec.trainer_container["name"], spec.resources.mode
    )
    state = replace(period.state, allocation=fallback, change_pending_since_s=None)
    hold_s = settings.unschedulable_hold_s
    d.remember(ceiling=(fallback, now_s + hold_s))
    why = (
        f"pod {pod['metadata']['name']} asking {asked:g} could not be scheduled for "
        f"{settings.unschedulable_wait_s:.0f}s; back to {fallback:g}, "
        f"asking no more for {hold_s:.0f}s"
    )
    d.delete_trainer(leader, settings, 0)
    d.event(vocabulary.EVENT_WARNING, vocabulary.EVENT_UNSCHEDULABLE, why)
    d.status["controller"] = state.to_dict()
    d.status["phase"] = vocabulary.PHASE_RESTARTING
    conditions = d.status.get("conditions") or period.conditions
    for type_, at_risk in (
        (vocabulary.CONDITION_AT_RISK, True),
        (vocabulary.CONDITION_ON_TRACK, False),
    ):
        conditions = build.set_condition(
            conditions,
            type_,
            at_risk,
            vocabulary.REASON_UNSCHEDULABLE,
            why,
            now_s=now_s,
            generation=period.generation,
        )
    d.status["conditions"] = conditions
    return d.finish(write=WriteStatus())


def _complete(
    d: _Decision,
    period: Period,
    finished_s: float,
    observation: control.Observation | None,
) -> Outcome:
    """Every step is done: Succeeded, with the outcome against the deadline."""
    status = d.status
    before = list(status.get("conditions") or [])
    conditions = build.conditions_for_completion(
        before, finished_s, period.deadline_s, now_s=period.now_s, generation=period.generation
    )
    outcome = build.build_outcome(finished_s, period.deadline_s, period.start_s)
    total = observation.steps_total if observation is not None else status.get("stepsTotal")
    status.update(
        phase=vocabulary.PHASE_SUCCEEDED,
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
    _completion_events(d, period, finished_s, outcome, before, conditions)
    return d.finish(write=WriteStatus(force=True), keep_going=False)


def _completion_events(
    d: _Decision,
    period: Period,
    finished_s: float,
    outcome: Mapping[str, Any],
    before: Sequence[Mapping[str, Any]],
    conditions: Sequence[Mapping[str, Any]],
) -> None:
    counts = f"{d.status.get('resizes', 0)} resizes, {d.status.get('restarts', 0)} restarts"
    if period.spec.best_effort:
        d.event(
            vocabulary.EVENT_NORMAL,
            vocabulary.EVENT_COMPLETED,
            f"finished at {outcome['finishedAt']} (best effort), {counts}",
        )
        return
    delta = finished_s - period.deadline_s
    deviation = outcome.get("deviationPercent")
    relative = (
        f"deviation {deviation:+.2f}%"
        if deviation is not None
        else "the deadline was before the start"
    )
    d.event(
        vocabulary.EVENT_NORMAL,
        vocabulary.EVENT_COMPLETED,
        f"finished at {outcome['finishedAt']}, {abs(delta):.1f}s "
        f"{'after' if delta > 0 else 'before'} the deadline ({relative}), {counts}",
    )
    if build.became_true(before, conditions, vocabulary.CONDITION_DEADLINE_MISSED):
        d.event(
            vocabulary.EVENT_WARNING,
            vocabulary.EVENT_DEADLINE_MISSED,
            f"finished {delta:.1f}s after the deadline",
        )


# --- 3. after the planner: admission, a new trainer, a running one ---------------------------


def capped(allocation: float, memory: Memory, now_s: float) -> float:
    """``allocation``, no more than the fallback of an unschedulable pod while it holds, nor
    more than a trainer held when the API server refused it more, while that backoff runs
    (the planner then gives the rest to others)."""
    refusal = memory.resize_refusal
    if refusal is not None and refusal.grow and refusal.holds(now_s):
        allocation = min(allocation, refusal.held)
    if memory.ceiling is None or now_s >= memory.ceiling[1]:
        return allocation
    return min(allocation, memory.ceiling[0])


def hold(
    period: Period, status: Mapping[str, Any], memory: Memory, grant: planner.Grant | None
) -> Outcome:
    """A pod that is not controllable yet: the planner's verdict is recorded, nothing more."""
    d = _Decision(status, memory)
    _note_admission(d, period, grant)
    return d.finish(write=WriteStatus())


def new_trainer_allocation(
    period: Period, memory: Memory, grant: planner.Grant | None
) -> float | None:
    """What a new trainer is created with: the grant (the law's allocation when the planner
    was not consulted), no more than a fallback's hold; None while the plan keeps the job
    waiting (queued, preempted, or granted nothing)."""
    allocation = grant.allocation if grant is not None else period.state.allocation
    allocation = capped(allocation, memory, period.now_s)
    if grant is not None and (grant.verdict in WAITING or allocation <= 0):
        return None
    return allocation


def create(
    period: Period,
    status: Mapping[str, Any],
    memory: Memory,
    grant: planner.Grant | None,
    allocation: float | None,
    fits: bool,
) -> Outcome:
    """No trainer pod: record the verdict, and create one with ``allocation``
    (:func:`new_trainer_allocation`) when the node has room for it now (``fits``);
    otherwise the job waits (Queued when the plan says so). After a refused create, nothing
    changes until its backoff ends (:func:`create_backed_off`)."""
    d = _Decision(status, memory)
    if create_backed_off(period, memory, allocation):
        return d.finish(write=WriteStatus())  # the CreateRefused condition says until when
    if allocation is not None and not fits and grant is not None:
        grant = replace(grant, reason=f"{grant.reason}; waiting for the node to free room")
    before = tuple(d.status.get("conditions") or period.conditions)
    _note_admission(d, period, grant)
    if allocation is None or not fits:
        if grant is not None and grant.verdict in WAITING:
            d.status["phase"] = vocabulary.PHASE_QUEUED
        return d.finish(write=WriteStatus())
    d.status["controller"] = replace(period.state, allocation=allocation).to_dict()
    index = int(d.status.get("podsCreated") or 0)
    return d.finish(create=CreateTrainer(allocation, index, before))


def create_backed_off(period: Period, memory: Memory, allocation: float | None) -> bool:
    """Whether a new trainer with ``allocation`` waits for the backoff of a refused create:
    until it ends, unless the allocation is smaller than the refused one (a smaller pod may
    fit the quota) or the spec changed (:func:`begin` forgets the refusal)."""
    refusal = memory.create_refusal
    if allocation is None or refusal is None or not refusal.holds(period.now_s):
        return False
    smaller = allocation < refusal.asked - (
        CPU_EPSILON_CORES if period.spec.resources.mode == "cpu" else GPU_STEP
    )
    return not smaller


def trainer_created(
    period: Period, status: Mapping[str, Any], memory: Memory, created: TrainerCreated
) -> Outcome:
    """The trainer's pods exist: announced, and the status names them."""
    d = _Decision(status, memory)
    d.remember(create_refusal=None)
    spec = period.spec
    d.actions.append(CountActuation(vocabulary.ACTUATION_CREATE))
    quantity = build.format_allocation(spec.resources.mode, created.allocation)
    several = len(created.pods) > 1
    noun = "pods" if several else "pod"
    what = (
        f"first trainer {noun}"
        if created.index == 0
        else f"trainer {noun} (resuming from the checkpoint)"
    )
    shares = "+".join(str(c) for c in created.counts) if several else quantity
    unit = "CPU" if spec.resources.mode == "cpu" else "nvidia.com/gpu"
    d.event(
        vocabulary.EVENT_NORMAL,
        vocabulary.EVENT_POD_CREATED,
        f"created {what} {', '.join(created.pods)} with {shares} {unit}",
    )
    d.status.update(
        podName=created.name,
        podsCreated=created.index + 1,
        desiredAllocation=quantity,
        phase=vocabulary.PHASE_PENDING if created.index == 0 else vocabulary.PHASE_RESTARTING,
    )
    return d.finish(write=WriteStatus())


def create_refused(
    period: Period,
    status: Mapping[str, Any],
    memory: Memory,
    create: CreateTrainer,
    answer: tuple[int, str],
) -> Outcome:
    """The API server refused the trainer's pod (admission, quota, an invalid object;
    ``answer``: its HTTP status and message): not a log line but a False Admitted condition
    naming the answer and when it is tried again (after :func:`refusal_delay_s`: quota may
    free up), and one Warning Event per generation."""
    d = _Decision(status, memory)
    refusal = _refused_again(memory.create_refusal, period.generation, create.allocation,
                             create.allocation, answer, period.now_s)  # fmt: skip
    d.remember(create_refusal=refusal)
    message = (
        f"the API server refused the trainer pod: {answer[0]} {answer[1]}; "
        f"trying again at {format_time(refusal.retry_at_s)}"
    )
    if memory.create_refused_generation != period.generation:
        d.remember(create_refused_generation=period.generation)
        d.event(vocabulary.EVENT_WARNING, vocabulary.REASON_CREATE_REFUSED, message)
    d.status["conditions"] = build.set_condition(
        create.conditions_before,  # as the period found them: a refusal going on keeps its time
        vocabulary.CONDITION_ADMITTED,
        False,
        vocabulary.REASON_CREATE_REFUSED,
        message,
        now_s=period.now_s,
        generation=period.generation,
    )
    return d.finish(write=WriteStatus())


def run_target(period: Period, memory: Memory, grant: planner.Grant | None) -> float:
    """What a running trainer moves towards: the grant (the law's decision without a plan),
    no more than a fallback's hold, and at least the minimum (a best-effort job squeezed to
    nothing keeps its minimum; only preemption takes a pod away)."""
    assert period.decision is not None
    target = period.decision.allocation if grant is None else grant.allocation
    return max(period.spec.resources.min, capped(target, memory, period.now_s))


def growth_wanted(period: Period, memory: Memory, grant: planner.Grant | None) -> float:
    """How much more than the trainer holds its move needs from the node's room now (cores
    or GPUs; 0 when it does not grow). A GPU grow needs all of it, a CPU grow takes what
    there is."""
    view = period.view
    if (
        (grant is not None and grant.verdict == vocabulary.VERDICT_PREEMPTED)
        or view is None
        or view.applied is None
        or view.desired is None
        or view.refused
        or view.pending
    ):
        return 0.0
    target, desired = run_target(period, memory, grant), view.desired
    if period.spec.resources.mode == "gpu":
        return target - desired if target - desired >= GPU_STEP else 0.0
    if abs(target - desired) < CPU_EPSILON_CORES:
        return 0.0
    return max(0.0, target - max(desired, view.applied))


def run(
    period: Period,
    status: Mapping[str, Any],
    memory: Memory,
    grant: planner.Grant | None,
    grown_by: float,
    settings: LifecycleSettings,
) -> Outcome:
    """A running trainer acts on its grant: preempted, or moved towards it (``grown_by``:
    the room the node gave for :func:`growth_wanted`); the law follows what was applied,
    and the conditions and status say where the job stands."""
    d = _Decision(status, memory)
    if grant is not None and grant.verdict == vocabulary.VERDICT_PREEMPTED:
        return _preempt(d, period, grant, settings)
    decision, view, pod = period.decision, period.view, period.pod
    assert decision is not None and view is not None and pod is not None
    spec = period.spec
    target = run_target(period, memory, grant)
    _settle_refusal(d, period, target)
    target, desired, phase = _move(d, period, target, grown_by, settings)
    refused = _switch_refused(period, memory, target)
    followed = control.follow_grant(
        decision, target, period.state, period.settings, period.now_s,
        period.observation if refused else None,
    )  # fmt: skip
    if spec.best_effort:  # less than max is what best effort means, not a risk
        followed = jobperiod.best_effort_followed(
            followed, decision, target, period.settings.max_allocation
        )
    _note_admission(d, period, grant)
    _refusal_condition(d, period, grant)
    message = followed.message
    if period.observation is None:
        message = jobperiod.no_progress_message(d.memory.metrics_reason, target)
    conditions = _run_conditions(d, period, followed.condition, message, settings)
    d.status.update(
        build.build_status(
            phase=phase,
            mode=spec.resources.mode,
            start_s=period.start_s,
            deadline_s=period.deadline_s,
            state=followed.state,
            applied=view.applied,
            desired=desired,
            observation=period.observation,
            eta_s=followed.eta_s,
            generation=period.generation,
            conditions=conditions,
            pod=pod["metadata"]["name"],
            epochs_done=period.epochs_done,
        )
    )
    return d.finish(write=WriteStatus())


def _switch_refused(period: Period, memory: Memory, target: float) -> bool:
    """Whether a deadline job's trainer moves to fewer GPUs than its law decided within the
    job's own caps: the planner, or the node's room at commit, refused the count (the law
    re-plans within what runs). A count held at a cap of the job's own (a fallback's hold, a
    refused resize's backoff) follows as before; so does a CPU job and a best-effort one."""
    decision = period.decision
    return (
        decision is not None
        and period.spec.resources.mode == "gpu"
        and not period.spec.best_effort
        and target < capped(decision.allocation, memory, period.now_s) - 1e-9
    )


def resize_refused(
    period: Period,
    status: Mapping[str, Any],
    memory: Memory,
    grant: planner.Grant | None,
    settings: LifecycleSettings,
    refused: ResizeCpu,
    answer: tuple[int, str],
) -> Outcome:
    """The API server refused the resize ``refused`` that :func:`run` asked for (a
    ResourceQuota's or LimitRange's 403, a 422; ``answer``: its HTTP status and message):
    the trainer keeps what it holds. The step is decided again from ``status`` and
    ``memory`` (as :func:`run` had them) knowing it: no move that way until the backoff ends
    (:func:`refusal_delay_s`), the law following what the pod holds, the Admitted condition
    (True: the job runs) naming the answer; and one Warning Event when a refusal begins (or
    the API's status changes), never one per period or per try."""
    assert period.view is not None
    held = period.view.desired if period.view.desired is not None else refused.cores
    previous = memory.resize_refusal
    refusal = _refused_again(previous, period.generation, refused.cores, held, answer,
                             period.now_s)  # fmt: skip
    outcome = run(period, status, replace(memory, resize_refusal=refusal), grant, 0.0, settings)
    same = previous is not None and (previous.generation, previous.code) == (
        refusal.generation,
        refusal.code,
    )
    if same:
        return outcome  # the same refusal going on: its Event was posted when it began
    event = PostEvent(
        vocabulary.EVENT_WARNING, vocabulary.EVENT_RESIZE_REFUSED, _refusal_message(refusal)
    )
    return replace(outcome, actions=(event, *outcome.actions))


def _refusal_message(refusal: Refusal) -> str:
    asked, held = (build.format_allocation("cpu", c) for c in (refusal.asked, refusal.held))
    return (
        f"the API server refused a resize to {asked} CPU: {refusal.code} {refusal.answer}; "
        f"running at {held}, trying again at {format_time(refusal.retry_at_s)}"
    )


def _past_refusal(refusal: Refusal, cores: float) -> bool:
    """Whether ``cores`` lies beyond what the pod held when ``refusal`` came, the way the
    refused resize went."""
    if refusal.grow:
        return cores > refusal.held + CPU_EPSILON_CORES
    return cores < refusal.held - CPU_EPSILON_CORES


def _settle_refusal(d: _Decision, period: Period, target: float) -> None:
    """A refused resize whose backoff is over is forgotten once a resize that way went
    through (the pod's spec moved past what it held), or when the job no longer wants to
    go that way; otherwise it is tried again now, and stays until that try is answered."""
    refusal, view = d.memory.resize_refusal, period.view
    if refusal is None or view is None or refusal.holds(period.now_s):
        return
    moved = view.desired is not None and _past_refusal(refusal, view.desired)
    if moved or not _past_refusal(refusal, target):
        d.remember(resize_refusal=None)


def _resize_backed_off(d: _Decision, period: Period, target: float) -> bool:
    """Whether a resize to ``target`` waits for the backoff of a refused one."""
    refusal = d.memory.resize_refusal
    return refusal is not None and refusal.holds(period.now_s) and _past_refusal(refusal, target)


def _refusal_condition(d: _Decision, period: Period, grant: planner.Grant | None) -> None:
    """While a refused resize goes on, the Admitted condition (True: the job runs at what it
    holds) says so; once it is over, the planner's verdict says again where the job stands
    (:func:`_note_admission`; without a planner, Admitted)."""
    conditions = list(d.status.get("conditions") or period.conditions)
    refusal = d.memory.resize_refusal
    if refusal is not None:
        reason, message = vocabulary.REASON_RESIZE_REFUSED, _refusal_message(refusal)
    elif grant is None and (build.get_condition(conditions, vocabulary.CONDITION_ADMITTED) or {}
                            ).get("reason") == vocabulary.REASON_RESIZE_REFUSED:  # fmt: skip
        reason, message = vocabulary.VERDICT_ADMITTED, "the API server accepts its resizes again"
    else:
        return
    d.status["conditions"] = build.set_condition(
        conditions, vocabulary.CONDITION_ADMITTED, True, reason, message,
        now_s=period.now_s, generation=period.generation,
    )  # fmt: skip


def _preempt(
    d: _Decision, period: Period, grant: planner.Grant, settings: LifecycleSettings
) -> Outcome:
    """Give the node back to a higher-priority job: the trainer checkpoints and goes; the
    job waits (Queued) and resumes from its checkpoint when admitted again."""
    assert period.pod is not None
    d.delete_trainer(period.pod, settings, None)
    d.actions.append(CountActuation(vocabulary.ACTUATION_PREEMPT))
    _note_admission(d, period, grant)
    d.status["phase"] = vocabulary.PHASE_QUEUED
    return d.finish(write=WriteStatus())


def _move(
    d: _Decision, period: Period, target: float, grown_by: float, settings: LifecycleSettings
) -> tuple[float, float | None, str]:
    """Move the pod towards ``target`` as far as the node's room allows (``grown_by``).
    Returns the allocation the law should remember, the pod's desired allocation, and the
    phase."""
    decision, view, pod = period.decision, period.view, period.pod
    assert decision is not None and view is not None and pod is not None
    desired = view.desired
    if view.applied is None or desired is None:
        return decision.allocation, desired, vocabulary.PHASE_RUNNING
    container = period.spec.trainer_container["name"]
    if view.refused:
        # Never leave a resize waiting: take the refused request back to what runs.
        _warn_refusal(d, desired, view)
        if _resize_backed_off(d, period, view.applied):  # the API refused that too
            return view.applied, desired, vocabulary.PHASE_RUNNING
        d.actions.append(ResizeCpu(pod["metadata"]["name"], container, view.applied))
        return view.applied, view.applied, vocabulary.PHASE_RUNNING
    if view.pending:  # a change is landing: stack nothing on it
        return decision.allocation, desired, vocabulary.PHASE_RUNNING
    if period.spec.resources.mode == "gpu":
        if abs(target - desired) < GPU_STEP or (target > desired and grown_by <= 0):
            return desired, desired, vocabulary.PHASE_RUNNING
        _restart_for_gpus(d, period, desired, target, settings)
        return target, target, vocabulary.PHASE_RESTARTING
    if abs(target - desired) < CPU_EPSILON_CORES:
        return target, desired, vocabulary.PHASE_RUNNING
    held = max(desired, view.applied)
    if target > held:  # a grow: only as far as the node has room now
        target = max(desired, held + grown_by)
    if _resize_backed_off(d, period, target):  # the API refused a move that far
        return desired, desired, vocabulary.PHASE_RUNNING
    if abs(target - desired) >= CPU_EPSILON_CORES:
        _resize(d, period, container, desired, target)
    return target, target, vocabulary.PHASE_RUNNING


def _warn_refusal(d: _Decision, desired: float, view: PodView) -> None:
    quantity = build.format_allocation("cpu", desired)
    if d.memory.refusal_warned == quantity:
        return
    d.remember(refusal_warned=quantity)
    d.event(
        vocabulary.EVENT_WARNING,
        vocabulary.EVENT_RESIZE_INFEASIBLE,
        f"the node did not apply {quantity} CPU ({view.refusal}); back to "
        f"{build.format_allocation('cpu', view.applied or 0.0)}",
    )


def _resize(d: _Decision, period: Period, container: str, current: float, target: float) -> None:
    assert period.pod is not None and period.decision is not None
    d.actions.append(ResizeCpu(period.pod["metadata"]["name"], container, target))
    d.status["resizes"] = int(d.status.get("resizes") or 0) + 1
    d.actions.append(CountActuation(vocabulary.ACTUATION_RESIZE))
    d.event(
        vocabulary.EVENT_NORMAL,
        vocabulary.EVENT_RESIZED,
        f"cpu {build.format_allocation('cpu', current)} -> "
        f"{build.format_allocation('cpu', target)} in place: {period.decision.message}",
    )


def _restart_for_gpus(
    d: _Decision, period: Period, current: float, target: float, settings: LifecycleSettings
) -> None:
    # Deleting sends SIGTERM: the trainer checkpoints and exits; the next periods see the
    # pods terminating, then gone, and create them with the new count (state.allocation).
    assert period.pod is not None and period.decision is not None
    d.delete_trainer(period.pod, settings, None)
    d.status["restarts"] = int(d.status.get("restarts") or 0) + 1
    d.actions.append(CountActuation(vocabulary.ACTUATION_RESTART))
    d.event(
        vocabulary.EVENT_NORMAL,
        vocabulary.EVENT_RESTARTING,
        f"nvidia.com/gpu {current:g} -> {target:g}: checkpoint, restart and resume "
        f"({period.decision.message})",
    )


def _run_conditions(
    d: _Decision,
    period: Period,
    condition: str,
    message: str,
    settings: LifecycleSettings,
) -> list[dict[str, Any]]:
    """The law's condition, Stalled and DeadlineMissed, with the Events of what turned."""
    conditions = list(d.status.get("conditions") or period.conditions)
    after = build.conditions_for_decision(
        conditions,
        condition,
        message,
        now_s=period.now_s,
        generation=period.generation,
        deadline_was_past=period.deadline_was_past,
    )
    after = _stall_conditions(d, period, after, settings)
    _transition_events(d, conditions, after)
    return after


def _stall_conditions(
    d: _Decision,
    period: Period,
    conditions: list[dict[str, Any]],
    settings: LifecycleSettings,
) -> list[dict[str, Any]]:
    """Stalled: the trainer runs but its steps have not moved for the stall timeout (a
    period with no progress sample says nothing about steps: Stalled stays as it is).
    DeadlineMissed: the deadline passed while steps remain, even with no progress read."""
    observation = period.observation
    if observation is not None:
        return _stalled(d, period, observation, conditions, settings)
    return build.conditions_for_unread_progress(
        conditions,
        period.deadline_s,
        best_effort=period.spec.best_effort,
        now_s=period.now_s,
        generation=period.generation,
    )


def _stalled(
    d: _Decision,
    period: Period,
    observation: control.Observation,
    conditions: list[dict[str, Any]],
    settings: LifecycleSettings,
) -> list[dict[str, Any]]:
    """Stalled turns True when the steps seen have not moved for the stall timeout (with a
    Warning Event), and False once they move again."""
    now_s = period.now_s
    watch = jobperiod.StepWatch(d.memory.last_steps, d.memory.last_progress_s)
    watch = watch.seen(observation.steps_done, now_s)
    d.remember(last_steps=watch.steps, last_progress_s=watch.moved_s)
    stalled_for = watch.still_for_s(now_s)
    after = build.conditions_for_stall(
        conditions, stalled_for, settings.stall_timeout_s, now_s=now_s, generation=period.generation
    )
    if build.became_true(conditions, after, vocabulary.CONDITION_STALLED):
        d.event(
            vocabulary.EVENT_WARNING,
            vocabulary.EVENT_STALLED,
            jobperiod.stalled_message(stalled_for),
        )
    return after


TRANSITION_EVENTS = (
    (vocabulary.CONDITION_INFEASIBLE, vocabulary.EVENT_INFEASIBLE),
    (vocabulary.CONDITION_AT_RISK, vocabulary.EVENT_AT_RISK),
    (vocabulary.CONDITION_DEADLINE_MISSED, vocabulary.EVENT_DEADLINE_MISSED),
    (vocabulary.CONDITION_METRICS_UNAVAILABLE, vocabulary.EVENT_METRICS_UNAVAILABLE),
)
"""Conditions announced by a Warning Event when they turn True."""


def _transition_events(
    d: _Decision, before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> None:
    for type_, reason in TRANSITION_EVENTS:
        if not build.became_true(before, after, type_):
            continue
        condition = build.get_condition(after, type_) or {}
        if condition.get("reason") == vocabulary.REASON_DEADLINE_IN_PAST:
            continue  # announced when the deadline was set
        if type_ == vocabulary.CONDITION_AT_RISK and build.condition_is_true(
            after, vocabulary.CONDITION_INFEASIBLE
        ):
            continue  # Infeasible says more (and was announced when it turned True)
        d.event(vocabulary.EVENT_WARNING, reason, str(condition.get("message", "")))
    if build.condition_is_true(
        before, vocabulary.CONDITION_METRICS_UNAVAILABLE
    ) and not build.condition_is_true(after, vocabulary.CONDITION_METRICS_UNAVAILABLE):
        d.event(
            vocabulary.EVENT_NORMAL,
            vocabulary.EVENT_METRICS_RECOVERED,
            "progress is readable again",
        )


def _note_admission(d: _Decision, period: Period, grant: planner.Grant | None) -> None:
    """Record the planner's verdict in ``status.admission`` and the Admitted condition;
    announce a job queued, admitted after waiting, displaced or shorted."""
    if grant is None:
        return
    before = d.status.get("admission")
    d.status["admission"] = grant.verdict
    d.status["conditions"] = jobperiod.conditions_for_verdict(
        list(d.status.get("conditions") or period.conditions),
        grant,
        now_s=period.now_s,
        generation=period.generation,
    )
    if before == grant.verdict:
        return
    announced = {
        vocabulary.VERDICT_QUEUED: (vocabulary.EVENT_WARNING, vocabulary.EVENT_QUEUED),
        vocabulary.VERDICT_PREEMPTED: (vocabulary.EVENT_WARNING, vocabulary.EVENT_PREEMPTED),
        vocabulary.VERDICT_SHORTED: (vocabulary.EVENT_WARNING, vocabulary.EVENT_SHORTED),
    }.get(grant.verdict)
    if announced is None and before in WAITING:
        announced = (vocabulary.EVENT_NORMAL, vocabulary.EVENT_ADMITTED)
    if announced is not None:
        d.event(*announced, jobperiod.verdict_message(grant))


# --- reading the trainer's pods ---------------------------------------------------------------


def read_allocation(
    spec: JobSpec, pod: Mapping[str, Any], workers: Sequence[Mapping[str, Any]]
) -> PodView:
    """What the trainer holds, asks for, and whether a CPU resize is landing or refused."""
    container = spec.trainer_container["name"]
    if spec.resources.mode == "gpu":
        count = group_allocation(pod, workers, container, "gpu")
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


def group_allocation(
    leader: Mapping[str, Any], workers: Sequence[Mapping[str, Any]], container: str, mode: str
) -> float | None:
    """The allocation the trainer's pods hold together (None while unknown)."""
    held = [build.pod_allocation(p, container, mode) for p in [leader, *workers]]
    return None if any(h is None for h in held) else sum(h or 0.0 for h in held)


def _observe(
    pod: Mapping[str, Any],
    view: PodView,
    read: progress.Progress | progress.MetricsError | None,
    now_s: float,
) -> tuple[control.Observation | None, float | None, str]:
    """A progress sample and epochs done, or why there is none (``""`` when there is)."""
    if view.applied is None:
        return None, None, "allocation in effect is not known yet"
    if read is None:
        return None, None, f"no progress read for pod {pod['metadata']['name']}"
    if isinstance(read, progress.MetricsError):
        return None, None, str(read)
    observation = progress.observation_from_progress(read, now_s, view.applied, view.pending)
    return observation, read.epochs_done, ""


def _exited_early(status: Mapping[str, Any], pod: Mapping[str, Any], container: str) -> str | None:
    """Why a trainer that exited 0 is not done (None: it is). Its termination message
    (``steps=DONE/PLANNED``, written by decor_trainer) decides; without one, the last
    progress read must have covered every planned step."""
    steps = build.termination_steps(pod, container)
    if steps is None:
        done = float(status.get("stepsDone") or 0)
        planned = float(status.get("stepsTotal") or 0)
        if planned > 0 and done >= planned:
            return None
        seen = f"{done:.0f} of {planned:.0f}" if planned > 0 else "no progress"
        return f"{vocabulary.REASON_EXITED_EARLY}: exited 0 with {seen} steps seen"
    done, planned = steps
    if done >= planned:
        return None
    return f"{vocabulary.REASON_EXITED_EARLY}: exited 0 at step {done:.0f} of {planned:.0f}"


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
