"""What a namespace's LimitRanges leave of a job's allocation bounds (decor.core.limitrange)."""

from __future__ import annotations

from typing import Any

import pytest
from decor.api.model import parse_job
from decor.core.build import job_overhead_cpu_cores, sidecar_cpu_cores
from decor.core.limitrange import Clip, clip
from support.scenario import job_body

SIDECAR = sidecar_cpu_cores()


def limit_range(name: str, *items: dict[str, Any], namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"limits": list(items)},
    }


def container(**ends: dict[str, str]) -> dict[str, Any]:
    return {"type": "Container", **ends}


def pod(**ends: dict[str, str]) -> dict[str, Any]:
    return {"type": "Pod", **ends}


@pytest.mark.parametrize(
    ("ranges", "bounds", "expected"),
    [
        pytest.param([], (0.5, 4.0), (0.5, 4.0, ()), id="no LimitRange"),
        pytest.param(
            [limit_range("cpu", container(max={"cpu": "1500m"}))],
            (0.5, 4.0),
            (0.5, 1.5, ("max 4000m clipped to 1500m by LimitRange ml/cpu",)),
            id="container max",
        ),
        pytest.param(
            [limit_range("cpu", container(min={"cpu": "750m"}))],
            (0.5, 4.0),
            (0.75, 4.0, ("min 500m raised to 750m by LimitRange ml/cpu",)),
            id="container min",
        ),
        pytest.param(
            [limit_range("cpu", container(min={"cpu": "100m"}, max={"cpu": "8"}))],
            (0.5, 4.0),
            (0.5, 4.0, ()),
            id="wider than the job: nothing changes",
        ),
        pytest.param(
            [limit_range("pods", pod(max={"cpu": "2"}))],
            (0.5, 4.0),
            (0.5, 2.0 - SIDECAR, ("max 4000m clipped to 1950m by LimitRange ml/pods",)),
            id="pod max: the sidecar counts",
        ),
        pytest.param(
            [limit_range("pods", pod(min={"cpu": "1"}))],
            (0.5, 4.0),
            (1.0 - SIDECAR, 4.0, ("min 500m raised to 950m by LimitRange ml/pods",)),
            id="pod min: the sidecar counts",
        ),
        pytest.param(
            [limit_range("ratio", container(maxLimitRequestRatio={"cpu": "1"}))],
            (0.5, 4.0),
            (0.5, 4.0, ()),
            id="ratio: requests = limits always fit",
        ),
        pytest.param(
            [
                limit_range(
                    "mem",
                    container(max={"memory": "1Gi"}),
                    {"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}},
                )
            ],
            (0.5, 4.0),
            (0.5, 4.0, ()),
            id="other resources and types: not read",
        ),  # fmt: skip
        pytest.param(
            [
                limit_range("a", container(max={"cpu": "3"}, min={"cpu": "250m"})),
                limit_range("b", container(max={"cpu": "2"}), pod(min={"cpu": "800m"})),
            ],
            (0.5, 4.0),
            (
                0.75,
                2.0,
                (
                    "min 500m raised to 750m by LimitRange ml/b",
                    "max 4000m clipped to 2000m by LimitRange ml/b",
                ),
            ),
            id="several LimitRanges: all apply",
        ),
    ],
)
def test_cpu_bounds_are_clipped(
    ranges: list[dict[str, Any]], bounds: tuple[float, float], expected: tuple[Any, ...]
) -> None:
    result = clip(ranges, "cpu", *bounds, beside_cores=SIDECAR)
    assert result.refusal is None
    assert (result.low, result.high) == pytest.approx(expected[:2])
    assert result.changes == expected[2]


@pytest.mark.parametrize(
    ("ranges", "bounds", "expected"),
    [
        pytest.param(
            [limit_range("small", container(max={"cpu": "500m"}))],
            (1.0, 4.0),
            "spec.resources.min (1000m for the trainer) is above max cpu 500m (Container) of "
            "LimitRange ml/small (500m for the trainer)",
            id="min above a container max",
        ),
        pytest.param(
            [limit_range("big", container(min={"cpu": "2"}))],
            (0.5, 1.0),
            "min cpu 2000m (Container) of LimitRange ml/big (2000m for the trainer) is above "
            "spec.resources.max (1000m for the trainer)",
            id="max below a container min",
        ),
        pytest.param(
            [limit_range("pods", pod(max={"cpu": "1"}))],
            (1.0, 2.0),
            "spec.resources.min (1000m for the trainer) is above max cpu 1000m (Pod) of "
            "LimitRange ml/pods (950m for the trainer)",
            id="min plus the sidecar above a pod max",
        ),
        pytest.param(
            [
                limit_range("low", container(max={"cpu": "1"})),
                limit_range("high", container(min={"cpu": "2"})),
            ],
            (0.5, 4.0),
            "min cpu 2000m (Container) of LimitRange ml/high (2000m for the trainer) is above "
            "max cpu 1000m (Container) of LimitRange ml/low (1000m for the trainer)",
            id="two LimitRanges that do not meet",
        ),
    ],
)
def test_bounds_that_cannot_fit_are_refused_naming_the_limit_range(
    ranges: list[dict[str, Any]], bounds: tuple[float, float], expected: str
) -> None:
    result = clip(ranges, "cpu", *bounds, beside_cores=SIDECAR)
    assert result == Clip(*bounds, refusal=expected)


def test_gpu_bounds_are_whole_gpus_and_ignore_the_sidecar() -> None:
    ranges = [
        limit_range("gpu", container(max={"nvidia.com/gpu": "3"}), pod(min={"nvidia.com/gpu": "2"}))
    ]
    result = clip(ranges, "gpu", 1, 8, beside_cores=SIDECAR)
    assert (result.low, result.high) == (2, 3)
    assert result.changes == (
        "min 1 raised to 2 by LimitRange ml/gpu",
        "max 8 clipped to 3 by LimitRange ml/gpu",
    )
    cpu_only = [limit_range("cpu", container(max={"cpu": "500m"}))]
    assert clip(cpu_only, "gpu", 1, 8) == Clip(1, 8)


def test_a_gpu_job_over_pods_is_refused_when_a_pod_holds_more_than_the_max() -> None:
    ranges = [limit_range("gpu", container(max={"nvidia.com/gpu": "2"}))]
    refused = clip(ranges, "gpu", 2, 8, gpus_per_pod=4)
    assert refused.refusal == (
        "spec.resources.gpusPerPod 4 is above max nvidia.com/gpu 2 (Container) of LimitRange ml/gpu"
    )
    assert clip(ranges, "gpu", 2, 8, gpus_per_pod=2) == Clip(2, 8)


def test_the_pod_sum_counts_the_containers_the_template_adds() -> None:
    body = job_body("j")
    template = body["spec"]["template"]["spec"]
    template["containers"].append(
        {"name": "logger", "image": "busybox", "resources": {"requests": {"cpu": "200m"}}}
    )
    beside = job_overhead_cpu_cores(parse_job(body))
    ranges = [limit_range("pods", pod(max={"cpu": "2"}))]
    assert clip(ranges, "cpu", 0.5, 4.0, beside_cores=beside).high == pytest.approx(1.75)
