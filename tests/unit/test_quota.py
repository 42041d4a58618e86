"""The planner's ResourceQuota bound: tables for each duty and a property over random
clusters (no plan passes any namespace's quota or any node's capacity).

Speed curves are exact plants ``step_time = a / u``; times are seconds from 0.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from decor.api import vocabulary
from decor.api.model import format_time
from decor.core import build, quota
from decor.core import planner as pl
from decor.core.planner import Demand, Node, PlannerSettings
from decor.core.policy import TemplatePolicy
from decor.core.views import ClusterView, quotas_left
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.fake_trainers import FakeTrainer, linear_speed  # noqa: E402
from support.scenario import NAMESPACE, Bench, job_body, scenario_config  # noqa: E402

GIB = 2.0**30
SIDECAR = ((quota.LIMITS_CPU, 0.05), (quota.REQUESTS_CPU, 0.05))


def linear(u: float) -> float:
    """Seconds per step at ``u`` cores or GPUs: twice the cores, twice the speed."""
    return 1.0 / u


def job(key: str, **kw: object) -> Demand:
    """A CPU deadline job in namespace ``key``'s prefix: need 2 of [0.5, 4] cores, 100 steps
    (100 s at one core), deadline at 1,000 s; each pod charges the sidecar's 0.05 cores."""
    base: dict[str, object] = dict(
        key=key, mode="cpu", need=2.0, min_allocation=0.5, max_allocation=4.0, current=0.0,
        steps_remaining=100.0, deadline_s=1000.0, arrival_s=0.0, step_time_s=linear,
        pod_charge=SIDECAR,
    )  # fmt: skip
    base.update(kw)
    return Demand(**base)  # type: ignore[arg-type]


def gpu_job(key: str, **kw: object) -> Demand:
    base: dict[str, object] = dict(mode="gpu", need=2.0, min_allocation=1.0, max_allocation=4.0)
    return job(key, **{**base, **kw})


def limit(namespace: str, name: str = "q", **left: float) -> quota.Quota:
    """A quota leaving ``left`` (keyword names: requests_cpu for requests.cpu, ...)."""
    names = {
        "requests_cpu": quota.REQUESTS_CPU,
        "limits_cpu": quota.LIMITS_CPU,
        "requests_memory": quota.REQUESTS_MEMORY,
        "limits_memory": quota.LIMITS_MEMORY,
        "gpus": quota.REQUESTS_GPU,
        "pods": quota.PODS,
    }
    return quota.Quota(namespace, name, tuple((names[k], v) for k, v in left.items()))


def grants(
    demands: Sequence[Demand],
    nodes: Sequence[Node],
    quotas: Sequence[quota.Quota],
    policy: str = pl.POLICY_DECOR,
) -> dict[str, pl.Grant]:
    return dict(pl.plan(demands, nodes, 0.0, PlannerSettings(policy=policy), quotas).grants)


BIG = [Node("n1", cpu_cores=16.0, gpus=8.0)]


def test_a_quota_bounds_a_deadline_job_that_the_nodes_would_hold() -> None:
    g = grants([job("ml/a", need=3.0)], BIG, [limit("ml", limits_cpu=2.0)])
    assert g["ml/a"].verdict == vocabulary.VERDICT_QUEUED
    assert g["ml/a"].allocation == 0.0
    assert "ResourceQuota ml/q leaves 2 of limits.cpu" in g["ml/a"].reason
    # The most the quota holds is 1.95 cores (2 - the sidecar): 100 / 1.95 s from now.
    assert g["ml/a"].earliest_deadline_s == pytest.approx(100 / 1.95)
    assert "earliest deadline it could meet now" in g["ml/a"].reason


def test_of_two_jobs_only_one_fits_the_earlier_deadline_is_admitted() -> None:
    a = job("ml/a", need=1.5, deadline_s=500.0)
    b = job("ml/b", need=1.5, deadline_s=400.0)
    g = grants([a, b], BIG, [limit("ml", limits_cpu=2.0)])
    assert g["ml/b"].verdict == vocabulary.VERDICT_ADMITTED
    assert g["ml/b"].allocation == 1.5
    assert g["ml/a"].verdict == vocabulary.VERDICT_QUEUED
    assert "ResourceQuota ml/q leaves 0.45 of limits.cpu" in g["ml/a"].reason
    # b finishes at 100 / 1.5 s; then a could start with 1.95 cores.
    assert g["ml/a"].earliest_deadline_s == pytest.approx(100 / 1.5 + 100 / 1.95)


