"""The trainer's lifecycle as pure steps: given the job, its pods, its status, the
controller's memory and the clock, the actions a period takes (``decor.core.lifecycle``).

No cluster, no facade: each case builds the pods as the API server would show them and
compares the actions and the status that follow.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from decor.api import vocabulary
from decor.api.model import format_time, parse_job
from decor.core import build, group, lifecycle, planner
from decor.core.lifecycle import (
    CountActuation,
    DeletePod,
    LifecycleSettings,
    Memory,
    Outcome,
    Period,
    PostEvent,
    ResizeCpu,
    WriteStatus,
)
from decor.core.policy import CheckpointStorage, TemplatePolicy
from decor.core.progress import Progress
from support.scenario import START_S, job_body

NOW_S = START_S + 100.0
SETTINGS = LifecycleSettings(
    startup_grace_s=60.0,
    max_pod_failures=2,
    unschedulable_wait_s=60.0,
    unschedulable_hold_s=300.0,
    stall_timeout_s=30.0,
    template_policy=TemplatePolicy(),
)
RUNNING = {"phase": "Running", "podName": "resnet-0", "podsCreated": 1, "podFailures": 0}


def started(**body: Any) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    """A job (``job_body`` options) whose first period ran at START_S: body, spec, status."""
    manifest = job_body("resnet", **{"initial": "2", **body})
    spec = parse_job(manifest)
    opened, _ = lifecycle.begin({}, Memory(), manifest, spec, 1, START_S)
    return manifest, spec, opened.status


def period_of(status: dict[str, Any], **body: Any) -> tuple[Period, dict[str, Any]]:
    """The period at NOW_S of a started job whose status also holds ``status``."""
    manifest, spec, first = started(**body)
    _, period = lifecycle.begin({**first, **status}, Memory(), manifest, spec, 1, NOW_S)
    return period, {**first, **status}


def trainer_pod(
    period: Period,
    name: str = "resnet-0",
    *,
    phase: str = "Running",
    cores: float = 2.0,
    restarts: int = 0,
    **state: Any,
) -> dict[str, Any]:
    """The trainer pod as the API server shows it; ``state``: the container's state."""
    pod = group.build_trainer_group(
        period.body,
        period.spec,
        cores,
        name,
        rendezvous_ip=None,
        sidecar_image=None,
        checkpoint_storage=CheckpointStorage(volume="claim"),
    )[0]
    millis = f"{round(cores * 1000)}m"
    pod["spec"]["nodeName"] = "node-a"
    pod["status"] = {
        "phase": phase,
        "containerStatuses": [
            {
                "name": "trainer",
                "restartCount": restarts,
                "state": state or {"running": {"startedAt": format_time(START_S)}},
                "resources": {"limits": {"cpu": millis}, "requests": {"cpu": millis}},
            }
        ],
    }
    return pod


def progress(steps: float) -> dict[str, Progress]:
    return {"resnet-0": Progress(steps, 1000.0, NOW_S - 1.0, epochs_done=steps / 100)}


def pods_outcome(
    period: Period,
    status: dict[str, Any],
    pods: list[dict[str, Any]],
    memory: Memory | None = None,
    read: dict[str, Any] | None = None,
) -> Outcome:
    return lifecycle.pods(period, status, memory or Memory(), pods, read or {}, SETTINGS)


def events(outcome: Outcome) -> list[str]:
    return [a.reason for a in outcome.actions if isinstance(a, PostEvent)]


def kube_actions(outcome: Outcome) -> list[Any]:
    """The actions without their Events' messages."""
    return [
        a.reason if isinstance(a, PostEvent) else a
        for a in outcome.actions
        if not isinstance(a, lifecycle.LogWarning)
    ]


# --- begin -----------------------------------------------------------------------------------


def test_the_first_period_records_the_start_with_a_forced_write() -> None:
    manifest = job_body("resnet", initial="2")
    opened, period = lifecycle.begin({}, Memory(), manifest, parse_job(manifest), 1, START_S)
    assert opened.actions == (WriteStatus(force=True),)
    assert opened.status["phase"] == vocabulary.PHASE_PENDING
    assert opened.status["startTime"] == format_time(START_S)
    assert (period.state.allocation, period.deadline_s) == (2.0, START_S + 600.0)


