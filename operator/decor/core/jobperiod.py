"""One job's period, the parts every runtime shares: the law's settings and start, the
best-effort rule on the law's decision, the demand the job gives the planner, how the
planner's verdict is told (and the Admitted condition it sets), and when a trainer whose
steps stand still is Stalled.

The operator (``lifecycle`` and ``job``) and the local runtime (``local``) both run a job's
period with these functions, so the two cannot drift apart; the cluster simulation
(``bench.cluster_sim``) builds its demands with :func:`demand`. Where a runtime differs on
purpose, it says so through a parameter: the local runtime caps ``max`` at the machine's
cores and may override the policy (``decor run --policy``).

Pure: no clock, no I/O. Allocations are cores (CPU) or GPU counts; times are Unix seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from decor.api import vocabulary
from decor.api.model import JobSpec, format_time
from decor.core import build, control, planner, quota

BEST_EFFORT_HORIZON_S = 30 * 86400.0
"""The horizon a best-effort job's law plans over (it has no deadline): its law only learns
its speed, for the planner's marginal gains."""
BEST_EFFORT_MESSAGE = "best effort: trains on capacity no deadline job needs"
"""The law's message for a best-effort job (it asks for MAX, which no deadline job needs)."""
RUNNING_VERDICTS = (
    vocabulary.VERDICT_ADMITTED,
    vocabulary.VERDICT_SHORTED,
    vocabulary.VERDICT_BEST_EFFORT,
)
"""The planner's verdicts under which a job's trainer runs (its Admitted condition is True)."""
WAITING_VERDICTS = (vocabulary.VERDICT_QUEUED, vocabulary.VERDICT_PREEMPTED)
"""The planner's verdicts under which a job holds no trainer and waits."""
NEED_BISECTIONS = 40
"""Halvings of [min, max] when a need is read off a speed curve (to far below a millicore)."""
NEED_RESOLUTION = 1000.0
"""A need read off a speed curve is rounded up to 1 / this (a thousandth: a millicore)."""


# --- the law -----------------------------------------------------------------------------


def law_deadline_s(spec: JobSpec, start_s: float) -> float:
    """The deadline the law aims at (Unix s): the job's, or for a best-effort job (which has
    none) the end of :data:`BEST_EFFORT_HORIZON_S` after its start."""
    if spec.best_effort:
        return start_s + BEST_EFFORT_HORIZON_S
    return spec.deadline_s(start_s)


def law_settings(
    spec: JobSpec,
    start_s: float,
    *,
    max_allocation: float | None = None,
    policy: str | None = None,
) -> control.Settings:
    """The law's settings for a job that started at ``start_s`` (Unix s), from its spec (the
    deadline: :func:`law_deadline_s`; a deadline moved outside the spec, as the local
    runtime's ``decor deadline`` does, is a ``replace`` of ``deadline_s``).

    A runtime's own limits: ``max_allocation`` caps ``spec.resources.max`` (and ``min`` with it: the local
    runtime's cores), ``policy`` overrides ``spec.control.policy`` (``decor run --policy``).
    """
    r, c = spec.resources, spec.control
    high = r.max if max_allocation is None else min(r.max, max_allocation)
    tuned = {
        name: value
        for name, value in (
            ("k", c.k),
            ("ti_s", c.ti_s),
            ("safety_margin_s", c.safety_margin_s),
            ("restart_cost_s", c.restart_cost_s),
            ("gpu_max_restarts", c.max_restarts),
        )
        if value is not None
    }
    return control.Settings(
        mode=r.mode,
        min_allocation=min(r.min, high),
        max_allocation=high,
        start_s=start_s,
        deadline_s=law_deadline_s(spec, start_s),
        policy=policy or c.policy,
        period_s=c.period_s,
        **tuned,  # type: ignore[arg-type]
    )


