"""A clairvoyant BOUND for the cluster SIMULATION (``bench/cluster_sim.py``).

For a trace small enough to solve exactly, a mixed-integer program that knows every arrival
in advance answers two questions, one after the other (lexicographic):

(a) the most deadline jobs that any schedule could finish by their deadlines;
(b) the least resource-seconds (core-seconds plus GPU-seconds) of deadline jobs among the
    schedules that meet that many.

Every policy of the simulation is measured against it: met / optimum met, and its
deadline jobs' resource-seconds / optimum resource-seconds.

The model (solved with scipy's ``milp``, HiGHS):

* **time slots**: the intervals between consecutive arrivals and deadlines of the deadline
  jobs. In each slot the set of jobs that may run is fixed.
* **variables**: ``x[j, i, k]``, job j's average allocation in slot i on the k-th linear
  piece of its speed curve (cores or GPUs, ``0 <= x <= width_k``); ``met[j]`` binary.
* **speed**: the simulator's own curve (``Amdahl`` or ``Saturating`` step time), as steps
  per second ``rate(u) = 1 / step_time_s(u)``, written as a concave piecewise-linear
  function of the allocation (slopes decreasing, so filling the pieces in order is the best
  use of an allocation): a GPU job's pieces join its whole counts ``0, min, ..., max``
  (exact at every whole count); a CPU job's pieces are the line from 0 to ``min`` and the
  tangents of ``rate`` at ``CPU_TANGENTS`` points from ``min`` to ``max``.
* **constraints**: per slot and resource kind, the jobs' allocations add up to at most the
  cluster's capacity of that kind (every node's cores for CPU jobs, every node's whole GPUs
  for GPU jobs, as the planner books them); per job, the steps done in its slots
  (``sum slope_k x len_i``) reach its steps when ``met[j]`` is 1.
* **objectives**: (a) maximise ``sum met``; (b) with ``sum met >= (a)``, minimise
  ``sum x len_i``.

Every simplification RELAXES the problem (a schedule the simulation can run is feasible in
the model, with at least the progress it really makes), so (a) is a true upper bound on met
deadlines and (b) a true lower bound on the resource-seconds of a schedule meeting (a):

* capacity is pooled per resource kind: no per-node packing, a job may span nodes (relax);
* restart costs of GPU count changes and resumes are not charged (relax);
* allocations may change at any instant, and a job may start at its arrival rather than at
  the next planner period; within a slot only the average allocation counts, and by the
  concavity of the pieces (Jensen) no mix over time in a slot does better than its average
  (relax; a mix of two whole GPU counts is exactly the line between them);
* CPU speed is over-estimated by tangents (an upper envelope of a concave curve) and, below
  ``min``, by the line from 0 to ``rate(min)`` (the simulation never grants less than
  ``min`` to a running job); a GPU job's speed is exact at whole counts (relax or exact);
* best-effort jobs are left out: they take no capacity (relax);
* speed noise is not modelled: the bound is only computed for exact plants (noise 0).

The slots between events lose nothing in this pooled model: within a slot the jobs and the
capacity do not change, so averaging any schedule over the slot keeps it feasible.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CPU_TANGENTS = 16  # tangent points of a CPU job's speed curve, geometric from min to max
TIME_LIMIT_S = 600.0  # per solve; past it the bound is the solver's proven bound, not exact
MET_GAP = 1e-9  # stage (a): a count, solved to optimality
RESOURCE_GAP = 1e-6  # stage (b): relative gap of the resource-seconds
EPS = 1e-9


@dataclass(frozen=True)
class BoundJob:
    """What the bound needs of one deadline job. Times in seconds, allocations in cores
    (``mode == "cpu"``) or GPUs (``"gpu"``); ``curve(u)`` is seconds per step at ``u``."""

    key: str
    mode: str
    min_allocation: float
    max_allocation: float
    steps: float
    arrival_s: float
    deadline_s: float
    curve: Any  # cluster_sim.Amdahl | cluster_sim.Saturating


@dataclass(frozen=True)
class Bound:
    """The clairvoyant optimum of one trace (see the module docstring)."""

    deadline_jobs: int
    met: int  # (a): the most deadlines any schedule could meet
    met_proven: bool  # False: (a) is the solver's bound after TIME_LIMIT_S, not an optimum
    # (b): least resource-seconds of deadline jobs among schedules meeting ``met`` (when not
    # proven, meeting the most the solver found)
    resource_seconds: float
    resource_lower_s: float  # (b)'s proven lower bound (equal within RESOURCE_GAP)
    met_keys: tuple[str, ...]  # one set of jobs that reaches (a) and (b)
    met_solve_s: float
    resource_solve_s: float
    slots: int
    variables: int
    rows: int


def rate_and_slope(curve: Any, u: float) -> tuple[float, float]:
    """Steps per second at allocation ``u`` > 0, and its derivative (exact, per curve kind)."""
    kind = type(curve).__name__
    if kind == "Amdahl":
        d = curve.a + curve.b * u
        return u / d, curve.a / (d * d)
    if kind == "Saturating":
        e = math.exp(-u / curve.k_units)
        return curve.rate_max * (1.0 - e), curve.rate_max * e / curve.k_units
    raise TypeError(f"no speed derivative for a {kind} curve")


def speed_pieces(job: BoundJob) -> list[tuple[float, float]]:
    """(width, slope) pieces of a concave piecewise-linear function ``P`` with ``P(0) = 0``
    and ``P(u) >= 1 / curve(u)`` at every allocation the simulation can grant (0, or from
    min to max; GPUs whole), equal at whole GPU counts and at a CPU job's min and max.
    Widths in allocation units, slopes in steps per allocation-second; slopes decrease."""
    lo, hi = job.min_allocation, job.max_allocation
    if job.mode == "gpu":
        counts = [0.0] + [float(g) for g in range(max(1, math.ceil(lo - EPS)), int(hi + EPS) + 1)]
        rates = [0.0] + [1.0 / job.curve(g) for g in counts[1:]]
        pieces = [
            (counts[k + 1] - counts[k], (rates[k + 1] - rates[k]) / (counts[k + 1] - counts[k]))
            for k in range(len(counts) - 1)
        ]
    else:
        lo = max(lo, EPS)
        r_lo, _ = rate_and_slope(job.curve, lo)
        pieces = [(lo, r_lo / lo)]
        if hi > lo + EPS:
            points = [lo * (hi / lo) ** (n / (CPU_TANGENTS - 1)) for n in range(CPU_TANGENTS)]
            # (slope, intercept) of each tangent, slopes strictly decreasing
            lines: list[tuple[float, float]] = []
            for u in points:
                r, d = rate_and_slope(job.curve, u)
                if not lines or d < lines[-1][0] * (1.0 - 1e-12):
                    lines.append((d, r - d * u))
            x = lo
            for n, (d, c) in enumerate(lines):
                if n + 1 < len(lines):
                    d2, c2 = lines[n + 1]
                    nxt = min(hi, max(x, (c2 - c) / (d - d2)))
                else:
                    nxt = hi
                if nxt > x + EPS:
                    pieces.append((nxt - x, d))
                x = nxt
    for (_, s1), (_, s2) in zip(pieces, pieces[1:], strict=False):
        if s2 > s1 * (1.0 + 1e-9):
            raise ValueError(f"{job.key}: speed curve is not concave ({s1} then {s2})")
    return pieces


def piecewise_rate(pieces: Sequence[tuple[float, float]], u: float) -> float:
    """``P(u)``: steps per second of ``pieces`` at allocation ``u``, filled in order."""
    out, left = 0.0, u
    for width, slope in pieces:
        take = min(width, max(0.0, left))
        out += take * slope
        left -= take
    return out


def trace_bound(
    jobs: Sequence[Any], nodes: Sequence[Any], time_limit_s: float = TIME_LIMIT_S
) -> Bound:
    """The bound of a simulated trace: its deadline jobs (``cluster_sim.SimJob``, fresh) on
    its nodes (``planner.Node``), capacity pooled as the planner books it: every node's
    cores for CPU jobs, every node's whole GPUs for GPU jobs."""
    capacity = {
        "cpu": sum(max(0.0, n.cpu_cores) for n in nodes),
        "gpu": float(sum(math.floor(n.gpus + 1e-6) for n in nodes if n.gpus > 0)),
    }
    deadline_jobs = [
        BoundJob(
            key=j.key,
            mode=j.mode,
            min_allocation=j.min_allocation,
            max_allocation=j.max_allocation,
            steps=j.steps_total - j.steps_done,
            arrival_s=j.arrival_s,
            deadline_s=j.deadline_s,
            curve=j.curve,
        )
        for j in jobs
        if j.deadline_s is not None
    ]
    return solve(deadline_jobs, capacity, time_limit_s)


