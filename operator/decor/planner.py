"""The cluster planner: who gets how many cores or GPUs, given every job's need and the nodes.

``plan(demands, nodes, now_s, settings)`` is a pure function: no I/O, no clock, stdlib only
(GPU counts come from an exact dynamic program, ``best_gpu_choices``). The operator and the local
runtime call it once per control period after each job's law has said what it needs
(``control.decide``), then act on its grants.

The policies (``PlannerSettings.policy``) and the rules they follow are described in
docs/planner.md; ``decor`` is ours, the others are baselines for ``make bench-cluster``.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

# Planner policies (spec: operator setting, not per job).
POLICY_DECOR = "decor"  # ours: admission + minimum satisfactory share + best-effort fill
POLICY_PROPORTIONAL = "decor-nn"  # DECOR-NN: every job scaled down proportionally
POLICY_EDF = "edf"  # earliest deadline first, greedy, no admission control
POLICY_ELASTICFLOW = "elasticflow"  # deadline order, min satisfactory share, admission, gain
POLICY_NONE = "none"  # no arbitration: each job gets its need, capacity permitting, in order
POLICIES = (POLICY_DECOR, POLICY_PROPORTIONAL, POLICY_EDF, POLICY_ELASTICFLOW, POLICY_NONE)

# Verdicts (the admission answer per job; also condition reasons in the job's status).
ADMITTED = "Admitted"  # runs with at least its need (deadline met as predicted)
QUEUED = "Queued"  # not admitted: cannot be met without making an admitted job late
PREEMPTED = "Preempted"  # was admitted, gave way to a higher-priority job; now queued
SHORTED = "Shorted"  # admitted, but the node cannot hold its need this period (it will be late)
BEST_EFFORT = "BestEffort"  # no deadline: gets what is left over (possibly nothing)


@dataclass(frozen=True)
class Demand:
    """One job's request for the next period, derived from its own control law.

    Allocations are cores (``mode == "cpu"``) or GPU counts (``"gpu"``). Times are Unix
    seconds. ``step_time_s(allocation)`` is the job's fitted speed curve (seconds per
    mini-batch at an allocation, decreasing in the allocation); None while nothing has been
    measured and no estimate exists.
    """

    key: str  # "namespace/name": unique, and the deterministic tie-break
    mode: str  # "cpu" | "gpu"
    need: float  # what the law asks for now to meet the deadline (MAX when infeasible)
    min_allocation: float
    max_allocation: float
    current: float  # in effect now (0 for a job with no pod yet)
    steps_remaining: float
    deadline_s: float | None  # None: best-effort (no deadline)
    arrival_s: float  # creation time: FIFO among equals
    priority: int = 0  # higher gives way last
    admitted: bool = False  # admitted in an earlier period (its deadline is promised)
    node: str | None = None  # where its pod runs; None: not placed yet
    step_time_s: Callable[[float], float] | None = None
    restart_cost_s: float = 0.0  # GPU: measured seconds from stop to the first step after resume


@dataclass(frozen=True)
class Node:
    """What DECOR may hand out on one node: allocatable minus every other pod's requests
    (a pod being resized charged at max(requested, applied))."""

    name: str
    cpu_cores: float
    gpus: float = 0.0


@dataclass(frozen=True)
class PlannerSettings:
    """The operator's planner settings (one per operator, not per job)."""

    policy: str = POLICY_DECOR
    period_s: float = 1.0
    # GPU: look-ahead window over which restart costs are charged (BFTrainer-style).
    lookahead_s: float = 300.0
    # CPU grants are multiples of this (the law's own quantum: 10 millicores). Needs round up.
    cpu_quantum_cores: float = 0.01
    # CPU leftover is handed out in steps of this many cores, each to the job it speeds up most.
    fill_step_cores: float = 0.5
    # decor, CPU: a best-effort job keeps what it has while the fill's answer is within this
    # many cores of it (no resize for a quarter core back and forth each period).
    hysteresis_cores: float = 0.25