def test_a_running_admitted_job_keeps_its_place_before_a_new_earlier_one() -> None:
    a = job("ml/a", need=1.5, deadline_s=500.0, admitted=True, current=1.5, node="n1")
    b = job("ml/b", need=1.5, deadline_s=400.0)
    g = grants([a, b], BIG, [limit("ml", requests_cpu=2.0)])
    assert g["ml/a"].verdict == vocabulary.VERDICT_ADMITTED
    assert g["ml/b"].verdict == vocabulary.VERDICT_QUEUED
    assert "ResourceQuota ml/q" in g["ml/b"].reason


def test_an_admitted_job_whose_need_passes_the_quota_is_shorted_to_it() -> None:
    a = job("ml/a", need=3.0, admitted=True, current=1.0, node="n1")
    g = grants([a], BIG, [limit("ml", limits_cpu=2.05)])
    assert g["ml/a"].verdict == vocabulary.VERDICT_SHORTED
    assert g["ml/a"].allocation == 2.0
    assert "ResourceQuota ml/q leaves 2.05 of limits.cpu" in g["ml/a"].reason


def test_best_effort_jobs_get_what_the_quota_leaves() -> None:
    a = job("ml/a", need=1.0)
    b = job("ml/b", deadline_s=None, need=4.0)
    c = job("other/c", deadline_s=None, need=4.0)
    g = grants([a, b, c], BIG, [limit("ml", limits_cpu=3.0)])
    assert g["ml/a"].allocation == 1.0
    # 3 - (1 + 0.05) - 0.05 for b's own sidecar.
    assert g["ml/b"].allocation == pytest.approx(1.9)
    assert g["other/c"].allocation == 4.0  # another namespace is not bounded


def test_best_effort_jobs_of_one_namespace_share_what_the_quota_leaves() -> None:
    jobs = [job(f"ml/b{i}", deadline_s=None, need=4.0, arrival_s=float(i)) for i in range(3)]
    g = grants(jobs, BIG, [limit("ml", requests_cpu=4.0)])
    charged = sum(x.allocation + 0.05 for x in g.values() if x.allocation > 0)
    assert charged <= 4.0 + 1e-6
    assert g["ml/b0"].allocation > 0


def test_a_best_effort_job_the_quota_leaves_nothing_for_gets_nothing_and_is_told() -> None:
    g = grants([job("ml/b", deadline_s=None)], BIG, [limit("ml", pods=0.0)])
    assert g["ml/b"].allocation == 0.0
    assert g["ml/b"].verdict == vocabulary.VERDICT_BEST_EFFORT
    assert "ResourceQuota ml/q leaves 0 of count/pods" in g["ml/b"].reason


def test_a_gpu_quota_bounds_gpus() -> None:
    a = gpu_job("ml/a", need=2.0, deadline_s=500.0)
    b = gpu_job("ml/b", need=2.0, deadline_s=600.0)
    g = grants([a, b], BIG, [limit("ml", gpus=3.0)])
    assert g["ml/a"].allocation == 2.0
    assert g["ml/b"].verdict == vocabulary.VERDICT_QUEUED
    assert "leaves 1 of requests.nvidia.com/gpu" in g["ml/b"].reason


def test_count_pods_bounds_a_job_of_several_pods() -> None:
    # 4 GPUs in pods of at most 1: four pods; the quota holds three more pods.
    a = gpu_job("ml/a", need=4.0, gpus_per_pod=1)
    g = grants([a], [Node("n1", 16.0, 4.0), Node("n2", 16.0, 4.0)], [limit("ml", pods=3.0)])
    assert g["ml/a"].verdict == vocabulary.VERDICT_QUEUED
    assert "leaves 3 of count/pods" in g["ml/a"].reason
    best = gpu_job("ml/b", deadline_s=None, gpus_per_pod=1)
    g = grants([best], [Node("n1", 16.0, 4.0), Node("n2", 16.0, 4.0)], [limit("ml", pods=3.0)])
    assert g["ml/b"].allocation == 3.0
    assert len(g["ml/b"].pods) == 3