def law_start(spec: JobSpec, settings: control.Settings, now_s: float) -> control.State:
    """The law's state when the job starts at ``now_s``: where ``decor`` starts
    (``control.start_allocation``: the spec's initial, or MAX when its estimate says the
    deadline is tight), and MAX when the deadline has already passed."""
    if deadline_passed(spec, settings, now_s):
        return control.initial_state(settings, settings.max_allocation)
    r = spec.resources
    start = control.start_allocation(
        settings, r.initial, r.initial_given, spec.planned_steps, spec.estimate
    )
    return control.initial_state(settings, start)


def deadline_passed(spec: JobSpec, settings: control.Settings, now_s: float) -> bool:
    """Whether the job's deadline is at or before ``now_s`` (never, for best effort)."""
    return not spec.best_effort and settings.deadline_s <= now_s


def best_effort_decision(
    decision: control.Decision, settings: control.Settings, observed: bool
) -> control.Decision:
    """A best-effort job's law only learns its speed: it asks for MAX (what no deadline job
    needs), is OnTrack while it reports progress (``observed``), and predicts no finish. A
    decision that every step is done (Complete) stays as it is."""
    if decision.condition == vocabulary.CONDITION_COMPLETE:
        return decision
    return replace(
        decision,
        allocation=settings.max_allocation,
        condition=vocabulary.CONDITION_ON_TRACK if observed else decision.condition,
        message=BEST_EFFORT_MESSAGE,
        eta_s=None,
    )


def best_effort_followed(
    followed: control.Decision, decided: control.Decision, granted: float, max_allocation: float
) -> control.Decision:
    """A best-effort job after its grant (``control.follow_grant``): less than MAX is what
    best effort means, not a risk; its condition stays the law's (``decided``)."""
    return replace(
        followed,
        condition=decided.condition,
        message=f"best effort: {granted:g} of up to {max_allocation:g} "
        "(capacity no deadline job needs)",
    )


# --- a trainer that runs but takes no step ----------------------------------------------------


STALL_TIMEOUT_S = 120.0
"""A running trainer that completes no step for this long is reported Stalled (the default of
both runtimes; the operator's ``DECOR_STALL_TIMEOUT_SECONDS`` changes it)."""


@dataclass(frozen=True)
class StepWatch:
    """The steps a trainer was last seen at and when they last moved (Unix s): a trainer
    whose steps stay still longer than a timeout is Stalled."""

    steps: float | None = None
    moved_s: float | None = None

    def seen(self, steps_done: float, now_s: float) -> StepWatch:
        """The watch after a progress sample of ``steps_done`` steps at ``now_s``."""
        return self if steps_done == self.steps else StepWatch(steps_done, now_s)

    def still_for_s(self, now_s: float) -> float:
        """Seconds the steps have not moved (0 before any sample)."""
        return 0.0 if self.moved_s is None else now_s - self.moved_s


def stalled_message(still_s: float) -> str:
    """What is said when a trainer turns Stalled, its steps still for ``still_s`` seconds."""
    return f"the trainer runs but completed no step for {still_s:.0f}s"


# --- the demand --------------------------------------------------------------------------


def steps_remaining(
    observation: control.Observation | None, steps_done: float, steps_total: float
) -> float:
    """Mini-batches left (>= 0): by this period's sample, else by the last one known
    (``steps_done`` of ``steps_total``; the spec's plan before any)."""
    if observation is not None:
        return max(0.0, observation.steps_total - observation.steps_done)
    return max(0.0, steps_total - steps_done)


def steps_left(
    status: Mapping[str, Any], spec: JobSpec, observation: control.Observation | None
) -> float:
    """:func:`steps_remaining` of a job from its status (``stepsDone`` of ``stepsTotal``; the
    spec's plan before any was read)."""
    planned = float(status.get("stepsTotal") or spec.planned_steps)
    return steps_remaining(observation, float(status.get("stepsDone") or 0), planned)


def training_again_by_s(
    spec: JobSpec, settings: control.Settings, state: control.State, remaining: float
) -> float | None:
    """The latest time a job with no trainer (suspended) must be training again for max to
    finish its ``remaining`` steps by the deadline, by its speed curve (the law's fit, else
    ``spec.estimate``); the new pod's start-up is not counted. None for best effort or with
    no curve."""
    if spec.best_effort:
        return None
    curve = _speed_curve(spec, settings, state)
    if curve is None:
        return None
    return settings.deadline_s - remaining * curve(settings.max_allocation)


