"""The cluster planner: who gets how many cores or GPUs, given every job's need and the nodes.

``plan(demands, nodes, now_s, settings)`` is a pure function: no I/O, no clock, stdlib only
(GPU counts come from an exact dynamic program, ``best_gpu_choices``). Its nodes, and the
packing of a GPU job's pods onto them, are :mod:`decor.core.capacity`'s: the model the operator
reserves a grant's pods with. The operator and the local
runtime call it once per control period after each job's law has said what it needs
(``control.decide``), then act on its grants.

A GPU job may span several pods (``Demand.gpus_per_pod``), and so several nodes: where any
job's grant goes is decided in one place, ``_Cluster``, so that the policies need not tell the
two kinds apart.

The policies (``PlannerSettings.policy``) and the rules they follow are described in
docs/planner.md; ``decor`` is ours, the others are baselines for ``make bench-cluster``.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from decor.api import vocabulary
from decor.core import quota
from decor.core.capacity import Book, Node, Pods, pack_pods, per_node, pod_gpu_counts

# Planner policies (spec: operator setting, not per job).
POLICY_DECOR = "decor"  # ours: admission + minimum satisfactory share + best-effort fill
POLICY_PROPORTIONAL = "decor-nn"  # DECOR-NN: every job scaled down proportionally
POLICY_EDF = "edf"  # earliest deadline first, greedy, no admission control
POLICY_ELASTICFLOW = "elasticflow"  # deadline order, min satisfactory share, admission, gain
POLICY_NONE = "none"  # no arbitration: each job gets its need, capacity permitting, in order
POLICIES = (POLICY_DECOR, POLICY_PROPORTIONAL, POLICY_EDF, POLICY_ELASTICFLOW, POLICY_NONE)

# What ``decor`` does with a job that can no longer meet its deadline (the deadline has passed,
# or even its max finishes after it): PlannerSettings.lost_deadline.
LOST_BEST_EFFORT = "bestEffort"  # it runs on what the admitted jobs leave, like a best-effort job
LOST_KEEP = "keep"  # it keeps its admitted share (and may make a job that can be met late)
LOST_DEADLINE_RULES = (LOST_BEST_EFFORT, LOST_KEEP)
LOST_MARGIN = 0.05
"""A job is lost only when it would finish (or is already) later than its deadline by more
than this share of its span (deadline - creation): a job a few seconds behind near its end
keeps its admitted share and finishes as close to the deadline as it can."""
RESCUE_SPANS = 1.0
"""A lost job that at its max would finish within this many spans after its deadline runs on
the leftover ahead of the jobs without a deadline, the least late first, so that it ends as
little late as the admitted jobs let it; one later still (a job of 10^12 steps) shares the
leftover with them by gain, and cannot starve them."""


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
    # A one-pod job with no pod now (a restart for a new count, a resume): the node its last
    # pod ran on. It goes back there when its room is there (``_Cluster.place``).
    last_node: str | None = None
    step_time_s: Callable[[float], float] | None = None
    restart_cost_s: float = 0.0  # GPU: measured seconds from stop to the first step after resume
    # GPU: the most GPUs one pod holds. 0: one pod on one node holds every GPU of the job;
    # p > 0: a grant of n GPUs runs as the pods of pod_gpu_counts(n, p), on any nodes.
    gpus_per_pod: int = 0
    # gpus_per_pod > 0: the node of each of its pods now, in pod_gpu_counts order (the
    # largest first); () when it has none. ``node`` is for a one-pod job.
    nodes: tuple[str, ...] = ()
    # Its max before a cap that lasts a while (a fallback's hold, a refused resize's backoff):
    # whether it can still meet its deadline is judged at this. 0: ``max_allocation``.
    uncapped_max: float = 0.0
    # What each of its pods charges against its namespace's ResourceQuota beside the
    # allocation (sidecars, memory: ``quota.pod_charge_beside``); () for nothing.
    pod_charge: quota.Amounts = ()
    # What a scoped ResourceQuota looks at in its pods (``quota.pod_facts``): which of its
    # namespace's quotas count them.
    pod_facts: quota.PodFacts = quota.PodFacts()
    # GPU: the most GPUs its law's plan uses over the coming periods, where that is more than
    # ``need`` (fewer now, one switch up later: 3 now, then 4); 0: its need. ``decor`` holds
    # the GPUs of the switch beside its need (``_Book.switch_room``): no other job is admitted
    # into them, while the job is granted, placed and charged at its need.
    planned_peak: float = 0.0


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
    # decor: a job that can no longer meet its deadline (LOST_*); other policies keep it.
    lost_deadline: str = LOST_BEST_EFFORT


@dataclass(frozen=True)
class Grant:
    """The planner's answer for one job.

    ``node``: where the grant runs (a job that spans several pods: the node of its first
    pod); for a job granted nothing, where its pod is (None for a job of several pods).
    ``pods``: where every pod of the grant runs, as ``pod_gpu_counts`` sizes them; () when
    nothing is granted."""

    key: str
    allocation: float  # 0 when queued
    node: str | None
    verdict: str  # one of vocabulary.VERDICT_*
    reason: str  # a sentence for the job's condition message
    earliest_deadline_s: float | None = (
        None  # queued or preempted: earliest deadline it could meet now
    )
    pods: Pods = ()


@dataclass(frozen=True)
class Plan:
    grants: Mapping[str, Grant] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Shared pieces: units, capacity book-keeping, where grants go, speed

EPS = 1e-9
GPU_QUANTUM = 1.0
# Placing a best-effort job with no speed curve beside ones with a curve: its normalized
# speed is taken as sqrt(allocation / max) (diminishing returns; an even split among such jobs).
_NO_CURVE_EXPONENT = 0.5


def _is_gpu(d: Demand) -> bool:
    return d.mode == "gpu"


def _spans_pods(d: Demand) -> bool:
    """Whether ``d``'s GPUs may run as several pods, on several nodes (a CPU job is one pod)."""
    return d.gpus_per_pod > 0 and _is_gpu(d)


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


def _listed(names: Sequence[str], most: int = 3) -> str:
    more = f" (+{len(names) - most} more)" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _names(ds: Sequence[Demand], most: int = 3) -> str:
    return _listed([d.key for d in ds], most)


def _on_nodes(names: Sequence[str]) -> str:
    """For a reason: "node a", "nodes a, b, c (+2 more)", or (none) "the nodes"."""
    if len(names) == 1:
        return f"node {names[0]}"
    return f"nodes {_listed(names)}" if names else "the nodes"


def _where(pods: Pods) -> str:
    """Where a grant runs, for a reason: "n1" for one pod, else every node with the sizes of
    its pods there, "n1 (2 + 2) and n2 (1)"; "any node" for none."""
    if len(pods) <= 1:
        return pods[0][0] if pods else "any node"
    sizes: dict[str, list[str]] = {}
    for node, amount in pods:
        sizes.setdefault(node, []).append(f"{amount:g}")
    parts = [f"{node} ({' + '.join(each)})" for node, each in sizes.items()]
    return f"{', '.join(parts[:-1])} and {parts[-1]}" if len(parts) > 1 else parts[0]


def _grant(
    d: Demand, got: float, pods: Pods, verdict: str, reason: str, idle_node: str | None = None
) -> Grant:
    """``got`` on ``pods`` (its node: the first pod's); ``idle_node`` when ``got`` is 0."""
    if got > 0:
        return Grant(d.key, got, pods[0][0], verdict, reason, None, pods)
    return Grant(d.key, 0.0, idle_node, verdict, reason)


def _served(d: Demand, got: float, need: float) -> str:
    """The verdict of a policy without admission: best-effort, else whether it got its need."""
    if d.deadline_s is None:
        return vocabulary.VERDICT_BEST_EFFORT
    return vocabulary.VERDICT_ADMITTED if got >= need - EPS else vocabulary.VERDICT_SHORTED


