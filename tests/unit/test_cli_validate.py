"""``decor validate``: a clear answer for every manifest the CRD accepts (a best-effort job,
with no deadline, once crashed it with a TypeError)."""

from __future__ import annotations

import copy
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
    return [
        ("example", EXAMPLE, "after start"),
        ("best-effort", best_effort, "deadline none (best-effort)"),
        ("absolute", absolute, "deadline 2026-11-22T12:00:00+00:00"),
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