def test_memory_is_charged_per_pod() -> None:
    charge = (*SIDECAR, (quota.LIMITS_MEMORY, 3 * GIB))
    a = gpu_job("ml/a", need=4.0, gpus_per_pod=2, pod_charge=charge)  # two pods: 6 GiB
    g = grants([a], BIG, [limit("ml", limits_memory=5 * GIB)])
    assert g["ml/a"].verdict == vocabulary.VERDICT_QUEUED
    assert "leaves 5120Mi of limits.memory" in g["ml/a"].reason
    g = grants([a], BIG, [limit("ml", limits_memory=6 * GIB)])
    assert g["ml/a"].verdict == vocabulary.VERDICT_ADMITTED


def test_a_quota_with_nothing_a_trainer_charges_changes_nothing() -> None:
    jobs = [
        job("ml/a", need=1.5),
        job("ml/b", need=3.0, deadline_s=300.0),
        job("ml/c", deadline_s=None),
        gpu_job("ml/g", gpus_per_pod=1),
    ]
    nodes = [Node("n1", 4.0, 2.0), Node("n2", 2.0, 2.0)]
    for policy in pl.POLICIES:
        unbounded = grants(jobs, nodes, [], policy)
        assert grants(jobs, nodes, [quota.Quota("ml", "q", ())], policy) == unbounded
        assert grants(jobs, nodes, [limit("other", limits_cpu=0.0)], policy) == unbounded


def test_the_baselines_are_cut_to_the_quota_too() -> None:
    jobs = [job("ml/a", need=3.0), job("ml/b", deadline_s=None)]
    for policy in pl.POLICIES:
        g = grants(jobs, BIG, [limit("ml", limits_cpu=2.0)], policy)
        assert sum(x.allocation + 0.05 for x in g.values() if x.allocation > 0) <= 2.0 + 1e-6


# ---------------------------------------------------------------------------------------
# The property: no plan passes a quota or a node


def charged(d: Demand, g: pl.Grant, floor: bool = False) -> dict[str, float]:
    """What ``g`` charges; ``floor``: what the job's pods hold, at least its min while it
    runs (only preemption takes a pod away)."""
    pods = len(g.pods) if g.allocation > 0 else 0
    amount = g.allocation
    if floor and d.current > 0 and g.verdict != vocabulary.VERDICT_PREEMPTED:
        amount = max(amount, d.min_allocation)
        pods = pl._pod_count(d, amount)
    return quota.charge(dict(d.pod_charge), d.mode, amount, pods)


def over(
    quotas: Sequence[quota.Quota], used: Callable[[str], dict[str, float]]
) -> list[tuple[str, str, float, float]]:
    """(quota, resource, charged, left) for each resource a namespace's charge passes."""
    out = []
    for q in quotas:
        charge = used(q.namespace)
        out += [
            (q.name, r, charge.get(r, 0.0), x) for r, x in q.left if charge.get(r, 0.0) > x + 1e-6
        ]
    return out