@dataclass(frozen=True)
class Grant:
    """The planner's answer for one job."""

    key: str
    allocation: float  # 0 when queued
    node: str | None
    verdict: str  # one of ADMITTED, QUEUED, PREEMPTED, SHORTED, BEST_EFFORT
    reason: str  # a sentence for the job's condition message
    earliest_deadline_s: float | None = (
        None  # QUEUED/PREEMPTED: earliest deadline it could meet now
    )


@dataclass(frozen=True)
class Plan:
    grants: Mapping[str, Grant] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Shared pieces: units, capacity book-keeping, speed

EPS = 1e-9
GPU_QUANTUM = 1.0
# Placing a best-effort job with no speed curve beside ones with a curve: its normalized
# speed is taken as sqrt(allocation / max) (diminishing returns; an even split among such jobs).
_NO_CURVE_EXPONENT = 0.5


def _is_gpu(d: Demand) -> bool:
    return d.mode == "gpu"


def _unit(d: Demand) -> str:
    return "GPUs" if _is_gpu(d) else "cores"


def _quantum(d: Demand, s: PlannerSettings) -> float:
    return GPU_QUANTUM if _is_gpu(d) else s.cpu_quantum_cores


def _floor_q(value: float, q: float) -> float:
    return round(math.floor(value / q + 1e-6) * q, 6)


def _ceil_q(value: float, q: float) -> float:
    return round(math.ceil(value / q - 1e-6) * q, 6)


def need_of(d: Demand, s: PlannerSettings) -> float:
    """The grant a deadline job must have: its need rounded up to the quantum (whole GPUs),
    within [min_allocation, max_allocation]."""
    n = _ceil_q(max(d.need, d.min_allocation), _quantum(d, s))
    return min(max(n, d.min_allocation), d.max_allocation)


def run_s(d: Demand, allocation: float) -> float | None:
    """Seconds to finish ``d``'s remaining steps at a constant ``allocation`` (None: no curve)."""
    if d.step_time_s is None or allocation <= 0:
        return None
    return d.steps_remaining * d.step_time_s(allocation)


def _speed(d: Demand, allocation: float) -> float:
    """Speed at ``allocation`` as a fraction of the speed at max (0 at 0)."""
    if allocation <= EPS:
        return 0.0
    if d.step_time_s is None:
        return (min(allocation, d.max_allocation) / d.max_allocation) ** _NO_CURVE_EXPONENT
    return d.step_time_s(d.max_allocation) / d.step_time_s(allocation)


def _utc(t_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_s))  # pure: formats t_s only


def _names(ds: Sequence[Demand], most: int = 3) -> str:
    keys = [d.key for d in ds]
    more = f" (+{len(keys) - most} more)" if len(keys) > most else ""
    return ", ".join(keys[:most]) + more


class _Cluster:
    """Free capacity per node and resource, as grants are made (mutable, local to a plan)."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.names = sorted(n.name for n in nodes)
        self.free_cpu = {n.name: max(0.0, n.cpu_cores) for n in nodes}
        self.free_gpu = {n.name: max(0.0, float(math.floor(n.gpus + 1e-6))) for n in nodes}

    def _book(self, gpu: bool) -> dict[str, float]:
        return self.free_gpu if gpu else self.free_cpu

    def home(self, d: Demand) -> str | None:
        """The node the job's pod lives on, if the planner knows it."""
        return d.node if d.node in self.free_cpu else None

    def free(self, node: str, d: Demand) -> float:
        return self._book(_is_gpu(d))[node]

    def take(self, node: str, d: Demand, amount: float) -> None:
        book = self._book(_is_gpu(d))
        book[node] = round(book[node] - amount, 9)

    def best_fit(self, d: Demand, amount: float) -> str | None:
        """The node where ``amount`` fits leaving the least free (ties: name); None if none."""
        book = self._book(_is_gpu(d))
        fits = [(book[n], n) for n in self.names if book[n] >= amount - EPS]
        return min(fits)[1] if fits else None

    def most_free(self, d: Demand) -> str | None:
        book = self._book(_is_gpu(d))
        return min(self.names, key=lambda n: (-book[n], n)) if self.names else None


def _fit(d: Demand, room: float, want: float, s: PlannerSettings) -> float:
    """The most of ``want`` that ``room`` holds, or 0 when that is below min_allocation."""
    got = min(want, _floor_q(max(room, 0.0), _quantum(d, s)))
    return got if got >= d.min_allocation - EPS and got > EPS else 0.0


