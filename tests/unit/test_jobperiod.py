"""The job period every runtime shares (``decor.core.jobperiod``): the law's settings and start,
the best-effort rule, and the demand the planner sees; and the local runtime's demand built
by it (no trainer runs here)."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.api import vocabulary
from decor.api.model import format_time, parse_job
from decor.core import control, jobperiod, planner
from decor.local import runtime as local

ROOT = Path(__file__).resolve().parents[2]
START_S = 1000.0


def job_doc(**spec: Any) -> dict[str, Any]:
    """The example CPU job (90 s, 4 x 120 steps, 0.5-2 cores, initial 2), ``spec`` merged in."""
    doc = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "resnet-cpu.yaml").read_text()))
    doc["spec"].update(spec)
    return doc


def best_effort_doc(**spec: Any) -> dict[str, Any]:
    doc = job_doc(**spec)
    doc["spec"].pop("duration")
    doc["spec"]["bestEffort"] = True
    return doc


def settings_of(doc: dict[str, Any], **options: Any) -> control.Settings:
    return jobperiod.law_settings(parse_job(doc), START_S, **options)


# --- the law's settings and start ---------------------------------------------------------


def test_settings_follow_the_spec() -> None:
    doc = job_doc(control={"policy": "decor-nn", "periodSeconds": 2,
                           "gains": {"k": 10, "tiSeconds": 30}})  # fmt: skip
    settings = settings_of(doc)
    assert (settings.mode, settings.policy, settings.period_s) == ("cpu", "decor-nn", 2.0)
    assert (settings.min_allocation, settings.max_allocation) == (0.5, 2.0)
    assert (settings.k, settings.ti_s) == (10.0, 30.0)
    assert (settings.start_s, settings.deadline_s) == (START_S, START_S + 90.0)
    default = settings_of(job_doc())
    assert (default.k, default.ti_s, default.safety_margin_s) == (50.0, 12.0, None)
    assert default.restart_cost_s == control.Settings.restart_cost_s
    assert default.gpu_max_restarts == 4
    assert settings_of(job_doc(control={"maxRestarts": 2})).gpu_max_restarts == 2


def test_a_runtime_caps_max_and_min_and_may_override_the_policy() -> None:
    settings = settings_of(job_doc(), max_allocation=1.0, policy="decor-nn")
    assert (settings.min_allocation, settings.max_allocation) == (0.5, 1.0)
    assert settings.policy == "decor-nn"
    tiny = settings_of(job_doc(), max_allocation=0.25)
    assert (tiny.min_allocation, tiny.max_allocation) == (0.25, 0.25)


def test_a_best_effort_law_plans_over_the_horizon_not_an_infinite_deadline() -> None:
    settings = settings_of(best_effort_doc())
    assert settings.deadline_s == START_S + jobperiod.BEST_EFFORT_HORIZON_S
    assert math.isfinite(settings.duration_s)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, 2.0),  # the spec's initial
        ({"resources": {"mode": "cpu", "min": "500m", "max": "2"}}, 1.0),  # one core
        # no initial, an estimate that needs 1.87 of 2 cores (>= 90 %): MAX from the start
        (
            {
                "resources": {"mode": "cpu", "min": "500m", "max": "2"},
                "estimate": {"stepSeconds": 0.35, "allocation": "1"},
            },
            2.0,
        ),  # fmt: skip
        (
            {
                "resources": {"mode": "cpu", "min": "500m", "max": "2"},  # 1.6 cores: one core
                "estimate": {"stepSeconds": 0.3, "allocation": "1"},
            },
            1.0,
        ),  # fmt: skip
    ],
)
def test_the_law_starts_where_the_spec_and_its_estimate_say(
    spec: dict[str, Any], expected: float
) -> None:
    doc = job_doc(**spec)
    settings = settings_of(doc)
    assert jobperiod.law_start(parse_job(doc), settings, START_S).allocation == expected


def test_a_deadline_already_past_starts_at_max() -> None:
    doc = job_doc(resources={"mode": "cpu", "min": "500m", "max": "2", "initial": "1"})
    doc["spec"].pop("duration")
    doc["spec"]["deadline"] = "2020-01-01T00:00:00Z"
    spec = parse_job(doc)
    settings = jobperiod.law_settings(spec, START_S + 2e9)
    assert jobperiod.deadline_passed(spec, settings, START_S + 2e9)
    assert jobperiod.law_start(spec, settings, START_S + 2e9).allocation == 2.0
    best_effort = parse_job(best_effort_doc())
    later_s = START_S + 2 * jobperiod.BEST_EFFORT_HORIZON_S
    assert not jobperiod.deadline_passed(best_effort, settings_of(best_effort_doc()), later_s)


# --- the best-effort rule -------------------------------------------------------------------


def test_a_best_effort_job_asks_for_max_and_is_on_track_while_it_reports() -> None:
    settings = settings_of(best_effort_doc())
    state = control.State(policy="decor", allocation=1.0)
    decided = control.Decision(1.0, state, vocabulary.CONDITION_AT_RISK, "behind", eta_s=5.0)
    asked = jobperiod.best_effort_decision(decided, settings, observed=True)
    assert (asked.allocation, asked.condition, asked.eta_s) == (2.0, "OnTrack", None)
    assert asked.message == jobperiod.BEST_EFFORT_MESSAGE
    silent = control.Decision(1.0, state, vocabulary.CONDITION_METRICS_UNAVAILABLE, "none")
    blind = jobperiod.best_effort_decision(silent, settings, observed=False)
    assert blind.condition == vocabulary.CONDITION_METRICS_UNAVAILABLE
    done = control.Decision(1.0, state, vocabulary.CONDITION_COMPLETE, "all planned steps done")
    assert jobperiod.best_effort_decision(done, settings, observed=True) == done


def test_a_best_effort_job_granted_less_than_max_is_not_at_risk() -> None:
    settings = settings_of(best_effort_doc())
    state = control.State(policy="decor", allocation=1.0)
    asked = jobperiod.best_effort_decision(
        control.Decision(1.0, state, "OnTrack", "x"), settings, observed=True
    )
    followed = control.follow_grant(asked, 0.75, state, settings, START_S + 10.0)
    assert followed.condition == vocabulary.CONDITION_AT_RISK  # the law's view of a shortfall
    kept = jobperiod.best_effort_followed(followed, asked, followed.allocation, 2.0)
    assert kept.condition == "OnTrack" and kept.allocation == 0.75
    assert kept.message == "best effort: 0.75 of up to 2 (capacity no deadline job needs)"


# --- the demand ------------------------------------------------------------------------------


def test_steps_remaining_by_the_sample_else_the_last_known_and_never_below_zero() -> None:
    sample = control.Observation(time_s=1.0, steps_done=30.0, steps_total=100.0, allocation=1.0)
    assert jobperiod.steps_remaining(sample, 10.0, 480.0) == 70.0
    assert jobperiod.steps_remaining(None, 10.0, 480.0) == 470.0
    assert jobperiod.steps_remaining(None, 500.0, 480.0) == 0.0


def test_the_need_off_a_curve_is_the_least_that_makes_it() -> None:
    curve = jobperiod.estimated_curve(0.5, 1.0)  # 0.5 s per step at one core, linear
    assert curve(2.0) == pytest.approx(0.25)
    assert jobperiod.need_from_curve(curve, 100.0, 40.0, 0.5, 2.0) == pytest.approx(1.25)
    assert jobperiod.need_from_curve(curve, 100.0, 200.0, 0.5, 2.0) == 0.5  # min makes it
    assert jobperiod.need_from_curve(curve, 100.0, 10.0, 0.5, 2.0) == 2.0  # none does
    assert jobperiod.need_from_curve(curve, 100.0, -1.0, 0.5, 2.0) == 2.0  # past


@pytest.mark.parametrize(
    ("starting", "verdict", "expected"),
    [
        (False, None, True),  # it holds a trainer
        (False, vocabulary.VERDICT_QUEUED, True),
        (True, None, False),  # never planned yet
        (True, vocabulary.VERDICT_QUEUED, False),
        (True, vocabulary.VERDICT_PREEMPTED, False),
        (True, vocabulary.VERDICT_ADMITTED, True),  # admitted, its trainer on its way
        (True, vocabulary.VERDICT_BEST_EFFORT, True),
    ],
)
def test_admitted_means_holding_a_trainer_or_a_verdict_that_is_no_wait(
    starting: bool, verdict: str | None, expected: bool
) -> None:
    assert jobperiod.admitted(starting, verdict) is expected


def test_a_demand_without_a_finite_deadline_gives_the_planner_none() -> None:
    common: dict[str, Any] = dict(key="a", mode="cpu", min_allocation=0.5, max_allocation=2.0,
                                  current=0.0, arrival_s=0.0, admitted=False)  # fmt: skip
    for deadline_s in (None, math.inf):
        made = jobperiod.demand(need=3.0, steps_remaining=-4.0, deadline_s=deadline_s, **common)
        assert made.deadline_s is None and made.need == 2.0 and made.steps_remaining == 0.0
    assert (
        jobperiod.demand(need=1.0, steps_remaining=5.0, deadline_s=50.0, **common).deadline_s
        == 50.0
    )


def job_demand(doc: dict[str, Any], **given: Any) -> Any:
    spec = parse_job(doc)
    settings = given.pop("settings", None) or jobperiod.law_settings(spec, START_S)
    state = jobperiod.law_start(spec, settings, START_S)
    args: dict[str, Any] = dict(key="ns/a", need=None, starting=True, remaining=480.0,
                                current=0.0, arrival_s=START_S, admitted=False)  # fmt: skip
    args.update(given)
    return jobperiod.job_demand(spec, settings, state, START_S, **args)


def test_a_job_still_to_start_needs_what_its_estimate_says() -> None:
    doc = job_doc(estimate={"stepSeconds": 0.15, "allocation": "1"})  # 72 s at one core
    made = job_demand(doc)
    assert 0.8 <= made.need <= 0.801  # 480 steps in 90 s, rounded up to a millicore
    assert made.step_time_s is not None and made.step_time_s(1.0) == pytest.approx(0.15)
    assert made.deadline_s == START_S + 90.0 and made.uncapped_max == 2.0
    assert job_demand(job_doc()).need == 2.0  # no curve: the law's start


def test_a_trainer_restarted_for_a_change_of_count_gets_the_laws_count() -> None:
    """The law may run fewer GPUs than its curve's need on purpose (fewer first, the count
    above for the rest): the pod made for that change gets the law's count, and the planner
    still holds the count planned for later, while a first pod gets the curve's need."""
    doc = job_doc(estimate={"stepSeconds": 0.5, "allocation": "1"}, checkpoint={"path": "/ckpt"})
    doc["spec"]["resources"] = {"mode": "gpu", "min": 1, "max": 4}  # 480 steps in 90 s
    spec = parse_job(doc)
    settings = jobperiod.law_settings(spec, START_S)
    state = jobperiod.law_start(spec, settings, START_S)
    args: dict[str, Any] = dict(key="ns/a", need=None, starting=True, remaining=480.0,
                                current=0.0, arrival_s=START_S, admitted=True)  # fmt: skip
    first = jobperiod.job_demand(spec, settings, state, START_S, **args)
    assert 2.6 < first.need < 2.7  # the curve's need: 240 s of steps at 1 GPU in 90 s
    changed = replace(
        state, allocation=2.0, change_pending_since_s=START_S - 20.0, planned_peak=3.0
    )
    restarted = jobperiod.job_demand(spec, settings, changed, START_S, **args)
    assert restarted.need == 2.0
    assert restarted.planned_peak == 3.0  # the switch up planned is still held meanwhile
    assert first.planned_peak == 0.0