def test_a_moved_deadline_is_announced_without_a_write() -> None:
    _, status = period_of({})
    manifest = job_body("resnet", initial="2", duration="300s")
    opened, period = lifecycle.begin(status, Memory(), manifest, parse_job(manifest), 2, NOW_S)
    assert events(opened) == [vocabulary.EVENT_DEADLINE_CHANGED]
    assert not any(isinstance(a, WriteStatus) for a in opened.actions)
    assert period.deadline_s == START_S + 300.0


# --- pods: what happens to the trainer --------------------------------------------------------


def test_no_pod_yet_asks_the_planner_to_create_one() -> None:
    period, status = period_of({})
    outcome = pods_outcome(period, status, [])
    assert outcome.actions == ()
    assert outcome.plan is not None and outcome.plan.period.step == lifecycle.STEP_CREATE


@pytest.mark.parametrize(
    ("failures", "expected", "keep_going"),
    [
        (0, [vocabulary.EVENT_POD_LOST], None),  # recreated from its checkpoint
        (2, [vocabulary.EVENT_FAILED, WriteStatus(force=True)], False),  # past the budget
    ],
)
def test_a_pod_gone_unasked_is_replaced_until_the_budget_is_spent(
    failures: int, expected: list[Any], keep_going: bool | None
) -> None:
    period, status = period_of({**RUNNING, "podFailures": failures})
    outcome = pods_outcome(period, status, [])
    assert kube_actions(outcome) == expected
    assert outcome.status["podFailures"] == failures + 1
    assert outcome.keep_going is keep_going
    assert (outcome.plan is not None) is (keep_going is None)


def test_a_pod_still_saving_its_checkpoint_is_waited_for_on_its_node() -> None:
    period, status = period_of({**RUNNING, "phase": vocabulary.PHASE_RESTARTING})
    going = trainer_pod(period)
    going["metadata"]["deletionTimestamp"] = format_time(NOW_S + 20)
    outcome = pods_outcome(period, status, [going])
    assert outcome.actions == ()
    assert outcome.plan is not None
    assert (outcome.plan.period.step, outcome.plan.node) == (lifecycle.STEP_HOLD, "node-a")


def test_the_pod_made_again_asks_for_the_node_its_last_pod_was_on() -> None:
    period, status = period_of({**RUNNING, "phase": vocabulary.PHASE_RESTARTING})
    going = trainer_pod(period)
    going["metadata"]["deletionTimestamp"] = format_time(NOW_S + 20)
    held = pods_outcome(period, status, [going])
    assert held.memory.last_node == "node-a"
    assert held.plan is not None and held.plan.last_node is None  # it is on its node still
    outcome = pods_outcome(period, held.status, [], held.memory)  # the pod is gone
    assert outcome.plan is not None and outcome.plan.period.step == lifecycle.STEP_CREATE
    assert (outcome.plan.node, outcome.plan.last_node) == (None, "node-a")
    assert pods_outcome(period, held.status, []).plan.last_node is None  # nothing remembered


def test_only_one_trainer_runs_an_extra_pod_is_deleted() -> None:
    period, status = period_of(RUNNING)
    extra = trainer_pod(period, "resnet-7")
    outcome = pods_outcome(period, status, [trainer_pod(period), extra])
    assert outcome.actions[0] == DeletePod("resnet-7")


def test_suspend_deletes_the_trainer_with_its_grace_period() -> None:
    period, status = period_of(RUNNING, suspend=True)
    outcome = pods_outcome(period, status, [trainer_pod(period)])
    assert kube_actions(outcome) == [
        DeletePod("resnet-0", 30),
        CountActuation(vocabulary.ACTUATION_SUSPEND),
        vocabulary.EVENT_SUSPENDED,
        WriteStatus(),
    ]
    assert outcome.status["phase"] == vocabulary.PHASE_SUSPENDED and outcome.plan is None


def suspended_at(
    now_s: float, status: dict[str, Any], duration: str = "600s"
) -> tuple[Period, dict[str, Any]]:
    """A job suspended at ``now_s``: 800 of its 1,000 steps left, 0.5 s a step at one core by
    its estimate (0.125 s at its max of 4: 100 s of work there), ``duration`` from START_S."""
    estimate = {"stepSeconds": 0.5, "allocation": "1"}
    manifest, spec, first = started(suspend=True, estimate=estimate, duration=duration)
    status = {**first, "stepsDone": 200, "stepsTotal": 1000, **status}
    _, period = lifecycle.begin(status, Memory(), manifest, spec, 1, now_s)
    return period, status


