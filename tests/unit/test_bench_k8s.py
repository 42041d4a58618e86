"""The pure parts of the benchmark's cluster runtime (bench/k8s_bench.py); no cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from decor.core import build

from bench import benchlib as bl
from bench import k8s_bench as kb


def test_k8s_grid_is_the_cluster_subset() -> None:
    grid = kb.k8s_grid(bl.make_grid("quick"))
    assert grid.name == "k8s"
    assert [w.name for w in grid.workloads] == ["resnet", "vgg", "lstm"]
    assert grid.scenarios == ("d1.5", "d1.8", "d2.5", "move-0.8", "disturb")
    runs = bl.plan_runs(grid)
    assert len(runs) == 60
    assert {r.policy for r in runs} == {"decor", "decor-nn"}
    assert {r.repetition for r in runs} == {0, 1}


def test_run_keys_of_k8s_records_do_not_collide_with_local_ones() -> None:
    record = {"workload": "resnet", "scenario": "d1.5", "policy": "decor", "repetition": 0}
    local = bl.record_key({**record, "runtime": "local"})
    k8s = bl.record_key({**record, "runtime": "k8s"})
    assert local != k8s and k8s == "k8s:resnet/d1.5/decor/r0"


def test_cluster_manifest_adds_image_pull_policy_and_memory() -> None:
    doc = {
        "apiVersion": "decor.dev/v1alpha1",
        "kind": "DeadlineTrainingJob",
        "metadata": {"name": "x"},
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "args": ["a"]}]}}},
    }
    out = kb.cluster_manifest(doc, "decor-bench", image="img:1")
    container = out["spec"]["template"]["spec"]["containers"][0]
    assert out["metadata"] == {"name": "decor-bench"}
    assert container["image"] == "img:1" and container["imagePullPolicy"] == "Never"
    assert container["resources"]["limits"]["memory"]
    assert "image" not in doc["spec"]["template"]["spec"]["containers"][0]  # a copy


@pytest.mark.parametrize(
    ("quantity", "cores"),
    [("1500m", 1.5), ("750m", 0.75), ("2", 2.0), ("0.5", 0.5), (2, 2.0), ("0", None), (None, None)],
)
def test_cpu_quantities_read_as_the_operator_reads_them(
    quantity: object, cores: float | None
) -> None:
    """The bench reads node, request and limit quantities with the operator's reader. They come
    from the API server in millicores or cores (the operator writes millicores); a zero or an
    absent one counts as no cores (``or 0.0`` where summed). A sub-millicore quantity
    (``250000u``) is no CPU limit the operator could have written: it reads as None."""
    assert build.parse_allocation("cpu", quantity) == cores
    assert build.parse_allocation("cpu", "250000u") is None


def test_pod_cpu_limit_prefers_the_applied_resources() -> None:
    pod = {
        "spec": {"containers": [{"name": "trainer", "resources": {"limits": {"cpu": "2"}}}]},
        "status": {
            "containerStatuses": [
                {"name": "metrics", "resources": {"limits": {}}},
                {"name": "trainer", "resources": {"limits": {"cpu": "750m"}}},
            ]
        },
    }
    assert kb.pod_cpu_limit(pod) == 0.75
    del pod["status"]
    assert kb.pod_cpu_limit(pod) == 2.0
    assert kb.pod_cpu_limit({}) is None


def test_integrate_cores_piecewise_constant() -> None:
    samples = [(101.0, 2.0), (102.0, None), (103.0, 1.0), (105.0, 0.5), (120.0, 0.25)]
    # initial 2 from 100 to 101, 2 to 103 (None keeps it), 1 to 105, 0.5 to 110
    assert kb.integrate_cores(samples, 100.0, 110.0, 2.0) == pytest.approx(2 + 4 + 2 + 2.5)
    assert kb.integrate_cores([], 0.0, 10.0, 1.5) == pytest.approx(15.0)
    assert kb.integrate_cores(samples, 110.0, 110.0, 2.0) == 0.0
    # samples before the start only set the value in force at the start
    assert kb.integrate_cores([(90.0, 1.0)], 100.0, 104.0, 2.0) == pytest.approx(4.0)


def test_count_changes() -> None:
    assert kb.count_changes([(0, None), (1, 2.0), (2, 2.0), (3, 1.5), (4, None), (5, 1.0)]) == 2


def test_outcome_of() -> None:
    assert kb.outcome_of({"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}) is None
    status = {
        "phase": "Succeeded",
        "startTime": "2026-01-01T00:00:00Z",
        "resizes": 7,
        "outcome": {
            "finishedAt": "2026-01-01T00:00:30Z",
            "finishedAtSeconds": 1767225630.25,
            "deviationPercent": -1.5,
            "late": False,
        },
    }
    o = kb.outcome_of(status)
    assert o is not None
    assert o.start_s == 1767225600.0
    assert o.finished_s == pytest.approx(30.25)
    assert (o.deviation_pct, o.late, o.resizes, o.phase) == (-1.5, False, 7, "Succeeded")
    failed = kb.outcome_of({"phase": "Failed", "startTime": "2026-01-01T00:00:00Z"})
    assert failed is not None and failed.finished_s is None and failed.deviation_pct is None


def test_schedule_of_scenarios() -> None:
    assert kb.schedule(bl.SCENARIOS["d1.5"], 30.0) == []
    assert kb.schedule(bl.SCENARIOS["move-0.8"], 36.0) == [(pytest.approx(10.8), "move")]
    assert [w for _, w in kb.schedule(bl.SCENARIOS["disturb"], 36.0)] == [
        "disturb-on",
        "disturb-off",
    ]
    assert json.loads(kb.deadline_patch(28.8)) == {"spec": {"duration": "28.800s"}}


def test_pod_max_cores_leaves_room_for_the_sidecar() -> None:
    assert kb.pod_max_cores(2.0, 0.0, 2) == 1.95  # the sidecar's 50m
    assert kb.pod_max_cores(4.0, 0.5, 2) == 1.45
    assert kb.unschedulable({}) is None
    pod = {"status": {"conditions": [{"type": "PodScheduled", "reason": "Unschedulable",
                                      "message": "Insufficient cpu"}]}}  # fmt: skip
    assert kb.unschedulable(pod) == "Insufficient cpu"


def test_k8s_results_start_a_fresh_folder(tmp_path: Path) -> None:
    from bench import harness

    grid = kb.k8s_grid(bl.make_grid("quick"))
    results = harness.Results(tmp_path / "new", grid, "small", resume=True, runtime="k8s")
    assert results.data["k8s"]["code_hash"] == harness.code_hash()
    assert results.data["records"] == []


def test_a_fresh_local_grid_keeps_the_cluster_runs(tmp_path: Path) -> None:
    from bench import harness

    base = {"workload": "resnet", "scenario": "d1.5", "policy": "decor", "repetition": 0}
    old = {
        "grid": "quick",
        "code_hash": "an-older-law",
        "records": [{**base, "runtime": "local"}, {**base, "runtime": "k8s"}],
        "k8s": {"git_head": "17d4489", "code_hash": "an-older-law"},
        "wall_s": {"runs": 10.0, "k8s_this_invocation": 20.0},
    }
    (tmp_path / "results.json").write_text(json.dumps(old))
    traces = {"local:resnet/d1.5/decor/r0": [1], "k8s:resnet/d1.5/decor/r0": [2]}
    (tmp_path / "traces.json").write_text(json.dumps(traces))
    results = harness.Results(tmp_path, bl.make_grid("quick"), "small", resume=False)
    assert [r["runtime"] for r in results.data["records"]] == ["k8s"]
    assert results.data["k8s"]["git_head"] == "17d4489"
    assert results.data["code_hash"] == harness.code_hash()
    assert results.data["wall_s"] == {"k8s_this_invocation": 20.0}
    assert results.traces == {"k8s:resnet/d1.5/decor/r0": [2]}
    assert json.loads((tmp_path / "results.prev.json").read_text()) == old


def test_a_run_manifest_carries_the_estimate_it_is_given() -> None:
    from decor.api.model import parse_job

    from bench import harness

    size = bl.make_grid("quick").workloads[0]
    step_s, cores = harness.profile_estimate(24.0, 1000, 2.0)
    assert (step_s, cores) == (0.024, 2.0)
    doc = harness.manifest(size, 1000, 24.0, 0.5, 2.0, None, "decor", (step_s, cores))
    job = parse_job(doc)
    assert job.estimate == (0.024, 2.0)
    assert job.resources.initial_given is False
    assert "estimate" not in harness.manifest(size, 1000, 24.0, 0.5, 2.0, None, "decor")["spec"]


def test_others_and_steal_cores_come_from_two_samples() -> None:
    from bench import harness

    before = harness.CpuSample(busy_s=100.0, own_s=10.0, steal_s=50.0)
    after = harness.CpuSample(busy_s=108.0, own_s=14.0, steal_s=51.0)
    assert harness.others_cores(before, after, 10.0) == pytest.approx(0.4)  # 8 busy, 4 ours
    assert harness.steal_cores(before, after, 10.0) == pytest.approx(0.1)
    assert harness.steal_cores(before, after, 0.0) == 0.0


def test_a_cpu_sample_reads_this_machine() -> None:
    from bench import harness

    first = harness.cpu_sample()
    second = harness.cpu_sample()
    assert second.busy_s >= first.busy_s and second.steal_s >= first.steal_s >= 0.0
