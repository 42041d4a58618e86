"""A SIMULATION of many training jobs on a cluster, driven by the real planner.

``make bench-cluster`` runs it: traces of hundreds to thousands of jobs arriving on tens to
hundreds of CPU and GPU nodes, each policy of :mod:`decor.core.planner` side by side on the same
traces, and writes ``docs/benchmarks/cluster/`` (results.json, plots, README.md).

What is real and what is simulated:

* **real**: ``decor.core.planner.plan`` itself, called once per period with every active job's
  demand, exactly as the operator calls it; its grants are applied as given.
* **simulated**: the jobs. Each is a *plant* whose seconds per step at an allocation ``u``
  follow a known curve (``Amdahl``: a / u + b, or ``Saturating``), optionally with noise
  (each period's speed multiplied by a log-normal factor). The three reference workloads'
  curves are fitted to their measured profiles (docs/benchmarks/results.json: steps/s at
  0.5, 1, 1.5, 2 cores) and stretched so that 2 profile cores map to the job's max; the
  rest are synthetic concave (Amdahl, serial fraction 2-30 %) and saturating curves.
* **the need**: not the law's fit (``control.decide``) but the *exact* need of each job
  from its own curve, aimed the way the law aims (``control.Settings`` defaults): at the
  deadline minus the law's safety margin (a CPU job on a noisy plant: twice the noise of one
  period, sigma x the period, as the law measures it: ``control.aimed``), CPU jobs keeping
  the law's reserve (a fraction of the time left before the end game); the smallest
  allocation (10 millicores, or whole GPUs, counting the restart a change costs) that
  finishes the remaining steps so. This is the
  need the law converges to on an exact plant, and it keeps a 1,000-job trace cheap.
* GPU jobs lose ``restart_cost_s`` of progress at every change of GPU count (and on a
  resume after a preemption); CPU resizes are in place and free.
* Deadlines: arrival + U(0.5, 1.5) x the job's duration at its max (ElasticFlow's rule):
  jobs drawn below 1.0 cannot be met at all. A share of jobs is best-effort (no deadline).
* Admission policies (decor, elasticflow) leave a job queued while its need does not fit;
  the simulated user withdraws a queued job once even its max could not meet the deadline
  (``dropped``). Policies without admission run every job to its end, late or not.
* **the bound**: on every trace with exact plants (noise 0), a clairvoyant optimum
  (``bench/clairvoyant.py``, a MILP that knows every arrival in advance): the most deadlines
  any schedule could meet, the least resource-seconds that meets them, and every policy's
  ratio to both. Its simplifications all relax, so it is a true upper bound on met deadlines.

Run ``python -m bench.cluster_sim --help``; ``--quick`` runs two small traces in seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import quantiles
from typing import Any

from decor.api import vocabulary
from decor.core import control, jobperiod
from decor.core import planner as pl

from bench import clairvoyant, plotting

ROOT = Path(__file__).resolve().parents[1]

OUT_DIR = ROOT / "docs" / "benchmarks" / "cluster"
PROFILES_JSON = ROOT / "docs" / "benchmarks" / "results.json"
POLICIES = (
    pl.POLICY_NONE,
    pl.POLICY_PROPORTIONAL,
    pl.POLICY_EDF,
    pl.POLICY_ELASTICFLOW,
    pl.POLICY_DECOR,
)
PROFILE_MAX_CORES = 2.0  # the reference profiles were measured up to 2 cores
CPU_QUANTUM_CORES = 0.01  # the law's CPU quantum
DEADLINE_FACTOR_RANGE = (0.5, 1.5)  # ElasticFlow's rule: arrival + U(0.5, 1.5) x duration
LATE_TOLERANCE_RATIO = 0.01  # "no admitted job late by more than 1 %" of its relative deadline
# Targets (README.md reports each one).
TARGET_VS_PROPORTIONAL_RATIO = 1.2
TARGET_PLANNER_CPU_MS = 100.0
TARGET_PLANNER_GPU_MS = 50.0
TARGET_VS_BOUND_RATIO = 0.95  # decor's met deadlines over the clairvoyant optimum's
TARGET_GPU_DEVIATION_PCT = 0.5  # decor's GPU jobs on exact plants, mean |deviation|
BOUND_POLICY = "clairvoyant"  # the bound's records: kind "bound", policy "clairvoyant"
SCALE_JOBS = 1000
SCALE_NODES = 100
SCALE_CALLS = 30  # plan() calls timed per scale snapshot


# ---------------------------------------------------------------------------------------
# Plants: speed curves


@dataclass(frozen=True)
class Amdahl:
    """Seconds per step ``a / u + b`` at allocation ``u`` (a serial part b, a parallel a)."""

    a: float
    b: float

    def __call__(self, u: float) -> float:
        return self.a / u + self.b

    def allocation_for(self, step_s: float) -> float:
        """The allocation at which a step takes ``step_s`` (inf if none)."""
        return math.inf if step_s <= self.b else self.a / (step_s - self.b)


@dataclass(frozen=True)
class Saturating:
    """Steps per second ``rate_max x (1 - exp(-u / k_units))``: fast at first, then flat."""

    rate_max: float
    k_units: float

    def __call__(self, u: float) -> float:
        return 1.0 / (self.rate_max * -math.expm1(-u / self.k_units))

    def allocation_for(self, step_s: float) -> float:
        ratio = 1.0 / (step_s * self.rate_max)
        return math.inf if ratio >= 1.0 else -self.k_units * math.log1p(-ratio)


Curve = Amdahl | Saturating


def fit_amdahl(points: Sequence[tuple[float, float]]) -> Amdahl:
    """Least squares of step time on 1 / cores over (cores, steps/s) points; a, b >= 0."""
    xs = [1.0 / c for c, _ in points]
    ys = [1.0 / r for _, r in points]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    a = max(1e-9, sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx)
    return Amdahl(a=a, b=max(0.0, my - a * mx))


def reference_curves(path: Path = PROFILES_JSON) -> dict[str, Amdahl]:
    """The three reference workloads' curves, fitted to their measured profiles."""
    profiles = json.loads(path.read_text())["profiles"]
    return {
        name: fit_amdahl([(p["cores"], p["steps_per_s"]) for p in prof["curve"]])
        for name, prof in sorted(profiles.items())
    }


# ---------------------------------------------------------------------------------------
# Traces


@dataclass(frozen=True)
class TraceSpec:
    """A trace: how many jobs and nodes, how loaded, and what kind of jobs.

    ``load`` is the offered work (each job's max x its duration at max) over the cluster's
    capacity during the arrival span: above 1 the cluster cannot run every job at max."""

    name: str
    jobs: int
    cpu_nodes: int
    gpu_nodes: int
    load: float
    gpu_share: float  # fraction of jobs that are GPU jobs
    noise_sigma: float = 0.0  # log-normal sigma of each period's speed factor; 0: exact
    best_effort_share: float = 0.2
    cores_per_node: float = 32.0
    gpus_per_node: float = 8.0
    period_s: float = 10.0  # the operator's period at a thousand jobs (DESIGN.md, Scale)
    priority_share: float = 0.0  # fraction of deadline jobs with priority 1 (others 0)
    contended: bool = True
    seed: int = 1


