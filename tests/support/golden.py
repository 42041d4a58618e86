"""Golden records: compare what a scenario did with the record committed beside the tests.

``DECOR_UPDATE_GOLDEN=1`` writes the records instead of comparing them. A difference fails
with the first entries that differ, expected against actual, as a unified diff.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
"""tests/golden: one folder per kind of record."""
ENV_UPDATE = "DECOR_UPDATE_GOLDEN"
FLOAT_DIGITS = 9
"""Significant digits a float keeps in a record: the same arithmetic reordered changes the
last bits, not the behaviour."""
CONTEXT_ENTRIES = 3
"""Entries shown from the first difference on."""


def normalised(value: Any) -> Any:
    """``value`` as JSON would bring it back, floats to :data:`FLOAT_DIGITS` digits."""
    if isinstance(value, float):
        return float(f"{value:.{FLOAT_DIGITS}g}")
    if isinstance(value, dict):
        return {str(k): normalised(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalised(v) for v in value]
    return value


def _text(value: Any) -> list[str]:
    return json.dumps(value, indent=1, sort_keys=True).splitlines()


def check_golden(path: Path, record: dict[str, Any]) -> None:
    """Compare ``record`` (``calls``: a list of entries; ``status``) with the JSON at ``path``."""
    __tracebackhide__ = True  # pytest: the message says it all
    name = path.stem
    actual = normalised(record)
    if os.environ.get(ENV_UPDATE) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(_text(actual)) + "\n")
        return
    if not path.exists():
        raise AssertionError(f"no golden record {path}; write it with {ENV_UPDATE}=1")
    expected = json.loads(path.read_text())
    if expected == actual:
        return
    calls, want = actual["calls"], expected["calls"]
    first = next(
        (i for i, (a, b) in enumerate(zip(want, calls, strict=False)) if a != b),
        min(len(want), len(calls)),
    )
    if first < max(len(want), len(calls)):
        period = next((e for e in reversed(calls[:first]) if "period" in e), {"period": 0})
        what = (want[first:] or calls[first:])[0]
        where = (
            f"calls[{first}] ({what.get('call') or what}, in period {period['period']}; "
            f"{len(want)} entries expected, {len(calls)} made)"
        )
        old = want[first : first + CONTEXT_ENTRIES]
        new = calls[first : first + CONTEXT_ENTRIES]
    else:
        where, old, new = "the final status", expected["status"], actual["status"]
    diff = "\n".join(
        difflib.unified_diff(_text(old), _text(new), "golden", "now", lineterm="", n=5)
    )
    raise AssertionError(
        f"{name}: the record differs from {path.name} from {where}:\n{diff}\n"
        f"(if the change is intended: {ENV_UPDATE}=1 rewrites the golden records)"
    )