def test_the_suspended_event_says_by_when_the_job_must_train_again() -> None:
    period, status = suspended_at(NOW_S, RUNNING)
    outcome = pods_outcome(period, status, [trainer_pod(period)])
    (event,) = [a for a in outcome.actions if isinstance(a, PostEvent)]
    # 600 s after the start, less 800 steps at 0.125 s (the estimate's speed at max)
    assert f"training again by {format_time(START_S + 500.0)}" in event.message, event.message
    conditions = outcome.status.get("conditions") or []
    infeasible = build.get_condition(conditions, vocabulary.CONDITION_INFEASIBLE) or {}
    assert infeasible.get("reason") != vocabulary.REASON_SUSPENDED_TOO_LONG


def test_a_job_suspended_past_that_time_is_infeasible_until_a_later_deadline() -> None:
    suspended = {**RUNNING, "phase": vocabulary.PHASE_SUSPENDED}
    period, status = suspended_at(START_S + 499.0, suspended)
    assert not pods_outcome(period, status, []).actions[:-1]  # in time: nothing to say
    period, status = suspended_at(START_S + 501.0, suspended)
    past = pods_outcome(period, status, [])
    assert kube_actions(past) == [vocabulary.EVENT_INFEASIBLE, WriteStatus()]
    infeasible = build.get_condition(past.status["conditions"], vocabulary.CONDITION_INFEASIBLE)
    assert (infeasible["status"], infeasible["reason"]) == (
        "True",
        vocabulary.REASON_SUSPENDED_TOO_LONG,
    )
    assert format_time(START_S + 500.0) in infeasible["message"]
    assert past.status["phase"] == vocabulary.PHASE_SUSPENDED
    again = pods_outcome(period, past.status, [])  # the next period: the same, no new Event
    assert kube_actions(again) == [WriteStatus()] and again.status == past.status
    # the deadline moved 100 s later: it may wait until START_S + 600 again
    period, _ = suspended_at(START_S + 510.0, suspended, duration="700s")
    moved = pods_outcome(period, past.status, [])
    cleared = build.get_condition(moved.status["conditions"], vocabulary.CONDITION_INFEASIBLE)
    assert (cleared["status"], cleared["reason"]) == ("False", vocabulary.REASON_FEASIBLE)


def test_a_suspended_job_with_no_speed_known_says_no_time() -> None:
    manifest, spec, first = started(suspend=True)
    _, period = lifecycle.begin({**first, **RUNNING}, Memory(), manifest, spec, 1, NOW_S)
    outcome = pods_outcome(period, {**first, **RUNNING}, [trainer_pod(period)])
    (event,) = [a for a in outcome.actions if isinstance(a, PostEvent)]
    assert event.message.endswith("controller state kept"), event.message


def test_a_failed_pod_is_deleted_at_once_and_replaced() -> None:
    period, status = period_of(RUNNING)
    failed = trainer_pod(period, phase="Failed")
    failed["status"]["reason"] = "Evicted"
    outcome = pods_outcome(period, status, [failed])
    assert kube_actions(outcome) == [
        vocabulary.EVENT_POD_LOST,
        DeletePod("resnet-0", 0),
        WriteStatus(),
    ]
    assert (outcome.status["phase"], outcome.status["podFailures"]) == (
        vocabulary.PHASE_RESTARTING,
        1,
    )


def test_a_trainer_crashing_past_the_budget_fails_the_job() -> None:
    period, status = period_of(RUNNING)
    crashing = trainer_pod(period, restarts=3, waiting={"reason": "CrashLoopBackOff"})
    outcome = pods_outcome(period, status, [crashing])
    assert kube_actions(outcome) == [
        DeletePod("resnet-0", 0),
        vocabulary.EVENT_FAILED,
        WriteStatus(force=True),
    ]
    assert (outcome.status["phase"], outcome.keep_going) == (vocabulary.PHASE_FAILED, False)


def test_a_trainer_that_exited_after_its_last_step_completes_the_job() -> None:
    period, status = period_of(RUNNING)
    terminated = {"exitCode": 0, "message": "steps=1000/1000", "finishedAt": format_time(NOW_S)}
    outcome = pods_outcome(
        period, status, [trainer_pod(period, phase="Succeeded", terminated=terminated)]
    )
    assert kube_actions(outcome) == [vocabulary.EVENT_COMPLETED, WriteStatus(force=True)]
    assert (outcome.status["phase"], outcome.keep_going) == (vocabulary.PHASE_SUCCEEDED, False)