@st.composite
def clusters(
    draw: st.DrawFn,
) -> tuple[list[Demand], list[Node], list[quota.Quota], str]:
    nodes = [
        Node(f"n{i}", draw(st.sampled_from([0.0, 1.0, 2.5, 4.0, 8.0])), draw(st.integers(0, 4)))
        for i in range(draw(st.integers(1, 3)))
    ]
    demands = []
    for i in range(draw(st.integers(1, 7))):
        ns = draw(st.sampled_from(["a", "b", "c"]))
        gpu = draw(st.booleans())
        low = 1.0 if gpu else draw(st.sampled_from([0.1, 0.5, 1.0]))
        top = draw(st.sampled_from([1.0, 2.0, 4.0])) if gpu else draw(st.sampled_from([1.0, 3.0]))
        current = draw(st.sampled_from([0.0, low, top]))
        demands.append(
            Demand(
                key=f"{ns}/j{i}",
                mode="gpu" if gpu else "cpu",
                need=draw(st.sampled_from([low, top, (low + top) / 2])),
                min_allocation=low,
                max_allocation=top,
                current=current,
                steps_remaining=draw(st.sampled_from([10.0, 100.0, 1000.0])),
                deadline_s=draw(st.sampled_from([None, 50.0, 500.0, 5000.0])),
                arrival_s=float(draw(st.integers(0, 5))),
                priority=draw(st.integers(0, 1)),
                admitted=current > 0 and draw(st.booleans()),
                node=draw(st.sampled_from([None, "n0"])) if current > 0 else None,
                step_time_s=linear,
                gpus_per_pod=draw(st.sampled_from([0, 1, 2])) if gpu else 0,
                pod_charge=(
                    (quota.LIMITS_CPU, 0.05),
                    (quota.REQUESTS_MEMORY, draw(st.sampled_from([0.0, 1.0]))),
                ),
            )
        )
    resources = st.sampled_from(quota.CHARGED)
    quotas = [
        quota.Quota(
            ns,
            f"q{k}",
            tuple(
                (r, draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 5.0])))
                for r in sorted(set(draw(st.lists(resources, max_size=4))))
            ),
        )
        for ns in ("a", "b")
        for k in range(draw(st.integers(0, 2)))
    ]
    return demands, nodes, quotas, draw(st.sampled_from(pl.POLICIES))


@settings(max_examples=400, deadline=None, database=None)
@given(clusters())
def test_no_plan_passes_a_namespaces_quota_or_a_nodes_capacity(
    case: tuple[list[Demand], list[Node], list[quota.Quota], str],
) -> None:
    demands, nodes, quotas, policy = case
    g = grants(demands, nodes, quotas, policy)
    by_key = {d.key: d for d in demands}

    def used(namespace: str, floor: bool = False) -> dict[str, float]:
        total: dict[str, float] = {}
        for key, x in g.items():
            if key.startswith(namespace + "/"):
                for r, a in charged(by_key[key], x, floor).items():
                    total[r] = total.get(r, 0.0) + a
        return total

    assert not over(quotas, used), g
    # What the pods hold (a running job at least its min) passes no quota either, unless
    # those mins alone do.
    floors = {k: replace(x, allocation=0.0, pods=()) for k, x in g.items()}

    def held_mins(namespace: str) -> dict[str, float]:
        total: dict[str, float] = {}
        for key, x in floors.items():
            if key.startswith(namespace + "/"):
                for r, a in charged(by_key[key], x, True).items():
                    total[r] = total.get(r, 0.0) + a
        return total

    if not over(quotas, held_mins):
        assert not over(quotas, lambda ns: used(ns, True)), g
    for node in nodes:
        for gpu in (False, True):
            held = sum(
                a for key, x in g.items() for n, a in x.pods if n == node.name and
                (by_key[key].mode == "gpu") == gpu
            )  # fmt: skip
            room = math.floor(node.gpus + 1e-6) if gpu else node.cpu_cores
            assert held <= room + 1e-6, (node, gpu, g)
    for key, x in g.items():
        assert x.allocation == 0 or x.allocation >= by_key[key].min_allocation - 1e-6


# ---------------------------------------------------------------------------------------
# What a pod charges, and what a ResourceQuota leaves (the view layer)


def pod(*containers: dict[str, Any], phase: str = "Running", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": list(containers), **spec},
        "status": {"phase": phase},
    }


def container(name: str, **resources: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "resources": resources}


TRAINER = container("trainer", requests={"cpu": "2"}, limits={"cpu": "2", "memory": "1Gi"})
SIDECAR_CONTAINER = container(
    "metrics", requests={"cpu": "50m", "memory": "64Mi"}, limits={"cpu": "50m", "memory": "64Mi"}
)


def test_a_pod_charges_its_containers_and_sidecars_or_its_largest_init_container() -> None:
    usage = build.pod_quota_usage(pod(TRAINER, SIDECAR_CONTAINER))
    assert usage[quota.REQUESTS_CPU] == pytest.approx(2.05)
    assert usage[quota.LIMITS_CPU] == pytest.approx(2.05)
    # The trainer's memory request is its limit (the API server's defaulting).
    assert usage[quota.REQUESTS_MEMORY] == usage[quota.LIMITS_MEMORY] == (1024 + 64) * 2**20
    assert usage[quota.PODS] == 1.0
    init = container("setup", requests={"cpu": "3"}, limits={"cpu": "3"})
    usage = build.pod_quota_usage(pod(TRAINER, initContainers=[init]))
    assert usage[quota.LIMITS_CPU] == 3.0
    native = {**init, "restartPolicy": "Always"}
    usage = build.pod_quota_usage(pod(TRAINER, initContainers=[native]))
    assert usage[quota.LIMITS_CPU] == 5.0
    assert build.pod_quota_usage(pod(TRAINER, phase="Succeeded")) == {}


