"""A run's trace: one row per control period, saved as JSON and plotted to PNG."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TraceRow:
    t_s: float  # seconds since the job started
    steps_done: float
    steps_total: float
    progress: float  # 0..1
    set_point: float  # t / D against the deadline in force at that moment
    deadline_s: float  # relative deadline in force (s since start)
    allocation: float  # cores (or GPUs) in effect when the sample was taken
    requested: float  # what the controller asked for in this period
    condition: str
    eta_s: float | None  # predicted finish, s since start
    # Several jobs under the planner (None for a job run alone):
    granted: float | None = None  # what the planner granted this period (0 while waiting)
    verdict: str | None = None  # the planner's admission verdict (Admitted, Queued, ...)


def write_trace(rows: list[TraceRow], summary: dict[str, Any], path: Path) -> None:
    """JSON with the summary and every row (atomic: a crash never leaves half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"summary": summary, "rows": [asdict(r) for r in rows]}, indent=1))
    tmp.replace(path)


def read_trace(path: Path) -> tuple[dict[str, Any], list[TraceRow]]:
    data = json.loads(path.read_text())
    return data["summary"], [TraceRow(**row) for row in data["rows"]]


def plot_trace(rows: list[TraceRow], path: Path, title: str, unit: str = "cores") -> None:
    """Progress against the set point (top) and the allocation over time (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r.t_s for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 5.5))
    top.plot(t, [r.progress for r in rows], label="progress")
    top.plot(t, [min(1.0, r.set_point) for r in rows], "--", label="set point t / D")
    deadlines = sorted({r.deadline_s for r in rows})
    for d in deadlines:
        top.axvline(d, color="red", linewidth=0.8, alpha=0.6)
    top.set_ylabel("progress")
    top.set_ylim(0, 1.05)
    top.legend(loc="upper left")
    top.set_title(title)
    bottom.step(t, [r.allocation for r in rows], where="post", label=f"{unit} in effect")
    bottom.set_ylabel(unit)
    bottom.set_xlabel("seconds since start (red: deadline)")
    for d in deadlines:
        bottom.axvline(d, color="red", linewidth=0.8, alpha=0.6)
    bottom.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