def test_a_trainer_that_exited_early_is_a_failed_pod() -> None:
    period, status = period_of(RUNNING)
    terminated = {"exitCode": 0, "message": "steps=400/1000", "finishedAt": format_time(NOW_S)}
    outcome = pods_outcome(
        period, status, [trainer_pod(period, phase="Succeeded", terminated=terminated)]
    )
    assert events(outcome) == [vocabulary.EVENT_POD_LOST]
    assert outcome.status["phase"] == vocabulary.PHASE_RESTARTING


def test_a_pod_unschedulable_too_long_falls_back_and_holds_the_fallback() -> None:
    period, status = period_of(
        {**RUNNING, "ranWith": "1", "podName": "llm-1"},
        mode="gpu",
        minimum="1",
        maximum="4",
        initial="1",
    )
    pending = trainer_pod(period, "llm-1", phase="Pending", cores=3.0)
    pending["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": format_time(NOW_S - 61.0),
            }
        ],
    }
    outcome = pods_outcome(period, status, [pending])
    assert kube_actions(outcome) == [
        DeletePod("llm-1", 0),
        vocabulary.EVENT_UNSCHEDULABLE,
        WriteStatus(),
    ]
    assert outcome.memory.ceiling == (1.0, NOW_S + 300.0)
    assert outcome.status["controller"]["allocation"] == 1.0
    assert lifecycle.capped(4.0, outcome.memory, NOW_S + 299.0) == 1.0
    assert lifecycle.capped(4.0, outcome.memory, NOW_S + 300.0) == 4.0


def test_a_trainer_still_starting_holds_what_it_has() -> None:
    period, status = period_of(RUNNING)
    outcome = pods_outcome(period, status, [trainer_pod(period)])
    assert outcome.actions == ()
    assert outcome.plan is not None
    assert (outcome.plan.period.step, outcome.plan.current) == (lifecycle.STEP_HOLD, 2.0)
    assert outcome.memory.first_running_s == {"resnet-0": NOW_S}


def test_a_running_trainer_with_progress_asks_what_the_law_decides() -> None:
    period, status = period_of(RUNNING)
    outcome = pods_outcome(period, status, [trainer_pod(period)], read=progress(100))
    assert outcome.plan is not None
    request = outcome.plan
    assert request.period.step == lifecycle.STEP_RUN and request.period.decision is not None
    assert request.need == request.period.decision.allocation
    assert (request.current, request.node) == (2.0, "node-a")
    assert outcome.memory.progress_seen == {"resnet-0"}


# --- after the planner ------------------------------------------------------------------------


def grant(verdict: str, allocation: float, reason: str = "r") -> planner.Grant:
    return planner.Grant("ml/resnet", allocation, "node-a", verdict, reason)


def test_a_queued_job_creates_nothing_and_says_so() -> None:
    period, status = period_of({})
    queued = grant(vocabulary.VERDICT_QUEUED, 0.0)
    assert lifecycle.new_trainer_allocation(period, Memory(), queued) is None
    outcome = lifecycle.create(period, status, Memory(), queued, None, False)
    assert kube_actions(outcome) == [vocabulary.EVENT_QUEUED, WriteStatus()]
    assert outcome.create is None and outcome.status["phase"] == vocabulary.PHASE_QUEUED


def test_an_admitted_job_with_room_creates_its_trainer_with_the_grant() -> None:
    period, status = period_of({})
    admitted = grant(vocabulary.VERDICT_ADMITTED, 3.0)
    allocation = lifecycle.new_trainer_allocation(period, Memory(), admitted)
    outcome = lifecycle.create(period, status, Memory(), admitted, allocation, True)
    assert outcome.create is not None
    assert (outcome.create.allocation, outcome.create.index) == (3.0, 0)
    assert outcome.status["controller"]["allocation"] == 3.0


def running_period(cores: float = 2.0, steps: float = 100) -> tuple[Period, dict[str, Any]]:
    period, status = period_of(RUNNING)
    outcome = pods_outcome(period, status, [trainer_pod(period, cores=cores)], read=progress(steps))
    assert outcome.plan is not None
    return outcome.plan.period, outcome.status


def test_a_preempted_trainer_is_deleted_and_the_job_queued() -> None:
    period, status = running_period()
    preempted = grant(vocabulary.VERDICT_PREEMPTED, 0.0)
    assert lifecycle.growth_wanted(period, Memory(), preempted) == 0.0
    outcome = lifecycle.run(period, status, Memory(), preempted, 0.0, SETTINGS)
    assert kube_actions(outcome) == [
        DeletePod("resnet-0", 30),
        CountActuation(vocabulary.ACTUATION_PREEMPT),
        vocabulary.EVENT_PREEMPTED,
        WriteStatus(),
    ]
    assert outcome.status["phase"] == vocabulary.PHASE_QUEUED