def test_a_trainer_pod_charges_beside_its_allocation_what_its_other_containers_hold() -> None:
    beside = dict(build.pod_charge_beside([pod(TRAINER, SIDECAR_CONTAINER)], "cpu"))
    assert beside[quota.REQUESTS_CPU] == pytest.approx(0.05)
    assert beside[quota.LIMITS_CPU] == pytest.approx(0.05)
    assert beside[quota.LIMITS_MEMORY] == (1024 + 64) * 2**20
    assert quota.PODS not in beside


def quota_body(name: str, hard: dict[str, str], used: dict[str, str], **spec: Any) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"hard": hard, **spec},
        "status": {"hard": hard, "used": used},
    }


def test_what_a_quota_leaves_gives_back_what_the_planned_trainers_charge() -> None:
    view = ClusterView()
    view.put_quota(
        quota_body("q", {"limits.cpu": "4", "cpu": "3"}, {"limits.cpu": "3500m", "cpu": "2500m"})
    )
    view.put_quota(quota_body("objects", {"services": "2", "count/pods": "10"}, {"services": "1"}))
    view.put_quota(
        quota_body("scoped", {"limits.cpu": "1"}, {"limits.cpu": "0"}, scopes=["BestEffort"])
    )
    left = {
        q.name: dict(q.left)
        for q in quotas_left(view.snapshot(), [pod(TRAINER, SIDECAR_CONTAINER)])
    }
    assert set(left) == {"q", "objects", "scoped"}
    assert left["q"] == pytest.approx({quota.LIMITS_CPU: 2.55, quota.REQUESTS_CPU: 2.55})
    # The trainer is not BestEffort: the scoped quota does not count it, gives nothing back.
    assert left["scoped"] == {quota.LIMITS_CPU: 1.0}
    assert left["objects"] == {quota.PODS: 11.0}  # used has no count/pods yet: 0 used
    view.put_quota(quota_body("q", {}, {}), deleted=True)
    assert [q.name for q in quotas_left(view.snapshot(), [])] == ["objects", "scoped"]


# ---------------------------------------------------------------------------------------
# The operator's loop against a fake cluster whose quota controller counts its pods

QUOTA_CPU = 2.5


def counted_quota(bench: Bench) -> dict[str, Any]:
    """The namespace's quota as the quota controller would show it now."""
    used = sum(
        build.pod_quota_usage(p).get(quota.LIMITS_CPU, 0.0)
        for (namespace, _), p in bench.kube.pods.items()
        if namespace == NAMESPACE
    )
    return {
        "metadata": {"name": "team", "namespace": NAMESPACE},
        "spec": {"hard": {"limits.cpu": f"{QUOTA_CPU:g}"}},
        "status": {"hard": {"limits.cpu": f"{QUOTA_CPU:g}"}, "used": {"limits.cpu": f"{used:g}"}},
    }


def admitted_condition(bench: Bench, job: str) -> dict[str, Any]:
    conditions = bench.status(job).get("conditions") or []
    return next(c for c in conditions if c["type"] == vocabulary.CONDITION_ADMITTED)


