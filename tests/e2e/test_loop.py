"""The operator's control loop, period by period, with a fake clock against the real API server.

The loop (decor.service.loop.ControlLoop) runs in the test process with a clock the test advances;
everything it reads and writes is real: jobs, pods and the node through the test bed's
kube-apiserver, pods started and resized in place by the real kubelet. Only the trainers are
simulated: the pods sleep, and a small fleet model advances each one's steps at a speed
proportional to the CPU the kubelet reports as applied (SIMULATED progress; see
``FakeFleet``). Between periods the test polls until every resize asked for has landed, so
the fake clock never runs ahead of the kubelet.

Checked: the planner admits what fits and queues the rest with the earliest deadline it could
meet; a queued job is admitted and started when capacity frees; status is written when a
user would see a change, not every period; a deadline patch is acted on in the next period.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from decor.adapter.kube import Kube
from decor.api.model import format_time
from decor.api.vocabulary import API_GROUP, API_VERSION, PLURAL
from decor.core import build, progress
from decor.core.views import ClusterView, Key, Snapshot, job_label
from decor.service.config import OperatorConfig
from decor.service.loop import ControlLoop
from decor.service.operator_metrics import OperatorMetrics
from prometheus_client import CollectorRegistry
from test_operator import crd  # noqa: F401 - fixture used by name

# alone: the loop's jobs need the node's two cores (the third does not fit beside the first two)
pytestmark = [pytest.mark.e2e, pytest.mark.alone]

STEP_S_AT_ONE_CORE = 0.4  # the simulated trainers' speed: 2.5 steps/s per core
PLANNED_STEPS = 1000


class FakeFleet:
    """SIMULATED trainers: each running pod's steps advance by dt x cores / step time at one
    core, with the cores the kubelet reports as applied (status.containerStatuses)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.steps: dict[str, float] = {}
        self.rate: dict[str, float] = {}  # steps per second now
        self.last_s: float | None = None

    def advance(self, snapshot: Snapshot) -> None:
        now = self.clock()
        dt = 0.0 if self.last_s is None else now - self.last_s
        self.last_s = now
        for (_ns, name), pod in snapshot.pods.items():
            if not job_label(pod):
                continue
            if build.pod_phase(pod) != "Running" or build.is_terminating(pod):
                continue
            applied = build.applied_cpu_cores(pod, "trainer") or 0.0
            self.rate[name] = min(applied, 1.0) / STEP_S_AT_ONE_CORE
            done = self.steps.get(name, 0.0) + dt * self.rate[name]
            self.steps[name] = min(float(PLANNED_STEPS), done)

    def read(
        self, snapshot: Snapshot, due: list[Key]
    ) -> Mapping[progress.PodKey, progress.ProgressRead]:
        now = self.clock()
        reads: dict[progress.PodKey, progress.ProgressRead] = {}
        for (ns, name), pod in snapshot.pods.items():
            if name in self.steps and build.pod_phase(pod) == "Running":
                # Whole steps, stamped with when the last one completed (as the reporter does).
                done = float(int(self.steps[name]))
                rate = self.rate.get(name) or 1.0
                reads[(ns, name)] = progress.Progress(
                    steps_done=done,
                    steps_planned=float(PLANNED_STEPS),
                    last_step_time_s=now - (self.steps[name] - done) / rate,
                )
        return reads