# ---------------------------------------------------------------------------------------
# The entry point


def plan(
    demands: Sequence[Demand],
    nodes: Sequence[Node],
    now_s: float,
    settings: PlannerSettings = PlannerSettings(),
) -> Plan:
    """Allocations and admission verdicts for every demand. Deterministic for equal input:
    the demands' and nodes' order does not matter (ties are broken by key, then node name).

    Raises ValueError for an unknown policy or two demands with the same key.
    """
    if settings.policy not in POLICIES:
        raise ValueError(f"unknown planner policy {settings.policy!r}; one of {POLICIES}")
    ordered = sorted(demands, key=lambda d: d.key)
    if len({d.key for d in ordered}) != len(ordered):
        raise ValueError("two demands share a key")
    cluster = _Cluster(nodes)
    if settings.policy in (POLICY_DECOR, POLICY_ELASTICFLOW):
        grants = _plan_admission(ordered, cluster, now_s, settings)
    elif settings.policy == POLICY_PROPORTIONAL:
        grants = _plan_proportional(ordered, cluster, settings)
    else:
        grants = _plan_in_order(ordered, cluster, settings)
    return Plan(grants={k: grants[k] for k in sorted(grants)})


# ---------------------------------------------------------------------------------------
# Baselines without admission control: none (arrival order, need) and edf (deadline, max)


def _plan_in_order(
    demands: Sequence[Demand], cluster: _Cluster, s: PlannerSettings
) -> dict[str, Grant]:
    edf = s.policy == POLICY_EDF
    if edf:
        order = sorted(
            demands,
            key=lambda d: (d.deadline_s is None, d.deadline_s or 0.0, d.arrival_s, d.key),
        )
    else:
        order = sorted(demands, key=lambda d: (d.arrival_s, d.key))
    rule = (
        "earliest deadline first, each up to its max (policy edf)"
        if edf
        else "no arbitration: each its need in arrival order (policy none)"
    )
    grants: dict[str, Grant] = {}
    for d in order:
        need = need_of(d, s)
        want = float(d.max_allocation) if edf or d.deadline_s is None else need
        node = cluster.home(d) or cluster.best_fit(d, want) or cluster.most_free(d)
        got = _fit(d, cluster.free(node, d), want, s) if node is not None else 0.0
        if node is not None and got > 0:
            cluster.take(node, d, got)
        if d.deadline_s is None:
            verdict = BEST_EFFORT
        else:
            verdict = ADMITTED if got >= need - EPS else SHORTED
        reason = f"granted {got:g} of {want:g} {_unit(d)} on {node}; {rule}"
        grants[d.key] = Grant(d.key, got, node if got > 0 else cluster.home(d), verdict, reason)
    return grants


# ---------------------------------------------------------------------------------------
# Baseline: DECOR-NN's proportional scale-down


