"""Whether the installed DeadlineTrainingJob CRD is as new as this operator needs.

Helm installs the CRD from the chart's ``crds/`` folder on the first install only and never
upgrades it, so after a ``helm upgrade`` the cluster may still hold an older schema: the
status fields a newer operator writes would be pruned, and spec fields it reads refused.
The CRD carries its revision in the annotation ``decor.dev/crd-revision`` (a whole number,
raised whenever the schema changes); the operator reads it at start-up and refuses to run
on an older one. Pure: the caller reads the CRD (``Kube.get_crd``) and acts on the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from decor.api import vocabulary

REQUIRED_CRD_REVISION = 1
"""The revision of ``crds/deadlinetrainingjobs.yaml`` this operator was built with (raise both
together; tests/unit/test_crd_revision.py checks they match)."""
UPGRADE_COMMAND = "kubectl apply --server-side -f helm/decor/crds/"
"""How to install the chart's CRD (the chart's ``crds/`` folder, here from the repository)."""

START = "start"
"""The CRD is as new as needed (or newer)."""
WARN = "warn"
"""The revision could not be read: start anyway, with a warning."""
REFUSE = "refuse"
"""The CRD is missing or older than needed: do not start."""


@dataclass(frozen=True)
class CrdVerdict:
    """What to do at start-up, and the one log line that says why."""

    action: str  # START, WARN or REFUSE
    message: str
    installed: int | None = None  # the installed revision; None: unknown


def installed_revision(crd: Mapping[str, Any]) -> int | None:
    """The CRD's revision annotation as a number: 0 when it has none (a CRD from before
    revisions were marked), None when it is not a whole number."""
    annotations = (crd.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(vocabulary.ANNOTATION_CRD_REVISION)
    if value is None:
        return 0
    text = str(value).strip()
    return int(text) if text.isdigit() else None


def judge_crd(crd: Mapping[str, Any] | None, required: int = REQUIRED_CRD_REVISION) -> CrdVerdict:
    """The verdict on the installed CRD (None: there is none)."""
    name = vocabulary.CRD_NAME
    if crd is None:
        return CrdVerdict(
            REFUSE, f"CRD {name} is not installed; install it first: {UPGRADE_COMMAND}"
        )
    revision = installed_revision(crd)
    if revision is None:
        value = crd["metadata"]["annotations"][vocabulary.ANNOTATION_CRD_REVISION]
        return CrdVerdict(
            WARN,
            f"CRD {name}: annotation {vocabulary.ANNOTATION_CRD_REVISION}={value!r} is not a "
            f"revision; starting anyway (this operator needs revision {required})",
        )
    if revision < required:
        return CrdVerdict(
            REFUSE,
            f"CRD {name} is revision {revision}, older than revision {required} this operator "
            f"needs; upgrade it first (helm upgrade does not): {UPGRADE_COMMAND}",
            revision,
        )
    return CrdVerdict(START, f"CRD {name} is revision {revision} (needs {required})", revision)


def crd_unreadable(reason: str, required: int = REQUIRED_CRD_REVISION) -> CrdVerdict:
    """The verdict when the CRD could not be read (e.g. no ``get`` on it): start anyway."""
    return CrdVerdict(
        WARN,
        f"cannot read CRD {vocabulary.CRD_NAME} to check its revision ({reason}); starting "
        f"anyway: make sure it is revision {required} or later ({UPGRADE_COMMAND})",
    )