def solve(
    jobs: Sequence[BoundJob], capacity: dict[str, float], time_limit_s: float = TIME_LIMIT_S
) -> Bound:
    """The clairvoyant optimum of ``jobs`` on a cluster of ``capacity`` (``{"cpu": cores,
    "gpu": whole GPUs}``, pooled). Raises RuntimeError when HiGHS finds no solution."""
    pieces = {j.key: speed_pieces(j) for j in jobs}
    cands = _candidates(jobs, capacity, pieces)
    if not cands:
        return Bound(len(jobs), 0, True, 0.0, 0.0, (), 0.0, 0.0, 0, 0, 0)
    program = _program(cands, capacity, pieces)
    found, met_ub, proven, met_s = _most_met(program, time_limit_s)
    resource_s, resource_lower_s, met_keys, res_s = _least_resource(program, found, time_limit_s)
    return Bound(
        deadline_jobs=len(jobs),
        met=met_ub,
        met_proven=proven,
        resource_seconds=resource_s,
        resource_lower_s=resource_lower_s,
        met_keys=met_keys,
        met_solve_s=met_s,
        resource_solve_s=res_s,
        slots=len(program.slots),
        variables=program.nx + program.nj,
        rows=program.nrows + 1,
    )


def _candidates(
    jobs: Sequence[BoundJob],
    capacity: dict[str, float],
    pieces: dict[str, list[tuple[float, float]]],
) -> list[BoundJob]:
    """The jobs that could be met: a job that its max cannot finish alone in its window is
    never met (exact: P(max) is the model's fastest speed)."""
    return [
        j
        for j in jobs
        if j.deadline_s > j.arrival_s
        and capacity.get(j.mode, 0.0) >= j.min_allocation - EPS
        and piecewise_rate(pieces[j.key], min(j.max_allocation, capacity.get(j.mode, 0.0)))
        * (j.deadline_s - j.arrival_s)
        >= j.steps * (1.0 - 1e-12)
    ]