@dataclass
class SimJob:
    """One simulated job: its fixed description, then its state as the simulation runs."""

    key: str
    mode: str
    min_allocation: float
    max_allocation: float
    steps_total: float
    arrival_s: float
    deadline_s: float | None
    curve: Curve
    restart_cost_s: float = 0.0
    priority: int = 0
    # the root mean square of how far one period's seconds fall from the curve's, as the law
    # measures it (``control.State.interval_miss_s2``): the noise sigma times the period
    interval_miss_s: float = 0.0
    # state
    steps_done: float = 0.0
    allocation: float = 0.0
    node: str | None = None
    admitted: bool = False
    ever_admitted: bool = False
    finish_s: float | None = None
    dropped: bool = False
    pause_s: float = 0.0  # restart time still to sit out before steps resume
    allocations: list[float] = field(default_factory=list)
    steps_at_window_end: float | None = None  # steps done when the trace's window closed
    restarts: int = 0  # GPU: changes of count after the first step (each a restart)
    held_s: float = 0.0  # allocation x seconds held (core- or GPU-seconds)
    run_start_s: float | None = None  # when it first ran

    @property
    def active(self) -> bool:
        return self.finish_s is None and not self.dropped


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def make_trace(spec: TraceSpec, refs: dict[str, Amdahl]) -> tuple[list[SimJob], list[pl.Node]]:
    """Jobs (Poisson arrivals at the rate that gives ``spec.load``) and nodes."""
    rng = random.Random(spec.seed)
    ref_names = sorted(refs)
    drafts = []
    for i in range(spec.jobs):
        gpu = rng.random() < spec.gpu_share
        duration_s = _log_uniform(rng, 600.0, 3 * 3600.0)
        if gpu:
            max_a = float(rng.choice((1, 2, 4, 8)))
            min_a = 1.0
            serial = rng.uniform(0.05, 0.2)
            curve: Curve = Amdahl(a=1.0 - serial, b=serial)
            restart_s = rng.uniform(30.0, 120.0)
        else:
            max_a = float(rng.choice((2, 4, 8, 16)))
            min_a = 0.5
            kind = rng.random()
            stretch = max_a / PROFILE_MAX_CORES
            if kind < 0.5:  # a reference workload's profile, stretched to this max
                ref = refs[ref_names[i % len(ref_names)]]
                curve = Amdahl(a=ref.a * stretch, b=ref.b)
            elif kind < 0.8:
                serial = rng.uniform(0.02, 0.3)
                curve = Amdahl(a=1.0 - serial, b=serial / max_a)
            else:
                curve = Saturating(rate_max=1.0, k_units=max_a / rng.uniform(1.5, 4.0))
            restart_s = 0.0
        steps = duration_s / curve(max_a)
        drafts.append((gpu, min_a, max_a, steps, duration_s, curve, restart_s))
    capacity = spec.cpu_nodes * spec.cores_per_node + spec.gpu_nodes * spec.gpus_per_node
    work = sum(d[2] * d[4] for d in drafts)  # unit-seconds at max
    span_s = work / (spec.load * capacity)
    rate_per_s = spec.jobs / span_s
    jobs, t = [], 0.0
    for i, (gpu, min_a, max_a, steps, duration_s, curve, restart_s) in enumerate(drafts):
        t += rng.expovariate(rate_per_s)
        best_effort = rng.random() < spec.best_effort_share
        deadline = None if best_effort else t + rng.uniform(*DEADLINE_FACTOR_RANGE) * duration_s
        priority = 1 if deadline is not None and rng.random() < spec.priority_share else 0
        jobs.append(
            SimJob(
                key=f"t/{'g' if gpu else 'c'}{i:05d}",
                mode="gpu" if gpu else "cpu",
                min_allocation=min_a,
                max_allocation=max_a,
                steps_total=steps,
                arrival_s=t,
                deadline_s=deadline,
                curve=curve,
                restart_cost_s=restart_s,
                priority=priority,
                interval_miss_s=spec.noise_sigma * spec.period_s,
            )
        )
    return jobs, _nodes(spec)


def _nodes(spec: TraceSpec) -> list[pl.Node]:
    nodes = [pl.Node(f"cpu-{i:03d}", spec.cores_per_node) for i in range(spec.cpu_nodes)]
    return nodes + [
        pl.Node(f"gpu-{i:03d}", spec.cores_per_node, spec.gpus_per_node)
        for i in range(spec.gpu_nodes)
    ]


# ---------------------------------------------------------------------------------------
# The exact need and the simulation loop


def _law(job: SimJob) -> control.Settings:
    """The law's settings for ``job`` (its defaults: safety margin, reserve, end game), a
    CPU job aiming as early as the law would on its plant's noise (``control.aimed``)."""
    assert job.deadline_s is not None
    law = control.Settings(
        mode=job.mode,
        min_allocation=job.min_allocation,
        max_allocation=job.max_allocation,
        start_s=job.arrival_s,
        deadline_s=job.deadline_s,
    )
    return control.aimed(law, job.interval_miss_s**2)


def exact_need(job: SimJob, now_s: float) -> float:
    """The smallest allocation that finishes ``job`` where the law aims, on its exact curve:
    by the deadline minus the law's safety margin, a CPU job keeping the law's reserve
    (quantized up; a GPU job's change of count paying its restart); max if none does, and
    max for a best-effort job."""
    if job.deadline_s is None:
        return job.max_allocation
    law = _law(job)
    remaining = job.steps_total - job.steps_done
    horizon_s = law.target_s - now_s - job.pause_s
    if horizon_s <= 0:
        return job.max_allocation
    if job.mode == "gpu":
        reserve_s = law.gpu_shrink_reserve_ratio * horizon_s
        return _gpu_need(job, remaining, horizon_s, reserve_s)
    budget_s = control.planned_time_s(horizon_s, law)
    u = job.curve.allocation_for(budget_s / remaining)
    if u > job.max_allocation:
        return job.max_allocation
    u = math.ceil(u / CPU_QUANTUM_CORES - 1e-6) * CPU_QUANTUM_CORES
    return min(max(u, job.min_allocation), job.max_allocation)


