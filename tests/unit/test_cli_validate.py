"""``decor validate``: a clear answer for every manifest the CRD accepts (a best-effort job,
with no deadline, once crashed it with a TypeError)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor import cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "examples" / "resnet-cpu.yaml").read_text())


def variants() -> list[tuple[str, dict[str, Any], str]]:
    best_effort = copy.deepcopy(EXAMPLE)
    for key in ("deadline", "duration"):
        best_effort["spec"].pop(key, None)
    best_effort["spec"]["bestEffort"] = True
    absolute = copy.deepcopy(EXAMPLE)
    absolute["spec"].pop("duration", None)
    absolute["spec"]["deadline"] = "2026-11-22T12:00:00Z"
    unquoted = copy.deepcopy(EXAMPLE)  # YAML reads these as a timestamp and numbers
    unquoted["spec"].pop("duration", None)
    unquoted["spec"]["deadline"] = datetime(2026, 11, 22, 12, tzinfo=UTC)
    unquoted["spec"]["resources"].update({"min": 0.5, "max": 1.5, "initial": 1.5})
    seconds = copy.deepcopy(EXAMPLE)
    seconds["spec"]["duration"] = 90
    gpu_group = copy.deepcopy(EXAMPLE)
    gpu_group["spec"]["resources"] = {
        "mode": "gpu",
        "min": 1,
        "max": 16,
        "gpusPerPod": 8,
        "batchPolicy": "scaleWithWorkers",
    }
    gpu_group["spec"]["checkpoint"] = {"path": "/ckpt"}
    gpu_group["spec"]["estimate"] = {"stepSeconds": 0.12, "allocation": "1"}
    gpu_best_effort = copy.deepcopy(gpu_group)
    gpu_best_effort["spec"].pop("duration")
    gpu_best_effort["spec"]["bestEffort"] = True
    generated = copy.deepcopy(EXAMPLE)  # `kubectl create` with generateName
    generated["metadata"] = {"generateName": "resnet-"}
    return [
        ("example", EXAMPLE, "after start"),
        ("best-effort", best_effort, "deadline none (best-effort)"),
        ("absolute", absolute, "deadline 2026-11-22T12:00:00+00:00"),
        ("unquoted", unquoted, "deadline 2026-11-22T12:00:00+00:00, cpu 0.5-1.5"),
        ("seconds", seconds, "deadline 90s after start"),
        ("gpu-group", gpu_group, "gpu 1-16"),
        ("gpu-best-effort", gpu_best_effort, "deadline none (best-effort), gpu 1-16"),
        ("generate-name", generated, "resnet-<generated>"),
    ]


@pytest.mark.parametrize(("case", "manifest", "said"), variants(), ids=[v[0] for v in variants()])
def test_validate_answers_for_every_kind_of_deadline(
    case: str,
    manifest: dict[str, Any],
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / f"{case}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert cli.main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and said in out, out


def test_validate_names_the_field_of_an_invalid_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = copy.deepcopy(EXAMPLE)
    broken["spec"]["bestEffort"] = True  # and a deadline: refused, naming the field
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    assert cli.main(["validate", str(path)]) != 0
    assert "spec.bestEffort" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ("- a\n- b\n", "must be a mapping"),
        ("{}\n---\n{}\n", "expected one DeadlineTrainingJob document, found 2"),
        ("spec: [\n", "not valid YAML"),
        ("", "found 0"),
    ],
)
def test_validate_answers_for_what_is_no_manifest(
    document: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(document)
    assert cli.main(["validate", str(path)]) == 2
    assert said in capsys.readouterr().err


def test_validate_checks_the_name_the_api_server_would_generate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = copy.deepcopy(EXAMPLE)
    long["metadata"] = {"generateName": "j" * 48}  # 48 + 5 generated > the 52 allowed
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(long))
    assert cli.main(["validate", str(path)]) == 2
    assert "metadata.name" in capsys.readouterr().err


@pytest.mark.parametrize(
    "example", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_example_is_valid(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(example)]) == 0, capsys.readouterr().err
