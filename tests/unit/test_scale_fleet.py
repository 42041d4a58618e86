"""The simulated trainer fleet's pure parts (bench/scale/fleet.py): speed curves, simulated
trainers, the simulated kubelet's resize verdicts and the status patches and /metrics text."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from decor.core import build
from decor.core.progress import Progress, progress_by_pod

from bench.scale import fleet

REPO = Path(__file__).resolve().parents[2]

RESNET = fleet.SpeedCurve("resnet", "cpu", ((0.5, 16.0), (1.0, 32.0), (1.5, 33.0), (2.0, 44.8)))


def test_cpu_curve_follows_the_thread_staircase_and_extrapolates_past_the_last_core() -> None:
    assert RESNET.steps_per_s(0.5) == pytest.approx(16.0)  # below one core: the quota
    assert RESNET.steps_per_s(1.0) == pytest.approx(32.0)
    assert RESNET.steps_per_s(1.7) == pytest.approx(32.0)  # one thread until two cores
    assert RESNET.steps_per_s(2.0) == pytest.approx(44.8)
    exponent = RESNET.scaling_exponent()
    assert 0.3 <= exponent <= 1.0
    assert RESNET.steps_per_s(4.0) == pytest.approx(44.8 * 2**exponent)
    assert RESNET.steps_per_s(0) == 0.0


def test_a_cpu_curve_that_slows_at_its_last_core_goes_on_flat() -> None:
    """Two cores slower than one (the LSTM profile): no faster at three or four than at two,
    never faster than at one again (a floor above zero made four cores 8 % faster than one)."""
    lstm = fleet.SpeedCurve("lstm", "cpu", ((0.5, 1.86), (1.0, 4.62), (1.5, 3.95), (2.0, 4.08)))
    assert lstm.scaling_exponent() == 0.0
    assert lstm.steps_per_s(3.0) == lstm.steps_per_s(4.0) == pytest.approx(4.08)
    assert lstm.steps_per_s(4.0) < lstm.steps_per_s(1.0)


def test_gpu_curve_is_sublinear_and_curves_load_from_the_measured_profiles() -> None:
    profiles = json.loads((REPO / "docs/benchmarks/results.json").read_text())["profiles"]
    curves = fleet.curves_from_profiles(profiles)
    assert {"resnet", "vgg", "lstm", "gpu"} <= set(curves)
    gpu = curves["gpu"]
    assert gpu.steps_per_s(2) < 2 * gpu.steps_per_s(1)
    assert gpu.steps_per_s(2) > gpu.steps_per_s(1)
    for name in ("resnet", "vgg"):
        assert curves[name].steps_per_s(4) > curves[name].steps_per_s(1) > 0
    assert curves["lstm"].steps_per_s(4) <= curves["lstm"].steps_per_s(1)  # its profile slows


def trainer(**overrides: object) -> fleet.SimTrainer:
    values: dict[str, object] = dict(
        namespace="ns",
        pod="job-0",
        steps_planned=100,
        steps_per_epoch=25,
        steps_done=0.0,
        ready_s=1000.0,
        last_tick_s=995.0,
        rng=random.Random(0),
    )
    values.update(overrides)
    return fleet.SimTrainer(**values)  # type: ignore[arg-type]


def test_trainer_waits_for_start_up_then_advances_at_the_curve_speed() -> None:
    t = trainer()
    t.advance(999.0, 10.0, noise=0.0)
    assert t.steps_done == 0 and not t.reporting
    t.advance(1002.5, 10.0, noise=0.0)  # 2.5 s of training after ready_s
    assert t.reporting
    assert t.steps_done == pytest.approx(25.0)
    assert t.epochs_done == 1
    assert t.last_step_time_s == pytest.approx(1002.5)
    t.advance(1003.05, 10.0, noise=0.0)
    assert t.whole_steps == 30
    assert t.last_step_time_s == pytest.approx(1003.0)  # the step's own completion time


def test_trainer_finishes_at_the_exact_crossing_time_and_resumes_from_a_checkpoint() -> None:
    t = trainer(steps_done=90.0, ready_s=0.0, last_tick_s=10.0)
    t.advance(12.0, 10.0, noise=0.0)  # 20 steps' worth; 10 were left
    assert t.finished_s == pytest.approx(11.0)
    assert t.steps_done == 100
    t.advance(20.0, 10.0, noise=0.0)
    assert t.steps_done == 100  # nothing after the end


def test_noise_changes_speed_but_never_below_the_floor() -> None:
    t = trainer(ready_s=0.0, last_tick_s=0.0, steps_planned=10**9)
    for second in range(1, 200):
        before = t.steps_done
        t.advance(float(second), 10.0, noise=0.5)
        assert t.steps_done - before >= 10.0 * fleet.NOISE_FLOOR - 1e-9
    assert t.steps_done != pytest.approx(1990.0, abs=1e-6)


def test_exposition_is_what_the_operator_reads_from_prometheus() -> None:
    ready = trainer(ready_s=0.0, last_tick_s=0.0)
    ready.advance(5.0, 10.0, noise=0.0)
    starting = trainer(pod="job-1")
    text = fleet.exposition([ready, starting])
    assert 'pod="job-1"' not in text  # not reporting before its first step
    series = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        name = name_labels.split("{")[0]
        series.append(
            {"metric": {"__name__": name, "namespace": "ns", "pod": "job-0"}, "value": [0, value]}
        )
    reads = progress_by_pod(series)
    progress = reads[("ns", "job-0")]
    assert isinstance(progress, Progress)
    assert progress.steps_done == 50 and progress.steps_planned == 100
    assert progress.last_step_time_s == pytest.approx(5.0)
    assert progress.epochs_done == 2


def pod(cpu: str = "1", applied: str | None = "1", node: str = "n0", name: str = "p") -> dict:
    status: dict = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    trainer_status: dict = {"name": "trainer", "state": {"running": {"startedAt": "x"}}}
    if applied is not None:
        trainer_status["resources"] = {"requests": {"cpu": applied}, "limits": {"cpu": applied}}
    status["containerStatuses"] = [trainer_status]
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "trainer",
                    "args": ["--workload", "vgg"],
                    "env": [
                        {"name": "DECOR_EPOCHS", "value": "4"},
                        {"name": "DECOR_STEPS_PER_EPOCH", "value": "30"},
                    ],
                    "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}},
                }
            ],
            "initContainers": [
                {
                    "name": "decor-metrics",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "50m"}},
                }
            ],
        },
        "status": status,
    }


def test_pod_readers() -> None:
    p = pod(cpu="2500m", applied="1")
    assert fleet.planned_steps(p) == (120, 30)
    assert fleet.workload_of(p) == "vgg"
    assert fleet.desired_cpu_cores(p) == 2.5
    assert fleet.applied_cpu_cores(p) == 1.0
    assert fleet.pod_charge(p) == (pytest.approx(1.05), 0.0)  # applied + the sidecar
    assert fleet.applied_cpu_cores(pod(applied=None)) is None


def test_resize_verdicts_follow_the_kubelet() -> None:
    assert fleet.resize_verdict(1.0, 2.0, 8.0, 100.0) == fleet.VERDICT_APPLY  # shrink fits
    assert fleet.resize_verdict(3.0, 1.0, 8.0, 5.0) == fleet.VERDICT_APPLY
    assert fleet.resize_verdict(3.0, 1.0, 8.0, 5.5) == fleet.REASON_DEFERRED
    assert fleet.resize_verdict(9.0, 1.0, 8.0, 0.0) == fleet.REASON_INFEASIBLE


def test_others_on_node_skip_this_pod_other_nodes_and_finished_pods() -> None:
    done = pod(name="done")
    done["status"]["phase"] = "Succeeded"
    pods = [pod(name="me"), pod(name="a", applied="2"), pod(name="b", node="n1"), done]
    cores, gpus = fleet.others_on_node(pods, "n0", ("ns", "me"))
    assert cores == pytest.approx(2.05) and gpus == 0


def test_status_patches() -> None:
    p = pod(cpu="2", applied="1")
    pending = fleet.pending_patch(p, fleet.REASON_DEFERRED, "full", "2026-01-01T00:00:00Z")
    types = [c["type"] for c in pending["status"]["conditions"]]
    assert types == ["Ready", fleet.RESIZE_PENDING]
    p["status"]["conditions"] = pending["status"]["conditions"]
    assert fleet.resize_condition(p) == (fleet.REASON_DEFERRED, "full")
    applied = fleet.applied_patch(p)["status"]
    assert [c["type"] for c in applied["conditions"]] == ["Ready"]
    trainer_status = applied["containerStatuses"][0]
    assert trainer_status["resources"]["limits"]["cpu"] == "2"
    assert trainer_status["allocatedResources"] == {"cpu": "2"}
    done = fleet.completed_patch(p, "2026-01-01T00:01:00Z", 120, 120)["status"]
    assert done["phase"] == "Succeeded"
    terminated = done["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["finishedAt"] == "2026-01-01T00:01:00Z"
    assert terminated["startedAt"] == "x"
    p["status"] = done
    assert build.termination_steps(p, "trainer") == (120.0, 120.0)  # what the operator reads


def test_node_capacity() -> None:
    node = {"status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "8"}}}
    assert fleet.node_capacity(node) == (64.0, 8.0)
    assert fleet.parse_cpu_cores("250m") == 0.25


def test_held_by_node_counts_what_each_node_admitted() -> None:
    done = pod(name="done")
    done["status"]["phase"] = "Succeeded"
    pods = [pod(name="me"), pod(name="a", applied="2"), pod(name="b", node="n1"), done]
    held = fleet.held_by_node(pods)
    assert held == {"n0": pytest.approx(3.1), "n1": pytest.approx(1.05)}
