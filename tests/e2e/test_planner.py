"""End to end: several jobs on the 2-core test bed share it through the planner (issue 10).

One scenario, in the order a shared node sees it:

1. a best-effort job runs alone and takes the idle cores (up to its max);
2. a loose-deadline job arrives holding 1.5 cores: the best-effort job gives cores back;
3. a tight-deadline job arrives that fits only once the first one has shrunk: the first
   one's allocation goes down, the second's pod is created without waiting Pending, both
   finish within 5 % of their deadlines, and no resize is ever left Deferred/Infeasible;
4. a third deadline job that cannot be met now is Queued, its message naming the earliest
   deadline it could meet; moved to that deadline it is admitted and started when capacity
   frees, and runs to completion.

A watcher thread samples the namespace's pods every half second for the whole scenario.
"""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from decor.core.control import SpeedFit
from test_operator import (  # noqa: F401, F811 - fixtures used by name
    CPU_MIN,
    DEVIATION_BOUND_PERCENT,
    RESNET_STEP_S_AT_ONE_CORE,
    OperatorProcess,
    condition,
    cores,
    crd,
    create_job,
    job_events,
    job_manifest,
    job_status,
    machine_scale,
    machine_steps,
    now_utc,
    operator,
    report,
    rfc3339,
    trainer_pods,
    trainer_spec_cpu,
    wait_succeeded,
)

# alone: the planner shares the whole node among the scenario's jobs
pytestmark = [pytest.mark.e2e, pytest.mark.alone]

STARTUP_S = 30.0  # importing PyTorch and building the model in a throttled pod, roughly
TIME_SCALE_NOTE = "the test bed's 2 cores are shared with the control plane"