def _plan_proportional(
    demands: Sequence[Demand], cluster: _Cluster, s: PlannerSettings
) -> dict[str, Grant]:
    """Everyone asks its need (best-effort jobs their max); on a node whose asks exceed its
    capacity every ask is scaled by capacity / sum, then raised to min; if the mins do not
    fit, the latest arrivals get nothing."""
    asks = {
        d.key: (need_of(d, s) if d.deadline_s is not None else d.max_allocation) for d in demands
    }
    placed: dict[tuple[str, bool], list[Demand]] = {}
    asked = {(n, g): 0.0 for n in cluster.names for g in (False, True)}
    unplaced: list[Demand] = []
    for d in sorted(demands, key=lambda d: (d.arrival_s, d.key)):
        node = cluster.home(d)
        if node is None:
            book = cluster.free_gpu if _is_gpu(d) else cluster.free_cpu
            room = [(book[n] - asked[(n, _is_gpu(d))], n) for n in cluster.names]
            node = min(room, key=lambda r: (-r[0], r[1]))[1] if room else None
        if node is None:
            unplaced.append(d)
            continue
        asked[(node, _is_gpu(d))] += asks[d.key]
        placed.setdefault((node, _is_gpu(d)), []).append(d)
    grants: dict[str, Grant] = {}
    for (node, gpu), jobs in sorted(placed.items()):
        free = (cluster.free_gpu if gpu else cluster.free_cpu)[node]
        total = sum(asks[d.key] for d in jobs)
        factor = 1.0 if total <= free + EPS else free / total
        alloc = {}
        for d in jobs:
            scaled = _floor_q(asks[d.key] * factor, _quantum(d, s))
            alloc[d.key] = max(scaled, d.min_allocation)
        for d in reversed(jobs):  # latest arrivals give way when the mins do not fit
            if sum(alloc.values()) <= free + EPS:
                break
            alloc[d.key] = 0.0
        for d in jobs:
            got = alloc[d.key]
            if d.deadline_s is None:
                verdict = BEST_EFFORT
            else:
                verdict = ADMITTED if got >= need_of(d, s) - EPS else SHORTED
            reason = (
                f"granted {got:g} of {asks[d.key]:g} {_unit(d)} on {node}: asks scaled by "
                f"{factor:.3g} to the node's capacity (policy decor-nn)"
            )
            grants[d.key] = Grant(d.key, got, node, verdict, reason)
    for d in unplaced:
        verdict = SHORTED if d.deadline_s is not None else BEST_EFFORT
        grants[d.key] = Grant(
            d.key, 0.0, None, verdict, f"no node offers {_unit(d)} (policy decor-nn)"
        )
    return grants


# ---------------------------------------------------------------------------------------
# decor and elasticflow: admission control, minimum satisfactory share, leftover


def _plan_admission(
    demands: Sequence[Demand], cluster: _Cluster, now_s: float, s: PlannerSettings
) -> dict[str, Grant]:
    """The phases, in order: hold admitted needs (priority, then deadline, decides who gives
    way on a full node); admit new jobs whose need fits (ours: a higher priority may displace
    a lower one); tell the waiting ones the earliest deadline they could meet; hand out the
    leftover (ours: to best-effort jobs, GPU counts with restart costs; elasticflow: to every
    running job by marginal gain)."""
    ours = s.policy == POLICY_DECOR
    book = _Book(cluster, s, now_s, ours)
    with_deadline = [d for d in demands if d.deadline_s is not None]
    for d in sorted((d for d in with_deadline if d.admitted), key=book.hold_rank):
        book.hold_admitted(d)
    for d in sorted((d for d in with_deadline if not d.admitted), key=book.rank):
        book.admit_new(d)
    book.tell_waiting()
    best_effort = [d for d in demands if d.deadline_s is None]
    book.fill_leftover(best_effort)
    return book.grants


