"""The local runtime's conditions: the operator's status.conditions, built by the same pure
functions (``decor.core.build``, ``decor.core.jobperiod``) at the same moments of a job's
life. No trainer runs here: the tests drive a job's period by hand."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.api import vocabulary
from decor.api.model import parse_job
from decor.core import build, control, jobperiod, planner
from decor.local import runtime as local

ROOT = Path(__file__).resolve().parents[2]
START_S = 1_800_000_000.0
CONDITION_FIELDS = {"type", "status", "reason", "message", "lastTransitionTime"}


def job_doc(**spec: Any) -> dict[str, Any]:
    """The example CPU job (90 s, 0.5-2 cores), ``spec`` merged in."""
    doc = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "resnet-cpu.yaml").read_text()))
    doc["spec"].update(spec)
    return doc


@pytest.fixture
def make_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A local job that arrived at START_S; its trainer never starts."""
    monkeypatch.setenv("DECOR_STATE_DIR", str(tmp_path / "state"))

    def made(doc: dict[str, Any] | None = None, *, multi: bool = False) -> local._LocalJob:
        options = local.LocalOptions(out_dir=tmp_path / "out")
        job = local._LocalJob(parse_job(doc or job_doc()), options, tmp_path / "out", 0.0,
                              multi=multi)  # fmt: skip
        job.registry.mkdir(parents=True, exist_ok=True)
        job.out.mkdir(parents=True, exist_ok=True)
        job.arrive(START_S)
        return job

    return made


def condition(job: local._LocalJob, type_: str) -> dict[str, Any]:
    found = build.get_condition(job.status_conditions, type_)
    assert found is not None, (type_, job.status_conditions)
    return found


def said(job: local._LocalJob, type_: str) -> tuple[str, str]:
    """(status, reason) of the job's condition ``type_``."""
    found = condition(job, type_)
    return found["status"], found["reason"]


def decided(job: local._LocalJob, obs: control.Observation | None, now_s: float) -> str:
    """One period of a running trainer: the law decides on ``obs``, the decision is noted;
    the condition it names."""
    assert job.state is not None and job.settings is not None
    job.obs = obs
    decision = control.decide(job.state, obs, job.settings, now_s)
    job.state = decision.state
    job._note_decision(decision, now_s)
    return decision.condition


def test_a_job_arrives_with_the_operators_admission_conditions(make_job: Any) -> None:
    job = make_job()
    assert job.status_conditions == build.conditions_at_admission(False, now_s=START_S)
    on_track = said(job, vocabulary.CONDITION_ON_TRACK)
    assert on_track == ("Unknown", vocabulary.REASON_MEASURING_SPEED)
    assert set(condition(job, vocabulary.CONDITION_ON_TRACK)) == CONDITION_FIELDS  # no generation


def test_a_deadline_already_past_is_infeasible_from_the_start(make_job: Any) -> None:
    doc = job_doc(deadline="2020-01-01T00:00:00Z")
    doc["spec"].pop("duration")
    job = make_job(doc)
    assert job.status_conditions == build.conditions_at_admission(True, now_s=START_S)
    infeasible = said(job, vocabulary.CONDITION_INFEASIBLE)
    assert infeasible == ("True", vocabulary.REASON_DEADLINE_IN_PAST)
    # The law's next decision keeps it so, as the operator's does for the same deadline.
    decided(job, control.Observation(START_S + 5.0, 10.0, 480.0, 2.0), START_S + 5.0)
    infeasible = said(job, vocabulary.CONDITION_INFEASIBLE)
    assert infeasible == ("True", vocabulary.REASON_DEADLINE_IN_PAST)


def request_deadline(job: local._LocalJob, deadline_s: float, now_s: float) -> None:
    """``decor deadline``: the request file the loop takes up in its next period."""
    (job.registry / local.DEADLINE_REQUEST).write_text(json.dumps({"deadline_s": deadline_s}))
    job.prepare(now_s)