class PodSampler:
    """Samples (time, pod, trainer CPU limit, resize-pending reason) every 0.5 s."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.samples: list[tuple[float, str, str, float, str | None]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                pods = self.kube.core.list_namespaced_pod(self.namespace).items
            except Exception:  # noqa: BLE001 - a missed sample is not a verdict
                pods = []
            now = time.monotonic()
            for pod in pods:
                job = (pod.metadata.labels or {}).get("decor.dev/job", "")
                pending = None
                for cond in pod.status.conditions or []:
                    if cond.type == "PodResizePending" and cond.status == "True":
                        pending = f"{cond.reason}: {cond.message}"
                limit = pod.spec.containers[0].resources.limits.get("cpu", "0")
                self.samples.append((now, job, pod.metadata.name, cores(limit), pending))
            self.stop.wait(0.5)

    def allocations(self, job: str, since: float = 0.0) -> list[float]:
        return [c for t, j, _n, c, _p in self.samples if j == job and t >= since]

    def refused(self) -> list[str]:
        return sorted({f"{n}: {p}" for _t, _j, n, _c, p in self.samples if p})


def _resources(minimum: str, maximum: str, initial: str) -> dict[str, Any]:
    return {"mode": "cpu", "min": minimum, "max": maximum, "initial": initial}


def _allocation(kube: Any, namespace: str, job: str) -> float | None:
    pods = [p for p in trainer_pods(kube, namespace, job) if not p.metadata.deletion_timestamp]
    return cores(trainer_spec_cpu(pods[0])) if pods else None


def _step_s_at_one_core(status: dict[str, Any]) -> float | None:
    """Seconds per step at one core by the job's own fit (sub-core fit: a / u + b); None
    before the law has one."""
    fit = (status.get("controller") or {}).get("fit")
    if not fit:
        return None
    coefficients = SpeedFit(**fit).coefficients()
    if coefficients is None:
        return None
    a, b = coefficients
    return a + b


def test_jobs_share_the_node_through_the_planner(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    with PodSampler(kube, namespace) as sampler:
        # 1. A best-effort job alone takes the idle cores, up to its max, and measures the
        # workload's speed (every job here trains the same model).
        filler = job_manifest(
            "filler", trainer_image, epochs=40, resources=_resources("100m", "1", "250m")
        )
        filler["spec"]["bestEffort"] = True
        create_job(kube, namespace, filler)
        kube.wait_for(
            lambda: (_allocation(kube, namespace, "filler") or 0) >= 1.0,
            120,
            "the best-effort job to take the idle cores (1 core, its max)",
        )

        def measured() -> float | None:
            status = job_status(kube, namespace, "filler")
            if status.get("stepsDone", 0) < 60:  # past the cold start
                return None
            return _step_s_at_one_core(status)

        step_s = kube.wait_for(
            measured, 300, "the best-effort job's speed fit"
        )  # includes a cold start

        # 2. A loose job arrives holding 1.5 cores: the best-effort job gives them back. Its
        # work is sized from the measured speed so that it needs about 0.35 core, well above
        # its 100m floor: a floor near the need finishes the job early whatever the law does
        # (a fixed 400 steps at a 250m floor came in 20 % early at 0.093 s a step, and the
        # speed measured early in a run can be twice the steady one).
        loose_deadline_s = 200.0
        loose_steps = int(0.35 * (loose_deadline_s - STARTUP_S) / step_s)
        create_job(
            kube,
            namespace,
            job_manifest(
                "loose",
                trainer_image,
                epochs=1,
                steps_per_epoch=loose_steps,
                duration=f"{loose_deadline_s:.0f}s",
                resources=_resources("100m", "1500m", "1500m"),
            ),
        )
        kube.wait_for(
            lambda: (_allocation(kube, namespace, "filler") or 1.0) < 0.5,
            60,
            "the best-effort job to give cores back to the deadline job",
        )
        kube.wait_for(
            lambda: any(
                p.status.phase == "Running" for p in trainer_pods(kube, namespace, "loose")
            ),
            120,
            "the loose job's pod to run",
        )

        # 3. While the loose job still holds 1.5 cores, a tight job arrives that fits only
        # once the loose one has shrunk to what it needs.
        loose_before = _allocation(kube, namespace, "loose") or 0.0
        tight_deadline_s = 120.0
        # About 0.7 core over the run after start-up (one thread up to 1.99 cores).
        tight_steps = max(100, int(0.7 * (tight_deadline_s - STARTUP_S) / step_s))
        arrived = time.monotonic()
        create_job(
            kube,
            namespace,
            job_manifest(
                "tight",
                trainer_image,
                epochs=1,
                steps_per_epoch=tight_steps,
                duration=f"{tight_deadline_s:.0f}s",
                resources=_resources("100m", "1500m", "1"),
            ),
        )

        def tight_pod() -> Any:
            pods = trainer_pods(kube, namespace, "tight")
            return pods[0] if pods else None

        kube.wait_for(tight_pod, 90, "the tight job's pod to be created")
        created_after_s = time.monotonic() - arrived
        kube.wait_for(
            lambda: tight_pod().status.phase == "Running",
            60,
            "the tight job's pod to run (not Pending for want of CPU)",
        )

        # 4. A job that cannot be met now waits in the queue, told its earliest deadline. It
        # comes once the tight job's speed is measured: admitted while that job still probes,
        # a job of known speed comes first (the planner tops up a probing job's need after
        # them), and a CI run's tight job, shorted to 0.75 core for 25 s, missed its deadline.
        kube.wait_for(
            lambda: _step_s_at_one_core(job_status(kube, namespace, "tight")),
            120,
            "the tight job's speed fit",
        )
        queued_steps = int(90.0 / step_s)  # ~90 s at one core
        late = job_manifest(
            "queued",
            trainer_image,
            epochs=1,
            steps_per_epoch=queued_steps,
            duration="45s",
            resources=_resources("500m", "1", "1"),
        )
        late["spec"]["estimate"] = {"stepSeconds": round(step_s, 4), "allocation": "1"}
        create_job(kube, namespace, late)

        def queued() -> dict[str, Any] | None:
            status = job_status(kube, namespace, "queued")
            admitted = condition(status, "Admitted")
            return status if admitted.get("reason") == "Queued" else None

        status = kube.wait_for(queued, 60, "the third job to be Queued")
        message = condition(status, "Admitted")["message"]
        assert status["phase"] == "Queued", status
        assert not trainer_pods(kube, namespace, "queued")  # no pod while queued
        found = re.search(r"earliest deadline it could meet now is (\S+Z)", message)
        assert found, message
        assert ("Warning", "Queued") in {
            (t, r) for t, r, _m in job_events(kube, namespace, "queued")
        }
        # The user accepts the answer (with a margin for start-up): it is admitted and runs
        # once capacity frees.
        new_deadline = rfc3339(
            max(now_utc(), _parse(found.group(1))) + timedelta(seconds=STARTUP_S + 30)
        )
        kube.kubectl(
            "-n", namespace, "patch", "dtj", "queued", "--type", "merge",
            "-p", json.dumps({"spec": {"deadline": new_deadline, "duration": None}}),
        )  # fmt: skip
        kube.wait_for(
            lambda: (
                condition(job_status(kube, namespace, "queued"), "Admitted").get("status") == "True"
            ),
            300,
            "the queued job to be admitted",
        )
        # Its pod comes once the node has room for its 500m floor: at the latest when the
        # tight job, due tight_deadline_s after it arrived, has finished (on a slow VM the two
        # deadline jobs ran at 0.3 s a step, not the filler's 0.2, and held all but 0.45 core
        # until then).
        room_by_s = tight_deadline_s - (time.monotonic() - arrived) + STARTUP_S
        kube.wait_for(
            lambda: trainer_pods(kube, namespace, "queued"), max(60.0, room_by_s), "its pod"
        )

        loose = wait_succeeded(kube, namespace, "loose", timeout=400)
        tight = wait_succeeded(kube, namespace, "tight", timeout=400)
        last = wait_succeeded(kube, namespace, "queued", timeout=400)
        report("loose", loose, before_tight=loose_before)
        report("tight", tight, pod_created_after_s=round(created_after_s, 1))
        # Not held to the bound (the earliest deadline is the planner's forecast when it was
        # queued): one run of three ended 37 % late at its max with no resize. Its times, and
        # when it ends off by more than the bound, the operator's lines about it, show where
        # the time went (admitted late, its pod slow to start, or slower than its estimate).
        pod_start = min(
            (p.status.start_time for p in trainer_pods(kube, namespace, "queued")
             if p.status.start_time), default=None,
        )  # fmt: skip
        report(
            "queued", last, earliest=found.group(1), deadline=new_deadline,
            admitted=condition(last, "Admitted").get("lastTransitionTime"),
            pod_started=pod_start.strftime("%H:%M:%S") if pod_start else None,
        )  # fmt: skip
        if abs(last["outcome"]["deviationPercent"]) > DEVIATION_BOUND_PERCENT:
            lines = [ln for ln in operator.log_text().splitlines() if "queued" in ln]
            print("\n[e2e queued] the operator's lines about it:\n" + "\n".join(lines[-80:]))
        loose_after = sampler.allocations("loose", since=arrived)
        refused = sampler.refused()

    # Created once the loose job measured its need (it holds 1.5 cores until then), and
    # never left Pending by a request the node has not applied.
    assert created_after_s < 60.0, created_after_s
    assert loose_after and min(loose_after) < loose_before, (loose_before, loose_after)
    for status in (loose, tight):
        assert abs(status["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, status
    assert refused == [], refused  # never a resize left Deferred or Infeasible
    reasons = {r for _t, r, _m in job_events(kube, namespace, "queued")}
    assert "Admitted" in reasons, reasons


def _parse(text: str) -> Any:
    from datetime import UTC, datetime

    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def test_a_job_that_cannot_finish_does_not_hold_the_node(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    """A job of 10^12 steps, once proven unable to meet its deadline, runs as best effort
    (planner.lostDeadline's default): a job with a later deadline that arrives beside it is
    admitted at once and meets its deadline, while the hopeless one gets what is left.
    Before its first speed sample it holds only its min (a probe): a job of known speed (an
    estimate) that arrives then is admitted at once too, and meets its deadline."""
    hopeless = job_manifest(
        "hopeless",
        trainer_image,
        epochs=10_000_000,
        steps_per_epoch=100_000,
        deadline=rfc3339(now_utc() + timedelta(seconds=45)),
        resources=_resources("100m", "1500m", "1500m"),
    )
    create_job(kube, namespace, hopeless)
    # Admitted (at its initial 1.5 cores), its trainer still starting: nothing measured yet.
    kube.wait_for(
        lambda: job_status(kube, namespace, "hopeless").get("admission") == "Admitted",
        60,
        "the hopeless job to be admitted",
    )
    # A job of known speed whose estimate is twice the single-thread step time the width was
    # measured by: it asks about 0.52 core (420 steps at 2 x 0.09 s a core in the 145 s left
    # after its pod starts), more than the 0.4 left beside the hopeless job's 1.5 on the
    # node's 2 cores, so it fits only beside its 100m probe. In a pod a step takes 1.25-1.7x
    # that time (CI runs on a VM whose speed moves within the hour), so the job needs about
    # half a core once measured, and even a first sample slowed by the trainer's warm-up and
    # the hopeless job beside it (1.6x its later speed on the test bed) shows it on time at
    # MAX. (Sized to ask 0.55 core by a 1.3x estimate, it needed all of its one thread; its
    # first sample said even MAX was 13 s late, it ran as a lost job on what the hopeless one
    # left, and ended 11 % late.) On a slower machine (machine_scale) it has fewer, slower
    # steps: the same need.
    known = job_manifest(
        "known",
        trainer_image,
        epochs=1,
        steps_per_epoch=machine_steps(420),
        deadline=rfc3339(now_utc() + timedelta(seconds=160)),
        resources=_resources(CPU_MIN, "1500m", "1000m"),
    )
    step_s = round(2.0 * RESNET_STEP_S_AT_ONE_CORE / machine_scale(), 3)
    known["spec"]["estimate"] = {"stepSeconds": step_s, "allocation": "1"}
    create_job(kube, namespace, known)

    def set_aside() -> dict[str, Any] | None:
        status = job_status(kube, namespace, "hopeless")
        admitted = condition(status, "Admitted")
        return status if admitted.get("reason") == "BestEffort" else None

    status = kube.wait_for(set_aside, 150, "the hopeless job to run as best effort")
    message = condition(status, "Admitted")["message"]
    assert "runs as best effort" in message, message
    assert status["phase"] == "Running", status["phase"]
    # The job of known speed ends before the next one arrives: the next one is to meet its
    # deadline beside the hopeless job alone (beside a known job still at MAX it got 0.5 core).
    known_done = wait_succeeded(kube, namespace, "known", 240)
    report("known speed beside a job of unknown speed", known_done)

    # About half a core at the estimate's speed: room for a pod 1.65x slower (the same CI run
    # measured 0.26 s a step beside the hopeless job; with 4 x 100 steps it needed all of its one
    # thread, even its MAX finished after the deadline, and as a lost job it shared the
    # leftover with the hopeless one, 7.8 % late).
    created = now_utc()
    feasible = job_manifest(
        "feasible",
        trainer_image,
        epochs=4,
        steps_per_epoch=machine_steps(70),
        deadline=rfc3339(created + timedelta(seconds=100)),
        resources=_resources(CPU_MIN, "1500m", "1000m"),
    )
    create_job(kube, namespace, feasible)
    done = wait_succeeded(kube, namespace, "feasible", 240)
    report("feasible beside a hopeless job", done)
    assert condition(done, "Admitted").get("reason") in (None, "Admitted"), done["conditions"]
    queued = [e for e in job_events(kube, namespace, "feasible") if e[1] == "Queued"]
    assert not queued, f"the feasible job waited behind the hopeless one: {queued}"
    deviation = abs(done["outcome"]["deviationPercent"])
    assert deviation <= DEVIATION_BOUND_PERCENT, done["outcome"]
    # The hopeless job kept running beside it, on what was left.
    status = job_status(kube, namespace, "hopeless")
    assert status["phase"] == "Running", status["phase"]
    assert condition(status, "Admitted").get("reason") == "BestEffort", status["conditions"]
    # Before its speed was known it held its probe, and gave the rest to the job of known
    # speed, which was never queued and met its deadline.
    shorted = [m for _t, r, m in job_events(kube, namespace, "hopeless") if r == "Shorted"]
    assert any("its speed is not measured yet" in m for m in shorted), shorted
    queued = [e for e in job_events(kube, namespace, "known") if e[1] == "Queued"]
    assert not queued, f"the job of known speed waited behind one of unknown speed: {queued}"
    assert abs(known_done["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, known_done