class _Book:
    """The state of one admission plan as its phases run (local to one ``plan`` call)."""

    def __init__(self, cluster: _Cluster, s: PlannerSettings, now_s: float, ours: bool) -> None:
        self.cluster, self.s, self.now_s, self.ours = cluster, s, now_s, ours
        self.grants: dict[str, Grant] = {}
        self.held: dict[str, list[tuple[Demand, float]]] = {}  # node -> deadline grants there
        self.waiting: list[Demand] = []  # QUEUED or PREEMPTED: told their earliest deadline

    def prio(self, d: Demand) -> int:
        return d.priority if self.ours else 0

    def rank(self, d: Demand) -> tuple[int, float, float, str]:
        return (-self.prio(d), d.deadline_s or 0.0, d.arrival_s, d.key)

    def hold_rank(self, d: Demand) -> tuple[int, bool, float, float, str]:
        """Admitted jobs keep their share in ``rank`` order, except that within a priority
        a running pod comes before one still to be created (a restart, a resume): the
        planner does not hand a running trainer's node to a pod that does not exist yet,
        which would restart the running one for nothing (the kube-scheduler places the new
        pod wherever there is room)."""
        running = self.cluster.home(d) is not None and d.current > EPS
        return (-self.prio(d), not running, d.deadline_s or 0.0, d.arrival_s, d.key)

    def _hold(self, node: str, d: Demand, amount: float) -> None:
        self.cluster.take(node, d, amount)
        self.held.setdefault(node, []).append((d, amount))

    def _admitted(self, d: Demand, node: str, need: float, note: str = "") -> None:
        self._hold(node, d, need)
        finish = run_s(d, need)
        assert d.deadline_s is not None
        when = (
            f"predicted to finish at {_utc(self.now_s + finish)}, by its deadline "
            f"{_utc(d.deadline_s)}"
            if finish is not None
            else f"its need to meet the deadline {_utc(d.deadline_s)}"
        )
        reason = f"admitted: {need:g} {_unit(d)} on {node}, {when}{note}"
        self.grants[d.key] = Grant(d.key, need, node, ADMITTED, reason)

    def hold_admitted(self, d: Demand) -> None:
        """An admitted job keeps at least its need unless a job ranked before it holds the
        node: a higher priority preempts it, an earlier deadline shorts it."""
        need = need_of(d, self.s)
        node = self.cluster.home(d) or self.cluster.best_fit(d, need)
        if node is not None and self.cluster.free(node, d) >= need - EPS:
            self._admitted(d, node, need)
            return
        node = node or self.cluster.most_free(d)
        before = [h for h, _ in self.held.get(node or "", []) if h.mode == d.mode]
        higher = [h for h in before if self.prio(h) > self.prio(d)]
        if higher:
            reason = (
                f"preempted: node {node} cannot hold its need of {need:g} {_unit(d)} beside "
                f"higher-priority {_names(higher)}"
            )
            self.grants[d.key] = Grant(d.key, 0.0, self.cluster.home(d), PREEMPTED, reason)
            self.waiting.append(d)
            return
        got = _fit(d, self.cluster.free(node, d), need, self.s) if node is not None else 0.0
        if node is not None and got > 0:
            self._hold(node, d, got)
        who = f"earlier-deadline {_names(before)} first" if before else "too little"
        reason = (
            f"shorted: granted {got:g} of the {need:g} {_unit(d)} it needs; node {node} "
            f"holds {who}; it will be late"
        )
        self.grants[d.key] = Grant(d.key, got, node if got > 0 else None, SHORTED, reason)

    def admit_new(self, d: Demand) -> None:
        """Admit ``d`` if its need fits beside the admitted needs (ours: or by displacing
        lower-priority jobs); otherwise it waits (QUEUED)."""
        assert d.deadline_s is not None
        need = need_of(d, self.s)
        at_max_s = run_s(d, d.max_allocation)
        if at_max_s is not None and self.now_s + at_max_s > d.deadline_s + EPS:
            reason = (
                f"not admitted: even at its max of {d.max_allocation:g} {_unit(d)} it would "
                f"finish at {_utc(self.now_s + at_max_s)}, after its deadline {_utc(d.deadline_s)}"
            )
            self._wait(d, reason)
            return
        node = self.cluster.home(d) or self.cluster.best_fit(d, need)
        if node is not None and self.cluster.free(node, d) >= need - EPS:
            self._admitted(d, node, need)
            return
        displaced = self._displace(d, need) if self.ours else None
        if displaced is None:
            where = f"on {node}" if node is not None else "on any node"
            most = max(
                (self.cluster.free(n, d) for n in ([node] if node else self.cluster.names)),
                default=0.0,
            )
            reason = (
                f"not admitted: its need of {need:g} {_unit(d)} does not fit beside the "
                f"admitted jobs' needs ({most:g} free at most {where})"
            )
            self._wait(d, reason)
            return
        node, victims = displaced
        for v, amount in victims:
            self.held[node] = [(h, a) for h, a in self.held[node] if h.key != v.key]
            self.cluster.take(node, v, -amount)
            reason = (
                f"preempted by higher-priority {d.key} (priority {d.priority} > {v.priority}) "
                f"on node {node}"
            )
            self.grants[v.key] = Grant(v.key, 0.0, self.cluster.home(v), PREEMPTED, reason)
            self.waiting.append(v)
        note = f"; displaced lower-priority {_names([v for v, _ in victims])}"
        self._admitted(d, node, need, note)

    def _wait(self, d: Demand, reason: str) -> None:
        self.grants[d.key] = Grant(d.key, 0.0, self.cluster.home(d), QUEUED, reason)
        self.waiting.append(d)

    def _displace(self, d: Demand, need: float) -> tuple[str, list[tuple[Demand, float]]] | None:
        """The node where preempting the fewest lower-priority jobs (lowest priority, then
        latest deadline first) makes room for ``need``; None if none does."""
        home = self.cluster.home(d)
        best: tuple[int, str, list[tuple[Demand, float]]] | None = None
        for n in [home] if home else self.cluster.names:
            free = self.cluster.free(n, d)
            lower = sorted(
                (
                    ha
                    for ha in self.held.get(n, [])
                    if ha[0].mode == d.mode and ha[0].priority < d.priority
                ),
                key=lambda ha: (
                    ha[0].priority,
                    -(ha[0].deadline_s or 0.0),
                    -ha[0].arrival_s,
                    ha[0].key,
                ),
            )
            chosen: list[tuple[Demand, float]] = []
            for h, a in lower:
                if free >= need - EPS:
                    break
                chosen.append((h, a))
                free += a
            if free >= need - EPS and (best is None or (len(chosen), n) < best[:2]):
                best = (len(chosen), n, chosen)
        return (best[1], best[2]) if best is not None else None

    # -- the earliest deadline a waiting job could meet now --------------------------------

    def _timeline(self, node: str, gpu: bool) -> list[tuple[float, float]]:
        """(time, free) steps on ``node``: capacity frees as its deadline jobs finish
        (predicted from their curve at their grant, else at their deadline)."""
        free = (self.cluster.free_gpu if gpu else self.cluster.free_cpu)[node]
        events = []
        for h, a in self.held.get(node, []):
            if _is_gpu(h) == gpu and a > 0:
                r = run_s(h, a)
                events.append((self.now_s + r if r is not None else h.deadline_s or 0.0, a))
        points = [(self.now_s, free)]
        for t, a in sorted(events):
            free += a
            points.append((max(t, self.now_s), free))
        return points

    def _envelope(self, gpu: bool) -> list[tuple[float, float]]:
        """(time, most free on any one node) steps, over every node."""
        book = self.cluster.free_gpu if gpu else self.cluster.free_cpu
        free = dict(book)
        events = []
        for node in self.cluster.names:
            line = self._timeline(node, gpu)
            events += [(t, node, f) for t, f in line[1:]]
        best = max(free.values(), default=0.0)
        points = [(self.now_s, best)]
        for t, node, f in sorted(events):
            free[node] = f
            if f > best + EPS:
                best = f
                points.append((t, best))
        return points

    def tell_waiting(self) -> None:
        envelopes: dict[bool, list[tuple[float, float]]] = {}
        for d in self.waiting:
            gpu = _is_gpu(d)
            home = self.cluster.home(d)
            if home is not None:
                points = self._timeline(home, gpu)
            else:
                if gpu not in envelopes:
                    envelopes[gpu] = self._envelope(gpu)
                points = envelopes[gpu]
            earliest, frees_at = self._earliest(d, points)
            grant = self.grants[d.key]
            if earliest is not None:
                tail = f"; the earliest deadline it could meet now is {_utc(earliest)}"
            elif frees_at is not None:
                tail = f"; room for its need frees at {_utc(frees_at)} (no speed curve yet)"
            else:
                tail = "; no room for it frees while the admitted jobs run"
            self.grants[d.key] = Grant(
                grant.key,
                grant.allocation,
                grant.node,
                grant.verdict,
                grant.reason + tail,
                earliest,
            )

    def _earliest(
        self, d: Demand, points: Sequence[tuple[float, float]]
    ) -> tuple[float | None, float | None]:
        """(earliest finish, when its need first fits): start at each step of the timeline
        with what is free then (up to max), keep the earliest finish."""
        need = need_of(d, self.s)
        best: float | None = None
        frees_at: float | None = None
        for t, free in points:
            a = _fit(d, free, d.max_allocation, self.s)
            if a <= 0:
                continue
            if frees_at is None and a >= need - EPS:
                frees_at = t
            r = run_s(d, a)
            if r is not None and (best is None or t + r < best):
                best = t + r
            if a >= d.max_allocation - EPS:
                break  # more room later cannot start it faster
        return best, frees_at

    # -- leftover ------------------------------------------------------------------------

    def _place(self, jobs: Sequence[Demand]) -> dict[tuple[str, bool], list[Demand]]:
        """Best-effort jobs by node: where their pod is, else (arrival order) the node with
        the most room left after the ones placed before; unplaceable ones get nothing."""
        pending = {(n, g): (self.cluster.free_gpu if g else self.cluster.free_cpu)[n]
                   for n in self.cluster.names for g in (False, True)}  # fmt: skip
        by_node: dict[tuple[str, bool], list[Demand]] = {}
        for d in sorted(jobs, key=lambda d: (d.arrival_s, d.key)):
            gpu = _is_gpu(d)
            node = self.cluster.home(d)
            if node is None and self.cluster.names:
                node = min(self.cluster.names, key=lambda n: (-pending[(n, gpu)], n))
                if pending[(node, gpu)] < max(d.min_allocation, EPS) - EPS:
                    node = None
            if node is None:
                reason = f"best-effort: no node has {d.min_allocation:g} {_unit(d)} left over"
                self.grants[d.key] = Grant(d.key, 0.0, None, BEST_EFFORT, reason)
                continue
            pending[(node, gpu)] -= d.min_allocation
            by_node.setdefault((node, gpu), []).append(d)
        return by_node

    def fill_leftover(self, best_effort: Sequence[Demand]) -> None:
        by_node = self._place(best_effort)
        if not self.ours:  # elasticflow: admitted deadline jobs share the leftover too
            for node, held in self.held.items():
                for h, _ in held:
                    if self.grants[h.key].verdict == ADMITTED:
                        by_node.setdefault((node, _is_gpu(h)), []).append(h)
        for (node, gpu), jobs in sorted(by_node.items()):
            jobs = sorted(jobs, key=lambda d: d.key)
            base = {
                d.key: self.grants[d.key].allocation if d.key in self.grants else 0.0 for d in jobs
            }
            free = (self.cluster.free_gpu if gpu else self.cluster.free_cpu)[node]
            if gpu and self.ours:
                alloc = self._gpu_counts(jobs, int(math.floor(free + 1e-6)))
            else:
                alloc = _fill_by_gain(
                    jobs, base, free, 1.0 if gpu else self.s.fill_step_cores, self.s
                )
                if self.ours:
                    alloc = self._hysteresis(
                        jobs, alloc, free - sum(alloc[k] - base[k] for k in alloc)
                    )
            for d in jobs:
                self._grant_leftover(d, node, alloc[d.key], base[d.key])

    def _hysteresis(
        self, jobs: Sequence[Demand], alloc: dict[str, float], free: float
    ) -> dict[str, float]:
        """A best-effort job keeps its current allocation while the fill's answer is within
        ``hysteresis_cores`` of it and the node has room."""
        out = dict(alloc)
        for d in jobs:
            if d.deadline_s is not None or d.current <= EPS:
                continue
            keep = min(max(d.current, d.min_allocation), d.max_allocation)
            extra = keep - out[d.key]
            if abs(extra) <= self.s.hysteresis_cores + EPS and extra <= free + EPS:
                out[d.key] = keep
                free -= extra
        return out

    def _gpu_counts(self, best_effort: Sequence[Demand], free_gpus: int) -> dict[str, float]:
        """Ours, GPUs: whole counts for one node's best-effort jobs, chosen together to
        maximize the work done over the look-ahead window minus what restarts lose.

        Deadline jobs are not part of it: each gets its need, and its law has already
        weighed a shrink's restart against the GPUs it gives back (``control`` ``pays``)."""
        window_s = max(self.s.lookahead_s, EPS)

        def kept(d: Demand, x: float) -> float:
            changed = d.current > EPS and x > EPS and abs(x - d.current) > EPS
            return max(0.0, 1.0 - d.restart_cost_s / window_s) if changed else 1.0

        options: list[list[tuple[int, float]]] = []
        amounts: list[list[float]] = []
        for d in best_effort:
            counts = [0.0] + [
                float(x)
                for x in range(
                    max(1, math.ceil(d.min_allocation - 1e-6)), int(d.max_allocation + 1e-6) + 1
                )
            ]
            if d.current > EPS and d.current in counts:  # no change first: ties keep it
                counts.remove(d.current)
                counts.insert(0, d.current)
            options.append([(int(x), _speed(d, x) * kept(d, x)) for x in counts])
            amounts.append(counts)
        picks, _ = best_gpu_choices(options, free_gpus)
        return {
            d.key: amount[pick] for d, pick, amount in zip(best_effort, picks, amounts, strict=True)
        }

    def _grant_leftover(self, d: Demand, node: str, alloc: float, base: float) -> None:
        if d.deadline_s is not None:  # elasticflow: a deadline job's share of the leftover
            if alloc > base + EPS:
                g = self.grants[d.key]
                reason = (
                    f"{g.reason}; +{alloc - base:g} {_unit(d)} of the leftover (policy elasticflow)"
                )
                self.grants[d.key] = Grant(d.key, alloc, g.node, g.verdict, reason)
            return
        if alloc > EPS:
            reason = (
                f"best-effort: {alloc:g} {_unit(d)} left over on {node} after deadline jobs' needs"
            )
        else:
            reason = f"best-effort: nothing left over on {node}; waits for idle {_unit(d)}"
        self.grants[d.key] = Grant(d.key, alloc, node, BEST_EFFORT, reason)