def test_the_second_job_waits_for_the_quota_and_runs_when_the_first_is_done() -> None:
    bench = Bench({"node-a": (8.0, 0)})
    # 1,000 steps at a step per second per core: 1.67 cores each to finish in 600 s.
    bench.apply(
        job_body("first", maximum="2", initial="2", duration="600s"),
        FakeTrainer(1000, 100, linear_speed(1.0), exits=True),
    )
    bench.apply(
        job_body("second", maximum="2", initial="2", duration="1500s"),
        FakeTrainer(1000, 100, linear_speed(1.0), exits=True),
    )
    queued, second_created_s = [], None
    for _ in range(300):
        bench.view.put_quota(counted_quota(bench))
        bench.period()
        assert quota_used(bench) <= QUOTA_CPU + 1e-6
        if bench.phase("first") != "Succeeded":
            queued.append(admitted_condition(bench, "second"))
        if second_created_s is None and bench.pods("second"):
            second_created_s = bench.now
        if bench.phase("second") == "Succeeded":
            break
    assert bench.phase("first") == bench.phase("second") == "Succeeded"
    assert queued and all(c["reason"] == vocabulary.VERDICT_QUEUED for c in queued)
    message = queued[-1]["message"]
    assert "its need of 2 cores is more than ResourceQuota ml/team leaves" in message
    assert "of limits.cpu; room for its need frees at" in message  # (no speed curve yet)
    first = bench.status("first")
    assert first["outcome"]["late"] is False
    finished = first["outcome"]["finishedAt"]
    assert second_created_s is not None and format_time(second_created_s) >= finished


def quota_used(bench: Bench) -> float:
    return float(counted_quota(bench)["status"]["used"]["limits.cpu"])


# ---------------------------------------------------------------------------------------
# Scoped quotas: a quota counts only the pods its scopes match, as the API server decides


HIGH = quota.PodFacts(priority_class="high")
PLAIN = quota.PodFacts()


@pytest.mark.parametrize(
    ("scope", "counted", "not_counted"),
    [
        (quota.Scope(), [PLAIN, HIGH], []),
        (quota.Scope(("NotBestEffort",)), [PLAIN, HIGH], [quota.PodFacts(best_effort=True)]),
        (quota.Scope(("BestEffort",)), [quota.PodFacts(best_effort=True)], [PLAIN]),
        (quota.Scope(("NotTerminating",)), [PLAIN], [quota.PodFacts(terminating=True)]),
        (quota.Scope(("Terminating",)), [quota.PodFacts(terminating=True)], [PLAIN]),
        (quota.Scope(("PriorityClass",)), [HIGH], [PLAIN]),
        (quota.Scope(expressions=(("PriorityClass", "In", ("high", "top")),)), [HIGH],
         [PLAIN, quota.PodFacts(priority_class="low")]),
        (quota.Scope(expressions=(("PriorityClass", "NotIn", ("high",)),)),
         [quota.PodFacts(priority_class="low")], [HIGH, PLAIN]),
        (quota.Scope(expressions=(("PriorityClass", "Exists", ()),)), [HIGH], [PLAIN]),
        (quota.Scope(expressions=(("PriorityClass", "DoesNotExist", ()),)), [PLAIN], [HIGH]),
        (quota.Scope(("CrossNamespacePodAffinity",)),
         [quota.PodFacts(cross_namespace_affinity=True)], [PLAIN]),
        (quota.Scope(("VolumeAttributesClass",)), [], [PLAIN, HIGH]),
        # Every scope and expression must match.
        (quota.Scope(("NotBestEffort",), (("PriorityClass", "In", ("high",)),)), [HIGH], [PLAIN]),
        # An unknown scope counts the pod (a tighter plan, never a refused pod).
        (quota.Scope(("SomethingNew",)), [PLAIN], []),
    ],
)  # fmt: skip
def test_a_scoped_quota_counts_the_pods_its_scopes_match(
    scope: quota.Scope, counted: list[quota.PodFacts], not_counted: list[quota.PodFacts]
) -> None:
    assert all(quota.applies(scope, pod) for pod in counted)
    assert not any(quota.applies(scope, pod) for pod in not_counted)


def test_a_quotas_scope_and_a_pods_facts_are_read_from_their_bodies() -> None:
    spec = {
        "scopes": ["NotTerminating"],
        "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
        ]},
    }  # fmt: skip
    assert quota.scope_of(spec) == quota.Scope(
        ("NotTerminating",), (("PriorityClass", "In", ("high",)),)
    )
    assert quota.scope_of({}) == quota.Scope()
    assert quota.pod_facts(pod(TRAINER, priorityClassName="high")) == HIGH
    assert quota.pod_facts(pod(container("t"))).best_effort
    assert quota.pod_facts(pod(container("t"), activeDeadlineSeconds=60)).terminating
    required = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "x", "namespaceSelector": {}}]}}  # fmt: skip
    preferred = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "x", "namespaces": ["other"]}}]}}  # fmt: skip
    local = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "x"}]}}  # fmt: skip
    for affinity, cross in ((required, True), (preferred, True), (local, False)):
        assert quota.pod_facts(pod(TRAINER, affinity=affinity)).cross_namespace_affinity is cross


