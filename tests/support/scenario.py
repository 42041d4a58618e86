"""A bench that drives the operator's control loop period by period against the fakes.

:class:`Bench` holds a fake cluster (:class:`RecordingKube`), simulated trainers
(:class:`FakeTrainers`), a fake clock and the operator's own :class:`decor.service.loop.ControlLoop`.
Each :meth:`Bench.period` moves the clock, lets the trainers train, brings the cluster into
the loop's view (as the operator's watches do) and runs one period of the loop
(``run_period``, the operator's entry point: snapshot, progress read, prepare, plan,
commit); then the scheduler and kubelet answer what the period asked (pods placed and
started, resizes applied, deleted pods going) before the next one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from decor.api.model import format_time
from decor.api.vocabulary import API_GROUP, API_VERSION, KIND
from decor.core.policy import CheckpointStorage
from decor.core.views import ClusterView, job_label
from decor.service.config import OperatorConfig
from decor.service.loop import ControlLoop
from decor.service.operator_metrics import OperatorMetrics
from prometheus_client import CollectorRegistry

from support.fake_kube import RecordingKube, node_body
from support.fake_trainers import FakeTrainer, FakeTrainers

NAMESPACE = "ml"
START_S = 1_800_000_000.0  # 2027-01-15T08:00:00Z
TRAINER_IMAGE = "localhost/decor/trainer:0.1.0"


def scenario_config(**changes: Any) -> OperatorConfig:
    """The operator's configuration in the scenarios: its defaults, but a fixed instance name
    (Events carry it) and one commit at a time (several would interleave their calls)."""
    values: dict[str, Any] = {
        "instance": "decor-operator-0",
        "commit_workers": 1,
        "checkpoint_storage": CheckpointStorage(volume="claim"),
    }
    values.update(changes)
    return OperatorConfig(**values)


def job_body(
    name: str,
    *,
    mode: str = "cpu",
    minimum: str = "500m",
    maximum: str = "4",
    initial: str | None = None,
    duration: str | None = "600s",
    epochs: int = 10,
    steps_per_epoch: int = 100,
    period_s: int = 10,
    **spec: Any,
) -> dict[str, Any]:
    """A DeadlineTrainingJob as the API server returns it (uid, generation, creation time)."""
    resources: dict[str, Any] = {"mode": mode, "min": minimum, "max": maximum}
    if initial is not None:
        resources["initial"] = initial
    body_spec: dict[str, Any] = {
        "epochs": epochs,
        "stepsPerEpoch": steps_per_epoch,
        "resources": resources,
        "control": {"policy": "decor", "periodSeconds": period_s},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "trainer",
                        "image": TRAINER_IMAGE,
                        "command": ["python3", "-m", "decor_trainer.train"],
                        "resources": {"requests": {"memory": "512Mi"}},
                    }
                ]
            }
        },
    }
    if duration is not None:
        body_spec["duration"] = duration
    if mode == "gpu":
        body_spec["checkpoint"] = {"path": "/checkpoints"}
    body_spec.update(spec)
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": format_time(START_S),
        },
        "spec": body_spec,
    }


class Bench:
    """The control loop, a fake cluster, simulated trainers and a fake clock."""

    def __init__(
        self,
        nodes: Mapping[str, tuple[float, int]],
        config: OperatorConfig | None = None,
        *,
        capacity_view: bool = True,
    ) -> None:
        """``capacity_view`` False: the operator watches no nodes, quotas or LimitRanges (a
        namespaced install); the view gets jobs and pods alone."""
        self.capacity_view = capacity_view
        self.now = START_S
        self.kube = RecordingKube(lambda: self.now, nodes)
        self.trainers = FakeTrainers(self.kube, lambda: self.now)
        self.view = ClusterView()
        self.config = config or scenario_config()
        self.loop = self._operator()
        self.periods = 0

    def _operator(self) -> ControlLoop:
        return ControlLoop(
            self.view,
            kube=self.kube,  # type: ignore[arg-type]  # the fake has the facade's methods
            config=self.config,
            operator_metrics=OperatorMetrics(CollectorRegistry()),
            clock=lambda: self.now,
            read_progress=self.trainers.read,
        )

    def apply(self, body: Mapping[str, Any], trainer: FakeTrainer) -> None:
        """A user applies the job; ``trainer`` is how its training goes."""
        self.kube.add_job(body)
        self.trainers.add(body["metadata"]["name"], trainer)

    def patch_spec(self, name: str, spec: Mapping[str, Any]) -> None:
        """A user patches the job's spec; the loop is woken as the operator's job watch does."""
        self.kube.patch_job_spec(NAMESPACE, name, spec)
        self.loop.wake((NAMESPACE, name))

    def restart_operator(self) -> None:
        """A new operator process: a new loop, and every job's controller made afresh from
        what the API server holds (its status)."""
        self.loop = self._operator()
        self.kube.record.append({"scenario": "operator restarted"})

    def period(self, advance_s: float = 10.0, then: Callable[[], None] | None = None) -> None:
        """The clock moves ``advance_s``, the cluster goes on, and the loop runs one period;
        ``then``: what happens in the cluster right after it, before the kubelet acts."""
        self.now += advance_s
        self.periods += 1
        self.kube.record.append({"period": self.periods, "time": format_time(self.now)})
        self.trainers.advance()
        for job in self.kube.jobs.values():
            self.view.put_job(job)
        self.view.replace_pods([copy.deepcopy(p) for p in self.kube.pods.values()])
        if self.capacity_view:
            nodes = [node_body(n, *c) for n, c in sorted(self.kube.nodes.items())]
            self.view.replace_nodes(nodes)
            if self.kube.limit_ranges:
                self.view.replace_limit_ranges(list(self.kube.limit_ranges.values()))
        self.loop.run_period()
        if then is not None:
            then()
        self.kube.tick()

    def run_until(self, done: Callable[[], bool], most: int, advance_s: float = 10.0) -> None:
        """Periods until ``done()`` holds after one; fails after ``most`` periods."""
        for _ in range(most):
            self.period(advance_s)
            if done():
                return
        raise AssertionError(f"not done after {most} periods: {self.kube.record[-3:]}")

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.kube.jobs[(NAMESPACE, name)].get("status") or {})

    def phase(self, name: str) -> str | None:
        return self.status(name).get("phase")

    def pods(self, job: str) -> list[dict[str, Any]]:
        """The job's pods in the cluster now, by name."""
        return [p for key, p in sorted(self.kube.pods.items()) if job_label(p) == job]

    def events(self, job: str) -> list[str]:
        """The reasons of the Events posted about the job, in order."""
        return [e["reason"] for e in self.kube.events if e["involvedObject"]["name"] == job]

    def result(self) -> dict[str, Any]:
        """What the golden record holds: every call in order, and each job's final status."""
        return {
            "calls": self.kube.record,
            "status": {key[1]: job.get("status") for key, job in sorted(self.kube.jobs.items())},
        }