def estimated_curve(step_s: float, allocation: float) -> Callable[[float], float]:
    """Seconds per step from ``spec.estimate`` (``step_s`` at ``allocation``), assuming
    linear speed-up from it."""
    return lambda u: step_s * allocation / max(u, 1e-9)


def need_from_curve(
    curve: Callable[[float], float],
    steps: float,
    time_left_s: float,
    low: float,
    high: float,
) -> float:
    """The least allocation in [low, high] whose curve finishes ``steps`` within
    ``time_left_s`` (``high`` when none does), rounded up to a thousandth."""
    if time_left_s <= 0 or steps * curve(high) > time_left_s:
        return high
    lo, hi = low, high
    if steps * curve(lo) <= time_left_s:
        return lo
    for _ in range(NEED_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if steps * curve(mid) <= time_left_s:
            hi = mid
        else:
            lo = mid
    return math.ceil(hi * NEED_RESOLUTION) / NEED_RESOLUTION


def admitted(starting: bool, verdict: str | None) -> bool:
    """Whether the planner has promised the job its deadline: one that holds a trainer has
    been admitted; one still to start is while its last verdict is not a wait (none yet,
    Queued, Preempted)."""
    return not (starting and verdict in (None, *WAITING_VERDICTS))


def verdict_message(grant: planner.Grant, start_s: float | None = None) -> str:
    """The planner's reason for its verdict, with the earliest deadline the job could meet
    now when the planner told one (and, given the job's start ``start_s``, how many seconds
    after it): the Admitted condition's message, and the local runtime's line."""
    message, earliest_s = grant.reason, grant.earliest_deadline_s
    if earliest_s is None or "earliest deadline" in message:
        return message
    message = f"{message}; earliest deadline it could meet now: {format_time(earliest_s)}"
    if start_s is not None:
        message += f" ({earliest_s - start_s:.0f}s after its start)"
    return message


def conditions_for_verdict(
    conditions: Sequence[Mapping[str, Any]],
    grant: planner.Grant,
    *,
    now_s: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """The Admitted condition after the planner's verdict: True under a verdict the trainer
    runs under (:data:`RUNNING_VERDICTS`), False while it waits; the verdict is the reason,
    :func:`verdict_message` the message."""
    return build.set_condition(
        conditions,
        vocabulary.CONDITION_ADMITTED,
        grant.verdict in RUNNING_VERDICTS,
        grant.verdict,
        verdict_message(grant),
        now_s=now_s,
        generation=generation,
    )


def no_progress_message(reason: str | None, holding: float) -> str:
    """The law's message for a period without a progress sample: why none was read (None:
    unknown), and the allocation held meanwhile (cores or GPUs)."""
    return f"{reason or 'no progress sample'}; holding {holding:g}"


def demand(
    *,
    key: str,
    mode: str,
    need: float,
    min_allocation: float,
    max_allocation: float,
    current: float,
    steps_remaining: float,
    deadline_s: float | None,
    arrival_s: float,
    admitted: bool,
    priority: int = 0,
    node: str | None = None,
    last_node: str | None = None,
    step_time_s: Callable[[float], float] | None = None,
    restart_cost_s: float = 0.0,
    gpus_per_pod: int = 0,
    nodes: tuple[str, ...] = (),
    uncapped_max: float = 0.0,
    pod_charge: quota.Amounts = (),
    pod_facts: quota.PodFacts = quota.ANY_POD,
    planned_peak: float = 0.0,
) -> planner.Demand:
    """The planner's record of one job (every field as ``planner.Demand`` has it), with the
    rules every runtime keeps: a job with no deadline (None or infinite: best effort) gives
    the planner None; the need and the ``planned_peak`` never pass ``max_allocation``; no
    steps remaining below 0."""
    return planner.Demand(
        key=key,
        mode=mode,
        need=min(max_allocation, need),
        min_allocation=min_allocation,
        max_allocation=max_allocation,
        current=current,
        steps_remaining=max(0.0, steps_remaining),
        deadline_s=deadline_s if deadline_s is not None and math.isfinite(deadline_s) else None,
        arrival_s=arrival_s,
        priority=priority,
        admitted=admitted,
        node=node,
        last_node=last_node,
        step_time_s=step_time_s,
        restart_cost_s=restart_cost_s,
        gpus_per_pod=gpus_per_pod,
        nodes=nodes,
        uncapped_max=uncapped_max,
        pod_charge=pod_charge,
        pod_facts=pod_facts,
        planned_peak=min(max_allocation, planned_peak),
    )


def _restarting_for_the_law(spec: JobSpec, state: control.State) -> bool:
    """A change of GPU count the law made is being carried out (pending until progress
    resumes): the trainer created for it gets that count, not the curve's need rounded up
    (the law may run fewer on purpose, the count above later), and the planner still holds
    the count planned for later."""
    return spec.resources.mode == "gpu" and state.change_pending_since_s is not None


def _speed_curve(
    spec: JobSpec, settings: control.Settings, state: control.State
) -> Callable[[float], float] | None:
    """The job's step time at an allocation: the law's fit, else ``spec.estimate`` (linear
    speed-up); None when neither exists."""
    curve = control.step_time_curve(state, settings)
    if curve is None and spec.estimate is not None:
        curve = estimated_curve(*spec.estimate)
    return curve


def job_demand(
    spec: JobSpec,
    settings: control.Settings,
    state: control.State,
    now_s: float,
    *,
    key: str,
    need: float | None,
    starting: bool,
    planned_peak: float = 0.0,
    remaining: float,
    current: float,
    arrival_s: float,
    admitted: bool,
    most: float | None = None,
    node: str | None = None,
    last_node: str | None = None,
    nodes: tuple[str, ...] = (),
    pod_charge: quota.Amounts = (),
    pod_facts: quota.PodFacts = quota.ANY_POD,
) -> planner.Demand:
    """What a job of ``spec`` asks of this period's planner (:func:`demand`).

    ``need``: the law's decision (None: it did not decide: the law's allocation, or for a job
    ``starting`` its trainer, unless :func:`_restarting_for_the_law`, the least its speed curve
    finishes ``remaining`` steps with by the deadline, moved or not; the curve is the law's fit,
    else ``spec.estimate``, linear speed-up). ``most``: ``settings.max_allocation`` under a cap
    that lasts a while (None: no cap); the law's ``useful_max`` caps it and ``uncapped_max``.
    ``planned_peak``: the switch up the law planned (``Decision.planned_peak``; 0: none)."""
    top = control.useful_max(state, settings, now_s) or settings.max_allocation
    high = top if most is None else min(most, top)
    curve = _speed_curve(spec, settings, state)
    deadline_s = math.inf if spec.best_effort else settings.deadline_s
    if _restarting_for_the_law(spec, state):
        planned_peak = planned_peak or state.planned_peak or 0.0
    elif need is None and starting and curve is not None and remaining > 0:
        need = need_from_curve(curve, remaining, deadline_s - now_s, settings.min_allocation, high)
    return demand(
        key=key,
        mode=spec.resources.mode,
        need=state.allocation if need is None else need,
        min_allocation=settings.min_allocation,
        max_allocation=high,
        uncapped_max=top,
        current=current,
        steps_remaining=remaining,
        deadline_s=deadline_s,
        arrival_s=arrival_s,
        priority=spec.priority,
        admitted=admitted,
        node=node,
        last_node=last_node,
        gpus_per_pod=spec.resources.gpus_per_pod,
        nodes=nodes,
        step_time_s=curve,
        restart_cost_s=state.restart_cost_s or settings.restart_cost_s,
        pod_charge=pod_charge,
        pod_facts=pod_facts,
        planned_peak=planned_peak,
    )
