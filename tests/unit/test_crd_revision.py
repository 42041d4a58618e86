"""The start-up check of the installed CRD's revision (``decor.dev/crd-revision``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.adapter.kube import KubeError
from decor.api import vocabulary
from decor.core.crd_revision import (
    REFUSE,
    REQUIRED_CRD_REVISION,
    START,
    UPGRADE_COMMAND,
    WARN,
    crd_unreadable,
    installed_revision,
    judge_crd,
)

REPO = Path(__file__).resolve().parents[2]


def crd(revision: str | None) -> dict[str, Any]:
    annotations = {} if revision is None else {vocabulary.ANNOTATION_CRD_REVISION: revision}
    return {"metadata": {"name": vocabulary.CRD_NAME, "annotations": annotations}}


def test_the_shipped_crd_is_the_revision_the_operator_needs() -> None:
    for path in (REPO / "crds", REPO / "helm" / "decor" / "crds"):
        shipped = yaml.safe_load((path / "deadlinetrainingjobs.yaml").read_text())
        assert shipped["metadata"]["name"] == vocabulary.CRD_NAME
        assert installed_revision(shipped) == REQUIRED_CRD_REVISION, path
    assert UPGRADE_COMMAND == "kubectl apply --server-side -f helm/decor/crds/"
    assert (REPO / "helm" / "decor" / "crds").is_dir()


@pytest.mark.parametrize(
    ("revision", "required", "action", "installed"),
    [
        ("3", 3, START, 3),
        ("4", 3, START, 4),  # a newer CRD serves an older operator (the schema only grows)
        (" 3 ", 3, START, 3),
        ("2", 3, REFUSE, 2),
        (None, 1, REFUSE, 0),  # a CRD from before revisions were marked
        ("three", 3, WARN, None),
        ("-1", 3, WARN, None),
    ],
)
def test_an_older_crd_is_refused_and_a_newer_one_accepted(
    revision: str | None, required: int, action: str, installed: int | None
) -> None:
    verdict = judge_crd(crd(revision), required)
    assert (verdict.action, verdict.installed) == (action, installed)


def test_the_refusal_names_both_revisions_and_the_command_to_upgrade() -> None:
    message = judge_crd(crd("1"), 2).message
    assert message == (
        "CRD deadlinetrainingjobs.decor.dev is revision 1, older than revision 2 this operator "
        "needs; upgrade it first (helm upgrade does not): "
        "kubectl apply --server-side -f helm/decor/crds/"
    )
    missing = judge_crd(None, 2)
    assert missing.action == REFUSE
    assert "is not installed" in missing.message and UPGRADE_COMMAND in missing.message


def test_an_unreadable_crd_is_a_warning_only() -> None:
    verdict = crd_unreadable("403 forbidden", 2)
    assert verdict.action == WARN
    assert "403 forbidden" in verdict.message and "revision 2" in verdict.message


class _CrdReader:
    """What check_crd_revision uses of the Kube facade: get_crd."""

    def __init__(self, result: dict[str, Any] | None | Exception) -> None:
        self.result = result
        self.asked: list[str] = []

    def get_crd(self, name: str) -> dict[str, Any] | None:
        self.asked.append(name)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


@pytest.mark.parametrize(
    ("result", "starts", "level"),
    [
        (crd(str(REQUIRED_CRD_REVISION)), True, logging.INFO),
        (crd(str(REQUIRED_CRD_REVISION - 1)), False, logging.ERROR),
        (None, False, logging.ERROR),
        (KubeError("get crd", 403, "forbidden"), True, logging.WARNING),
    ],
)
def test_the_operator_logs_one_line_and_refuses_only_an_older_or_missing_crd(
    result: Any, starts: bool, level: int, caplog: pytest.LogCaptureFixture
) -> None:
    from decor.service.handlers import check_crd_revision

    reader = _CrdReader(result)
    with caplog.at_level(logging.INFO, logger="decor.operator"):
        assert check_crd_revision(reader) is starts  # type: ignore[arg-type]
    assert reader.asked == [vocabulary.CRD_NAME]
    (record,) = [r for r in caplog.records if r.name == "decor.operator"]
    assert record.levelno == level