@pytest.mark.parametrize(
    ("granted", "room", "resized_to"),
    [
        (3.0, 1.0, 3.0),  # the node has room for the whole grow
        (3.0, 0.5, 2.5),  # a grow only as far as the node has room now
        (1.0, 0.0, 1.0),  # a shrink needs no room
        (2.0, 0.0, None),  # what it holds: nothing to do
    ],
)
def test_a_cpu_trainer_is_resized_in_place_as_far_as_the_room_allows(
    granted: float, room: float, resized_to: float | None
) -> None:
    period, status = running_period()
    admitted = grant(vocabulary.VERDICT_ADMITTED, granted)
    assert lifecycle.growth_wanted(period, Memory(), admitted) == max(0.0, granted - 2.0)
    outcome = lifecycle.run(period, status, Memory(), admitted, room, SETTINGS)
    resizes = [a for a in outcome.actions if isinstance(a, ResizeCpu)]
    expected = [] if resized_to is None else [ResizeCpu("resnet-0", "trainer", resized_to)]
    assert resizes == expected
    assert outcome.actions[-1] == WriteStatus()


def test_a_fallback_caps_the_grant_while_it_holds() -> None:
    period, _ = running_period()
    held = Memory(ceiling=(1.0, NOW_S + 10.0))
    assert lifecycle.run_target(period, held, grant(vocabulary.VERDICT_ADMITTED, 4.0)) == 1.0
    expired = replace(held, ceiling=(1.0, NOW_S))
    assert lifecycle.run_target(period, expired, grant(vocabulary.VERDICT_ADMITTED, 4.0)) == 4.0


@pytest.mark.parametrize(
    ("until_s", "ceiling", "stored"),
    [
        (NOW_S + 10.0, (1.0, NOW_S + 10.0), {"allocation": 1.0, "untilSeconds": NOW_S + 10.0}),
        (NOW_S, None, None),  # over: deleted from the status (merge patch)
    ],
)
def test_the_fallback_hold_is_read_back_from_the_status(
    until_s: float, ceiling: tuple[float, float] | None, stored: dict[str, float] | None
) -> None:
    manifest, spec, status = started()
    status["controller"][lifecycle.FALLBACK_HOLD] = {"allocation": 1.0, "untilSeconds": until_s}
    opened, _ = lifecycle.begin(status, Memory(), manifest, spec, 1, NOW_S)  # a new controller
    assert opened.memory.ceiling == ceiling
    assert opened.status["controller"][lifecycle.FALLBACK_HOLD] == stored


# --- what the API server refuses ---------------------------------------------------------------

QUOTA = (403, "exceeded quota: compute, requested: limits.cpu=1, used: limits.cpu=2")


def test_a_refused_call_is_tried_again_after_a_doubling_backoff_up_to_a_cap() -> None:
    delays = [lifecycle.refusal_delay_s(n) for n in range(1, 8)]
    assert delays == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    assert lifecycle.REFUSAL_RETRY_MAX_S == 300.0