class _Cluster(Book):
    """Free capacity per node and resource, as grants are made (a ``capacity.Book``, local to
    a plan), and where a job's grant goes, so that the policies need not tell a one-pod job
    from one that spans several pods: ``place`` (where an amount fits now), ``most`` (the most
    of an amount that fits). A one-pod job's pod stays on its node. The pods of a job that spans
    several (``gpus_per_pod``) stay where they run while its count is unchanged; a new count
    restarts every pod, and they are packed anew onto any nodes (``pack_pods``)."""

    def home(self, d: Demand) -> str | None:
        """The node a one-pod job's pod lives on, if the planner knows it (None for a job that
        spans pods: it has no one node)."""
        return None if _spans_pods(d) or d.node not in self.free_cpu else d.node

    def back(self, d: Demand, amount: float) -> str | None:
        """The node a one-pod job with no pod ran on last (``Demand.last_node``), when
        ``amount`` fits there: a restart for a new count or a resume goes back to the room
        its own pod left, before any best fit. *Why*: its checkpoint may be on that node (a
        hostPath), its image is, and a restart by best fit took another node's tight hole
        and left its own room empty for others to be moved into."""
        node = d.last_node
        if _spans_pods(d) or node is None or node not in self.free_cpu:
            return None
        return node if self.free(node, d) >= amount - EPS else None

    def runs_on(self, d: Demand) -> tuple[str, ...]:
        """The known nodes of the job's pods now, one per pod."""
        if not _spans_pods(d):
            home = self.home(d)
            return (home,) if home else ()
        nodes = d.nodes or ((d.node,) if d.node else ())
        return tuple(n for n in nodes if n in self.free_cpu)

    def free(self, node: str, d: Demand) -> float:
        return self.book(_is_gpu(d))[node]

    def take(self, d: Demand, pods: Pods) -> None:
        self.reserve(_is_gpu(d), pods)

    def give(self, d: Demand, pods: Pods) -> None:
        self.release(_is_gpu(d), pods)

    def place(self, d: Demand, amount: float) -> Pods | None:
        """Where ``amount`` of ``d`` would run now; None when it does not fit. A one-pod job:
        on its pod's node, else the best fit. A job that spans pods: the pods of
        ``pod_gpu_counts``, where they run while the count is unchanged, else packed."""
        if not _spans_pods(d):
            node = self.home(d) or self.back(d, amount) or self.best_fit(_is_gpu(d), amount)
            if node is None or self.free(node, d) < amount - EPS:
                return None
            return ((node, amount),)
        counts = pod_gpu_counts(round(amount), d.gpus_per_pod)
        now = self.runs_on(d)
        if abs(d.current - amount) < EPS and len(now) == len(counts):
            pods = tuple(zip(now, map(float, counts), strict=True))
            return pods if self.holds(pods) else None
        return self.pack(counts, Counter(now))

    def most(self, d: Demand, want: float, s: PlannerSettings) -> tuple[float, Pods]:
        """The most of ``want`` that ``d`` can have now (on the quantum, at least its min), and
        where. A one-pod job is sized on its pod's node, else the best fit for ``want``, else
        the node with the most free; that node is named even when it holds nothing ((0, ())
        with no node at all). A job that spans pods gets the largest count whose pods can be
        placed ((0, ()) when none): every count from ``want`` down is tried, as more GPUs can
        fit where fewer do not (4 in pods of at most 3 are 2 + 2; 3 are one pod of 3)."""
        if not _spans_pods(d):
            node = (
                self.home(d)
                or self.back(d, want)
                or self.best_fit(_is_gpu(d), want)
                or self.most_free(_is_gpu(d))
            )
            if node is None:
                return 0.0, ()
            got = _fit(d, self.free(node, d), want, s)
            return got, ((node, got),)
        fewest = max(1, math.ceil(d.min_allocation - 1e-6))
        for count in range(math.floor(min(want, d.max_allocation) + 1e-6), fewest - 1, -1):
            pods = self.place(d, float(count))
            if pods is not None:
                return float(count), pods
        return 0.0, ()

    def fits(
        self, d: Demand, amount: float, scope: Sequence[str], freed: Mapping[str, float]
    ) -> bool:
        """Whether ``amount`` of ``d`` would fit in ``scope`` (see ``scopes``) were ``freed``
        given back on its nodes."""
        if not _spans_pods(d):
            (node,) = scope
            return self.free(node, d) + freed.get(node, 0.0) >= amount - EPS
        trial = self.copy()
        trial.give(d, tuple(freed.items()))
        return trial.place(d, amount) is not None

    def scopes(self, d: Demand) -> list[list[str]]:
        """Where preempting other jobs could make room for ``d``: one node (a one-pod job's
        own, else each in turn), or every node together for a job that spans pods."""
        if _spans_pods(d):
            return [list(self.names)] if self.names else []
        home = self.home(d)
        return [[home]] if home else [[n] for n in self.names]

    def reach(self, d: Demand, want: float, s: PlannerSettings) -> list[str]:
        """The nodes where a job that cannot have ``want`` meets the jobs that fill them: a
        one-pod job's node (else the one with the most free); a job that spans pods, the
        nodes its pods run on (else those the most of ``want`` that fits would use)."""
        if not _spans_pods(d):
            node = self.home(d) or self.most_free(_is_gpu(d))
            return [node] if node is not None else []
        nodes = self.runs_on(d) or tuple(n for n, _ in self.most(d, want, s)[1])
        return list(dict.fromkeys(nodes))

    def room(self, d: Demand, want: float, s: PlannerSettings) -> str:
        """How much of ``want`` fits, for a reason (``want`` does not)."""
        if _spans_pods(d):
            got, _ = self.most(d, want, s)
            return f"{got:g} at most fit, in pods of at most {d.gpus_per_pod} on any nodes"
        home = self.home(d)
        most = max((self.free(n, d) for n in ([home] if home else self.names)), default=0.0)
        return f"{most:g} free at most {f'on {home}' if home else 'on any node'}"


def _fit(d: Demand, room: float, want: float, s: PlannerSettings) -> float:
    """The most of ``want`` that ``room`` holds, or 0 when that is below min_allocation."""
    got = min(want, _floor_q(max(room, 0.0), _quantum(d, s)))
    return got if got >= d.min_allocation - EPS and got > EPS else 0.0


# ---------------------------------------------------------------------------------------
# ResourceQuotas: what each namespace leaves, booked as a plan makes its grants

QUOTA_TOLERANCE = 1e-6
"""A charge may pass what a quota leaves by this much (rounding of cores and bytes)."""


def _namespace(d: Demand) -> str:
    return d.key.partition("/")[0]


def _pod_count(d: Demand, amount: float) -> int:
    """How many pods ``amount`` of ``d`` runs as (none for nothing)."""
    if amount <= EPS:
        return 0
    return len(pod_gpu_counts(round(amount), d.gpus_per_pod)) if _spans_pods(d) else 1


@dataclass(frozen=True)
class _Short:
    """Why an amount does not fit: the quota, the resource and what the quota leaves of it."""

    title: str
    resource: str
    left: float

    def __str__(self) -> str:
        bytes_ = self.resource.endswith("memory")
        left = f"{self.left / 2**20:g}Mi" if bytes_ else f"{self.left:g}"
        return f"{self.title} leaves {left} of {self.resource}"


