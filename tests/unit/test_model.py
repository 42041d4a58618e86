"""Manifest parsing and validation: valid manifests load; every invalid one names its field.

Each invalid case is one edit to a valid manifest, and asserts both ``ManifestError.field``
(the dotted path a user must fix) and a fragment of the message (what is wrong with it).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.api.model import (
    DEFAULT_METRICS_PATH,
    ManifestError,
    parse_cpu_cores,
    parse_duration_s,
    parse_job,
    parse_time,
    tree_copy,
)
from decor_trainer import contract

REPO = Path(__file__).resolve().parents[2]
DELETE = object()  # marks a key to remove in ``edited``


def valid_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "decor.dev/v1alpha1",
        "kind": "DeadlineTrainingJob",
        "metadata": {"name": "mnist", "namespace": "ml"},
        "spec": {
            "duration": "10m",
            "epochs": 3,
            "resources": {"mode": "cpu", "min": "500m", "max": 4, "initial": 2},
            "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}},
        },
    }


def valid_gpu_manifest() -> dict[str, Any]:
    manifest = valid_manifest()
    manifest["spec"]["resources"] = {"mode": "gpu", "min": 1, "max": 4, "initial": 2}
    manifest["spec"]["checkpoint"] = {"path": "/ckpt/mnist"}
    return manifest


def edited(base: dict[str, Any], **edits: Any) -> dict[str, Any]:
    """A copy of ``base`` with dotted paths (``spec__resources__min``) set or deleted."""
    manifest = copy.deepcopy(base)
    for dotted, value in edits.items():
        *parents, last = dotted.split("__")
        node = manifest
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return manifest


# ---------------------------------------------------------------------------------------
# valid manifests


def test_example_manifest_loads() -> None:
    manifest = yaml.safe_load((REPO / "examples" / "resnet-cpu.yaml").read_text())
    job = parse_job(manifest)
    assert job.name == "resnet-demo"
    assert job.namespace == "default"
    assert (job.duration_s, job.deadline) == (90.0, None)
    assert (job.epochs, job.steps_per_epoch) == (4, 120)
    assert (job.resources.mode, job.resources.min, job.resources.max) == ("cpu", 0.5, 2.0)
    assert (job.resources.initial, job.resources.initial_given) == (2.0, True)
    assert job.planned_steps == 480.0
    assert (job.control.policy, job.control.period_s) == ("decor", 1.0)
    assert job.checkpoint.path is None  # local runs checkpoint into their own folder
    assert (job.metrics.port, job.metrics.path) == (9100, "/metrics")
    assert job.trainer_container["name"] == "trainer"
    assert job.deadline_s(1000.0) == 1090.0


def test_defaults() -> None:
    job = parse_job(edited(valid_manifest(), spec__resources={"max": "3"}))
    assert job.resources.mode == "cpu"
    assert (job.resources.min, job.resources.max, job.resources.initial) == (1.0, 3.0, 1.0)
    assert job.resources.initial_given is False
    assert job.estimate is None
    assert job.control.policy == "decor"
    assert job.control.period_s == 1.0
    assert job.control.safety_margin_s is None
    assert (job.metrics.port, job.metrics.path) == (
        contract.DEFAULT_METRICS_PORT,
        DEFAULT_METRICS_PATH,
    )
    assert job.suspend is False
    # a MAX below one core lowers the default MIN with it
    small = parse_job(edited(valid_manifest(), spec__resources={"max": "500m"}))
    assert (small.resources.min, small.resources.max) == (0.5, 0.5)


def test_absolute_deadline() -> None:
    job = parse_job(
        edited(valid_manifest(), spec__duration=DELETE, spec__deadline="2026-11-22T12:00:00Z")
    )
    assert job.duration_s is None
    assert job.deadline == datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    # an absolute deadline does not depend on when the job started
    assert job.deadline_s(0.0) == job.deadline_s(1e9) == job.deadline.timestamp()


def test_relative_duration() -> None:
    job = parse_job(edited(valid_manifest(), spec__duration="1h30m"))
    assert (job.duration_s, job.deadline) == (5400.0, None)
    assert job.deadline_s(1_000.0) == 6_400.0


def test_millicores_and_control_settings() -> None:
    job = parse_job(
        edited(
            valid_manifest(),
            spec__resources={"mode": "cpu", "min": "250m", "max": "1500m", "initial": 0.75},
            spec__control={
                "policy": "decor-nn",
                "periodSeconds": "2s",
                "safetyMarginSeconds": 3,
                "gains": {"k": 20, "tiSeconds": 30},
            },
            spec__stepsPerEpoch=100,
            spec__suspend=True,
            spec__metrics={"port": 9200, "path": "/m"},
        )
    )
    assert (job.resources.min, job.resources.max, job.resources.initial) == (0.25, 1.5, 0.75)
    control = job.control
    assert (control.policy, control.period_s, control.safety_margin_s) == ("decor-nn", 2.0, 3.0)
    assert (control.k, control.ti_s) == (20.0, 30.0)
    assert job.steps_per_epoch == 100
    assert job.suspend is True
    assert (job.metrics.port, job.metrics.path) == (9200, "/m")


def test_gpu_mode() -> None:
    job = parse_job(valid_gpu_manifest())
    assert job.resources.mode == "gpu"
    assert (job.resources.min, job.resources.max, job.resources.initial) == (1.0, 4.0, 2.0)
    assert job.control.period_s == 5.0  # the published GPU period
    assert job.checkpoint.path == "/ckpt/mnist"
    string_counts = edited(
        valid_gpu_manifest(), spec__resources__max="2", spec__resources__initial="2"
    )
    assert parse_job(string_counts).resources.max == 2.0
    assert job.control.max_restarts is None
    bounded = parse_job(edited(valid_gpu_manifest(), spec__control={"maxRestarts": 2}))
    assert bounded.control.max_restarts == 2


# ---------------------------------------------------------------------------------------
# invalid manifests: (edit, field, message fragment)

Case = tuple[dict[str, Any], str, str]

CPU_INVALID: list[Case] = [
    ({"spec__resources__min": 3, "spec__resources__max": 2, "spec__resources__initial": 2},
     "spec.resources.min", "must be <= spec.resources.max (3 > 2)"),
    ({"spec__resources__initial": 5}, "spec.resources.initial", "within [min, max] = [0.5, 4]"),
    ({"spec__resources__initial": "250m"}, "spec.resources.initial", "within [min, max]"),
    ({"spec__resources__mode": "tpu"}, "spec.resources.mode", "must be one of cpu, gpu"),
    ({"spec__resources__max": DELETE}, "spec.resources.max", "is required"),
    ({"spec__resources__max": "lots"}, "spec.resources.max", "cores (e.g. 2 or 0.5)"),
    ({"spec__resources__min": "0m"}, "spec.resources.min", "must be positive"),
    ({"spec__resources": DELETE}, "spec.resources", "is required"),
    ({"spec__resources__memory": "1Gi"}, "spec.resources.memory", "unknown field"),
    ({"spec__deadline": "2026-11-22T12:00:00Z"}, "spec.deadline", "exactly one of"),
    ({"spec__duration": DELETE}, "spec.deadline", "exactly one of"),
    ({"spec__duration": DELETE, "spec__deadline": "2026-11-22T12:00:00"},
     "spec.deadline", "needs a time zone"),
    ({"spec__duration": DELETE, "spec__deadline": "next friday"},
     "spec.deadline", "RFC 3339"),
    ({"spec__duration": "ten minutes"}, "spec.duration", "a duration such as 90s"),
    ({"spec__duration": "0s"}, "spec.duration", "must be positive"),
    ({"spec__epochs": 0}, "spec.epochs", "positive integer"),
    ({"spec__epochs": -3}, "spec.epochs", "positive integer"),
    ({"spec__epochs": 2.5}, "spec.epochs", "positive integer"),
    ({"spec__epochs": "3"}, "spec.epochs", "positive integer"),
    ({"spec__epochs": True}, "spec.epochs", "positive integer"),
    ({"spec__epochs": DELETE}, "spec.epochs", "is required"),
    ({"spec__stepsPerEpoch": 0}, "spec.stepsPerEpoch", "positive integer"),
    ({"spec__control": {"policy": "pid"}}, "spec.control.policy", "one of decor, decor-nn"),
    ({"spec__control": {"periodSeconds": "soon"}}, "spec.control.periodSeconds", "a duration"),
    ({"spec__control": {"safetyMarginSeconds": -1}}, "spec.control.safetyMarginSeconds", ">= 0"),
    ({"spec__control": {"gains": {"k": 0}}}, "spec.control.gains.k", "positive number"),
    ({"spec__control": {"maxRestarts": 0}}, "spec.control.maxRestarts", "positive integer"),
    ({"spec__control": {"maxRestarts": 1.5}}, "spec.control.maxRestarts", "positive integer"),
    ({"spec__control": {"gains": {"kp": 1}}}, "spec.control.gains.kp", "unknown field"),
    ({"spec__control": {"period": 1}}, "spec.control.period", "unknown field"),
    ({"spec__replicas": 2}, "spec.replicas", "unknown field"),
    ({"spec__checkpoint": {"dir": "/x"}}, "spec.checkpoint.dir", "unknown field"),
    ({"spec__metrics": {"port": 0}}, "spec.metrics.port", "1-65535"),
    ({"spec__metrics": {"port": 65536}}, "spec.metrics.port", "1-65535"),
    ({"spec__metrics": {"port": "9100"}}, "spec.metrics.port", "1-65535"),
    ({"spec__metrics": {"port": True}}, "spec.metrics.port", "1-65535"),
    ({"spec__metrics": {"path": "metrics"}}, "spec.metrics.path", "must start with /"),
    ({"spec__metrics": {"scheme": "https"}}, "spec.metrics.scheme", "unknown field"),
    ({"spec__suspend": "yes"}, "spec.suspend", "true or false"),
    ({"spec__template": {"spec": {"containers": []}}}, "spec.template.spec.containers",
     "at least one container"),
    ({"spec__template": {"spec": {"containers": [{"image": "x"}]}}},
     "spec.template.spec.containers[0].name", "is required"),
    ({"apiVersion": "decor.dev/v1"}, "apiVersion", "must be decor.dev/v1alpha1"),
    ({"kind": "Job"}, "kind", "must be DeadlineTrainingJob"),
    ({"metadata__name": "My_Job"}, "metadata.name", "DNS-1035 label"),
    ({"spec": DELETE}, "spec", "is required"),
]  # fmt: skip

GPU_INVALID: list[Case] = [
    ({"spec__checkpoint": DELETE}, "spec.checkpoint.path", "required in gpu mode"),
    ({"spec__checkpoint": {"path": ""}}, "spec.checkpoint.path", "required in gpu mode"),
    ({"spec__resources__max": 2.5}, "spec.resources.max", "whole number of GPUs"),
    ({"spec__resources__max": "1.5"}, "spec.resources.max", "whole number of GPUs"),
    ({"spec__resources__min": 0}, "spec.resources.min", "at least 1"),
    ({"spec__resources__initial": "500m"}, "spec.resources.initial", "whole number of GPUs"),
    ({"spec__resources__min": 3, "spec__resources__max": 2, "spec__resources__initial": 2},
     "spec.resources.min", "(3 > 2)"),
    ({"spec__resources__initial": 8}, "spec.resources.initial", "within [min, max] = [1, 4]"),
]  # fmt: skip


def case_id(case: Case) -> str:
    edits, field, _ = case
    shown = ",".join(
        f"{k.replace('__', '.')}={'<deleted>' if v is DELETE else v!r}" for k, v in edits.items()
    )
    return f"{field}<-{shown}"


@pytest.mark.parametrize(("base", "case"), [
    *((valid_manifest, case) for case in CPU_INVALID),
    *((valid_gpu_manifest, case) for case in GPU_INVALID),
], ids=[case_id(c) for c in CPU_INVALID + GPU_INVALID])  # fmt: skip
def test_invalid_manifest_names_the_field(base, case) -> None:
    edits, field, fragment = case
    with pytest.raises(ManifestError) as raised:
        parse_job(edited(base(), **edits))
    assert raised.value.field == field
    assert fragment in raised.value.message
    assert str(raised.value) == f"{field}: {raised.value.message}"


@pytest.mark.parametrize("document", [None, [], "a string", 3])
def test_a_document_that_is_not_a_mapping(document: Any) -> None:
    with pytest.raises(ManifestError) as raised:
        parse_job(document)
    assert raised.value.field == "(document)"


# ---------------------------------------------------------------------------------------
# scalar parsers


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("90s", 90.0),
        ("2m", 120.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        (" 45s ", 45.0),
    ],
)
def test_parse_duration_s(value: Any, seconds: float) -> None:
    assert parse_duration_s(value, "spec.duration") == seconds


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("", "a duration such as 90s"),
        ("   ", "a duration such as 90s"),
        ("ninety", "a duration such as 90s"),
        ("1h30", "a duration such as 90s"),  # trailing number without a unit
        ("5d", "a duration such as 90s"),  # days are not a Go duration unit
        ("90 s", "a duration such as 90s"),
        ("1.5.3s", "a duration such as 90s"),
        ("-5s", "a duration such as 90s"),
        (True, "a duration such as 90s"),
        (None, "a duration such as 90s"),
        ([90], "a duration such as 90s"),
        ("0s", "must be positive"),
        (0, "must be positive"),
        (-1, "must be positive"),
        ("-1", "must be positive"),
    ],
)
def test_parse_duration_s_rejects(value: Any, fragment: str) -> None:
    with pytest.raises(ManifestError) as raised:
        parse_duration_s(value, "spec.control.periodSeconds")
    assert raised.value.field == "spec.control.periodSeconds"
    assert fragment in raised.value.message


@pytest.mark.parametrize(
    ("value", "cores"),
    [
        (2, 2.0),
        (0.5, 0.5),
        ("1.5", 1.5),
        ("2", 2.0),
        ("250m", 0.25),
        (" 1500m ", 1.5),
        ("1m", 0.001),
    ],
)
def test_parse_cpu_cores(value: Any, cores: float) -> None:
    assert parse_cpu_cores(value, "spec.resources.max") == pytest.approx(cores)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (0, "must be positive"),
        ("0m", "must be positive"),
        (-1, "must be positive"),
        ("nan", "must be positive"),
        ("abc", "millicores (500m)"),
        ("m", "millicores (500m)"),
        ("250Mi", "millicores (500m)"),
        ("", "millicores (500m)"),
        (None, "millicores (500m)"),
        (True, "millicores (500m)"),
        ([2], "millicores (500m)"),
    ],
)
def test_parse_cpu_cores_rejects(value: Any, fragment: str) -> None:
    with pytest.raises(ManifestError) as raised:
        parse_cpu_cores(value, "spec.resources.min")
    assert raised.value.field == "spec.resources.min"
    assert fragment in raised.value.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-22T12:00:00Z", datetime(2026, 11, 22, 12, 0, tzinfo=UTC)),
        ("2026-11-22T13:00:00+01:00", datetime(2026, 11, 22, 12, 0, tzinfo=UTC)),
        ("2026-11-22T12:00:00.5Z", datetime(2026, 11, 22, 12, 0, 0, 500000, tzinfo=UTC)),
        (
            datetime(2026, 11, 22, 7, 0, tzinfo=timezone(timedelta(hours=-5))),
            datetime(2026, 11, 22, 12, 0, tzinfo=UTC),
        ),
    ],
)
def test_parse_time(value: Any, expected: datetime) -> None:
    parsed = parse_time(value, "spec.deadline")
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)  # normalised to UTC


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("2026-11-22T12:00:00", "needs a time zone"),
        (datetime(2026, 11, 22, 12, 0), "needs a time zone"),
        ("2026-11-22 noon", "RFC 3339"),
        ("", "RFC 3339"),
        (1795000000, "RFC 3339"),
        (None, "RFC 3339"),
    ],
)
def test_parse_time_rejects(value: Any, fragment: str) -> None:
    with pytest.raises(ManifestError) as raised:
        parse_time(value, "spec.deadline")
    assert raised.value.field == "spec.deadline"
    assert fragment in raised.value.message


@pytest.mark.parametrize("value", ["inf", "nan", float("inf"), float("nan"), "-inf"])
def test_non_finite_quantities_are_rejected(value: object) -> None:
    with pytest.raises(ManifestError, match="finite"):
        parse_cpu_cores(value, "spec.resources.max")
    with pytest.raises(ManifestError, match="finite|duration"):
        parse_duration_s(value, "spec.duration")


def test_estimate_and_planned_steps() -> None:
    job = parse_job(
        edited(valid_manifest(), spec__estimate={"stepSeconds": 0.12, "allocation": "1500m"})
    )
    assert job.estimate == (0.12, 1.5)
    without_steps = parse_job(edited(valid_manifest(), spec__stepsPerEpoch=DELETE))
    assert without_steps.planned_steps == 0.0


def test_tree_copy_is_deepcopy_of_an_api_object() -> None:
    shared = {"cpu": "500m"}
    body: dict[str, Any] = {
        "metadata": {"name": "a", "labels": {"x": "y"}, "generation": 3},
        "spec": {"containers": [{"resources": {"requests": shared, "limits": shared}}]},
        "status": {"phase": None, "ready": True, "progress": 0.5, "pair": (1, [2])},
    }
    copied = tree_copy(body)
    assert copied == copy.deepcopy(body)
    requests = copied["spec"]["containers"][0]["resources"]
    assert requests["requests"] is requests["limits"] is not shared  # shared as in the original
    assert copied["status"]["pair"] == (1, [2])
    copied["metadata"]["labels"]["x"] = "z"
    copied["status"]["pair"][1].append(3)
    assert body["metadata"]["labels"] == {"x": "y"} and body["status"]["pair"] == (1, [2])