def test_the_laws_decision_is_the_need_under_a_cap_and_a_moved_deadline_counts() -> None:
    doc = job_doc(estimate={"stepSeconds": 0.15, "allocation": "1"})
    capped = job_demand(doc, need=1.7, starting=False, most=1.5, node="n1")
    assert (capped.need, capped.max_allocation, capped.uncapped_max) == (1.5, 1.5, 2.0)
    assert capped.node == "n1"
    moved = jobperiod.law_settings(parse_job(doc), START_S)
    moved = control.Settings(**{**moved.__dict__, "deadline_s": START_S + 45.0})
    earlier = job_demand(doc, settings=moved)
    assert earlier.deadline_s == START_S + 45.0 and 1.6 <= earlier.need <= 1.601


def test_a_best_effort_demand_has_no_deadline() -> None:
    made = job_demand(best_effort_doc(), need=2.0, starting=False)
    assert made.deadline_s is None and made.need == 2.0


# --- the local runtime builds its demand with it ----------------------------------------------


def test_the_local_runtime_asks_the_planner_what_the_operator_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local job that waits for the planner needs what its estimate says (it once asked
    for its start allocation), and a best-effort one gives no deadline."""
    monkeypatch.setenv("DECOR_STATE_DIR", str(tmp_path / "state"))
    options = local.LocalOptions(out_dir=tmp_path, max_cores=2.0)
    for doc in (job_doc(estimate={"stepSeconds": 0.15, "allocation": "1"}), best_effort_doc()):
        spec = parse_job(doc)
        job = local._LocalJob(spec, options, tmp_path / "a", 0.0, multi=True)
        job.registry.mkdir(parents=True, exist_ok=True)
        if job.max_cores < 2.0:
            pytest.skip("this machine has fewer than 2 cores")
        job.arrive(START_S)
        made = job.prepare(START_S)
        expected = job_demand(doc, key=spec.name, arrival_s=START_S)
        assert made is not None
        assert (made.need, made.deadline_s, made.admitted, made.max_allocation) == (
            expected.need, expected.deadline_s, expected.admitted, expected.max_allocation
        )  # fmt: skip


def test_steps_that_do_not_move_are_counted_from_when_they_last_moved() -> None:
    watch = jobperiod.StepWatch()
    assert watch.still_for_s(50.0) == 0.0
    watch = watch.seen(10.0, 100.0).seen(10.0, 130.0)
    assert watch == jobperiod.StepWatch(10.0, 100.0) and watch.still_for_s(130.0) == 30.0
    assert watch.seen(11.0, 140.0).still_for_s(140.0) == 0.0
    assert jobperiod.stalled_message(121.4) == "the trainer runs but completed no step for 121s"


def test_a_local_trainer_whose_steps_stand_still_is_stalled_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DECOR_STATE_DIR", str(tmp_path / "state"))
    lines: list[str] = []
    options = local.LocalOptions(out_dir=tmp_path, display=lambda line, final: lines.append(line))
    job = local._LocalJob(parse_job(job_doc()), options, tmp_path / "a", 0.0, multi=False)
    for now_s in (START_S, START_S + 60.0, START_S + jobperiod.STALL_TIMEOUT_S):
        job._watch_steps(10.0, now_s)
    assert not lines and vocabulary.CONDITION_STALLED not in job.conditions
    for now_s in (
        START_S + jobperiod.STALL_TIMEOUT_S + 1.0,
        START_S + jobperiod.STALL_TIMEOUT_S + 9.0,
    ):
        job._watch_steps(10.0, now_s)
    assert lines == ["warning: the trainer runs but completed no step for 121s"]
    assert vocabulary.CONDITION_STALLED in job.conditions
    job._watch_steps(11.0, START_S + 200.0)
    assert not job.stalled


def test_a_verdict_names_the_earliest_deadline_once_and_locally_how_long_after_the_start() -> None:
    queued = planner.Grant("a", 0.0, None, vocabulary.VERDICT_QUEUED, "no room",
                           earliest_deadline_s=START_S + 300.0)  # fmt: skip
    at = format_time(START_S + 300.0)
    assert (
        jobperiod.verdict_message(queued) == f"no room; earliest deadline it could meet now: {at}"
    )
    assert jobperiod.verdict_message(queued, START_S).endswith(f"{at} (300s after its start)")
    named = replace(queued, reason="quota q: earliest deadline 12:00")
    assert jobperiod.verdict_message(named, START_S) == "quota q: earliest deadline 12:00"
    plain = planner.Grant("a", 1.0, None, vocabulary.VERDICT_ADMITTED, "fits")
    assert jobperiod.verdict_message(plain, START_S) == "fits"


def test_a_job_whose_extra_cores_measured_no_faster_asks_the_planner_for_no_more() -> None:
    """The law's useful maximum (one core: the second measured no faster) is the job's max
    for the planner, and the max its deadline is judged at, while it holds; not after."""
    doc = job_doc(estimate={"stepSeconds": 0.15, "allocation": "1"})
    spec = parse_job(doc)
    settings = jobperiod.law_settings(spec, START_S)
    state = replace(
        jobperiod.law_start(spec, settings, START_S), useful_cap=(1.0, START_S + 60, 60.0)
    )
    args: dict[str, Any] = dict(key="ns/a", need=1.7, starting=False, remaining=480.0,
                                current=1.0, arrival_s=START_S, admitted=True)  # fmt: skip
    made = jobperiod.job_demand(spec, settings, state, START_S, **args)
    assert (made.need, made.max_allocation, made.uncapped_max) == (1.0, 1.0, 1.0)
    under_cap = jobperiod.job_demand(spec, settings, state, START_S, most=0.5, **args)
    assert (under_cap.max_allocation, under_cap.uncapped_max) == (0.5, 1.0)
    later = jobperiod.job_demand(spec, settings, state, START_S + 60, **args)
    assert (later.need, later.max_allocation, later.uncapped_max) == (1.7, 2.0, 2.0)