def _gpu_need(job: SimJob, remaining: float, horizon_s: float, reserve_s: float) -> float:
    """The law's GPU rule (``control``) on the exact curve: the smallest count that makes
    it, a change paying its restart (none does: the earliest finish, restart included). One
    that already makes it shrinks only when ``control.shrink_pays`` and the smaller count
    keeps the law's small GPU reserve (no restart back after a slow-down)."""
    current = job.allocation
    restarts = current > 0 and job.steps_done > 0

    def finish_s(g: float) -> float:
        restart_s = job.restart_cost_s if restarts and g != current else 0.0
        return remaining * job.curve(g) + restart_s

    counts = [float(g) for g in range(max(1, math.ceil(job.min_allocation)),
                                      int(job.max_allocation) + 1)]  # fmt: skip
    meeting = [g for g in counts if finish_s(g) <= horizon_s]
    if not meeting:
        return min(counts, key=finish_s)
    if restarts and current in meeting:
        pays = [g for g in meeting if g < current
                and control.shrink_pays(current, g, remaining * job.curve(g), job.restart_cost_s)
                and finish_s(g) + reserve_s <= horizon_s]  # fmt: skip
        return min(pays) if pays else current
    return meeting[0]


def _demand(job: SimJob, now_s: float) -> pl.Demand:
    """The job's demand, built as the operator's and the local runtime's are
    (``jobperiod.demand``), with the exact need and curve in place of the law's."""
    return jobperiod.demand(
        key=job.key,
        mode=job.mode,
        need=exact_need(job, now_s),
        min_allocation=job.min_allocation,
        max_allocation=job.max_allocation,
        current=job.allocation,
        steps_remaining=job.steps_total - job.steps_done,
        deadline_s=job.deadline_s,
        arrival_s=job.arrival_s,
        priority=job.priority,
        admitted=job.admitted,
        node=job.node,
        step_time_s=job.curve,
        restart_cost_s=job.restart_cost_s,
    )


@dataclass
class SimResult:
    jobs: list[SimJob]
    planner_ms: list[float]
    resource_seconds: float
    deadline_resource_seconds: float
    periods: int


def simulate(
    jobs: list[SimJob], nodes: Sequence[pl.Node], spec: TraceSpec, policy: str
) -> SimResult:
    """Run the trace under ``policy`` until every job has finished or been withdrawn (or a
    horizon of twice the last deadline)."""
    settings = pl.PlannerSettings(policy=policy, period_s=spec.period_s)
    admission = policy in (pl.POLICY_DECOR, pl.POLICY_ELASTICFLOW)
    rng = random.Random(spec.seed * 7919 + 1)
    pending = sorted(jobs, key=lambda j: j.arrival_s)
    last = max((j.deadline_s or j.arrival_s) for j in jobs)
    window_end_s = window_end(jobs)
    closed = False
    horizon_s = 2.0 * last + spec.period_s
    active: list[SimJob] = []
    planner_ms: list[float] = []
    resource_s = deadline_resource_s = 0.0
    now, nxt, periods = 0.0, 0, 0
    while (nxt < len(pending) or active) and now < horizon_s:
        while nxt < len(pending) and pending[nxt].arrival_s <= now:
            active.append(pending[nxt])
            nxt += 1
        if admission:  # the user withdraws a queued job that can no longer make it
            for j in active:
                if not j.admitted and j.deadline_s is not None and j.allocation == 0:
                    at_max_s = (j.steps_total - j.steps_done) * j.curve(j.max_allocation)
                    if now + at_max_s > j.deadline_s:
                        j.dropped = True
            active = [j for j in active if j.active]
        if active:
            demands = [_demand(j, now) for j in active]
            t0 = time.perf_counter()
            grants = pl.plan(demands, nodes, now, settings).grants
            planner_ms.append((time.perf_counter() - t0) * 1000.0)
            for j in active:
                _apply(j, grants[j.key])
            for j in active:
                if j.run_start_s is None and j.allocation > 0:
                    j.run_start_s = now
                used_s = _advance(j, now, spec.period_s, rng, spec.noise_sigma)
                resource_s += j.allocation * used_s
                j.held_s += j.allocation * used_s
                if j.deadline_s is not None:
                    deadline_resource_s += j.allocation * used_s
            active = [j for j in active if j.active]
        now += spec.period_s
        periods += 1
        if not closed and now >= window_end_s:
            closed = True
            for j in jobs:
                j.steps_at_window_end = j.steps_done
    return SimResult(jobs, planner_ms, resource_s, deadline_resource_s, periods)


def window_end(jobs: Sequence[SimJob]) -> float:
    """When best-effort work is counted: the last arrival of a deadline job (after it, the
    cluster drains and every policy would finish every best-effort job eventually)."""
    return max((j.arrival_s for j in jobs if j.deadline_s is not None), default=0.0)


def _apply(job: SimJob, grant: pl.Grant) -> None:
    new = grant.allocation
    if job.mode == "gpu" and new > 0 and job.steps_done > 0 and new != job.allocation:
        job.pause_s = job.restart_cost_s  # checkpoint, restart at the new count
        job.restarts += 1
    job.allocation = new
    job.node = grant.node if new > 0 else None
    job.admitted = grant.verdict in (vocabulary.VERDICT_ADMITTED, vocabulary.VERDICT_SHORTED)
    job.ever_admitted = job.ever_admitted or (job.admitted and job.deadline_s is not None)
    job.allocations.append(new)


def _advance(job: SimJob, now: float, period_s: float, rng: random.Random, sigma: float) -> float:
    """Run ``job`` for one period at its allocation; returns the seconds it held it."""
    if job.allocation <= 0:
        return 0.0
    paused = min(job.pause_s, period_s)
    job.pause_s -= paused
    factor = math.exp(rng.gauss(-sigma * sigma / 2, sigma)) if sigma > 0 else 1.0
    step_s = job.curve(job.allocation) / factor
    steps = (period_s - paused) / step_s
    remaining = job.steps_total - job.steps_done
    if steps >= remaining - 1e-9:
        held_s = paused + remaining * step_s
        job.finish_s = now + held_s
        job.steps_done = job.steps_total
        return held_s
    job.steps_done += steps
    return period_s


# ---------------------------------------------------------------------------------------
# Metrics and the scale measurement


def _pcts(ms: Sequence[float]) -> tuple[float | None, float | None]:
    if not ms:
        return None, None
    if len(ms) == 1:
        return ms[0], ms[0]
    q = quantiles(ms, n=100, method="inclusive")
    return round(q[49], 3), round(q[98], 3)