def test_a_deadline_moved_into_the_past_and_back_sets_and_clears_infeasible(
    make_job: Any,
) -> None:
    job = make_job()
    expected = job.status_conditions
    request_deadline(job, START_S + 5.0, START_S + 10.0)
    expected = build.conditions_for_deadline(expected, True, now_s=START_S + 10.0)
    assert job.status_conditions == expected
    assert build.deadline_was_past(job.status_conditions)
    request_deadline(job, START_S + 600.0, START_S + 20.0)
    expected = build.conditions_for_deadline(expected, False, now_s=START_S + 20.0)
    assert job.status_conditions == expected
    infeasible = condition(job, vocabulary.CONDITION_INFEASIBLE)
    assert (infeasible["status"], infeasible["reason"]) == ("False", vocabulary.REASON_FEASIBLE)
    assert infeasible["message"] == "the deadline moved to the future"


def test_each_decision_sets_the_conditions_the_operator_sets(make_job: Any) -> None:
    job = make_job()
    expected = job.status_conditions
    names = set()
    for i, steps in enumerate((0.0, 20.0, 45.0, 70.0)):
        now_s = START_S + 10.0 * (i + 1)
        before = job.state
        name = decided(job, control.Observation(now_s, steps, 480.0, 2.0), now_s)
        decision = control.decide(before, control.Observation(now_s, steps, 480.0, 2.0),
                                  job.settings, now_s)  # fmt: skip
        expected = build.conditions_for_decision(expected, name, decision.message, now_s=now_s)
        names.add(name)
        assert job.status_conditions == expected
    assert job.conditions == names
    assert condition(job, vocabulary.CONDITION_COMPLETE)["status"] == "False"
    assert condition(job, vocabulary.CONDITION_METRICS_UNAVAILABLE)["status"] == "False"


def test_no_progress_after_the_deadline_is_a_missed_deadline(make_job: Any) -> None:
    job = make_job()
    job.metrics_reason = "connection refused"
    now_s = START_S + 120.0  # the example's deadline is 90 s after its start
    name = decided(job, None, now_s)
    assert name == vocabulary.CONDITION_METRICS_UNAVAILABLE
    unavailable = condition(job, vocabulary.CONDITION_METRICS_UNAVAILABLE)
    assert unavailable["status"] == "True"
    assert unavailable["message"] == jobperiod.no_progress_message(
        "connection refused", job.state.allocation
    )
    missed = condition(job, vocabulary.CONDITION_DEADLINE_MISSED)
    assert (missed["status"], missed["reason"]) == ("True", vocabulary.REASON_DEADLINE_PASSED)
    assert missed["message"] == "the deadline passed and no progress can be read"
    assert job.conditions == {vocabulary.CONDITION_METRICS_UNAVAILABLE}


def test_a_best_effort_job_misses_no_deadline_without_progress(make_job: Any) -> None:
    doc = job_doc(bestEffort=True)
    doc["spec"].pop("duration")
    job = make_job(doc)
    decided(job, None, START_S + 10 * 86400.0)
    assert build.get_condition(job.status_conditions, vocabulary.CONDITION_DEADLINE_MISSED) is None


def test_stalled_turns_true_once_and_false_when_steps_move(make_job: Any) -> None:
    job = make_job()
    job._watch_steps(10.0, START_S)
    job._watch_steps(10.0, START_S + jobperiod.STALL_TIMEOUT_S)
    assert build.get_condition(job.status_conditions, vocabulary.CONDITION_STALLED) is None
    late_s = START_S + jobperiod.STALL_TIMEOUT_S + 1.0
    job._watch_steps(10.0, late_s)
    stalled = condition(job, vocabulary.CONDITION_STALLED)
    assert (stalled["status"], stalled["reason"]) == ("True", vocabulary.REASON_NO_NEW_STEPS)
    assert job.stalled and vocabulary.CONDITION_STALLED in job.conditions
    job._watch_steps(10.0, late_s + 30.0)  # still stalled: its transition time stays
    still = condition(job, vocabulary.CONDITION_STALLED)
    assert still["lastTransitionTime"] == stalled["lastTransitionTime"]
    job._watch_steps(11.0, late_s + 40.0)
    moving = condition(job, vocabulary.CONDITION_STALLED)
    assert (moving["status"], moving["reason"]) == ("False", vocabulary.REASON_STEPS_MOVING)
    assert not job.stalled