@dataclass
class _Program:
    """The mixed-integer program over ``cands``: one continuous x per (job, slot, piece)
    (``cols``: job index, slot index, piece width, slope in steps/s per unit), then one
    binary per job (met); capacity rows per (slot, kind), then a progress row per job."""

    cands: list[BoundJob]
    slots: list[tuple[float, float]]
    """The time slots (s) between consecutive arrivals and deadlines."""
    cols: list[tuple[int, int, float, float]]
    nrows: int
    base: Any
    """The ``LinearConstraint`` of the capacity and progress rows."""
    bounds: Any
    integrality: Any

    @property
    def nx(self) -> int:
        return len(self.cols)

    @property
    def nj(self) -> int:
        return len(self.cands)


def _program(
    cands: list[BoundJob],
    capacity: dict[str, float],
    pieces: dict[str, list[tuple[float, float]]],
) -> _Program:
    """Variables, rows and bounds of the program (scipy/HiGHS form)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint
    from scipy.sparse import coo_matrix

    edges = sorted({t for j in cands for t in (j.arrival_s, j.deadline_s)})
    slots = list(zip(edges, edges[1:], strict=False))
    cols: list[tuple[int, int, float, float]] = []  # (job, slot, width, slope) per x
    for n, j in enumerate(cands):
        for i, (t0, t1) in enumerate(slots):
            if t0 >= j.arrival_s - EPS and t1 <= j.deadline_s + EPS:
                cols += [(n, i, w, s) for w, s in pieces[j.key]]
    nx, nj = len(cols), len(cands)
    # Rows: one capacity row per (slot, kind), then one progress row per job.
    kinds = sorted({j.mode for j in cands})
    cap_row = {(i, k): n for n, (i, k) in enumerate(
        (i, k) for i in range(len(slots)) for k in kinds)}  # fmt: skip
    job_row0 = len(cap_row)
    rows: list[int] = []
    cols_: list[int] = []
    vals: list[float] = []
    for c, (n, i, _w, s) in enumerate(cols):
        j = cands[n]
        rows += [cap_row[(i, j.mode)], job_row0 + n]
        cols_ += [c, c]
        # steps in this slot per unit of x, as a fraction of the job's steps (well scaled)
        vals += [1.0, s * (slots[i][1] - slots[i][0]) / j.steps]
    rows += [job_row0 + n for n in range(nj)]
    cols_ += [nx + n for n in range(nj)]
    vals += [-1.0] * nj
    nrows = job_row0 + nj
    a = coo_matrix((vals, (rows, cols_)), shape=(nrows, nx + nj)).tocsr()
    lb = np.array([-np.inf] * job_row0 + [0.0] * nj)
    ub = np.array([capacity.get(k, 0.0) for (_, k) in cap_row] + [np.inf] * nj)
    base = LinearConstraint(a, lb, ub)
    bounds = Bounds(np.zeros(nx + nj), np.array([w for _, _, w, _ in cols] + [1.0] * nj))
    integrality = np.array([0] * nx + [1] * nj)
    return _Program(cands, slots, cols, nrows, base, bounds, integrality)


def _most_met(program: _Program, time_limit_s: float) -> tuple[int, int, bool, float]:
    """(a) The most jobs met: found, its proven upper bound, whether they are equal (within
    the gap), and the solve time (s)."""
    import numpy as np
    from scipy.optimize import milp

    nx, nj = program.nx, program.nj
    base, bounds, integrality = program.base, program.bounds, program.integrality
    t0 = time.perf_counter()
    c_met = np.array([0.0] * nx + [-1.0] * nj)
    res = milp(c_met, integrality=integrality, bounds=bounds, constraints=[base],
               options={"time_limit": time_limit_s, "mip_rel_gap": MET_GAP})  # fmt: skip
    met_s = time.perf_counter() - t0
    if res.x is None:
        raise RuntimeError(f"clairvoyant bound (a): {res.message}")
    found = round(-res.fun)
    dual = getattr(res, "mip_dual_bound", None)
    met_ub = found if dual is None else math.floor(-dual + 1e-6)
    proven = res.status == 0 and met_ub == found
    return found, met_ub, proven, met_s


def _least_resource(
    program: _Program, found: int, time_limit_s: float
) -> tuple[float, float, tuple[str, ...], float]:
    """(b) The least resource-seconds that still meets ``found`` jobs: the optimum found, its
    lower bound, the met jobs' keys, and the solve time (s)."""
    import numpy as np
    from scipy.optimize import LinearConstraint, milp
    from scipy.sparse import coo_matrix

    cols, slots, cands = program.cols, program.slots, program.cands
    nx, nj = program.nx, program.nj
    base, bounds, integrality = program.base, program.bounds, program.integrality
    t0 = time.perf_counter()
    lens = [slots[i][1] - slots[i][0] for _, i, _, _ in cols]
    c_res = np.array(lens + [0.0] * nj)
    count = LinearConstraint(
        coo_matrix(([1.0] * nj, ([0] * nj, range(nx, nx + nj))), shape=(1, nx + nj)).tocsr(),
        found,
        np.inf,
    )
    res2 = milp(c_res, integrality=integrality, bounds=bounds, constraints=[base, count],
                options={"time_limit": time_limit_s, "mip_rel_gap": RESOURCE_GAP})  # fmt: skip
    res_s = time.perf_counter() - t0
    if res2.x is None:
        raise RuntimeError(f"clairvoyant bound (b): {res2.message}")
    dual2 = getattr(res2, "mip_dual_bound", None)
    met_keys = tuple(sorted(cands[n].key for n in range(nj) if res2.x[nx + n] > 0.5))
    resource_lower_s = float(res2.fun if dual2 is None else dual2)
    return float(res2.fun), resource_lower_s, met_keys, res_s