def summarize(spec: TraceSpec, policy: str, result: SimResult, nodes: int) -> dict[str, Any]:
    """One results.json record for (trace, policy)."""
    dl = [j for j in result.jobs if j.deadline_s is not None]
    met = [j for j in dl if j.finish_s is not None and j.finish_s <= j.deadline_s + 1e-6]  # type: ignore[operator]
    admitted = [j for j in dl if j.ever_admitted]
    met_admitted = [j for j in admitted if j in met]
    met_ids = {id(j) for j in met}

    def late(j: SimJob) -> bool:
        assert j.deadline_s is not None
        allowed = j.deadline_s + LATE_TOLERANCE_RATIO * (j.deadline_s - j.arrival_s)
        return j.finish_s is None or j.finish_s > allowed

    be = [j for j in result.jobs if j.deadline_s is None]
    p50, p99 = _pcts(result.planner_ms)
    return {
        "trace": spec.name,
        "policy": policy,
        "jobs": len(result.jobs),
        "nodes": nodes,
        "deadline_jobs": len(dl),
        "met": len(met),
        "met_ratio": round(len(met) / len(dl), 4) if dl else None,
        "admitted": len(admitted),
        "admitted_met_ratio": round(len(met_admitted) / len(admitted), 4) if admitted else None,
        "late_admitted": sum(1 for j in admitted if late(j)),
        "late_within_tolerance": sum(1 for j in admitted if id(j) not in met_ids and not late(j)),
        "dropped": sum(1 for j in dl if j.dropped),
        "high_priority_jobs": sum(1 for j in dl if j.priority > 0),
        "high_priority_met": sum(1 for j in met if j.priority > 0),
        "resource_seconds": round(result.resource_seconds, 1),
        "deadline_resource_seconds": round(result.deadline_resource_seconds, 1),
        "best_effort_work": round(
            sum(
                (j.steps_at_window_end if j.steps_at_window_end is not None else j.steps_done)
                / j.steps_total
                for j in be
            ),
            3,
        ),  # fmt: skip
        "best_effort_jobs": len(be),
        "planner_ms_p50": p50,
        "planner_ms_p99": p99,
        "periods": result.periods,
        "noise_sigma": spec.noise_sigma,
        "contended": spec.contended,
        "exact_plants": spec.noise_sigma == 0,
        **gpu_precision(dl),
    }


def _fractional_gpu_s(job: SimJob) -> float | None:
    """GPU-seconds of ``job`` at its exact fractional need: the one constant (not whole)
    count that runs every step from its first period to its deadline; None if that is
    outside its bounds (less than its min GPUs: whole counts cannot finish it later; more
    than its max: nothing meets the deadline) or it never ran."""
    if job.run_start_s is None or job.deadline_s is None:
        return None
    span_s = job.deadline_s - job.run_start_s
    u = job.curve.allocation_for(span_s / job.steps_total) if span_s > 0 else math.inf
    inside = job.min_allocation <= u <= job.max_allocation
    return u * span_s if inside else None


def two_count_gpu_s(job: SimJob) -> float | None:
    """The least GPU-seconds of a plan that runs every step of ``job`` from its first period
    with two whole counts and one switch between them (in either order; the second count's
    GPUs held through the restart), finishing exactly at its deadline; None if no such plan
    exists within its bounds."""
    if job.run_start_s is None or job.deadline_s is None:
        return None
    span_s, steps, restart_s = job.deadline_s - job.run_start_s, job.steps_total, job.restart_cost_s
    counts = range(max(1, math.ceil(job.min_allocation)), int(job.max_allocation) + 1)
    best = None
    for a, b in ((a, b) for a in counts for b in counts if a != b):
        step_a, step_b = job.curve(float(a)), job.curve(float(b))
        if step_a == step_b:
            continue
        # t_a + restart + t_b = span, t_a / step_a + t_b / step_b = steps
        t_a = (span_s - restart_s - steps * step_b) / (1.0 - step_b / step_a)
        t_b = (steps - t_a / step_a) * step_b
        if t_a > 0 and t_b > 0:
            gpu_s = a * t_a + b * (restart_s + t_b)
            best = gpu_s if best is None else min(best, gpu_s)
    return best