def test_the_planner_bounds_a_job_only_by_the_quotas_that_count_its_pods() -> None:
    high_only = replace(
        limit("ml", "high-cpu", limits_cpu=1.0),
        scope=quota.Scope(expressions=(("PriorityClass", "In", ("high",)),)),
    )
    urgent = job("ml/urgent", need=3.0, pod_facts=HIGH)
    plain = job("ml/plain", need=3.0)
    g = grants([urgent, plain], BIG, [high_only])
    assert g["ml/urgent"].verdict == vocabulary.VERDICT_QUEUED
    assert "ResourceQuota ml/high-cpu leaves 1 of limits.cpu" in g["ml/urgent"].reason
    assert (g["ml/plain"].verdict, g["ml/plain"].allocation) == (vocabulary.VERDICT_ADMITTED, 3.0)
    # A best-effort job of the counted class gets only what that quota leaves.
    sweep = job("ml/sweep", deadline_s=None, need=4.0, pod_facts=HIGH)
    assert grants([sweep], BIG, [high_only])["ml/sweep"].allocation == pytest.approx(0.95)


def test_a_scoped_quota_gives_back_only_what_the_pods_it_counts_charge() -> None:
    view = ClusterView()
    hard, used = {"limits.cpu": "4"}, {"limits.cpu": "2100m"}
    view.put_quota(quota_body("high", hard, used, scopeSelector={"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}))  # fmt: skip
    view.put_quota(quota_body("all", hard, used))
    high_pod = pod(TRAINER, SIDECAR_CONTAINER, priorityClassName="high")
    plain_pod = pod(TRAINER, SIDECAR_CONTAINER)
    left = {q.name: q for q in quotas_left(view.snapshot(), [high_pod, plain_pod])}
    assert dict(left["high"].left) == pytest.approx({quota.LIMITS_CPU: 4 - 2.1 + 2.05})
    assert dict(left["all"].left) == pytest.approx({quota.LIMITS_CPU: 4 - 2.1 + 2 * 2.05})
    assert left["high"].scope.expressions == (("PriorityClass", "In", ("high",)),)


def test_the_operator_plans_a_job_within_the_quota_scoped_to_its_priority_class() -> None:
    policy = TemplatePolicy(allowed_priority_classes=frozenset({"high"}))
    bench = Bench({"node-a": (8.0, 0)}, config=scenario_config(template_policy=policy))
    urgent = job_body("urgent", maximum="2", initial="2")
    urgent["spec"]["template"]["spec"]["priorityClassName"] = "high"
    bench.apply(urgent, FakeTrainer(1000, 100, linear_speed(1.0)))
    bench.apply(
        job_body("plain", maximum="2", initial="2"), FakeTrainer(1000, 100, linear_speed(1.0))
    )

    def counted() -> dict[str, Any]:  # the quota controller counts only class "high" pods
        used = sum(
            build.pod_quota_usage(p).get(quota.LIMITS_CPU, 0.0)
            for (namespace, _), p in bench.kube.pods.items()
            if namespace == NAMESPACE and p["spec"].get("priorityClassName") == "high"
        )
        hard = {"limits.cpu": "1500m"}
        selector = {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}  # fmt: skip
        return {
            "metadata": {"name": "high", "namespace": NAMESPACE},
            "spec": {"hard": hard, "scopeSelector": selector},
            "status": {"hard": hard, "used": {"limits.cpu": f"{used:g}"}},
        }

    for _ in range(5):
        bench.view.put_quota(counted())
        bench.period()
    assert bench.pods("urgent") == [] and bench.pods("plain") != []
    condition = admitted_condition(bench, "urgent")
    assert condition["reason"] == vocabulary.VERDICT_QUEUED
    assert "ResourceQuota ml/high leaves 1.5 of limits.cpu" in condition["message"]
    assert admitted_condition(bench, "plain")["reason"] == vocabulary.VERDICT_ADMITTED