class LoopBench:
    """The loop, its view refreshed from the API server, a fake clock and the fake fleet."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.now = time.time()
        self.api = Kube.from_environment(kube.kubeconfig)
        self.writes: list[str] = []
        self.visible: dict[str, Any] = {}
        self.changes: list[Any] = []
        patch = self.api.patch_job_status

        def counting_patch(
            ns: str, name: str, status: Mapping[str, Any], uid: str | None = None
        ) -> bool:
            self.writes.append(name)
            visible = build.visible_status(status)
            before = self.visible.get(name)
            if before is not None and before != visible:
                self.changes.append(
                    (name, [(a, b) for a, b in zip(before, visible, strict=True) if a != b])
                )
            self.visible[name] = visible
            return patch(ns, name, status, uid)

        self.api.patch_job_status = counting_patch  # type: ignore[method-assign]
        self.view = ClusterView()
        self.fleet = FakeFleet(lambda: self.now)
        self.loop = ControlLoop(
            self.view,
            kube=self.api,
            config=OperatorConfig(startup_grace_s=3600.0, min_period_s=1.0),
            operator_metrics=OperatorMetrics(CollectorRegistry()),
            clock=lambda: self.now,
            read_progress=self.fleet.read,
        )

    def refresh(self) -> Snapshot:
        jobs = self.api.custom.list_namespaced_custom_object(
            API_GROUP, API_VERSION, self.namespace, PLURAL
        )["items"]
        for body in jobs:
            self.view.put_job(body)
        pods = self.kube.core.api_client.sanitize_for_serialization(
            self.kube.core.list_pod_for_all_namespaces().items
        )
        self.view.replace_pods(pods)
        nodes = self.kube.core.api_client.sanitize_for_serialization(
            self.kube.core.list_node().items
        )
        self.view.replace_nodes(nodes)
        return self.view.snapshot()

    def settled(self) -> bool:
        """Every resize asked for has landed and no pod of the namespace is still pending."""
        for pod in self.refresh().pods.values():
            if pod["metadata"].get("namespace") != self.namespace:
                continue
            if build.pod_phase(pod) == "Pending" or build.resize_state(pod).waiting:
                return False
            desired = build.desired_cpu_cores(pod, "trainer")
            applied = build.applied_cpu_cores(pod, "trainer")
            if desired is not None and applied is not None and abs(desired - applied) > 1e-3:
                return False
        return True

    def period(self, advance_s: float = 1.0) -> None:
        """Advance the fake clock, let the fleet train, run one period, wait for its status
        writes (sent in the background) and the kubelet."""
        self.now += advance_s
        self.fleet.advance(self.refresh())
        self.loop.run_period()
        assert self.loop.status_writer.flush(30), "the period's status writes were not sent"
        self.kube.wait_for(self.settled, 90, "the kubelet to apply what the period asked")

    def status(self, name: str) -> dict[str, Any]:
        body = self.api.custom.get_namespaced_custom_object(
            API_GROUP, API_VERSION, self.namespace, PLURAL, name
        )
        return body.get("status") or {}

    def pods(self, job: str) -> list[dict[str, Any]]:
        return [
            p
            for (ns, _n), p in self.refresh().pods.items()
            if ns == self.namespace and job_label(p) == job
        ]


def _job(name: str, deadline_in_s: float, now: float, trainer_image: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "DeadlineTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "deadline": format_time(now + deadline_in_s),
            "epochs": 1,
            "stepsPerEpoch": PLANNED_STEPS,
            "resources": {"mode": "cpu", "min": "250m", "max": "1", "initial": "1"},
            "estimate": {"stepSeconds": STEP_S_AT_ONE_CORE, "allocation": "1"},
            "control": {"policy": "decor", "periodSeconds": 1},
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": trainer_image,
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"],
                            "resources": {"requests": {"memory": "64Mi"}},
                        }
                    ],
                }
            },
        },
    }


def _create(bench: LoopBench, body: dict[str, Any]) -> None:
    bench.api.custom.create_namespaced_custom_object(
        API_GROUP, API_VERSION, bench.namespace, PLURAL, body
    )


def test_the_loop_admits_what_fits_queues_the_rest_and_writes_only_what_users_see(
    kube: Any,
    namespace: str,
    crd: None,  # noqa: F811
    trainer_image: str,
) -> None:
    bench = LoopBench(kube, namespace)
    # 1000 steps at 2.5 steps/s per core: "first" needs 0.5 core over 800 s, "second" 0.91
    # core over 440 s; "third" (the same) does not fit beside them on 2 cores.
    # They arrive in that order, a period apart (arriving together, the two tighter ones
    # would be admitted first: deadline order).
    for name, deadline_in_s in (("first", 800), ("second", 440), ("third", 440)):
        _create(bench, _job(name, deadline_in_s, bench.now, trainer_image))
        bench.period()
    bench.period()
    first, second, third = (bench.status(n) for n in ("first", "second", "third"))
    assert first.get("admission") == "Admitted" and second.get("admission") == "Admitted"
    assert third.get("phase") == "Queued", third
    assert not bench.pods("third")
    admitted = next(c for c in third["conditions"] if c["type"] == "Admitted")
    found = re.search(r"earliest deadline it could meet now is (\S+Z)", admitted["message"])
    assert found, admitted
    first_cpu = build.desired_cpu_cores(bench.pods("first")[0], "trainer")
    second_cpu = build.desired_cpu_cores(bench.pods("second")[0], "trainer")
    assert first_cpu == pytest.approx(0.5, abs=0.1) and second_cpu == pytest.approx(0.91, abs=0.1)

    # Status writes: once the jobs run steadily, one per shown change of progress (at most
    # one per 3 periods), not one per period. "first" gains a whole percent of progress
    # every 8 periods, "second" every 4: about 12 writes in 32 periods, where writing every
    # period would be 64.
    writes_before = len(bench.writes)
    steady_periods = 32
    for _ in range(steady_periods):
        bench.period()
    steady_writes = len(bench.writes) - writes_before
    assert 8 <= steady_writes <= 24, (steady_writes, bench.changes[-12:])
    progress = bench.status("second")["progress"]
    assert progress == pytest.approx(
        bench.fleet.steps[bench.pods("second")[0]["metadata"]["name"]] / PLANNED_STEPS, abs=0.02
    )

    # The queued job, moved to the deadline it was told (plus two minutes: the answer assumes
    # it starts the moment "second" ends, and this clock jumps 10 s at a time), is admitted
    # as soon as its need at that deadline fits (at the latest once "second" is done).
    from datetime import UTC, datetime

    told_s = datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    kube.kubectl(
        "-n", namespace, "patch", "dtj", "third", "--type", "merge",
        "-p", json.dumps({"spec": {"deadline": format_time(told_s.timestamp() + 120)}}),
    )  # fmt: skip
    bench.loop.wake((namespace, "third"))
    while bench.status("second").get("phase") != "Succeeded":
        bench.period(advance_s=10.0)
        assert bench.now < time.time() + 800, "the second job never finished"
        held = sum(
            build.desired_cpu_cores(pod, "trainer") or 0.0
            for name in ("first", "second", "third")
            for pod in bench.pods(name)
        )
        assert held <= 2.0, held  # never more than the node has
    for pod in bench.pods("second"):  # the trainer exits when done
        kube.core.delete_namespaced_pod(pod["metadata"]["name"], namespace, grace_period_seconds=0)
    kube.wait_for(lambda: not bench.pods("second"), 60, "the finished trainer to go")
    for _ in range(3):
        bench.period()
    third = bench.status("third")
    assert third.get("admission") == "Admitted", (third.get("deadline"), third["conditions"])
    assert bench.pods("third"), "the admitted job has a pod"
    events = kube.core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=third"
    ).items
    assert {"Queued", "Admitted"} <= {e.reason for e in events}

    # A deadline patch is acted on in the next period, whatever the job's own period.
    before = build.desired_cpu_cores(bench.pods("first")[0], "trainer")
    assert before is not None

    remaining = PLANNED_STEPS - bench.fleet.steps[bench.pods("first")[0]["metadata"]["name"]]
    sooner = bench.now + remaining * STEP_S_AT_ONE_CORE / 0.95  # needs ~0.95 core
    kube.kubectl(
        "-n", namespace, "patch", "dtj", "first", "--type", "merge",
        "-p", json.dumps({"spec": {"deadline": format_time(sooner)}}),
    )  # fmt: skip
    bench.loop.wake((namespace, "first"))
    bench.period(advance_s=0.1)
    after = build.desired_cpu_cores(bench.pods("first")[0], "trainer")
    assert after is not None and after > before + 0.2, (before, after)
