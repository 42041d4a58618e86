"""The order in which the e2e lanes take their tests: a long test when a lane is about to
start its next test, a short one to hold its place otherwise.

pytest-xdist's ``loadgroup`` hands a lane one work unit (a test, or every test of one
``xdist_group``) whenever the lane runs low, in collection order. Dealt in the order the files
happen to be collected, a long test taken last runs on by itself after the other lanes have
finished: the lanes phase's tail (117-263 s measured on the test bed, with tests of 90-190 s
dealt late). Dealt longest first (the LPT rule of list scheduling), what is left at the end is
short, and the lanes finish close together (a tail of 96-118 s, measured). What is left of the
tail comes from a lane holding the test after the one it runs (an xdist worker needs its next
test before it runs one): a test is committed to a lane a whole test ahead of its start, and a
45 s test given to a lane as it began a 93 s one started 93 s later, while two other lanes ran
out of work. So ``ShortAheadScheduling`` gives a lane whose next test starts soon the longest
test waiting, and a lane busy with a long test the shortest: a long test is chosen when it is
about to start, and the short tests (56 of the 78, most under 5 s) hold the places ahead.

The seconds are those of a recorded lanes run, one line per test in ``lane_seconds.tsv`` beside
the e2e tests (cluster/e2e.sh records them with DECOR_E2E_RECORD_LANE_SECONDS=1). A test with
no recorded seconds (a new one) counts as the longest: it may be long, and a long test dealt
last is the tail this order exists to avoid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadGroupScheduling

SECONDS_FILE = Path(__file__).resolve().parents[1] / "e2e" / "lane_seconds.tsv"
SOON_S = 10.0
"""A lane whose queued work is expected to end within this many seconds starts its next
test soon: it gets the longest waiting."""


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


def recorded_seconds() -> dict[str, float]:
    """The seconds of ``SECONDS_FILE``; none when there is no file."""
    return read_seconds(SECONDS_FILE.read_text()) if SECONDS_FILE.exists() else {}


def format_seconds(seconds: Mapping[str, float]) -> str:
    """The file's text: a header, then one line per test, by test id (stable diffs)."""
    lines = ["# seconds<TAB>test id: each e2e test's seconds in a recorded lanes run (set-up,"]
    lines.append(
        "# test and teardown); the lanes' scheduler chooses tests by them (lane_order.py)."
    )
    lines += [f"{seconds[t]:.0f}\t{t}" for t in sorted(seconds)]
    return "\n".join(lines) + "\n"


def next_unit(waiting_s: Sequence[float], queued_s: float) -> int:
    """Which waiting unit (by expected seconds) to give a lane whose queued work, that is the
    tests it will run before the one given now, is expected to take ``queued_s``: the longest
    when that is at most ``SOON_S`` (it starts soon), else the shortest (it holds the place
    while the lane is busy). Ties: the first."""
    if not waiting_s:
        raise ValueError("no unit is waiting")
    pick = max if queued_s <= SOON_S else min
    best = pick(waiting_s)
    return next(k for k, s in enumerate(waiting_s) if s == best)


class ShortAheadScheduling(LoadGroupScheduling):  # type: ignore[misc]
    """pytest-xdist's ``loadgroup`` (an ``xdist_group`` is one unit, a lane at a time), each
    unit chosen by ``next_unit`` instead of taken in collection order."""

    def __init__(self, config: Any, log: Any, seconds: Mapping[str, float]) -> None:
        super().__init__(config, log)
        self.seconds = dict(seconds)

    def _expected_s(self, nodeids: Any) -> float:
        return sum(self.seconds.get(without_group(n), math.inf) for n in nodeids)

    def _assign_work_unit(self, node: Any) -> None:
        queued = self._expected_s(
            n
            for unit in self.assigned_work.get(node, {}).values()
            for n, done in unit.items()
            if not done
        )
        scopes = list(self.workqueue)
        k = next_unit([self._expected_s(self.workqueue[s]) for s in scopes], queued)
        self.workqueue.move_to_end(scopes[k], last=False)
        super()._assign_work_unit(node)