def gpu_precision(deadline_jobs: Sequence[SimJob]) -> dict[str, Any]:
    """How closely GPU deadline jobs hit their deadlines, over those admitted and finished
    whose fractional need from their first period lies within their bounds:
    ``gpu_deviation_mean_pct`` mean |finish - deadline| in % of the relative deadline,
    ``gpu_seconds_vs_fractional_pct`` their GPU-seconds over the same jobs' at their exact
    fractional need (:func:`_fractional_gpu_s`), less 100, and restarts per job (median, max).
    ``gpu_deviation_switched_mean_pct`` is the mean over the jobs that changed count: the
    others ran at one whole count and finish early by the gap between that count's speed and
    the fractional need's. ``gpu_unswitched_jobs`` counts those, and
    ``gpu_unswitched_a_switch_paid`` those of them for which a plan of two counts that ends at
    the deadline (:func:`two_count_gpu_s`) would have held fewer GPU-seconds than they did: 0
    says that every early finish was the cheapest a whole-count plan could do."""
    rows = []
    for j in deadline_jobs:
        if j.mode != "gpu" or not j.ever_admitted or j.finish_s is None:
            continue
        frac_s = _fractional_gpu_s(j)
        if frac_s is None:
            continue
        assert j.deadline_s is not None
        dev = abs(j.finish_s - j.deadline_s) / (j.deadline_s - j.arrival_s) * 100.0
        mixed_s = None if j.restarts else two_count_gpu_s(j)
        rows.append((dev, j.held_s, frac_s, j.restarts, mixed_s is not None and mixed_s < j.held_s))
    if not rows:
        return {"gpu_jobs_measured": 0}
    restarts = sorted(r[3] for r in rows)
    switched = [r for r in rows if r[3] > 0]
    return {
        "gpu_jobs_measured": len(rows),
        "gpu_deviation_mean_pct": round(sum(r[0] for r in rows) / len(rows), 3),
        "gpu_deviation_max_pct": round(max(r[0] for r in rows), 3),
        "gpu_seconds_vs_fractional_pct": round(
            (sum(r[1] for r in rows) / sum(r[2] for r in rows) - 1.0) * 100.0, 2
        ),
        "gpu_deviation_switched_mean_pct": round(sum(r[0] for r in switched) / len(switched), 3)
        if switched
        else None,  # fmt: skip
        "gpu_restarts_median": restarts[len(restarts) // 2],
        "gpu_restarts_max": restarts[-1],
        "gpu_unswitched_jobs": len(rows) - len(switched),
        "gpu_unswitched_a_switch_paid": sum(1 for r in rows if r[4]),
    }


def scale_snapshot(
    jobs_n: int, nodes_n: int, gpu: bool, seed: int = 5
) -> tuple[list[pl.Demand], list[pl.Node]]:
    """A contended moment: ``jobs_n`` jobs on ``nodes_n`` nodes, most admitted and placed,
    some new, a fifth best-effort; needs add up to more than the cluster holds. With ``gpu``
    a third of the nodes and jobs are GPU ones."""
    rng = random.Random(seed)
    gpu_nodes = nodes_n // 3 if gpu else 0
    nodes = [pl.Node(f"cpu-{i:03d}", 32.0) for i in range(nodes_n - gpu_nodes)]
    nodes += [pl.Node(f"gpu-{i:03d}", 32.0, 8.0) for i in range(gpu_nodes)]
    demands = []
    for i in range(jobs_n):
        is_gpu = gpu and i % 3 == 0
        pool = [n for n in nodes if (n.gpus > 0) == is_gpu]
        max_a = float(rng.choice((1, 2, 4, 8))) if is_gpu else float(rng.choice((2, 4, 8, 16)))
        serial = rng.uniform(0.02, 0.3)
        curve = Amdahl(a=1.0 - serial, b=serial)
        best_effort = rng.random() < 0.2
        admitted = not best_effort and rng.random() < 0.7
        need = (
            float(rng.randint(1, int(max_a))) if is_gpu else round(rng.uniform(0.5, max_a * 0.6), 2)
        )
        steps = rng.uniform(500.0, 5000.0)
        demands.append(
            pl.Demand(
                key=f"s/{i:05d}",
                mode="gpu" if is_gpu else "cpu",
                need=need,
                min_allocation=1.0 if is_gpu else 0.5,
                max_allocation=max_a,
                current=need if admitted else 0.0,
                steps_remaining=steps,
                deadline_s=None if best_effort else steps * curve(need) * rng.uniform(1.0, 1.5),
                arrival_s=float(i),
                priority=1 if rng.random() < 0.05 else 0,
                admitted=admitted,
                node=rng.choice(pool).name
                if admitted or (best_effort and rng.random() < 0.5)
                else None,
                step_time_s=curve,
                restart_cost_s=rng.uniform(30.0, 120.0) if is_gpu else 0.0,
            )
        )
    return demands, nodes


def time_planner(
    demands: Sequence[pl.Demand], nodes: Sequence[pl.Node], policy: str, calls: int
) -> list[float]:
    """Milliseconds per ``plan`` call over ``calls`` calls (the input's order shuffled each
    time, so no call benefits from a sorted input). What exists before the calls is kept out
    of garbage collection, as the operator keeps what exists before it serves
    (``handlers._freeze_what_lives_forever``): unfrozen, the traces simulated before left a
    heap whose full collection, inside one of the 30 calls, took 200-280 ms."""
    settings = pl.PlannerSettings(policy=policy)
    rng = random.Random(3)
    out = []
    items = list(demands)
    gc.collect()
    gc.freeze()
    try:
        for _ in range(calls):
            rng.shuffle(items)
            t0 = time.perf_counter()
            pl.plan(items, nodes, 0.0, settings)
            out.append((time.perf_counter() - t0) * 1000.0)
    finally:
        gc.unfreeze()
    return out


# ---------------------------------------------------------------------------------------
# Traces, targets, report


def traces(quick: bool) -> list[TraceSpec]:
    if quick:
        return [
            TraceSpec(
                "quick-cpu",
                jobs=60,
                cpu_nodes=4,
                gpu_nodes=0,
                load=1.5,
                gpu_share=0.0,
                period_s=30.0,
            ),
            TraceSpec(
                "quick-gpu",
                jobs=40,
                cpu_nodes=0,
                gpu_nodes=3,
                load=1.5,
                gpu_share=1.0,
                period_s=30.0,
            ),
        ]
    return [
        TraceSpec("cpu-light", jobs=300, cpu_nodes=20, gpu_nodes=0, load=0.5, gpu_share=0.0,
                  contended=False),
        TraceSpec("cpu-contended", jobs=1000, cpu_nodes=50, gpu_nodes=0, load=1.5, gpu_share=0.0),
        TraceSpec("cpu-contended-noisy", jobs=1000, cpu_nodes=50, gpu_nodes=0, load=1.5,
                  gpu_share=0.0, noise_sigma=0.05),
        TraceSpec("gpu-contended", jobs=400, cpu_nodes=0, gpu_nodes=16, load=1.5, gpu_share=1.0),
        TraceSpec("mixed-100-nodes", jobs=1000, cpu_nodes=80, gpu_nodes=20, load=1.2,
                  gpu_share=0.3, noise_sigma=0.03, priority_share=0.1),
        # Small traces, a few nodes: the clairvoyant bound at a load where it binds.
        TraceSpec("small-cpu", jobs=30, cpu_nodes=1, gpu_nodes=0, load=1.5, gpu_share=0.0),
        TraceSpec("small-cpu-tight", jobs=30, cpu_nodes=1, gpu_nodes=0, load=3.0, gpu_share=0.0),
        TraceSpec("small-gpu", jobs=30, cpu_nodes=0, gpu_nodes=1, load=1.5, gpu_share=1.0),
        TraceSpec("small-gpu-tight", jobs=30, cpu_nodes=0, gpu_nodes=1, load=3.0, gpu_share=1.0),
        TraceSpec("small-mixed", jobs=40, cpu_nodes=2, gpu_nodes=1, load=2.0, gpu_share=0.3),
    ]  # fmt: skip


@dataclass(frozen=True)
class Target:
    name: str
    met: bool | None  # None: not measured in this run
    measured: str


def targets(records: Sequence[dict[str, Any]], note: str = "") -> list[Target]:
    """The benchmark's targets, each with what was measured (``note``: how the run was made,
    beside the planner times)."""
    by = {(r["trace"], r["policy"]): r for r in records}
    sims = sorted({r["trace"] for r in records if r.get("kind") == "simulation"})
    out = []
    rows = []
    ok = True
    for t in sims:
        ours, ef = by.get((t, pl.POLICY_DECOR)), by.get((t, pl.POLICY_ELASTICFLOW))
        if ours and ef:
            rows.append(f"{t}: {ours['met']} vs {ef['met']}")
            ok = ok and ours["met"] >= ef["met"]
    out.append(Target("decor meets >= as many deadlines as elasticflow on every trace",
                      ok if rows else None, "; ".join(rows)))  # fmt: skip
    rows, ok = [], True
    for t in sims:
        ours, nn = by.get((t, pl.POLICY_DECOR)), by.get((t, pl.POLICY_PROPORTIONAL))
        if ours and nn and ours["contended"]:
            ratio = ours["met"] / nn["met"] if nn["met"] else math.inf
            rows.append(f"{t}: {ratio:.2f}x")
            ok = ok and ratio >= TARGET_VS_PROPORTIONAL_RATIO
    out.append(Target(f"decor meets >= {TARGET_VS_PROPORTIONAL_RATIO}x as many as decor-nn on "
                      "contended traces", ok if rows else None, "; ".join(rows)))  # fmt: skip
    rows, ok = [], True
    for t in sims:
        ours = by.get((t, pl.POLICY_DECOR))
        if ours and ours["exact_plants"]:
            rows.append(f"{t}: {ours['late_admitted']}")
            ok = ok and ours["late_admitted"] == 0
    out.append(Target("no admitted job late by more than 1 % on exact plants (decor)",
                      ok if rows else None, "; ".join(rows)))  # fmt: skip
    rows, ok = [], True
    for b in (r for r in records if r.get("kind") == "bound"):
        ratio = b["vs_bound"].get(pl.POLICY_DECOR, {}).get("met_ratio")
        if ratio is not None:
            rows.append(f"{b['trace']}: {ratio:.3f}")
            ok = ok and ratio >= TARGET_VS_BOUND_RATIO
    out.append(Target(f"decor meets >= {TARGET_VS_BOUND_RATIO} x the clairvoyant optimum's "
                      "deadlines on every bounded trace", ok if rows else None,
                      "; ".join(rows)))  # fmt: skip
    out.append(_gpu_deviation_target(by, sims))
    for kind, limit in (("cpu", TARGET_PLANNER_CPU_MS), ("gpu", TARGET_PLANNER_GPU_MS)):
        r = by.get((f"scale-{SCALE_JOBS}x{SCALE_NODES}-{kind}", pl.POLICY_DECOR))
        out.append(
            Target(
                f"planner p99 for {SCALE_JOBS} jobs on {SCALE_NODES} nodes < {limit:g} ms ({kind})",
                None if r is None else r["planner_ms_p99"] < limit,
                ""
                if r is None
                else f"p50 {r['planner_ms_p50']} ms, p99 {r['planner_ms_p99']} ms"
                + (f" ({note})" if note else ""),
            )
        )
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def write_report(out: Path, meta: dict[str, Any], records: Sequence[dict[str, Any]]) -> None:
    """results.json, plots and README.md under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(
        json.dumps({**meta, "records": list(records)}, indent=1) + "\n"
    )
    plots = _plots(out, records)
    (out / "README.md").write_text(render_readme(meta, records, plots))


def render_readme(
    meta: dict[str, Any], records: Sequence[dict[str, Any]], plots: Sequence[str]
) -> str:
    """README.md (Markdown): what the run is, the targets, the clairvoyant bound, a table
    per trace, the ``plots`` (file names) and what the columns mean."""
    note = meta.get("note") or ""
    lines = _readme_header(meta)
    lines += _targets_table(records, note)
    lines += _bound_section(records)
    for trace in dict.fromkeys(r["trace"] for r in records):
        lines += _trace_section([r for r in records if r["trace"] == trace], note)
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += COLUMNS_NOTE
    return "\n".join(lines)


def _readme_header(meta: dict[str, Any]) -> list[str]:
    """The title, what is simulated and how deadlines are drawn, the run's date and machine."""
    return [
        "# Cluster planner benchmark (a SIMULATION)",
        "",
        "Generated by `make bench-cluster` (`bench/cluster_sim.py`) from `results.json`; do not",
        "edit by hand. The real planner (`decor.core.planner.plan`) arbitrates simulated jobs whose",
        "speed curves are known (see the module docstring and docs/planner.md). Each job's need",
        "is the exact one from its curve, not the law's fit.",
        "",
        "Deadlines follow ElasticFlow's rule, arrival + U(0.5, 1.5) x the job's duration at its",
        "max: about half the deadline jobs cannot be met even alone on an idle cluster, so no",
        "policy's `met_ratio` can pass about 0.5. Policies with admission (decor, elasticflow)",
        "queue those and the simulated user withdraws them (`dropped`); the others run them late,",
        "and the capacity they hold makes feasible jobs late too. Planner times are wall-clock",
        "on the machine named below, shared with other work while it ran.",
        "",
        f"Run: {meta['date']}, {meta['wall_s']:.0f} s on {meta['machine']}, git {meta['git_head']}"
        f"{' (--quick)' if meta['quick'] else ''}.",
        "",
    ]


def _targets_table(records: Sequence[dict[str, Any]], note: str) -> list[str]:
    """The targets, met or not, and what was measured."""
    lines = [
        "## Targets",
        "",
        "| target | met | measured |",
        "|---|---|---|",
    ]
    for t in targets(records, note):
        mark = "not measured" if t.met is None else ("yes" if t.met else "**no**")
        lines.append(f"| {t.name} | {mark} | {t.measured} |")
    return lines


TRACE_COLUMNS = [
    "policy", "met", "met_ratio", "admitted", "admitted_met_ratio", "late_admitted",
    "late_within_tolerance", "dropped", "high_priority_met", "resource_seconds",
    "deadline_resource_seconds", "best_effort_work", "planner_ms_p50", "planner_ms_p99",
    "gpu_jobs_measured", "gpu_deviation_mean_pct", "gpu_deviation_switched_mean_pct",
    "gpu_seconds_vs_fractional_pct", "gpu_restarts_median", "gpu_restarts_max",
]  # fmt: skip
"""The columns of a trace's table: one row per policy."""


def _trace_section(rs: Sequence[dict[str, Any]], note: str) -> list[str]:
    """One trace's records (one per policy): its setting, then a row per policy."""
    first = rs[0]
    lines = ["", f"## {first['trace']}", ""]
    if first.get("kind") == "simulation":
        lines.append(
            f"{first['jobs']} jobs ({first['deadline_jobs']} with a deadline, "
            f"{first['best_effort_jobs']} best-effort) on {first['nodes']} nodes; "
            f"load {first['load']}; noise sigma {first['noise_sigma']}; "
            f"{first['high_priority_jobs']} jobs of priority 1; period {first['period_s']:g} s"
            f"{' (exact plants)' if first['exact_plants'] else ''}; "
            f"{'contended' if first['contended'] else 'not contended'}."
        )
    else:
        lines.append(
            f"Planner time only: one contended snapshot of {first['jobs']} jobs on "
            f"{first['nodes']} nodes, {SCALE_CALLS} calls per policy"
            + (f"; {note}." if note else ".")
        )
    lines += ["", "| " + " | ".join(TRACE_COLUMNS) + " |", "|" + "---|" * len(TRACE_COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in TRACE_COLUMNS) + " |" for r in rs]
    return lines


COLUMNS_NOTE = [
    "",
    "Columns: `met` deadline jobs finished by their deadline; `admitted` deadline jobs ever",
    "admitted (every deadline job under policies without admission); `late_admitted` admitted",
    "jobs later than 1 % of their relative deadline or never finished;",
    "`late_within_tolerance` admitted jobs finished after their deadline by at most 1 % of",
    "it (not counted in `met`); `dropped` queued",
    "jobs withdrawn once even their max could not meet the deadline; `resource_seconds`",
    "core-seconds plus GPU-seconds granted (all jobs), `deadline_resource_seconds` those of",
    "deadline jobs; `best_effort_work` best-effort jobs' work done by the last deadline job's",
    "arrival (later every policy finishes them all), in whole jobs. `gpu_*`: GPU deadline",
    "jobs admitted and finished whose fractional need from their first period lies within",
    "their min and max GPUs: mean |finish - deadline| in % of the relative deadline (all of",
    "them; those that changed count), GPU-seconds over the same jobs' at that exact",
    "fractional need (in %, less 100), and restarts per job (median, max).",
    "",
]
"""What the columns of the trace tables mean."""


def _bound_section(records: Sequence[dict[str, Any]]) -> list[str]:
    """README lines of the clairvoyant bound: the optimum per trace, then every policy's
    ratios to it (none when no record is a bound)."""
    bounds = [r for r in records if r.get("kind") == "bound"]
    if not bounds:
        return []
    lines = [
        "",
        "## Clairvoyant bound",
        "",
        "On every trace with exact plants, a MILP over time slots (`bench/clairvoyant.py`) that",
        "knows every arrival in advance gives the most deadlines any schedule could meet, then",
        "the least deadline-job resource-seconds among schedules meeting that many. Its",
        "simplifications all relax (capacity pooled per resource kind, no restart cost, best-effort",
        "jobs left out, allocations free to change at any instant, CPU speed over-estimated by",
        "tangents; GPU speed exact at whole counts): the optimum met is an upper bound on what any",
        "policy can meet, and its resource-seconds a lower bound for meeting that many. A policy",
        "that meets fewer deadlines may use fewer resource-seconds than the optimum.",
        "",
        "| trace | deadline jobs | optimum met | proven | optimum resource-s | slots | variables "
        "| solve (a) s | solve (b) s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b in bounds:
        lines.append(
            f"| {b['trace']} | {b['deadline_jobs']} | {b['met']} | "
            f"{'yes' if b['met_proven'] else '**no**'} | {_fmt(b['deadline_resource_seconds'])} | "
            f"{b['slots']} | {b['variables']} | {b['solve_met_s']} | {b['solve_resource_s']} |"
        )
    policies = list(dict.fromkeys(p for b in bounds for p in b["vs_bound"]))
    lines += [
        "",
        "Each policy over the optimum: met deadlines / optimum met, then deadline-job",
        "resource-seconds / optimum resource-seconds.",
        "",
        "| trace | " + " | ".join(policies) + " |",
        "|---|" + "---|" * len(policies),
    ]
    for b in bounds:
        cells = []
        for p in policies:
            v = b["vs_bound"].get(p)
            cells.append(
                "-" if v is None else f"{_fmt(v['met_ratio'])} / {_fmt(v['resource_ratio'])}"
            )
        lines.append(f"| {b['trace']} | " + " | ".join(cells) + " |")
    return lines


def _plots(out: Path, records: Sequence[dict[str, Any]]) -> list[str]:
    plt = plotting.pyplot()
    sims = [r for r in records if r.get("kind") == "simulation"]
    traces_ = list(dict.fromkeys(r["trace"] for r in sims))
    names = []
    for metric, title in (
        ("met_ratio", "deadline-met ratio (all deadline jobs)"),
        ("deadline_resource_seconds", "resource-seconds of deadline jobs"),
        ("best_effort_work", "best-effort work done (jobs)"),
    ):
        fig, ax = plt.subplots(figsize=(9, 4))
        width = 0.8 / len(POLICIES)
        for k, policy in enumerate(POLICIES):
            vals = [
                next((r[metric] or 0 for r in sims if r["trace"] == t and r["policy"] == policy), 0)
                for t in traces_
            ]
            ax.bar([i + k * width for i in range(len(traces_))], vals, width, label=policy)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(traces_))], traces_, fontsize=8)
        ax.set_title(title + " (simulation)")
        ax.legend(fontsize=7)
        name = f"{metric}.png"
        plotting.save(fig, out / name, dpi=90)
        names.append(name)
    return names