class _Quotas:
    """What each namespace's ResourceQuotas leave as a plan books its grants (local to one
    ``plan`` call). A namespace with no quota is not bounded.

    A running job is booked for its min from the start: granted less, its pod keeps its min
    (``lifecycle.run_target``: only preemption takes a pod away), and that is charged."""

    def __init__(self, quotas: Sequence[quota.Quota], demands: Sequence[Demand] = ()) -> None:
        self.left: dict[str, list[tuple[str, dict[str, float], quota.Scope]]] = {}
        for q in sorted(quotas, key=lambda q: (q.namespace, q.name)):
            self.left.setdefault(q.namespace, []).append((q.title, dict(q.left), q.scope))
        self.booked: dict[str, dict[str, float]] = {}  # job -> what its grant charges
        self.floor = {d.key: d.min_allocation for d in demands if d.current > EPS}
        for d in demands:
            if d.key in self.floor:
                self.book(d, 0.0)

    def copy(self) -> _Quotas:
        other = _Quotas(())
        other.left = {ns: [(t, dict(x), sc) for t, x, sc in qs] for ns, qs in self.left.items()}
        other.booked, other.floor = dict(self.booked), dict(self.floor)
        return other

    def _of(self, d: Demand) -> list[tuple[str, dict[str, float]]]:
        """The quotas of ``d``'s namespace that count its pods (by their scopes), by name."""
        if not self.left:  # (the common case, kept cheap: no namespace has a quota)
            return []
        return [
            (title, left)
            for title, left, scope in self.left.get(_namespace(d), ())
            if quota.applies(scope, d.pod_facts)
        ]

    def bounds(self, d: Demand) -> bool:
        """Whether any quota counts ``d``'s pods."""
        return bool(self._of(d))

    def _charge(self, d: Demand, amount: float) -> dict[str, float]:
        amount = max(amount, self.floor.get(d.key, 0.0))
        return quota.charge(dict(d.pod_charge), d.mode, amount, _pod_count(d, amount))

    def gone(self, d: Demand) -> None:
        """``d``'s pods are gone (it finished, or it is preempted): it holds nothing."""
        self.floor.pop(d.key, None)
        self.book(d, 0.0)

    def short(self, d: Demand, amount: float) -> _Short | None:
        """The first quota (by name) and resource that ``amount`` of ``d`` would pass, what
        ``d`` has booked given back; None when it fits."""
        quotas = self._of(d)
        if not quotas:
            return None
        want, had = self._charge(d, amount), self.booked.get(d.key, {})
        for title, left in quotas:
            for r in quota.CHARGED:
                back = had.get(r, 0.0)
                if r in left and want.get(r, 0.0) - back > left[r] + QUOTA_TOLERANCE:
                    return _Short(title, r, left[r] + back)
        return None

    def book(self, d: Demand, amount: float) -> None:
        """``d`` holds ``amount`` now (what it was booked for before is given back)."""
        quotas = self._of(d)
        if not quotas:
            return
        want, had = self._charge(d, amount), self.booked.pop(d.key, {})
        for _, left in quotas:
            for r in left:
                left[r] += had.get(r, 0.0) - want.get(r, 0.0)
        if want:
            self.booked[d.key] = want

    def most(self, d: Demand, want: float, s: PlannerSettings) -> float:
        """The most of ``want`` that the quotas let ``d`` hold: on the quantum, at least its
        min, else 0."""
        if self.short(d, want) is None:
            return want
        if _is_gpu(d):
            fewest = max(1, math.ceil(d.min_allocation - 1e-6))
            for count in range(math.floor(want + 1e-6), fewest - 1, -1):
                if self.short(d, float(count)) is None:
                    return float(count)
            return 0.0
        top, had, per_pod = want, self.booked.get(d.key, {}), dict(d.pod_charge)
        for _, left in self._of(d):  # one pod: its charge grows with its cores
            for r in quota.ALLOCATION_CHARGES["cpu"]:
                if r in left:
                    top = min(top, left[r] + had.get(r, 0.0) - per_pod.get(r, 0.0))
        got = _floor_q(max(top, 0.0), _quantum(d, s))
        if got <= EPS or got < d.min_allocation - EPS or self.short(d, got) is not None:
            return 0.0
        return got


def _shrunk(d: Demand, pods: Pods, amount: float) -> Pods:
    """``amount`` of ``d`` on the nodes of ``pods`` (what they hold there bounds it): a one-pod
    job's pod; a job that spans pods, the largest count from ``amount`` down whose pods fit."""
    if amount <= EPS or not pods:
        return ()
    if not _spans_pods(d):
        return ((pods[0][0], amount),)
    held = per_node(pods)
    fewest = max(1, math.ceil(d.min_allocation - 1e-6))
    for count in range(math.floor(amount + 1e-6), fewest - 1, -1):
        placed = pack_pods(pod_gpu_counts(count, d.gpus_per_pod), held, sorted(held), {})
        if placed is not None:
            return placed
    return ()


def _within_quotas(
    demands: Sequence[Demand], grants: Mapping[str, Grant], quotas: _Quotas, s: PlannerSettings
) -> dict[str, Grant]:
    """Every grant within what its namespace's quotas leave, deadline jobs first (priority,
    deadline, arrival), best-effort ones after (arrival): a grant past them is cut to the
    most they leave, on the nodes it had. Policy decor books the quotas as it admits, so
    this cuts only what best-effort jobs of one namespace would share; the baselines have
    no other bound."""
    out = dict(grants)
    for d in demands:
        if out[d.key].verdict == vocabulary.VERDICT_PREEMPTED:
            quotas.gone(d)
    order = sorted(
        demands,
        key=lambda d: (d.deadline_s is None, -d.priority, d.deadline_s or 0.0, d.arrival_s, d.key),
    )
    for d in (d for d in order if out[d.key].verdict != vocabulary.VERDICT_PREEMPTED):
        g = out[d.key]
        short = quotas.short(d, g.allocation) if g.allocation > EPS else None
        if short is not None:
            pods = _shrunk(d, g.pods, quotas.most(d, g.allocation, s))
            got = sum(a for _, a in pods)
            late = d.deadline_s is not None and got < need_of(d, s) - EPS
            verdict = vocabulary.VERDICT_SHORTED if late else g.verdict
            reason = f"{g.reason}; cut to {got:g} {_unit(d)}: {short}"
            g = out[d.key] = _grant(d, got, pods, verdict, reason, g.node)
        quotas.book(d, g.allocation)
    return out


