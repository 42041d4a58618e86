"""The order in which the e2e lanes take their tests: longest first.

pytest-xdist's ``loadgroup`` hands a lane one work unit (a test, or every test of one
``xdist_group``) whenever the lane runs low, in collection order. Dealt in the order the files
happen to be collected, a long test taken last runs on by itself after the other lanes have
finished: the lanes phase's tail (117-263 s measured on the test bed, with tests of 90-190 s
dealt late). Dealt longest first (the LPT rule of list scheduling), what is left to deal at
the end is short, and the lanes finish close together.

The seconds are those of a recorded lanes run, one line per test in ``lane_seconds.tsv`` beside
the e2e tests (cluster/e2e.sh records them with DECOR_E2E_RECORD_LANE_SECONDS=1). A test with
no recorded seconds (a new one) is dealt first: it may be long, and a long test dealt last is
the tail this order exists to avoid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

SECONDS_FILE = Path(__file__).resolve().parents[1] / "e2e" / "lane_seconds.tsv"


def without_group(nodeid: str) -> str:
    """A test's id without the ``@group`` suffix pytest-xdist's ``loadgroup`` appends (the
    suffix follows the parameters' ``]``, as xdist itself splits it)."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


def read_seconds(text: str) -> dict[str, float]:
    """``seconds<TAB>test id`` per line (``#`` starts a comment) into {test id: seconds}."""
    seconds: dict[str, float] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        value, sep, nodeid = line.partition("\t")
        try:
            s = float(value)
        except ValueError:
            s = math.nan
        if not sep or not nodeid or not s >= 0 or math.isinf(s):
            raise ValueError(f"line {number}: expected 'seconds<TAB>test id', got {line!r}")
        seconds[nodeid] = s
    return seconds


def format_seconds(seconds: Mapping[str, float]) -> str:
    """The file's text: a header, then one line per test, by test id (stable diffs)."""
    lines = ["# seconds<TAB>test id: each e2e test's seconds in a recorded lanes run (set-up,"]
    lines.append("# test and teardown); cluster/e2e.sh deals the lanes' tests longest first.")
    lines += [f"{seconds[t]:.0f}\t{t}" for t in sorted(seconds)]
    return "\n".join(lines) + "\n"


def longest_first(
    tests: Sequence[tuple[str, str | None]], seconds: Mapping[str, float]
) -> list[int]:
    """The indices of `tests` ((test id, xdist group or None), in collection order) in the
    order to deal them: work units by their seconds (a group's is the sum of its tests'),
    longest first, a unit with any test of unknown seconds before all others; ties, and the
    tests within a group, keep their collection order. A group's tests stay together, as
    ``loadgroup`` deals them as one unit."""
    units: dict[str, list[int]] = {}
    for index, (nodeid, group) in enumerate(tests):
        units.setdefault(f"group {group}" if group else f"test {nodeid}", []).append(index)

    def unit_seconds(members: list[int]) -> float:
        return sum(seconds.get(tests[k][0], math.inf) for k in members)

    ordered = sorted(units.values(), key=lambda members: -unit_seconds(members))
    return [k for members in ordered for k in members]