def test_the_planners_verdict_is_the_admitted_condition(make_job: Any) -> None:
    job = make_job(multi=True)
    queued = planner.Grant("a", 0.0, None, vocabulary.VERDICT_QUEUED, "no room",
                           earliest_deadline_s=START_S + 300.0)  # fmt: skip
    job._note_verdict(queued, START_S)
    admitted = condition(job, vocabulary.CONDITION_ADMITTED)
    assert (admitted["status"], admitted["reason"]) == ("False", vocabulary.VERDICT_QUEUED)
    assert admitted["message"] == jobperiod.verdict_message(queued)
    grant = planner.Grant("a", 1.5, "local", vocabulary.VERDICT_ADMITTED, "fits")
    job._note_verdict(grant, START_S + 10.0)
    admitted = condition(job, vocabulary.CONDITION_ADMITTED)
    assert (admitted["status"], admitted["reason"], admitted["message"]) == (
        "True", vocabulary.VERDICT_ADMITTED, "fits"
    )  # fmt: skip
    # The summary still lists the verdicts reached (Queued, then Admitted).
    assert job.conditions == {vocabulary.VERDICT_QUEUED, vocabulary.VERDICT_ADMITTED}


def test_a_finished_job_is_complete_and_says_whether_it_was_late(make_job: Any) -> None:
    for finished_s, late in ((80.0, False), (100.0, True)):
        job = make_job()
        before = job.status_conditions
        job._note_end(finished_s, None, START_S + finished_s + 1.0)
        assert job.status_conditions == build.conditions_for_completion(
            before, START_S + finished_s, START_S + 90.0, now_s=START_S + finished_s + 1.0
        )
        complete = condition(job, vocabulary.CONDITION_COMPLETE)
        missed = condition(job, vocabulary.CONDITION_DEADLINE_MISSED)
        assert complete["status"] == "True"
        assert missed["status"] == ("True" if late else "False")


def test_a_complete_sample_is_the_completions_not_a_decisions(make_job: Any) -> None:
    job = make_job()
    before = job.status_conditions
    name = decided(job, control.Observation(START_S + 80.0, 480.0, 480.0, 2.0), START_S + 80.0)
    assert job.status_conditions == before and name in job.conditions


def test_a_failed_job_gives_up_with_the_errors_first_line(make_job: Any) -> None:
    job = make_job()
    job._note_end(None, "trainer exited with code 1: Traceback\n  line 2", START_S + 30.0)
    complete = condition(job, vocabulary.CONDITION_COMPLETE)
    assert (complete["status"], complete["reason"]) == ("False", vocabulary.REASON_TRAINER_FAILED)
    assert complete["message"] == "trainer exited with code 1: Traceback"
    assert condition(job, vocabulary.CONDITION_ON_TRACK)["status"] == "False"


def test_the_summary_keeps_the_names_and_adds_the_final_conditions(make_job: Any) -> None:
    job = make_job(multi=True)
    queued = planner.Grant("a", 0.0, None, vocabulary.VERDICT_QUEUED, "no room")
    job._note_verdict(queued, START_S)
    job.error = "never admitted: QUEUED: no room"
    summary = job.finish(START_S + 60.0)
    assert summary.conditions == [vocabulary.VERDICT_QUEUED]
    types = [c["type"] for c in summary.status_conditions]
    assert types == [
        vocabulary.CONDITION_ON_TRACK,
        vocabulary.CONDITION_ADMITTED,
        vocabulary.CONDITION_COMPLETE,
        vocabulary.CONDITION_AT_RISK,
        vocabulary.CONDITION_METRICS_UNAVAILABLE,
    ]
    assert all(set(c) == CONDITION_FIELDS for c in summary.status_conditions)
    complete = condition(job, vocabulary.CONDITION_COMPLETE)
    assert complete["message"] == "never admitted: QUEUED: no room"
    saved = json.loads((job.out / "trace.json").read_text())
    assert saved["summary"]["status_conditions"] == summary.status_conditions