def _fill_by_gain(
    jobs: Sequence[Demand], base: Mapping[str, float], free: float, step: float, s: PlannerSettings
) -> dict[str, float]:
    """Hand ``free`` out in steps of ``step`` (a job's first step: up to its min), each to
    the job whose normalized speed rises most per unit; jobs stop at their max."""
    alloc = dict(base)
    heap: list[tuple[float, str, int, float]] = []

    def offer(i: int) -> None:
        d = jobs[i]
        x = alloc[d.key]
        # The most a job may get, on the quantum grid (a max off the grid would otherwise
        # be approached in ever smaller steps, and granted a rounding above it).
        top = _floor_q(d.max_allocation, _quantum(d, s))
        if x >= top - EPS:
            return
        nxt = min(top, max(d.min_allocation, x + step) if x <= EPS else x + step)
        if nxt - x < 0.5 * _quantum(d, s):
            return
        gain = (_speed(d, nxt) - _speed(d, x)) / (nxt - x)
        heapq.heappush(heap, (-gain, d.key, i, nxt))

    for i in range(len(jobs)):
        offer(i)
    while heap and free > EPS:
        _, key, i, nxt = heapq.heappop(heap)
        d = jobs[i]
        x = alloc[key]
        inc = nxt - x
        if inc > free + EPS:
            inc = _floor_q(free, _quantum(d, s))
            if inc <= EPS or (x <= EPS and inc < d.min_allocation - EPS):
                continue
        alloc[key] = round(x + inc, 6)
        free -= inc
        offer(i)
    return alloc