def test_a_refused_resize_holds_what_runs_says_so_and_announces_itself_once() -> None:
    period, status = running_period()
    admitted = grant(vocabulary.VERDICT_ADMITTED, 3.0)
    ran = lifecycle.run(period, status, Memory(), admitted, 1.0, SETTINGS)
    asked = next(a for a in ran.actions if isinstance(a, ResizeCpu))
    assert asked == ResizeCpu("resnet-0", "trainer", 3.0)
    refused = lifecycle.resize_refused(period, status, ran.memory, admitted, SETTINGS, asked, QUOTA)
    # no resize, no actuation counted: one Warning Event, the status written
    assert kube_actions(refused)[0] == vocabulary.REASON_RESIZE_REFUSED
    assert not [a for a in refused.actions if isinstance(a, ResizeCpu | CountActuation)]
    assert refused.actions[-1] == WriteStatus()
    assert refused.status.get("resizes", 0) == 0
    assert refused.status["desiredAllocation"] == "2000m"
    assert refused.status["controller"]["allocation"] == 2.0  # the law follows what runs
    admitted_condition = next(
        c for c in refused.status["conditions"] if c["type"] == vocabulary.CONDITION_ADMITTED
    )
    assert (admitted_condition["status"], admitted_condition["reason"]) == ("True", "ResizeRefused")
    assert "exceeded quota" in admitted_condition["message"]
    refusal = refused.memory.resize_refusal
    assert refusal is not None
    assert (refusal.asked, refusal.held, refusal.refusals) == (3.0, 2.0, 1)
    assert refusal.retry_at_s == NOW_S + lifecycle.REFUSAL_RETRY_FIRST_S
    # while the backoff runs: capped at what it held, no resize asked, no Event
    assert lifecycle.capped(4.0, refused.memory, NOW_S + 5.0) == 2.0
    assert lifecycle.growth_wanted(period, refused.memory, admitted) == 0.0
    held = lifecycle.run(period, refused.status, refused.memory, admitted, 1.0, SETTINGS)
    assert not [a for a in held.actions if isinstance(a, ResizeCpu)]
    assert vocabulary.REASON_RESIZE_REFUSED not in events(held)
    # refused again after the backoff: no second Event for the same refusal, twice the wait
    later = replace(period, now_s=refusal.retry_at_s)
    retried = lifecycle.run(later, refused.status, refused.memory, admitted, 1.0, SETTINGS)
    again = next(a for a in retried.actions if isinstance(a, ResizeCpu))
    second = lifecycle.resize_refused(later, refused.status, retried.memory, admitted, SETTINGS,
                                      again, QUOTA)  # fmt: skip
    assert vocabulary.REASON_RESIZE_REFUSED not in events(second)
    assert second.memory.resize_refusal is not None
    assert second.memory.resize_refusal.refusals == 2
    assert second.memory.resize_refusal.retry_at_s == later.now_s + 20.0
    # refused for another reason (the API's status changed): announced
    other = lifecycle.resize_refused(later, refused.status, retried.memory, admitted, SETTINGS,
                                     again, (422, "invalid"))  # fmt: skip
    assert events(other)[0] == vocabulary.REASON_RESIZE_REFUSED


def test_a_refused_resize_is_forgotten_once_a_grow_went_through() -> None:
    period, status = running_period(cores=3.0)  # the pod grew since the refusal
    refusal = lifecycle.Refusal(1, 3.0, 2.0, 403, "exceeded quota", 1, NOW_S - 1.0)
    memory = Memory(resize_refusal=refusal)
    admitted = grant(vocabulary.VERDICT_ADMITTED, 3.0)
    outcome = lifecycle.run(period, status, memory, admitted, 0.0, SETTINGS)
    assert outcome.memory.resize_refusal is None
    admitted_condition = next(
        c for c in outcome.status["conditions"] if c["type"] == vocabulary.CONDITION_ADMITTED
    )
    assert admitted_condition["reason"] == vocabulary.VERDICT_ADMITTED


def test_a_new_generation_forgets_a_refusal() -> None:
    manifest, spec, status = started()
    refusal = lifecycle.Refusal(1, 3.0, 2.0, 403, "exceeded quota", 1, NOW_S + 100.0)
    memory = Memory(resize_refusal=refusal, create_refusal=refusal)
    same, _ = lifecycle.begin(status, memory, manifest, spec, 1, NOW_S)
    assert same.memory.resize_refusal == refusal and same.memory.create_refusal == refusal
    patched, _ = lifecycle.begin(status, memory, manifest, spec, 2, NOW_S)
    assert patched.memory.resize_refusal is None and patched.memory.create_refusal is None


@pytest.mark.parametrize(
    ("allocation", "now_s", "waits"),
    [
        (2.0, NOW_S, True),  # the same pod before the backoff ends
        (2.5, NOW_S, True),  # a bigger one would be refused too
        (1.0, NOW_S, False),  # a smaller pod may fit the quota: tried at once
        (2.0, NOW_S + 10.0, False),  # the backoff is over
    ],
)
def test_a_refused_create_waits_for_its_backoff(
    allocation: float, now_s: float, waits: bool
) -> None:
    period, status = period_of({})
    period = replace(period, now_s=now_s)
    refusal = lifecycle.Refusal(1, 2.0, 2.0, 403, "exceeded quota", 1, NOW_S + 10.0)
    memory = Memory(create_refusal=refusal)
    assert lifecycle.create_backed_off(period, memory, allocation) == waits
    admitted = grant(vocabulary.VERDICT_ADMITTED, allocation)
    outcome = lifecycle.create(period, status, memory, admitted, allocation, True)
    assert (outcome.create is None) == waits