def bound_record(
    spec: TraceSpec, refs: dict[str, Amdahl], policy_records: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The clairvoyant bound of ``spec`` (``bench/clairvoyant.py``) as a results.json record,
    with every policy's ratios to it: ``met / met`` and deadline resource-seconds over the
    optimum's (a policy that meets fewer deadlines may use fewer)."""
    if spec.noise_sigma != 0:
        raise ValueError(f"{spec.name}: the bound models exact plants only (noise 0)")
    jobs, nodes = make_trace(spec, refs)
    b = clairvoyant.trace_bound(jobs, nodes)
    opt_rs = b.resource_seconds
    return {
        "trace": spec.name,
        "policy": BOUND_POLICY,
        "kind": "bound",
        "jobs": len(jobs),
        "nodes": len(nodes),
        "deadline_jobs": b.deadline_jobs,
        "met": b.met,
        "met_ratio": round(b.met / b.deadline_jobs, 4) if b.deadline_jobs else None,
        "met_proven": b.met_proven,
        "deadline_resource_seconds": round(opt_rs, 1),
        "resource_lower_seconds": round(b.resource_lower_s, 1),
        "solve_met_s": round(b.met_solve_s, 2),
        "solve_resource_s": round(b.resource_solve_s, 2),
        "slots": b.slots,
        "variables": b.variables,
        "rows": b.rows,
        # not modelled by the bound (best-effort jobs left out, no planner):
        "admitted_met_ratio": None,
        "late_admitted": None,
        "resource_seconds": None,
        "best_effort_work": None,
        "planner_ms_p50": None,
        "planner_ms_p99": None,
        "vs_bound": {
            r["policy"]: {
                "met_ratio": round(r["met"] / b.met, 4) if b.met else None,
                "resource_ratio": round(r["deadline_resource_seconds"] / opt_rs, 4)
                if opt_rs > 0
                else None,
            }
            for r in policy_records
        },
    }


def run(
    quick: bool,
    out: Path | None = None,
    policies: Sequence[str] = POLICIES,
    trace_names: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Every trace under every policy, then the planner's time at scale. ``trace_names``:
    only these simulation traces, and no timing at scale (None: all of them, and the timing).
    ``out`` is not used (kept for callers)."""
    refs = reference_curves()
    records: list[dict[str, Any]] = []
    for spec in traces(quick):
        if trace_names is not None and spec.name not in trace_names:
            continue
        records += _trace_records(spec, refs, policies)
    if trace_names is not None:
        return records
    return records + _scale_records(quick, policies)


def _trace_records(
    spec: TraceSpec, refs: dict[str, Amdahl], policies: Sequence[str]
) -> list[dict[str, Any]]:
    """One simulation trace under every policy (each record printed as it comes), then its
    clairvoyant bound where the plants are exact."""
    records: list[dict[str, Any]] = []
    for policy in policies:
        jobs, nodes = make_trace(spec, refs)  # fresh jobs: the state is per run
        t0 = time.perf_counter()
        result = simulate(jobs, nodes, spec, policy)
        rec = summarize(spec, policy, result, len(nodes))
        rec.update(
            kind="simulation",
            load=spec.load,
            period_s=spec.period_s,
            sim_wall_s=round(time.perf_counter() - t0, 2),
        )
        records.append(rec)
        print(
            f"{spec.name:22s} {policy:12s} met {rec['met']:4d}/{rec['deadline_jobs']:<4d} "
            f"late_admitted {rec['late_admitted']:3d} "
            f"(<=1 % {rec['late_within_tolerance']:3d}) dropped {rec['dropped']:4d} "
            f"be_work {rec['best_effort_work']:8.2f} p99 {rec['planner_ms_p99']} ms "
            f"({rec['sim_wall_s']} s)",
            flush=True,
        )
        _print_gpu_figures(rec)
    if spec.noise_sigma == 0:
        rec = bound_record(spec, refs, records)
        records.append(rec)
        print(
            f"{spec.name:22s} {BOUND_POLICY:12s} met {rec['met']:4d}/{rec['deadline_jobs']:<4d} "
            f"deadline resource-s {rec['deadline_resource_seconds']:.4g} "
            f"({rec['solve_met_s']} s + {rec['solve_resource_s']} s)",
            flush=True,
        )
    return records


def _gpu_deviation_target(
    by: Mapping[tuple[str, str], dict[str, Any]], sims: Sequence[str]
) -> Target:
    """decor's GPU jobs on exact plants, mean |deviation|, per trace: all of them, those
    that switched count, and how many ran at one count where a switch would have paid."""
    rows, ok = [], True
    for t in sims:
        ours = by.get((t, pl.POLICY_DECOR))
        if not ours or not ours["exact_plants"] or not ours["gpu_jobs_measured"]:
            continue
        rows.append(
            f"{t}: {ours['gpu_deviation_mean_pct']} % (switched "
            f"{ours['gpu_deviation_switched_mean_pct']} %; {ours['gpu_unswitched_jobs']} of "
            f"{ours['gpu_jobs_measured']} at one count, a switch would have paid for "
            f"{ours['gpu_unswitched_a_switch_paid']})"
        )
        ok = ok and ours["gpu_deviation_mean_pct"] <= TARGET_GPU_DEVIATION_PCT
    return Target(f"GPU jobs on exact plants within {TARGET_GPU_DEVIATION_PCT} % of their "
                  "deadlines on average (decor)", ok if rows else None, "; ".join(rows))  # fmt: skip


def _print_gpu_figures(rec: dict[str, Any]) -> None:
    """The GPU deadline jobs' figures of one record, under its line (when it has any)."""
    if rec["gpu_jobs_measured"]:
        print(
            f"{'':22s} {'':12s} GPU |dev| {rec['gpu_deviation_mean_pct']} % "
            f"(max {rec['gpu_deviation_max_pct']}) GPU-s vs fractional "
            f"{rec['gpu_seconds_vs_fractional_pct']:+} % restarts median "
            f"{rec['gpu_restarts_median']} max {rec['gpu_restarts_max']} "
            f"switched |dev| {rec['gpu_deviation_switched_mean_pct']} % "
            f"({rec['gpu_jobs_measured']} jobs; {rec['gpu_unswitched_jobs']} at one count, a "
            f"switch would have paid for {rec['gpu_unswitched_a_switch_paid']})",
            flush=True,
        )


def _scale_records(quick: bool, policies: Sequence[str]) -> list[dict[str, Any]]:
    """The planner's time (ms, p50 and p99) on one contended snapshot per kind, per policy."""
    records: list[dict[str, Any]] = []
    jobs_n, nodes_n = (200, 20) if quick else (SCALE_JOBS, SCALE_NODES)
    calls = 5 if quick else SCALE_CALLS
    for kind in ("cpu", "gpu"):
        demands, nodes = scale_snapshot(jobs_n, nodes_n, gpu=kind == "gpu")
        for policy in policies:
            ms = time_planner(demands, nodes, policy, calls)
            p50, p99 = _pcts(ms)
            records.append({
                "trace": f"scale-{jobs_n}x{nodes_n}-{kind}", "policy": policy, "kind": "scale",
                "jobs": jobs_n, "nodes": nodes_n, "met_ratio": None, "admitted_met_ratio": None,
                "late_admitted": None, "resource_seconds": None, "best_effort_work": None,
                "planner_ms_p50": p50, "planner_ms_p99": p99,
            })  # fmt: skip
            print(f"scale {kind} {policy:12s} p50 {p50} ms p99 {p99} ms", flush=True)
    return records


def _names(value: str, known: Sequence[str], what: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}"
        )
    return names


def main(argv: Sequence[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        trace_names = (
            None
            if args.traces is None
            else _names(args.traces, [t.name for t in traces(args.quick)], "trace")
        )
        policies = POLICIES if args.policies is None else _names(args.policies, POLICIES, "policy")
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    selected = trace_names is not None or args.policies is not None
    if args.out is None and not selected:
        args.out = OUT_DIR
    if args.report_only:
        if args.out is None:
            ap.error("--report-only rewrites a full run's report: no --traces or --policies")
        data = json.loads((args.out / "results.json").read_text())
        records = data.pop("records")
        write_report(args.out, data, records)
        return 0
    return _run_and_write(args, policies, trace_names)


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench.cluster_sim``."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.cluster_sim", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--quick", action="store_true", help="two small traces (seconds)")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output folder (default {OUT_DIR.relative_to(ROOT)}; with --traces or --policies "
        "nothing is written unless --out is given)",
    )
    ap.add_argument(
        "--traces",
        metavar="NAME,...",
        help="only these simulation traces (comma-separated names; the timing at scale is left "
        "out); the records are printed",
    )
    ap.add_argument(
        "--policies", metavar="NAME,...", help=f"only these policies (of {', '.join(POLICIES)})"
    )
    ap.add_argument(
        "--note",
        default="",
        help="a line on how the run was made (the machine's other work), printed beside the "
        "planner times in README.md",
    )
    ap.add_argument(
        "--report-only", action="store_true", help="rewrite README.md and plots from results.json"
    )
    return ap


def _run_and_write(
    args: argparse.Namespace, policies: Sequence[str], trace_names: Sequence[str] | None
) -> int:
    """Run the selection; without a selection (or with ``--out``) write results.json, the
    plots and README.md, and print the targets."""
    import os
    import platform
    import subprocess

    t0 = time.perf_counter()
    records = run(args.quick, policies=policies, trace_names=trace_names)
    if args.out is None:  # a selection: its records were printed as they came
        return 0
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    meta = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "wall_s": time.perf_counter() - t0,
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "git_head": head,
        "note": args.note,
    }
    write_report(args.out, meta, records)
    for t in targets(records, args.note):
        print(f"target: {t.name}: {t.met} ({t.measured})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