def _lower(
    a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The smaller of two step functions given as (time, value) from the same start."""

    def at(points: Sequence[tuple[float, float]], t: float) -> float:
        return [v for u, v in points if u <= t][-1] if points and points[0][0] <= t else 0.0

    return [(t, min(at(a, t), at(b, t))) for t in sorted({t for t, _ in [*a, *b]})]


# ---------------------------------------------------------------------------------------
# The entry point


def plan(
    demands: Sequence[Demand],
    nodes: Sequence[Node],
    now_s: float,
    settings: PlannerSettings = PlannerSettings(),
    quotas: Sequence[quota.Quota] = (),
) -> Plan:
    """Allocations and admission verdicts for every demand. Deterministic for equal input:
    the demands' and nodes' order does not matter (ties are broken by key, then node name).
    ``quotas``: what each namespace's ResourceQuotas leave for its jobs; no grant passes them
    (a namespace without one is not bounded).

    Raises ValueError for an unknown policy or two demands with the same key.
    """
    if settings.policy not in POLICIES:
        raise ValueError(f"unknown planner policy {settings.policy!r}; one of {POLICIES}")
    ordered = sorted(demands, key=lambda d: d.key)
    if len({d.key for d in ordered}) != len(ordered):
        raise ValueError("two demands share a key")
    cluster = _Cluster(nodes)
    if settings.policy in (POLICY_DECOR, POLICY_ELASTICFLOW):
        grants = _plan_admission(ordered, cluster, now_s, settings, _Quotas(quotas, ordered))
    elif settings.policy == POLICY_PROPORTIONAL:
        grants = _plan_proportional(ordered, cluster, settings)
    else:
        grants = _plan_in_order(ordered, cluster, settings)
    if quotas:
        grants = _within_quotas(ordered, grants, _Quotas(quotas, ordered), settings)
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
        got, pods = cluster.most(d, want, s)
        cluster.take(d, pods)
        reason = f"granted {got:g} of {want:g} {_unit(d)} on {_where(pods)}; {rule}"
        idle_node = cluster.home(d) if got <= 0 else None
        grants[d.key] = _grant(d, got, pods, _served(d, got, need), reason, idle_node)
    return grants


# ---------------------------------------------------------------------------------------
# Baseline: DECOR-NN's proportional scale-down


_Slot = tuple[str, bool]  # (node, GPU?): where a one-pod job's ask is counted


@dataclass
class _Asks:
    """Where DECOR-NN's asks landed: one-pod jobs by (node, GPU?), the nodes each pod of a
    job that spans pods asks on, the total asked per (node, GPU?), and the jobs no node
    takes."""

    placed: dict[_Slot, list[Demand]] = field(default_factory=dict)
    spread: dict[str, list[str]] = field(default_factory=dict)
    asked: dict[_Slot, float] = field(default_factory=dict)
    unplaced: list[Demand] = field(default_factory=list)


def _plan_proportional(
    demands: Sequence[Demand], cluster: _Cluster, s: PlannerSettings
) -> dict[str, Grant]:
    """Everyone asks its need (best-effort jobs their max); on a node whose asks exceed its
    capacity every ask is scaled by capacity / sum, then raised to min; if the mins do not
    fit, the latest arrivals get nothing. A job that spans pods asks with each of its pods,
    each on the node with the most room like a new one-pod job's; it is granted its ask
    scaled by the smallest factor among those nodes, from what the one-pod jobs leave."""
    asks = {
        d.key: (need_of(d, s) if d.deadline_s is not None else d.max_allocation) for d in demands
    }
    where = _place_asks(demands, asks, cluster)
    factor = _scale_factors(where.asked, cluster)
    grants: dict[str, Grant] = {}
    for slot, jobs in sorted(where.placed.items()):
        _grant_scaled_on_node(jobs, asks, slot, factor[slot], cluster, s, grants)
    for d in sorted((d for d in demands if d.key in where.spread), key=_by_arrival):
        _grant_scaled_pods(d, asks[d.key], where.spread[d.key], factor, cluster, s, grants)
    for d in where.unplaced:
        verdict = (
            vocabulary.VERDICT_SHORTED
            if d.deadline_s is not None
            else vocabulary.VERDICT_BEST_EFFORT
        )
        grants[d.key] = Grant(
            d.key, 0.0, None, verdict, f"no node offers {_unit(d)} (policy decor-nn)"
        )
    return grants


def _by_arrival(d: Demand) -> tuple[float, str]:
    return (d.arrival_s, d.key)


def _place_asks(demands: Sequence[Demand], asks: Mapping[str, float], cluster: _Cluster) -> _Asks:
    """Each job's ask (each pod's share of it, for a job that spans pods), in arrival order,
    on its pod's node, else on the node with the most capacity not yet asked for (the first
    by name on a tie)."""
    where = _Asks(asked={(n, g): 0.0 for n in cluster.names for g in (False, True)})
    for d in sorted(demands, key=_by_arrival):
        gpu = _is_gpu(d)
        book = cluster.free_gpu if gpu else cluster.free_cpu
        shares = (
            pod_gpu_counts(round(asks[d.key]), d.gpus_per_pod) if _spans_pods(d) else [asks[d.key]]
        )
        on: list[str] = []
        for share in shares:
            node = cluster.home(d)
            if node is None and cluster.names:
                node = min(cluster.names, key=lambda n: (-(book[n] - where.asked[(n, gpu)]), n))
            if node is None:
                break
            where.asked[(node, gpu)] += share
            on.append(node)
        if len(on) < len(shares):
            where.unplaced.append(d)
        elif _spans_pods(d):
            where.spread[d.key] = on
        else:
            where.placed.setdefault((on[0], gpu), []).append(d)
    return where


def _scale_factors(asked: Mapping[_Slot, float], cluster: _Cluster) -> dict[_Slot, float]:
    """What every ask on a (node, GPU?) is scaled by: 1 where the asks fit its free
    capacity, else free / asked."""
    factor: dict[_Slot, float] = {}
    for (node, gpu), total in asked.items():
        free = (cluster.free_gpu if gpu else cluster.free_cpu)[node]
        factor[(node, gpu)] = 1.0 if total <= free + EPS else free / total
    return factor


def _grant_scaled_on_node(
    jobs: Sequence[Demand],
    asks: Mapping[str, float],
    slot: _Slot,
    factor: float,
    cluster: _Cluster,
    s: PlannerSettings,
    grants: dict[str, Grant],
) -> None:
    """One node's one-pod jobs (in arrival order): each its ask scaled by ``factor``, raised
    to its min; the latest arrivals get nothing while the mins do not fit the node."""
    node, gpu = slot
    free = (cluster.free_gpu if gpu else cluster.free_cpu)[node]
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
        cluster.take(d, ((node, got),))
        reason = (
            f"granted {got:g} of {asks[d.key]:g} {_unit(d)} on {node}: asks scaled by "
            f"{factor:.3g} to the node's capacity (policy decor-nn)"
        )
        verdict = _served(d, got, asks[d.key])
        grants[d.key] = _grant(d, got, ((node, got),), verdict, reason, node)


def _grant_scaled_pods(
    d: Demand,
    ask: float,
    nodes: Sequence[str],
    factor: Mapping[_Slot, float],
    cluster: _Cluster,
    s: PlannerSettings,
    grants: dict[str, Grant],
) -> None:
    """A job that spans pods: its ask scaled by the smallest factor among the nodes its pods
    asked on, raised to its min, placed where the one-pod jobs left room."""
    scale = min((factor[(n, True)] for n in nodes), default=1.0)
    want = max(_floor_q(ask * scale, GPU_QUANTUM), d.min_allocation)
    got, pods = cluster.most(d, want, s)
    cluster.take(d, pods)
    reason = (
        f"granted {got:g} of {ask:g} GPUs on {_where(pods)}: its pods' asks scaled "
        f"by {scale:.3g} to their nodes' capacity (policy decor-nn)"
    )
    grants[d.key] = _grant(d, got, pods, _served(d, got, ask), reason)


# ---------------------------------------------------------------------------------------
# decor and elasticflow: admission control, minimum satisfactory share, leftover


def _plan_admission(
    demands: Sequence[Demand], cluster: _Cluster, now_s: float, s: PlannerSettings, q: _Quotas
) -> dict[str, Grant]:
    """The phases, in order: hold admitted needs (priority, then deadline, decides who gives
    way on a full node; ours: a job of unknown speed its probe, ``_Book.probe``); admit new
    jobs whose need fits (ours: a higher priority may displace a lower one; the jobs of
    known speed first, then the rest of the probing jobs' needs, then the others); tell the
    waiting ones the earliest deadline they could meet; hand out the leftover (ours: to best-effort jobs, GPU counts with restart costs; elasticflow: to every
    running job by marginal gain). A namespace's quotas bound its jobs as its nodes do: a
    new job whose need they cannot hold waits, best-effort jobs get what they leave."""
    ours = s.policy == POLICY_DECOR
    book = _Book(cluster, s, now_s, ours, q)
    lost = _lost_causes(demands, now_s) if book.probes else {}  # (the same rule)
    with_deadline = [d for d in demands if d.deadline_s is not None and d.key not in lost]
    book.lowest_priority = min((d.priority for d in with_deadline), default=0)
    for d in sorted((d for d in with_deadline if d.admitted), key=book.hold_rank):
        book.hold_admitted(d)
    new = sorted((d for d in with_deadline if not d.admitted), key=book.rank)
    if book.probes:  # new jobs of known speed before what the admitted jobs of unknown speed
        # ask beyond their probe (``_Book.probe``); the new jobs of unknown speed last
        for d in (d for d in new if d.step_time_s is not None):
            book.admit_new(d)
        for d in sorted((d for d in with_deadline if d.key in book.probing), key=book.hold_rank):
            book.top_up(d)
        new = [d for d in new if d.step_time_s is None]
    for d in new:
        book.admit_new(d)
    _Waiting(book).tell()
    leftover = _Leftover(book, _rescued(demands, lost, now_s))
    best_effort = leftover.within_quota(
        [
            replace(d, deadline_s=None) if d.key in lost else d
            for d in demands
            if d.deadline_s is None or d.key in lost
        ]
    )
    leftover.fill(best_effort)
    for key, why in lost.items():
        g = book.grants[key]
        first = ", ahead of the jobs without one" if key in leftover.rescue else ""
        book.grants[key] = replace(g, reason=f"{why}: runs as best effort{first}; {g.reason}")
    return book.grants


def _lost_causes(demands: Sequence[Demand], now_s: float) -> dict[str, str]:
    """The deadline jobs that can no longer meet their deadline, each with why: the deadline
    has passed, or (an admitted job) even its max by its speed curve finishes after it, in
    both cases by more than ``LOST_MARGIN`` of its span. A job with no curve yet is not
    proven late, nor one whose steps are all done (its trainer is ending: saving, exiting);
    a new job that could not make it is told so and waits (``admit_new``: the earliest
    deadline it could meet) until its deadline is moved or has passed."""
    lost: dict[str, str] = {}
    for d in demands:
        if d.deadline_s is None or d.steps_remaining <= 0:
            continue
        slack_s = LOST_MARGIN * max(0.0, d.deadline_s - d.arrival_s)
        if now_s > d.deadline_s + slack_s:
            lost[d.key] = f"its deadline {_utc(d.deadline_s)} has passed"
            continue
        most = _most(d)
        at_max_s = run_s(d, most)
        if d.admitted and at_max_s is not None and now_s + at_max_s > d.deadline_s + slack_s + EPS:
            lost[d.key] = (
                f"even at its max of {most:g} {_unit(d)} it would finish at "
                f"{_utc(now_s + at_max_s)}, after its deadline {_utc(d.deadline_s)}"
            )
    return lost


def _most(d: Demand) -> float:
    """The most a job could run at, a cap that lasts a while lifted: what the lost rule
    judges it by."""
    return max(d.max_allocation, d.uncapped_max)


def _rescued(demands: Sequence[Demand], lost: Mapping[str, str], now_s: float) -> dict[str, float]:
    """The lost jobs that run on the leftover ahead of the jobs without a deadline
    (``RESCUE_SPANS``), each with how late it would finish at its max, in spans."""
    rescued: dict[str, float] = {}
    for d in demands:
        if d.key not in lost or d.deadline_s is None:
            continue
        at_max_s = run_s(d, _most(d))
        if at_max_s is None:
            continue
        late = (now_s + at_max_s - d.deadline_s) / max(d.deadline_s - d.arrival_s, EPS)
        if late <= RESCUE_SPANS:
            rescued[d.key] = late
    return rescued


class _Book:
    """The state of one admission plan as its phases run (local to one ``plan`` call), and
    its first two phases: hold the admitted jobs' needs, admit new jobs. The later
    phases read and extend it: ``_Waiting`` (the earliest deadline a waiting job could
    meet) and ``_Leftover`` (what the deadline jobs leave, to best-effort jobs)."""

    def __init__(
        self, cluster: _Cluster, s: PlannerSettings, now_s: float, ours: bool, quotas: _Quotas
    ) -> None:
        self.cluster, self.s, self.now_s, self.ours = cluster, s, now_s, ours
        self.quotas = quotas
        self.grants: dict[str, Grant] = {}
        self.held: dict[str, list[tuple[Demand, float]]] = {}  # node -> deadline jobs' holds there
        self.pods_of: dict[str, Pods] = {}  # deadline job -> the pods it holds
        self.waiting: list[Demand] = []  # queued or preempted: told their earliest deadline
        self.probing: dict[str, float] = {}  # admitted, held at its probe -> its need
        # ours under LOST_BEST_EFFORT: lost jobs run as best effort, unmeasured ones probe
        self.probes = ours and s.lost_deadline == LOST_BEST_EFFORT
        self.lowest_priority = 0  # of the deadline jobs planned (``probe``)

    def probe(self, d: Demand) -> float | None:
        """Ours: what an admitted CPU job of unknown speed (no curve yet) holds first: its
        min, where that is less than its need; None for every other job. The rest of its
        need (``top_up``) comes after the new jobs of known speed are admitted: a job whose
        speed nobody has measured may be one that cannot finish, and does not keep a job
        that can be met out. A job that outranks another deadline job holds its need (a
        lower priority does not take its room), and so does a GPU job (a change of count
        restarts it), and every job under the ``LOST_KEEP`` rule, as a lost job does."""
        if not self.probes or _is_gpu(d) or d.step_time_s is not None:
            return None
        if d.priority > self.lowest_priority:  # nothing it outranks takes its room
            return None
        probe = need_of(replace(d, need=d.min_allocation), self.s)
        return probe if probe < need_of(d, self.s) - EPS else None

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
        running = d.current > EPS and bool(self.cluster.runs_on(d))
        return (-self.prio(d), not running, d.deadline_s or 0.0, d.arrival_s, d.key)

    def _hold(self, d: Demand, pods: Pods, switch_room: Pods = ()) -> None:
        """Hold ``pods`` for ``d`` (charged to its namespace's quotas) and ``switch_room``
        beside them (the GPUs of a planned switch up: held on the nodes, not charged)."""
        held = (*pods, *switch_room)
        self.cluster.take(d, held)
        self.quotas.book(d, sum(a for _, a in pods))
        self.pods_of[d.key] = held
        for node, amount in per_node(held).items():
            self.held.setdefault(node, []).append((d, amount))

    def switch_room(self, d: Demand, pods: Pods, need: float) -> tuple[Pods, str]:
        """Where the GPUs of ``d``'s planned switch up (``Demand.planned_peak`` beyond
        ``need``, granted on ``pods``) are held, and a note for its reason; ((), "") for none
        planned (a CPU job, a baseline policy). A one-pod job's switch restarts its pod on its
        node, so the room is there; a job that spans pods is packed anew at a switch, so the
        room is pods of at most ``gpus_per_pod`` on any nodes, its own first. No room: nothing
        is held, and the reason says so (the switch will be re-planned if refused)."""
        peak = min(_ceil_q(d.planned_peak, GPU_QUANTUM), d.max_allocation)
        if not (self.ours and _is_gpu(d)) or peak <= need + EPS or not pods:
            return (), ""
        extra = peak - need
        trial = self.cluster.copy()
        trial.take(d, pods)
        room: Pods | None
        if _spans_pods(d):
            counts = pod_gpu_counts(round(extra), d.gpus_per_pod)
            room = trial.pack(counts, Counter(n for n, _ in pods))
        else:
            node = pods[0][0]
            room = ((node, extra),) if trial.free(node, d) >= extra - EPS else None
        if room is None:
            return (), f"; no room for its planned switch to {peak:g} {_unit(d)}"
        return room, f"; {extra:g} more held on {_where(room)} for its planned switch to {peak:g}"

    def _release(self, d: Demand) -> None:
        self.probing.pop(d.key, None)  # (a probing job preempted is no longer topped up)
        pods = self.pods_of.pop(d.key)
        self.cluster.give(d, pods)
        self.quotas.gone(d)
        for node in per_node(pods):
            self.held[node] = [(h, a) for h, a in self.held[node] if h.key != d.key]

    def _holders(self, nodes: Sequence[str], mode: str, below: float = math.inf) -> list[Demand]:
        """The deadline jobs that hold ``mode`` capacity on ``nodes``, each once, as held
        (those of a priority below ``below`` only)."""
        if len(nodes) == 1:  # (the common case, kept cheap: one node holds a job once)
            held = self.held.get(nodes[0], ())
            return [h for h, _ in held if h.mode == mode and h.priority < below]
        found = {
            h.key: h
            for n in nodes
            for h, _ in self.held.get(n, ())
            if h.mode == mode and h.priority < below
        }
        return list(found.values())

    def _admitted(self, d: Demand, pods: Pods, need: float, note: str = "") -> None:
        room, switch_note = self.switch_room(d, pods, need)
        self._hold(d, pods, room)
        note += switch_note
        finish = run_s(d, need)
        assert d.deadline_s is not None
        on_time = finish is not None and self.now_s + finish <= d.deadline_s + EPS
        when = (
            f"predicted to finish at {_utc(self.now_s + finish)}, "
            f"{'by' if on_time else 'after'} its deadline {_utc(d.deadline_s)}"
            if finish is not None
            else f"its need to meet the deadline {_utc(d.deadline_s)}"
        )
        reason = f"admitted: {need:g} {_unit(d)} on {_where(pods)}, {when}{note}"
        self.grants[d.key] = _grant(d, need, pods, vocabulary.VERDICT_ADMITTED, reason)

    def hold_admitted(self, d: Demand) -> None:
        """An admitted job keeps at least its need unless a job ranked before it holds the
        node: a higher priority preempts it, an earlier deadline shorts it. A job of unknown
        speed holds its probe here (``probe``), the rest later (``top_up``)."""
        probe = self.probe(d)
        need = need_of(d, self.s) if probe is None else probe
        short = self.quotas.short(d, need)
        if short is not None:
            self._quota_shorted(d, need, short)
            return
        pods = self.cluster.place(d, need)
        if pods is not None:
            self._admitted(d, pods, need)
            if probe is not None:
                self.probing[d.key] = need_of(d, self.s)
            return
        reach = self.cluster.reach(d, need, self.s)
        before = self._holders(reach, d.mode)
        higher = [h for h in before if self.prio(h) > self.prio(d)]
        if higher:
            reason = (
                f"preempted: {_on_nodes(reach)} cannot hold its need of {need:g} {_unit(d)} "
                f"beside higher-priority {_names(higher)}"
            )
            self.grants[d.key] = _grant(
                d, 0.0, (), vocabulary.VERDICT_PREEMPTED, reason, self.cluster.home(d)
            )
            self.quotas.gone(d)
            self.waiting.append(d)
            return
        got, pods = self.cluster.most(d, need, self.s)
        if got > 0:
            self._hold(d, pods)
        who = f"earlier-deadline {_names(before)} first" if before else "too little"
        reason = (
            f"shorted: granted {got:g} of the {need:g} {_unit(d)} it needs; "
            f"{_on_nodes(reach)} {'holds' if len(reach) == 1 else 'hold'} {who}; it will be late"
        )
        self.grants[d.key] = _grant(d, got, pods, vocabulary.VERDICT_SHORTED, reason)

    def top_up(self, d: Demand) -> None:
        """An admitted job held at its probe (``probe``) gets the rest of its need, or what
        its node and quotas have left of it after the jobs of known speed: ``Shorted``, and
        its reason says why (nothing says yet that it will be late)."""
        need = self.probing.pop(d.key)
        ((node, held),) = self.pods_of[d.key]
        self._release(d)
        want = _floor_q(min(need, self.cluster.free(node, d)), _quantum(d, self.s))
        if self.quotas.bounds(d):
            want = self.quotas.most(d, want, self.s)
        if want >= need - EPS:
            self._admitted(d, ((node, need),), need)
            return
        # Shorted, it gives back room in steps of ``hysteresis_cores``: the new job's need
        # creeps up while its pod waits for the room, and a resize every period would keep
        # the room in flight (a shrink frees nothing until it lands).
        got = max(_floor_q(want, max(self.s.hysteresis_cores, _quantum(d, self.s))), held)
        self._hold(d, ((node, got),))
        reason = (
            f"shorted: granted {got:g} of the {need:g} {_unit(d)} it asks on {node}; its speed "
            "is not measured yet, and jobs of known speed come first"
        )
        self.grants[d.key] = _grant(d, got, ((node, got),), vocabulary.VERDICT_SHORTED, reason)

    def _quota_shorted(self, d: Demand, need: float, short: _Short) -> None:
        """An admitted job whose need its namespace's quotas no longer hold: the most they
        and the nodes let it have."""
        cap = self.quotas.most(d, need, self.s)
        got, pods = self.cluster.most(d, cap, self.s) if cap > 0 else (0.0, ())
        if got > 0:
            self._hold(d, pods)
        reason = (
            f"shorted: granted {got:g} of the {need:g} {_unit(d)} it needs; {short}; "
            "it will be late"
        )
        self.grants[d.key] = _grant(
            d, got, pods, vocabulary.VERDICT_SHORTED, reason, self.cluster.home(d)
        )

    def admit_new(self, d: Demand) -> None:
        """Admit ``d`` if its need fits beside the admitted needs (ours: or by displacing
        lower-priority jobs); otherwise it waits (vocabulary.VERDICT_QUEUED)."""
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
        short = self.quotas.short(d, need)
        if short is not None:
            self._wait(d, f"not admitted: its need of {need:g} {_unit(d)} is more than {short}")
            return
        pods = self.cluster.place(d, need)
        if pods is not None:
            self._admitted(d, pods, need)
            return
        victims = self._displace(d, need) if self.ours else None
        if victims is None:
            reason = (
                f"not admitted: its need of {need:g} {_unit(d)} does not fit beside the "
                f"admitted jobs' needs ({self.cluster.room(d, need, self.s)})"
            )
            self._wait(d, reason)
            return
        for v in victims:
            self._release(v)
        pods = self.cluster.place(d, need)
        assert pods is not None  # what the victims held makes room
        for v in victims:
            reason = (
                f"preempted by higher-priority {d.key} (priority {d.priority} > {v.priority}) "
                f"on {_on_nodes(list(per_node(pods)))}"
            )
            self.grants[v.key] = _grant(
                v, 0.0, (), vocabulary.VERDICT_PREEMPTED, reason, self.cluster.home(v)
            )
            self.waiting.append(v)
        self._admitted(d, pods, need, f"; displaced lower-priority {_names(victims)}")

    def _wait(self, d: Demand, reason: str) -> None:
        self.grants[d.key] = _grant(
            d, 0.0, (), vocabulary.VERDICT_QUEUED, reason, self.cluster.home(d)
        )
        self.waiting.append(d)

    def _displace(self, d: Demand, need: float) -> list[Demand] | None:
        """The fewest lower-priority jobs (lowest priority, then latest deadline first) whose
        preemption makes room for ``need``: on one node for a one-pod job (the first such
        node by name on a tie), on all of them for a job that spans pods; None if none do."""
        best: tuple[int, str, list[Demand]] | None = None
        for scope in self.cluster.scopes(d):
            lower = sorted(
                self._holders(scope, d.mode, below=d.priority),
                key=lambda h: (h.priority, -(h.deadline_s or 0.0), -h.arrival_s, h.key),
            )
            if not lower:
                continue  # (it does not fit as things are: ``place`` said so)
            freed: dict[str, float] = {}
            chosen: list[Demand] = []
            for h in lower:
                if self.cluster.fits(d, need, scope, freed):
                    break
                chosen.append(h)
                for node, amount in self.pods_of[h.key]:
                    freed[node] = freed.get(node, 0.0) + amount
            fits = self.cluster.fits(d, need, scope, freed)
            if fits and (best is None or (len(chosen), scope[0]) < best[:2]):
                best = (len(chosen), scope[0], chosen)
        return best[2] if best is not None else None


class _Waiting:
    """The third phase: each job that waits (queued or preempted) is told the earliest
    deadline it could meet now, as the admitted jobs of ``book`` finish and free room."""

    def __init__(self, book: _Book) -> None:
        self.book = book

    def _timeline(self, node: str, gpu: bool) -> list[tuple[float, float]]:
        """(time, free) steps on ``node``: capacity frees as its deadline jobs finish
        (predicted from their curve at their grant, else at their deadline)."""
        free = (self.book.cluster.free_gpu if gpu else self.book.cluster.free_cpu)[node]
        events = []
        for h, a in self.book.held.get(node, []):
            if _is_gpu(h) == gpu and a > 0:
                r = run_s(h, sum(x for _, x in self.book.pods_of[h.key]))  # its whole grant
                events.append((self.book.now_s + r if r is not None else h.deadline_s or 0.0, a))
        points = [(self.book.now_s, free)]
        for t, a in sorted(events):
            free += a
            points.append((max(t, self.book.now_s), free))
        return points

    def _events(self, gpu: bool) -> list[tuple[float, str, float]]:
        """(time, node, free there then), over every node, in time order."""
        events = []
        for node in self.book.cluster.names:
            events += [(t, node, f) for t, f in self._timeline(node, gpu)[1:]]
        return sorted(events)

    def _envelope(self, gpu: bool) -> list[tuple[float, float]]:
        """(time, most free on any one node) steps, over every node."""
        free = dict(self.book.cluster.free_gpu if gpu else self.book.cluster.free_cpu)
        best = max(free.values(), default=0.0)
        points = [(self.book.now_s, best)]
        for t, node, f in self._events(gpu):
            free[node] = f
            if f > best + EPS:
                best = f
                points.append((t, best))
        return points

    def _packed_envelope(self, d: Demand) -> list[tuple[float, float]]:
        """(time, the most GPUs ``d``'s pods could be placed for then) steps, as capacity
        frees on every node. Its pods would all be created anew (it waits: it has none)."""
        d = replace(d, current=0.0)
        trial = self.book.cluster.copy()
        got, _ = trial.most(d, d.max_allocation, self.book.s)
        points = [(self.book.now_s, got)]
        for t, node, f in self._events(True):
            if got >= d.max_allocation - EPS:
                break  # more room later cannot start it faster
            trial.free_gpu[node] = f
            more, _ = trial.most(d, d.max_allocation, self.book.s)
            if more > got:
                got = more
                points.append((t, got))
        return points

    def _room_over_time(
        self, d: Demand, envelopes: dict[object, list[tuple[float, float]]]
    ) -> Iterable[tuple[float, float]]:
        """(time, the most ``d`` could start with then) as the admitted jobs finish: on its
        pod's node, else on the node with the most free; for a job that spans pods, what its
        pods can be placed for. Envelopes are shared by the jobs they fit."""
        gpu = _is_gpu(d)
        if _spans_pods(d):
            key = (d.gpus_per_pod, d.min_allocation, d.max_allocation)
            if key not in envelopes:
                envelopes[key] = self._packed_envelope(d)
            return envelopes[key]
        home = self.book.cluster.home(d)
        if home is not None:
            points = self._timeline(home, gpu)
        else:
            if gpu not in envelopes:
                envelopes[gpu] = self._envelope(gpu)
            points = envelopes[gpu]
        return ((t, _fit(d, free, d.max_allocation, self.book.s)) for t, free in points)

    def tell(self) -> None:
        """Append to each waiting job's reason the earliest deadline it could meet now (or
        when room for its need frees, or that none does), and set its ``earliest_deadline_s``."""
        envelopes: dict[object, list[tuple[float, float]]] = {}
        for d in self.book.waiting:
            room = list(self._room_over_time(d, envelopes))
            if self.book.quotas.bounds(d):
                room = _lower(room, self._quota_over_time(d))
            earliest, frees_at = self._earliest(d, room)
            if earliest is not None:
                tail = f"; the earliest deadline it could meet now is {_utc(earliest)}"
            elif frees_at is not None:
                tail = f"; room for its need frees at {_utc(frees_at)} (no speed curve yet)"
            else:
                tail = "; no room for it frees while the admitted jobs run"
            g = self.book.grants[d.key]  # (nothing granted: no pods)
            self.book.grants[d.key] = Grant(
                g.key, 0.0, g.node, g.verdict, g.reason + tail, earliest
            )

    def _quota_over_time(self, d: Demand) -> list[tuple[float, float]]:
        """(time, the most the quotas of ``d``'s namespace let it hold then) as the deadline
        jobs of its namespace finish (as ``_timeline`` predicts)."""
        trial, ns = self.book.quotas.copy(), _namespace(d)
        holders = {
            h.key: h for held in self.book.held.values() for h, _ in held if _namespace(h) == ns
        }
        ends = []
        for key, h in holders.items():
            r = run_s(h, sum(a for _, a in self.book.pods_of[key]))
            ends.append((self.book.now_s + r if r is not None else h.deadline_s or 0.0, key))
        points = [(self.book.now_s, trial.most(d, d.max_allocation, self.book.s))]
        for t, key in sorted(ends):
            trial.gone(holders[key])
            points.append((max(t, self.book.now_s), trial.most(d, d.max_allocation, self.book.s)))
        return points

    def _earliest(
        self, d: Demand, points: Iterable[tuple[float, float]]
    ) -> tuple[float | None, float | None]:
        """(earliest finish, when its need first fits): start at each step of the timeline
        with the most it could have then (up to max), keep the earliest finish."""
        need = need_of(d, self.book.s)
        best: float | None = None
        frees_at: float | None = None
        for t, a in points:
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


class _Leftover:
    """The last phase: what the deadline jobs of ``book`` leave, handed to best-effort jobs
    (ours: GPU counts chosen with restart costs; elasticflow: to every running job by
    marginal gain), within their namespaces' quotas."""

    def __init__(self, book: _Book, rescue: Mapping[str, float]) -> None:
        self.book = book
        self.rescue = rescue  # lost jobs served first, the least late first (_rescued)

    def within_quota(self, jobs: Sequence[Demand]) -> list[Demand]:
        """Best-effort jobs, each with its max cut to what its namespace's quotas leave after
        the deadline jobs; one they leave no room for is granted nothing here and left out.
        (Jobs of one namespace that share what is left: ``_within_quotas`` after the plan.)"""
        out = []
        for d in jobs:
            cap = (
                self.book.quotas.most(d, d.max_allocation, self.book.s)
                if self.book.quotas.bounds(d)
                else None
            )
            if cap is None:
                out.append(d)
            elif cap > EPS:
                out.append(replace(d, max_allocation=cap, need=min(d.need, cap)))
            else:
                short = self.book.quotas.short(d, max(d.min_allocation, _quantum(d, self.book.s)))
                reason = f"best-effort: no room within its namespace's quota ({short})"
                self.book.grants[d.key] = Grant(
                    d.key, 0.0, self.book.cluster.home(d), vocabulary.VERDICT_BEST_EFFORT, reason
                )
        return out

    def _place(
        self, jobs: Sequence[Demand]
    ) -> tuple[dict[tuple[str, bool], list[Demand]], dict[str, Pods]]:
        """Best-effort jobs by node: where their pod is, else (arrival order) the node with
        the most room left after the ones placed before; and a job that spans pods: the pods
        of its smallest count, packed into that room (reserved for it). Unplaceable ones get
        nothing."""
        room = self.book.cluster.copy()
        by_node: dict[tuple[str, bool], list[Demand]] = {}
        reserved: dict[str, Pods] = {}
        for d in sorted(jobs, key=lambda d: (d.arrival_s, d.key)):
            if _spans_pods(d):
                pods = room.place(d, max(GPU_QUANTUM, _ceil_q(d.min_allocation, GPU_QUANTUM)))
            else:
                node = self.book.cluster.home(d)
                if node is None:
                    node = room.most_free(_is_gpu(d))
                    if node is not None and room.free(node, d) < max(d.min_allocation, EPS) - EPS:
                        node = None
                pods = ((node, d.min_allocation),) if node is not None else None
            if pods is None:
                reason = f"best-effort: no node has {d.min_allocation:g} {_unit(d)} left over"
                self.book.grants[d.key] = Grant(
                    d.key, 0.0, None, vocabulary.VERDICT_BEST_EFFORT, reason
                )
                continue
            room.take(d, pods)
            if _spans_pods(d):
                reserved[d.key] = pods
            else:
                by_node.setdefault((pods[0][0], _is_gpu(d)), []).append(d)
        return by_node, reserved

    def fill(self, best_effort: Sequence[Demand]) -> None:
        """Grant ``best_effort`` (and, elasticflow, the admitted deadline jobs) the leftover:
        node by node for one-pod jobs, then the pool of every node's GPUs for jobs that span
        pods."""
        by_node, reserved = self._place(best_effort)
        pooled = {d.key: d for d in best_effort if d.key in reserved}
        if not self.book.ours:  # elasticflow: admitted deadline jobs share the leftover too
            for node, held in self.book.held.items():
                for h, _ in held:
                    if self.book.grants[h.key].verdict != vocabulary.VERDICT_ADMITTED:
                        continue
                    if _spans_pods(h):
                        pooled[h.key] = h
                    else:
                        by_node.setdefault((node, _is_gpu(h)), []).append(h)
        for d in pooled.values():  # a job that spans pods keeps its smallest count meanwhile
            self.book.cluster.take(d, reserved.get(d.key, ()))
        for (node, gpu), jobs in sorted(by_node.items()):
            jobs = sorted(jobs, key=lambda d: d.key)
            base = {
                d.key: self.book.grants[d.key].allocation if d.key in self.book.grants else 0.0
                for d in jobs
            }
            free = (self.book.cluster.free_gpu if gpu else self.book.cluster.free_cpu)[node]
            if gpu and self.book.ours:
                alloc = self._gpu_counts(jobs, int(math.floor(free + 1e-6)))
            else:
                step = 1.0 if gpu else self.book.s.fill_step_cores
                alloc = _fill_by_gain(jobs, base, free, step, self.book.s, self.rescue)
                if self.book.ours:
                    alloc = self._hysteresis(
                        jobs, alloc, free - sum(alloc[k] - base[k] for k in alloc)
                    )
            for d in jobs:
                if pooled:  # (booked only for the pool that is shared next)
                    self.book.cluster.take(d, ((node, alloc[d.key] - base[d.key]),))
                self._grant_leftover(d, alloc[d.key], ((node, alloc[d.key]),), base[d.key])
        self._fill_pooled(sorted(pooled.values(), key=lambda d: d.key), reserved)

    def _fill_pooled(self, jobs: Sequence[Demand], reserved: Mapping[str, Pods]) -> None:
        """The leftover for jobs that span pods, whose pods may go to any node: every node's
        free GPUs as one pool, shared as on one node (ours: the counts chosen together, each
        one whose pods can be placed; elasticflow: by marginal gain), then booked job by job
        (deadline jobs, then by arrival), each the most of its share its pods can be placed
        for. A best-effort job's smallest count stays reserved for it until its turn."""
        if not jobs:
            return
        holds = {d.key: reserved.get(d.key) or self.book.pods_of[d.key] for d in jobs}
        base = {
            d.key: self.book.grants[d.key].allocation if d.key in self.book.grants else 0.0
            for d in jobs
        }
        pool = sum(self.book.cluster.free_gpu.values()) + sum(
            a for pods in reserved.values() for _, a in pods
        )
        if self.book.ours:
            names = self.book.cluster.names

            def fits(d: Demand, x: float) -> bool:
                return self.book.cluster.fits(d, x, names, per_node(holds[d.key]))

            most = min(pool, sum(d.max_allocation for d in jobs))  # (a smaller DP)
            alloc = self._gpu_counts(jobs, int(math.floor(most + 1e-6)), fits)
        else:
            alloc = _fill_by_gain(jobs, base, pool, GPU_QUANTUM, self.book.s)
        for d in sorted(jobs, key=lambda d: (base[d.key] <= 0, d.arrival_s, d.key)):
            self.book.cluster.give(d, holds[d.key])
            got, pods = self.book.cluster.most(d, alloc[d.key], self.book.s)
            if base[d.key] > 0 and got <= base[d.key]:
                got, pods = base[d.key], holds[d.key]  # a deadline job keeps what it holds
            self.book.cluster.take(d, pods)
            self._grant_leftover(d, got, pods, base[d.key])

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
            if abs(extra) <= self.book.s.hysteresis_cores + EPS and extra <= free + EPS:
                out[d.key] = keep
                free -= extra
        return out

    def _gpu_counts(
        self,
        best_effort: Sequence[Demand],
        free_gpus: int,
        fits: Callable[[Demand, float], bool] | None = None,
    ) -> dict[str, float]:
        """Ours, GPUs: whole counts for one node's best-effort jobs (or the pool's, for jobs
        that span pods: ``fits`` says which counts their pods can be placed for), chosen
        together to maximize the work done over the look-ahead window minus what restarts
        lose.

        Deadline jobs are not part of it: each gets its need, and its law has already
        weighed a shrink's restart against the GPUs it gives back (``control`` ``pays``).
        Lost jobs served first (``rescue``) take, the least late first, the most GPUs up to
        their max before the others' counts are chosen."""
        window_s = max(self.book.s.lookahead_s, EPS)

        def kept(d: Demand, x: float) -> float:
            changed = d.current > EPS and x > EPS and abs(x - d.current) > EPS
            return max(0.0, 1.0 - d.restart_cost_s / window_s) if changed else 1.0

        def counts_of(d: Demand) -> list[float]:
            return [0.0] + [
                float(x)
                for x in range(
                    max(1, math.ceil(d.min_allocation - 1e-6)), int(d.max_allocation + 1e-6) + 1
                )
                if fits is None or fits(d, float(x))
            ]

        chosen: dict[str, float] = {}
        for d in sorted(
            (d for d in best_effort if d.key in self.rescue),
            key=lambda d: (self.rescue[d.key], d.key),
        ):
            chosen[d.key] = max(x for x in counts_of(d) if x <= free_gpus + EPS)
            free_gpus -= int(chosen[d.key])
        rest = [d for d in best_effort if d.key not in chosen]
        options: list[list[tuple[int, float]]] = []
        amounts: list[list[float]] = []
        for d in rest:
            counts = counts_of(d)
            if d.current > EPS and d.current in counts:  # no change first: ties keep it
                counts.remove(d.current)
                counts.insert(0, d.current)
            options.append([(int(x), _speed(d, x) * kept(d, x)) for x in counts])
            amounts.append(counts)
        picks, _ = best_gpu_choices(options, free_gpus)
        chosen.update(
            (d.key, amount[pick]) for d, pick, amount in zip(rest, picks, amounts, strict=True)
        )
        return chosen

    def _grant_leftover(self, d: Demand, alloc: float, pods: Pods, base: float) -> None:
        """``alloc`` on ``pods`` (for a one-pod job, its node even when ``alloc`` is 0)."""
        if d.deadline_s is not None:  # elasticflow: a deadline job's share of the leftover
            if alloc > base + EPS:
                g = self.book.grants[d.key]
                reason = (
                    f"{g.reason}; +{alloc - base:g} {_unit(d)} of the leftover (policy elasticflow)"
                )
                self.book.grants[d.key] = _grant(d, alloc, pods, g.verdict, reason)
            return
        where = _where(pods)
        if alloc > EPS:
            reason = (
                f"best-effort: {alloc:g} {_unit(d)} left over on {where} after deadline jobs' needs"
            )
        else:
            reason = f"best-effort: nothing left over on {where}; waits for idle {_unit(d)}"
        idle_node = pods[0][0] if pods else None
        self.book.grants[d.key] = _grant(
            d, alloc, pods, vocabulary.VERDICT_BEST_EFFORT, reason, idle_node
        )


def _fill_by_gain(
    jobs: Sequence[Demand],
    base: Mapping[str, float],
    free: float,
    step: float,
    s: PlannerSettings,
    first: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Hand ``free`` out in steps of ``step`` (a job's first step: up to its min), each to
    the job whose normalized speed rises most per unit; jobs stop at their max. The jobs in
    ``first`` come before the others, the lowest value first (lost jobs: ``_rescued``)."""
    alloc = dict(base)
    order = first or {}
    heap: list[tuple[float, float, str, int, float]] = []

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
        heapq.heappush(heap, (order.get(d.key, math.inf), -gain, d.key, i, nxt))

    for i in range(len(jobs)):
        offer(i)
    while heap and free > EPS:
        _, _, key, i, nxt = heapq.heappop(heap)
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