def best_gpu_choices(
    options: Sequence[Sequence[tuple[int, float]]], capacity: int
) -> tuple[list[int], float]:
    """Exact multiple-choice knapsack: pick one option (units, value) per item, total units
    <= ``capacity``, maximizing the total value. Returns (chosen option index per item, value).

    Dynamic programming over (item, units used): O(items x capacity x options), exact.
    Ties keep the earlier option of an item (callers list "no change" first). Every item
    must offer a 0-unit option (so that a choice always exists)."""
    neg = -math.inf
    best = [0.0] + [neg] * capacity  # best[g]: most value with exactly g units used
    picks: list[list[tuple[int, int]]] = []
    for opts in options:
        nxt = [neg] * (capacity + 1)
        pick = [(-1, -1)] * (capacity + 1)
        for g in range(capacity + 1):
            if best[g] == neg:
                continue
            for j, (units, value) in enumerate(opts):
                h = g + units
                if h <= capacity and best[g] + value > nxt[h] + 1e-12:
                    nxt[h] = best[g] + value
                    pick[h] = (j, g)
        picks.append(pick)
        best = nxt
    g = max(range(capacity + 1), key=lambda u: (best[u], -u))
    total = best[g]
    chosen = [0] * len(options)
    for i in range(len(options) - 1, -1, -1):
        j, g = picks[i][g]
        chosen[i] = j
    return chosen, total
