"""The job controller's behaviour, period by period, recorded in golden records.

Each scenario drives the operator's control loop (``ControlLoop.run_period``: snapshot,
progress read, each job's ``JobController.prepare``, the planner, each job's ``commit``)
against a fake cluster (``support.fake_kube.RecordingKube``) and simulated trainers
(``support.fake_trainers``), with a fake clock. Everything the controller asks of the
Kubernetes facade (pods created, resized, deleted; status patches; Events) is recorded in
order with its arguments, beside what the cluster did in between, and compared with
``tests/golden/job_scenarios/<scenario>.json``; the job's final status is part of the
record. Each scenario runs twice, and both records must be the same.

``DECOR_UPDATE_GOLDEN=1`` rewrites the records; without it a difference fails with the
first entries that differ. A few facts are asserted directly in each test, so that a record
rewritten by mistake still has to tell the same story.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from decor.api.model import format_time
from support.fake_trainers import FakeTrainer, linear_speed
from support.golden import check_golden
from support.scenario import NAMESPACE, START_S, Bench, job_body, scenario_config

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "job_scenarios"
CPU_NODE = {"node-a": (8.0, 0)}
GPU_NODE = {"gpu-node": (16.0, 4)}


def cpu_trainer(steps: int = 1000, **options: Any) -> FakeTrainer:
    """A CPU trainer of ``steps`` steps, one step per second per core."""
    return FakeTrainer(steps, 100, linear_speed(1.0), **options)


def recorded(scenario: Callable[[], Bench]) -> Bench:
    """Run ``scenario`` twice, check that both runs made the same record, and compare it with
    its golden record (named after the scenario). Returns the first run."""
    bench = scenario()
    again = scenario()
    assert bench.result() == again.result(), f"{scenario.__name__} is not deterministic"
    check_golden(GOLDEN / f"{scenario.__name__}.json", bench.result())
    return bench


def calls(bench: Bench, method: str, **where: Any) -> list[dict[str, Any]]:
    """The facade calls of ``method`` made so far (those whose arguments match ``where``)."""
    return [
        entry
        for entry in bench.kube.record
        if entry.get("call") == method and all(entry.get(k) == v for k, v in where.items())
    ]


def created(bench: Bench) -> list[tuple[str, dict[str, str]]]:
    """(name, the trainer's resource limits) of every pod the controller created."""
    return [
        (
            entry["body"]["metadata"]["name"],
            entry["body"]["spec"]["containers"][0]["resources"]["limits"],
        )
        for entry in calls(bench, "create_pod")
        if "raised" not in entry
    ]


def condition(status: dict[str, Any], type_: str) -> tuple[str, str] | None:
    """(status, reason) of the condition ``type_``; None when there is none."""
    for found in status.get("conditions") or []:
        if found["type"] == type_:
            return found["status"], found["reason"]
    return None


def limits(bench: Bench, pod: str) -> dict[str, str]:
    """The trainer container's resource limits of a pod in the cluster now."""
    return bench.kube.pods[(NAMESPACE, pod)]["spec"]["containers"][0]["resources"]["limits"]


# --- one CPU job ------------------------------------------------------------------------------


def cpu_job_succeeds() -> Bench:
    """Created at MAX, resized in place down and up as the law decides; the trainer exits 0
    after its last step and the job Succeeds from the pod's termination message."""
    bench = Bench(CPU_NODE)
    bench.apply(job_body("resnet", initial="4", duration="600s"), cpu_trainer(exits=True))
    bench.run_until(lambda: bench.phase("resnet") == "Succeeded", most=80)
    return bench


def test_cpu_job_is_resized_in_place_and_succeeds() -> None:
    bench = recorded(cpu_job_succeeds)
    assert created(bench) == [("resnet-0", {"cpu": "4000m"})]
    resizes = [entry["cores"] for entry in calls(bench, "resize_pod_cpu")]
    assert resizes[0] == 1.0  # thrown down from MAX once the speed is known
    assert any(later > earlier for earlier, later in zip(resizes, resizes[1:], strict=False))
    assert calls(bench, "delete_pod") == []
    status = bench.status("resnet")
    assert status["phase"] == "Succeeded"
    assert status["resizes"] == len(resizes)
    assert condition(status, "Complete") == ("True", "AllStepsDone")
    assert condition(status, "DeadlineMissed") == ("False", "FinishedOnTime")
    assert bench.events("resnet").count("Completed") == 1
    assert bench.kube.pods[(NAMESPACE, "resnet-0")]["status"]["phase"] == "Succeeded"


def deadline_moved() -> Bench:
    """A job running on a lenient deadline gets a much earlier one mid-run: it grows at once
    and finishes by the new deadline; the trainer keeps running after its last step, so the
    job completes from its progress."""
    bench = Bench(CPU_NODE)
    bench.apply(job_body("resnet", initial="4", duration="900s"), cpu_trainer())
    for _ in range(12):
        bench.period()
    bench.patch_spec("resnet", {"duration": "400s"})
    bench.run_until(lambda: bench.phase("resnet") == "Succeeded", most=40)
    return bench


def test_a_moved_deadline_is_followed_in_the_next_period() -> None:
    bench = recorded(deadline_moved)
    moved = bench.kube.record.index(
        {"scenario": "patch job spec", "name": "resnet", "spec": {"duration": "400s"}}
    )
    before = [e["cores"] for e in bench.kube.record[:moved] if e.get("call") == "resize_pod_cpu"]
    after = [e["cores"] for e in bench.kube.record[moved:] if e.get("call") == "resize_pod_cpu"]
    assert before[-1] == 1.0 and after[0] == 3.0  # grown in the period after the patch
    assert "DeadlineChanged" in bench.events("resnet")
    status = bench.status("resnet")
    start_s = START_S + 10.0  # the first period records the start
    assert status["deadline"] == format_time(start_s + 400.0)
    assert status["phase"] == "Succeeded"
    assert condition(status, "DeadlineMissed") == ("False", "FinishedOnTime")
    assert bench.kube.pods[(NAMESPACE, "resnet-0")]["status"]["phase"] == "Running"


# --- GPU jobs: a count change is a checkpoint and a new pod -------------------------------------


def gpu_count_changes() -> Bench:
    """A GPU job starts with 4 GPUs and is ahead, its need between 1 and 2: it is restarted
    with 1 (fewer first, measured while it runs), then with 2 for the rest, each time its
    pod deleted with a grace period, seen terminating, and created anew with the new
    ``nvidia.com/gpu`` request (the law's count, not the curve's need rounded up); its
    checkpoint claim is created with the first pod."""
    bench = Bench(GPU_NODE)
    trainer = FakeTrainer(400, 100, linear_speed(0.5), mode="gpu")
    bench.apply(
        job_body("llm", mode="gpu", minimum="1", maximum="4", initial="4", epochs=4), trainer
    )
    bench.run_until(lambda: bench.phase("llm") == "Succeeded", most=80)
    return bench


def test_gpu_count_changes_by_checkpoint_and_restart() -> None:
    bench = recorded(gpu_count_changes)
    gpu = "nvidia.com/gpu"
    assert created(bench) == [("llm-0", {gpu: "4"}), ("llm-1", {gpu: "1"}), ("llm-2", {gpu: "2"})]
    assert [(e["name"], e["grace_period_s"]) for e in calls(bench, "delete_pod")] == [
        ("llm-0", 30),
        ("llm-1", 30),
    ]
    assert [e["body"]["metadata"]["name"] for e in calls(bench, "create_claim")] == [
        "llm-checkpoint"
    ]
    assert calls(bench, "resize_pod_cpu") == []
    status = bench.status("llm")
    assert (status["phase"], status["restarts"], status["allocation"]) == ("Succeeded", 2, "2")
    assert bench.events("llm").count("Restarting") == 2


def gpu_planned_switch_held() -> Bench:
    """A GPU job runs at 3 of the node's 4 GPUs, its law planning a switch to 4 later; a job
    with an earlier deadline arrives needing 1 GPU. The planner holds the fourth GPU for the
    planned switch: the new job waits, and the switch up is granted when it comes."""
    bench = Bench(GPU_NODE)
    llm = FakeTrainer(1000, 100, linear_speed(0.5), mode="gpu")
    bench.apply(
        job_body("llm", mode="gpu", minimum="1", maximum="4", initial="3", duration="600s"), llm
    )
    for _ in range(6):
        bench.period()
    bert = FakeTrainer(200, 100, linear_speed(0.5), mode="gpu")
    bench.apply(
        job_body("bert", mode="gpu", minimum="1", maximum="1", epochs=2, duration="500s"), bert
    )
    bench.run_until(lambda: bench.phase("llm") == "Succeeded", most=60)
    return bench


def test_a_planned_gpu_switch_up_is_not_given_to_a_new_job() -> None:
    bench = recorded(gpu_planned_switch_held)
    gpu = "nvidia.com/gpu"
    assert created(bench) == [("llm-0", {gpu: "3"}), ("llm-1", {gpu: "4"})]
    assert bench.status("llm")["phase"] == "Succeeded"
    # the new job waits while llm runs, and is admitted in the period llm is done
    admissions = [
        entry["status"]["admission"]
        for entry in calls(bench, "patch_job_status", name="bert")
        if "admission" in entry["status"]
    ]
    assert len(admissions) >= 2 and set(admissions[:-1]) == {"Queued"}
    assert admissions[-1] == "Admitted"
    reasons = [
        c["message"]
        for entry in calls(bench, "patch_job_status", name="llm")
        for c in entry["status"].get("conditions", [])
        if c["type"] == "Admitted"
    ]
    assert any("1 more held on gpu-node for its planned switch to 4" in r for r in reasons)


def gpu_pod_unschedulable() -> Bench:
    """A GPU job running on 1 GPU asks for 3; the new pod cannot be scheduled, and after the
    wait the job falls back to the 1 GPU that last ran and asks no more for the hold."""
    config = scenario_config(unschedulable_wait_s=60.0, unschedulable_hold_s=300.0)
    bench = Bench(GPU_NODE, config)
    trainer = FakeTrainer(1000, 100, linear_speed(0.5), mode="gpu")
    bench.apply(
        job_body("llm", mode="gpu", minimum="1", maximum="4", initial="1", duration="900s"),
        trainer,
    )
    bench.run_until(lambda: bench.status("llm").get("restarts") == 1, most=10)
    bench.kube.unschedulable = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    bench.run_until(lambda: bench.status("llm").get("podsCreated") == 3, most=12)
    bench.kube.unschedulable = None
    for _ in range(4):
        bench.period()
    return bench


def test_a_pod_unschedulable_for_too_long_falls_back_to_what_last_ran() -> None:
    bench = recorded(gpu_pod_unschedulable)
    gpu = "nvidia.com/gpu"
    assert created(bench) == [("llm-0", {gpu: "1"}), ("llm-1", {gpu: "3"}), ("llm-2", {gpu: "1"})]
    assert calls(bench, "delete_pod", name="llm-1") == [
        {"call": "delete_pod", "namespace": NAMESPACE, "name": "llm-1", "grace_period_s": 0}
    ]
    assert bench.events("llm").count("Unschedulable") == 1
    status = bench.status("llm")
    assert (status["phase"], status["allocation"], status["podName"]) == ("Running", "1", "llm-2")
    assert condition(status, "AtRisk") == ("True", "NeedsNearMax")  # capped at the fallback
    assert limits(bench, "llm-2") == {gpu: "1"}


def fallback_held_across_restart() -> Bench:
    """As ``gpu_pod_unschedulable``, and the operator restarts right after the fallback: the
    new controller reads the hold from the job's status and still asks no more than the
    fallback until it ends."""
    config = scenario_config(unschedulable_wait_s=60.0, unschedulable_hold_s=300.0)
    bench = Bench(GPU_NODE, config)
    trainer = FakeTrainer(1000, 100, linear_speed(0.5), mode="gpu")
    bench.apply(
        job_body("llm", mode="gpu", minimum="1", maximum="4", initial="1", duration="900s"),
        trainer,
    )
    bench.run_until(lambda: bench.status("llm").get("restarts") == 1, most=10)
    bench.kube.unschedulable = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    bench.run_until(lambda: bench.status("llm").get("podsCreated") == 3, most=12)
    bench.kube.unschedulable = None
    bench.period()
    bench.restart_operator()
    for _ in range(6):
        bench.period()
    return bench


def test_a_fallback_hold_survives_an_operator_restart() -> None:
    bench = recorded(fallback_held_across_restart)
    gpu = "nvidia.com/gpu"
    restarted = bench.kube.record.index({"scenario": "operator restarted"})
    after = bench.kube.record[restarted:]
    assert not [e for e in after if e.get("call") in ("create_pod", "delete_pod")]
    assert created(bench) == [("llm-0", {gpu: "1"}), ("llm-1", {gpu: "3"}), ("llm-2", {gpu: "1"})]
    status = bench.status("llm")
    assert (status["phase"], status["allocation"], status["podName"]) == ("Running", "1", "llm-2")
    assert status["controller"]["fallback"]["allocation"] == 1.0
    assert condition(status, "AtRisk") == ("True", "NeedsNearMax")  # capped at the fallback


# --- a trainer pod's lifecycle --------------------------------------------------------------


def pod_lost() -> Bench:
    """The running trainer pod is deleted by someone else: the job recreates it (resuming from
    the checkpoint) with the allocation it had, and counts a pod failure."""
    bench = Bench(CPU_NODE)
    bench.apply(job_body("resnet", initial="2"), cpu_trainer())
    for _ in range(4):
        bench.period()
    bench.kube.lose_pod(NAMESPACE, "resnet-0")
    for _ in range(3):
        bench.period()
    return bench


def test_a_lost_pod_is_recreated() -> None:
    bench = recorded(pod_lost)
    assert created(bench) == [("resnet-0", {"cpu": "2000m"}), ("resnet-1", {"cpu": "2000m"})]
    assert calls(bench, "delete_pod") == []
    assert bench.events("resnet") == ["PodCreated", "PodLost", "PodCreated"]
    status = bench.status("resnet")
    assert (status["phase"], status["podName"], status["podFailures"]) == (
        "Running",
        "resnet-1",
        1,
    )
    assert status["stepsDone"] > 60  # resumed, not restarted from step 0


def suspended_and_resumed() -> Bench:
    """``spec.suspend`` deletes the trainer pod (it checkpoints) and keeps the controller's
    state; clearing it creates a new pod that resumes."""
    bench = Bench(CPU_NODE)
    bench.apply(job_body("resnet", initial="2"), cpu_trainer())
    for _ in range(3):
        bench.period()
    bench.patch_spec("resnet", {"suspend": True})
    for _ in range(3):
        bench.period()
    assert bench.phase("resnet") == "Suspended" and bench.pods("resnet") == []
    bench.patch_spec("resnet", {"suspend": False})
    for _ in range(3):
        bench.period()
    return bench


def test_a_suspended_job_gives_its_pod_back_and_resumes() -> None:
    bench = recorded(suspended_and_resumed)
    assert [(e["name"], e["grace_period_s"]) for e in calls(bench, "delete_pod")] == [
        ("resnet-0", 30)
    ]
    assert created(bench) == [("resnet-0", {"cpu": "2000m"}), ("resnet-1", {"cpu": "2000m"})]
    assert bench.events("resnet") == ["PodCreated", "Suspended", "Resumed", "PodCreated"]
    status = bench.status("resnet")
    assert (status["phase"], status["podName"], status["podFailures"]) == (
        "Running",
        "resnet-1",
        0,
    )


def crash_loop() -> Bench:
    """The trainer crashes again and again (the kubelet restarts it in place): past the
    failure budget the pod is deleted and the job Fails."""
    bench = Bench(CPU_NODE, scenario_config(max_pod_failures=2))
    bench.apply(job_body("resnet", initial="2"), cpu_trainer())
    for _ in range(3):
        bench.period()
    while bench.phase("resnet") != "Failed" and bench.periods < 10:
        bench.kube.crash_trainer(NAMESPACE, "resnet-0")
        bench.period()
    bench.period()  # a finished job takes no more periods
    return bench


def test_a_crash_looping_trainer_fails_the_job() -> None:
    bench = recorded(crash_loop)
    assert calls(bench, "delete_pod") == [
        {"call": "delete_pod", "namespace": NAMESPACE, "name": "resnet-0", "grace_period_s": 0}
    ]
    assert bench.events("resnet") == ["PodCreated", "Failed"]
    status = bench.status("resnet")
    assert status["phase"] == "Failed"
    assert condition(status, "Complete") == ("False", "TrainerFailed")
    assert "crashed 3 times" in next(
        c["message"] for c in status["conditions"] if c["type"] == "Complete"
    )
    assert bench.kube.record[-1] == {"period": bench.periods, "time": format_time(bench.now)}


def call_times(bench: Bench, method: str) -> list[tuple[float, int | None]]:
    """(seconds since the start, the status it raised or None) of each call of ``method``:
    the time of the period that made it."""
    found, now_s = [], START_S
    for entry in bench.kube.record:
        if "period" in entry:
            now_s = START_S + 10.0 * entry["period"]
        elif entry.get("call") == method:
            found.append((now_s - START_S, entry.get("raised")))
    return found


def create_refused() -> Bench:
    """A ResourceQuota refuses the trainer pod three times (403): the job says so in a False
    Admitted condition and one Warning Event, tries again after 10 s, 20 s and 40 s (not every
    period), and creates the pod once the quota allows."""
    bench = Bench(CPU_NODE)
    bench.kube.fail(
        "create_pod",
        403,
        'pods "resnet-0" is forbidden: exceeded quota: compute, requested: limits.cpu=2, '
        "used: limits.cpu=7, limited: limits.cpu=8",
        times=3,
    )
    bench.apply(job_body("resnet", initial="2"), cpu_trainer())
    for _ in range(3):
        bench.period()
    assert condition(bench.status("resnet"), "Admitted") == ("False", "CreateRefused")
    bench.run_until(lambda: bench.phase("resnet") == "Running", most=12)
    return bench


def test_a_refused_create_is_reported_once_and_retried_with_backoff() -> None:
    bench = recorded(create_refused)
    assert call_times(bench, "create_pod") == [(10, 403), (20, 403), (40, 403), (80, None)]
    assert bench.events("resnet") == ["CreateRefused", "PodCreated"]
    status = bench.status("resnet")
    assert condition(status, "Admitted") == ("True", "Admitted")
    assert (status["phase"], status["podName"]) == ("Running", "resnet-0")


# --- several jobs: the planner --------------------------------------------------------------


def queued_until_room() -> Bench:
    """Two jobs on a node of 2.5 cores: the second cannot be admitted beside the first (its
    need does not fit) and waits, Queued, until the first succeeds; then it is admitted and
    started."""
    bench = Bench({"node-a": (2.5, 0)})
    bench.apply(
        job_body("first", maximum="2", initial="2", duration="240s", epochs=3),
        cpu_trainer(300, exits=True),
    )
    for _ in range(3):
        bench.period()
    bench.apply(
        job_body("second", minimum="1", maximum="2", initial="2", duration="900s"), cpu_trainer()
    )
    bench.run_until(lambda: bench.phase("second") == "Running", most=40)
    bench.period()
    return bench


def create_refused_then_patched() -> Bench:
    """A refused create waits out its backoff; a patch of the spec (a smaller max) tries
    again at once, and the quota allows it."""
    bench = Bench(CPU_NODE)
    bench.kube.fail("create_pod", 403, "exceeded quota: compute", times=2)
    bench.apply(job_body("resnet", initial="2"), cpu_trainer())
    for _ in range(2):
        bench.period()
    bench.patch_spec("resnet", {"resources": {"initial": "1", "max": "1"}})
    bench.run_until(lambda: bench.phase("resnet") == "Running", most=6)
    return bench


def test_a_new_generation_tries_a_refused_create_at_once() -> None:
    bench = create_refused_then_patched()
    # refused at 10 s and 20 s (next try 40 s), patched after 20 s: tried at 30 s
    assert call_times(bench, "create_pod") == [(10, 403), (20, 403), (30, None)]
    assert created(bench) == [("resnet-0", {"cpu": "1000m"})]
    assert bench.events("resnet") == ["CreateRefused", "PodCreated"]


def test_a_job_that_does_not_fit_waits_queued() -> None:
    bench = recorded(queued_until_room)
    assert bench.events("second")[:3] == ["Queued", "Admitted", "PodCreated"]
    assert [name for name, _ in created(bench)] == ["first-0", "second-0"]
    record = bench.kube.record
    first_done = record.index(
        {"kubelet": "trainer exited 0", "pod": "first-0", "message": "steps=300/300"}
    )
    second_created = next(
        i
        for i, e in enumerate(record)
        if e.get("call") == "create_pod" and e["body"]["metadata"]["name"] == "second-0"
    )
    assert first_done < second_created
    assert bench.phase("first") == "Succeeded"
    status = bench.status("second")
    assert (status["phase"], status["admission"]) == ("Running", "Admitted")


def preempted_by_priority() -> Bench:
    """A higher-priority job arrives on a full node: the running lower-priority job is
    preempted (its pod deleted, it checkpoints) and waits Queued; the urgent job starts once
    the pod is gone."""
    bench = Bench({"node-a": (2.5, 0)})
    bench.apply(
        job_body("low", minimum="1", maximum="2", initial="2", duration="900s"), cpu_trainer()
    )
    for _ in range(3):
        bench.period()
    bench.apply(
        job_body("urgent", minimum="1", maximum="2", initial="2", duration="700s", priority=10),
        cpu_trainer(),
    )
    for _ in range(6):
        bench.period()
    return bench


def test_a_higher_priority_job_preempts_a_running_one() -> None:
    bench = recorded(preempted_by_priority)
    assert [(e["name"], e["grace_period_s"]) for e in calls(bench, "delete_pod")] == [("low-0", 30)]
    assert bench.events("low") == ["PodCreated", "Resized", "Preempted", "Queued"]
    assert [name for name, _ in created(bench)] == ["low-0", "urgent-0"]
    low, urgent = bench.status("low"), bench.status("urgent")
    assert (low["phase"], low["admission"]) == ("Queued", "Queued")
    assert (urgent["phase"], urgent["admission"]) == ("Running", "Admitted")
    assert bench.pods("low") == []


def best_effort_beside_deadline_job() -> Bench:
    """A best-effort job fills what a deadline job leaves on the node; when the deadline job's
    deadline moves earlier it needs more, and the best-effort job gives cores back first (a
    shrink frees nothing until it lands, so the deadline job grows one period later)."""
    bench = Bench({"node-a": (6.0, 0)})
    bench.apply(job_body("deadline", initial="2", duration="600s"), cpu_trainer())
    bench.apply(
        job_body("sweep", maximum="4", duration=None, bestEffort=True),
        cpu_trainer(100_000),
    )
    for _ in range(6):
        bench.period()
    bench.patch_spec("deadline", {"duration": "400s"})
    for _ in range(4):
        bench.period()
    return bench


def test_a_best_effort_job_fills_what_a_deadline_job_leaves() -> None:
    bench = recorded(best_effort_beside_deadline_job)
    assert created(bench) == [("deadline-0", {"cpu": "2000m"}), ("sweep-0", {"cpu": "3900m"})]
    resizes = [(e["name"], e["cores"]) for e in calls(bench, "resize_pod_cpu")]
    assert resizes[:2] == [("sweep-0", 2.9), ("deadline-0", 3.0)]
    assert limits(bench, "sweep-0") == {"cpu": "2900m"}
    assert limits(bench, "deadline-0") == {"cpu": "3000m"}
    sweep = bench.status("sweep")
    assert (sweep["admission"], sweep.get("deadline")) == ("BestEffort", None)
    assert bench.events("deadline")[1:3] == ["DeadlineChanged", "AtRisk"]


# --- what the controller reads back -----------------------------------------------------------


def resize_deferred() -> Bench:
    """A grow asked for meets a node that another pod filled meanwhile: the kubelet defers
    the resize; the job takes the request back to what runs (never leaving a resize
    pending), says so, and the planner shorts it to what the node can still give."""
    bench = Bench({"node-a": (4.0, 0)})
    bench.apply(job_body("resnet", initial="1", maximum="3", duration="400s"), cpu_trainer())
    for _ in range(2):
        bench.period()
    bench.period(then=lambda: bench.kube.run_other_pod("log-shipper", "node-a", 2.0))
    for _ in range(3):
        bench.period()
    return bench


def test_a_deferred_resize_is_taken_back() -> None:
    bench = recorded(resize_deferred)
    assert [e["cores"] for e in calls(bench, "resize_pod_cpu")] == [3.0, 1.0, 1.95]
    assert bench.events("resnet")[2:5] == ["ResizeInfeasible", "Shorted", "AtRisk"]
    assert limits(bench, "resnet-0") == {"cpu": "1950m"}
    status = bench.status("resnet")
    assert (status["admission"], status["allocation"]) == ("Shorted", "1950m")
    assert condition(status, "AtRisk") == ("True", "NeedsNearMax")


QUOTA_ANSWER = (
    'pods "resnet-0" is forbidden: exceeded quota: compute, requested: limits.cpu=2, '
    "used: limits.cpu=1050m, limited: limits.cpu=1050m"
)


def resize_refused_by_quota() -> Bench:
    """A ResourceQuota holds the trainer's start but refuses its grow three times (403): the
    trainer keeps running at what it holds, the job says so in its Admitted condition and
    one Warning Event, tries again after 10 s, 20 s and 40 s, and grows once the quota
    allows; then the condition says Admitted again."""
    bench = Bench({"node-a": (4.0, 0)})
    bench.apply(job_body("resnet", initial="1", maximum="3", duration="400s"), cpu_trainer())
    bench.kube.fail("resize_pod_cpu", 403, QUOTA_ANSWER, times=3)
    for _ in range(3):
        bench.period()
    assert condition(bench.status("resnet"), "Admitted") == ("True", "ResizeRefused")
    bench.run_until(lambda: limits(bench, "resnet-0")["cpu"] != "1000m", most=12)
    bench.period()
    return bench


def test_a_refused_resize_is_a_condition_one_event_and_retried_with_backoff() -> None:
    bench = recorded(resize_refused_by_quota)
    resizes = call_times(bench, "resize_pod_cpu")
    assert [raised for _, raised in resizes] == [403, 403, 403, None]
    first = resizes[0][0]
    assert [at - first for at, _ in resizes] == [0, 10, 30, 70]
    assert bench.events("resnet").count("ResizeRefused") == 1
    assert "Resized" in bench.events("resnet")  # for the resize that went through alone
    status = bench.status("resnet")
    assert status["resizes"] == 1
    assert condition(status, "Admitted") == ("True", "Admitted")
    patches = [e["status"] for e in calls(bench, "patch_job_status")]
    refused = [p for p in patches if condition(p, "Admitted") == ("True", "ResizeRefused")]
    assert refused and all("exceeded quota" in c["message"] for p in refused
                           for c in p["conditions"] if c["type"] == "Admitted")  # fmt: skip
    # the trainer ran on at what it held: never restarted, never deleted
    assert calls(bench, "delete_pod") == []
    assert [name for name, _ in created(bench)] == ["resnet-0"]


def stalled_then_unreadable() -> Bench:
    """The trainer stops taking steps (Stalled after the stall timeout), then its progress
    cannot be read (MetricsUnavailable, holding the allocation), then both recover."""
    bench = Bench(CPU_NODE, scenario_config(stall_timeout_s=30.0))
    trainer = cpu_trainer()
    bench.apply(job_body("resnet", initial="2"), trainer)
    for _ in range(4):
        bench.period()
    trainer.paused = True
    for _ in range(5):
        bench.period()
    trainer.unreadable = "GET http://10.244.0.1:9100/metrics: connection refused"
    for _ in range(3):
        bench.period()
    trainer.paused, trainer.unreadable = False, None
    for _ in range(2):
        bench.period()
    return bench


def test_a_stalled_trainer_and_unreadable_progress_are_reported() -> None:
    bench = recorded(stalled_then_unreadable)
    events = bench.events("resnet")
    assert events[:3] == ["PodCreated", "Stalled", "MetricsUnavailable"]
    assert "MetricsRecovered" in events
    patches = [e["status"] for e in calls(bench, "patch_job_status")]
    assert any(condition(s, "Stalled") == ("True", "NoNewSteps") for s in patches)
    unreadable = next(
        s for s in patches if condition(s, "MetricsUnavailable") == ("True", "NoProgressSample")
    )
    assert unreadable["allocation"] == "2000m"  # held while nothing can be read
    assert condition(unreadable, "Stalled") == ("True", "NoNewSteps")  # no sample, no news
    assert condition(bench.status("resnet"), "MetricsUnavailable") == ("False", "ProgressSampled")


def operator_restarted() -> Bench:
    """The operator restarts while a job runs: the new controller picks the job up from its
    status (the law's state, the pod it runs) and goes on with the same pod."""
    bench = Bench(CPU_NODE)
    bench.apply(job_body("resnet", initial="4"), cpu_trainer())
    for _ in range(5):
        bench.period()
    bench.restart_operator()
    for _ in range(4):
        bench.period()
    return bench


def test_an_operator_restart_resumes_from_the_status() -> None:
    bench = recorded(operator_restarted)
    restarted = bench.kube.record.index({"scenario": "operator restarted"})
    after = bench.kube.record[restarted:]
    assert not [e for e in after if e.get("call") in ("create_pod", "delete_pod", "post_event")]
    assert created(bench) == [("resnet-0", {"cpu": "4000m"})]
    first_write = next(e for e in after if e.get("call") == "patch_job_status")["status"]
    assert first_write["controller"]["decisions"] > 0  # the law's state, not a fresh one
    status = bench.status("resnet")
    assert (status["phase"], status["podName"], status["startTime"]) == (
        "Running",
        "resnet-0",
        format_time(START_S + 10.0),
    )


@pytest.mark.parametrize("record", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_every_written_status_tells_one_story(record: Path) -> None:
    """In every status any scenario writes: a job on track is neither at risk nor infeasible
    (Infeasible comes with AtRisk by design), and a job that ended (Failed, Succeeded) is
    neither on track nor at risk."""
    data = json.loads(record.read_text())
    written = [e["status"] for e in data["calls"] if e.get("call") == "patch_job_status"]
    for status in [*written, data["status"]]:
        if "conditions" not in status:
            continue
        true = {c["type"] for c in status["conditions"] if c["status"] == "True"}
        if "OnTrack" in true:
            assert not true & {"AtRisk", "Infeasible"}, (record.stem, status.get("phase"), true)
        if status.get("phase") in ("Failed", "Succeeded"):
            assert not true & {"OnTrack", "AtRisk"}, (record.stem, status["phase"], true)


# --- LimitRanges -------------------------------------------------------------------------------


def cpu_limit_range(name: str, most: str) -> dict[str, Any]:
    """A LimitRange in the scenarios' namespace: at most ``most`` cpu per container."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": most}}]},
    }


def test_a_job_runs_within_what_a_limit_range_clips_its_max_to() -> None:
    bench = Bench(CPU_NODE)
    bench.kube.add_limit_range(cpu_limit_range("cpu-cap", "1500m"))
    bench.apply(job_body("resnet", initial="4", duration="900s"), cpu_trainer())
    bench.run_until(lambda: bench.phase("resnet") == "Succeeded", most=120)
    assert created(bench) == [("resnet-0", {"cpu": "1500m"})]  # initial 4, clipped
    resizes = calls(bench, "resize_pod_cpu")
    assert resizes and all(entry["cores"] <= 1.5 for entry in resizes)
    assert not [e for e in bench.kube.record if e.get("raised")]  # never refused
    assert bench.events("resnet").count("LimitRangeClipped") == 1
    clipped = [e for e in bench.kube.events if e["reason"] == "LimitRangeClipped"]
    assert clipped[0]["message"] == "max 4000m clipped to 1500m by LimitRange ml/cpu-cap"
    assert condition(bench.status("resnet"), "DeadlineMissed") == ("False", "FinishedOnTime")


def test_a_job_whose_min_is_above_a_limit_range_max_is_refused_once() -> None:
    bench = Bench(CPU_NODE)
    bench.kube.add_limit_range(cpu_limit_range("small", "500m"))
    bench.apply(job_body("resnet", minimum="1", initial="2"), cpu_trainer())
    for _ in range(5):
        bench.period()
    assert calls(bench, "create_pod") == []
    status = bench.status("resnet")
    assert condition(status, "Admitted") == ("False", "LimitRangeRefused")
    (admitted,) = [c for c in status["conditions"] if c["type"] == "Admitted"]
    assert "LimitRange ml/small" in admitted["message"]
    assert bench.events("resnet") == ["LimitRangeRefused"]


def test_without_the_capacity_view_limit_ranges_are_listed_every_30_s() -> None:
    bench = Bench(CPU_NODE, capacity_view=False)
    bench.kube.add_limit_range(cpu_limit_range("small", "500m"))
    bench.apply(job_body("resnet", minimum="1", initial="2"), cpu_trainer())
    for _ in range(5):
        bench.period()
    assert [e["time"] for e in bench.kube.record if "period" in e] == [
        format_time(START_S + 10 * n) for n in range(1, 6)
    ]
    listed = [e for e in bench.kube.record if e.get("call") == "list_limit_ranges"]
    assert len(listed) == 2  # at 10 s and 40 s
    assert calls(bench, "create_pod") == []
    assert condition(bench.status("resnet"), "Admitted") == ("False", "LimitRangeRefused")
    assert bench.events("resnet") == ["LimitRangeRefused"]


def test_a_job_made_again_under_its_name_never_gets_the_old_ones_status() -> None:
    """A job deleted and created again at once under its name (another uid), while the
    operator's view still shows the old one: the old job's controller acts once more (its
    pod was garbage-collected: PodLost) and writes its status, with the old uid as the
    patch's precondition, so nothing lands on the new job (the API server answers 409)."""
    bench = Bench({"node-a": (8.0, 0)})
    bench.apply(job_body("kept"), cpu_trainer())
    bench.period()
    bench.period()
    assert bench.status("kept").get("podsCreated") == 1
    successor = job_body("kept")
    successor["metadata"]["uid"] = "uid-successor"
    bench.kube.jobs[(NAMESPACE, "kept")] = successor  # no status yet
    bench.kube.pods = {k: p for k, p in bench.kube.pods.items() if k[0] != NAMESPACE}
    bench.view.replace_pods([dict(p) for p in bench.kube.pods.values()])
    bench.now += 10.0
    bench.loop.run_period()  # the view still holds the old job
    assert not bench.kube.jobs[(NAMESPACE, "kept")].get("status")
    last = calls(bench, "patch_job_status")[-1]
    assert last["uid"] == "uid-kept" and last["status"].get("phase") == "Restarting"
    bench.period()  # the view catches up: the new job starts afresh, its own status
    status = bench.status("kept")
    assert status.get("podsCreated") == 1 and status.get("podFailures", 0) == 0
