"""Node capacity and reservations: the one model the planner and the actuators share.

What DECOR may hand out on a node, and where a job's pods go, is counted here and nowhere
else, so that a grant the planner makes is a grant the operator can reserve and create:

* **per node, from a snapshot**: :func:`node_capacity` (allocatable cores and GPUs of a
  node body), :func:`pod_charge` (what the kubelet counts for a pod: ``max(requested,
  applied)`` per container while a resize is in flight), :class:`PodLoad` (a pod's node,
  charge and overhead, worked out once per pod body: the view keeps one per pod, so a period
  reads a thousand pods without parsing them again), :func:`free_capacity` (allocatable
  minus every pod that is not one of DECOR's trainers);
* **for the planner**: :func:`planner_nodes` (the free capacity less what DECOR's trainer pods
  hold beside their trainers), :class:`Node`, and where a GPU job's pods go:
  :func:`pod_gpu_counts` (their sizes) and :func:`pack_pods` (an exact packing onto nodes);
* **reservations**: :class:`Book`, free cores and whole GPUs per node as they are handed out:
  the planner books a plan's grants on one (``planner._Cluster`` is a Book), and a period's
  commits reserve on one: :func:`grow_room` (what is left once DECOR's trainers hold what
  they hold now) makes the :class:`Room`, which reserves a new trainer where the planner
  placed it (``Grant.pods``) or, without a plan, packs as the planner packs.

Units: cores (float) and GPUs (whole counts; a fraction of a GPU is never handed out). Pure:
dicts and dataclasses in and out, no clock, no I/O; :class:`Room` alone holds a lock, as jobs
commit concurrently.
"""

from __future__ import annotations

import functools
import heapq
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from decor.api.model import GPU_RESOURCE, ManifestError, parse_cpu_cores
from decor.core import build

Key = tuple[str, str]  # (namespace, name) of a pod
Pods = tuple[tuple[str, float], ...]
"""Where a grant runs: (node, cores or GPUs) per pod, the largest pod first."""

EPS = 1e-9
"""Slack on comparisons of cores and GPUs (float sums of quantities)."""
WHOLE_GPU_SLACK = 1e-6
"""A free GPU count this close below a whole number counts as that number."""


@dataclass(frozen=True)
class Node:
    """What DECOR may hand out on one node: allocatable minus every other pod's requests
    (a pod being resized charged at max(requested, applied)); cores and GPUs."""

    name: str
    cpu_cores: float
    gpus: float = 0.0


@dataclass(frozen=True)
class PodLoad:
    """What one pod holds and where: its node (None: not placed), :func:`pod_charge`, and
    the cores a trainer pod holds beside its trainer (``build.pod_overhead_cpu_cores``)."""

    node: str | None
    cpu_cores: float
    gpus: float
    overhead_cpu_cores: float


def pod_load(pod: Mapping[str, Any]) -> PodLoad:
    """``pod``'s :class:`PodLoad`."""
    cpu, gpus = pod_charge(pod)
    return PodLoad(node_of(pod), cpu, gpus, build.pod_overhead_cpu_cores(pod))


def pod_loads(pods: Mapping[Key, Mapping[str, Any]]) -> dict[Key, PodLoad]:
    """Every pod's :class:`PodLoad`, by key."""
    return {key: pod_load(pod) for key, pod in pods.items()}


@dataclass(frozen=True)
class NodeCapacity:
    """What a node can hold: allocatable CPU (cores) and ``nvidia.com/gpu``."""

    name: str
    cpu_cores: float
    gpus: float
    schedulable: bool = True


def whole_gpus(gpus: float) -> float:
    """The whole GPUs in a free count (``gpus`` >= 0; 3.9999999 counts as 4)."""
    return max(0.0, float(math.floor(gpus + WHOLE_GPU_SLACK)))


def node_of(pod: Mapping[str, Any]) -> str | None:
    """The node a pod is bound to (None while the scheduler has not placed it)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


# ---------------------------------------------------------------------------------------
# Per node, from a snapshot's node and pod bodies


def _cores(value: Any) -> float:
    return 0.0 if value is None else _cores_of(str(value))


@functools.lru_cache(maxsize=1024)
def _cores_of(text: str) -> float:
    """Cores of a CPU quantity's text, 0 for a malformed one (a period reads the same few
    quantities of a thousand pods: each is parsed once)."""
    try:
        return parse_cpu_cores(text, "quantity")
    except ManifestError:
        return 0.0


def _count(value: Any) -> float:
    try:
        return float(str(value)) if value is not None else 0.0
    except ValueError:
        return 0.0


def node_capacity(node: Mapping[str, Any]) -> NodeCapacity:
    """Allocatable CPU and GPUs of a node body; unschedulable when cordoned or not Ready."""
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    return NodeCapacity(
        name=str(node["metadata"]["name"]),
        cpu_cores=_cores(allocatable.get("cpu")),
        gpus=_count(allocatable.get(GPU_RESOURCE)),
        schedulable=ready and not cordoned,
    )


def pod_charge(pod: Mapping[str, Any]) -> tuple[float, float]:
    """(cores, GPUs) the scheduler and kubelet count for a pod on its node.

    Per container the larger of what its spec requests and what the kubelet reports as
    allocated (a resize in flight holds both until it lands); plus native sidecars (init
    containers with ``restartPolicy: Always``), which run beside the others. Finished pods
    hold nothing.
    """
    if build.pod_phase(pod) in ("Succeeded", "Failed"):
        return 0.0, 0.0
    spec = pod.get("spec") or {}
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    cpu = gpu = 0.0
    containers = list(spec.get("containers") or [])
    containers += [
        c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
    ]
    for container in containers:
        requests = (container.get("resources") or {}).get("requests") or {}
        allocated = (statuses.get(container.get("name")) or {}).get("allocatedResources") or {}
        applied = ((statuses.get(container.get("name")) or {}).get("resources") or {}).get(
            "requests"
        ) or {}
        cpu += max(
            _cores(requests.get("cpu")), _cores(allocated.get("cpu")), _cores(applied.get("cpu"))
        )
        gpu += _count(requests.get(GPU_RESOURCE))
    return cpu, gpu


def _held(loads: Mapping[Key, PodLoad], keys: Iterable[Key]) -> dict[str, list[float]]:
    """[cores, GPUs] the pods ``keys`` hold per node (:func:`pod_charge`); unplaced pods aside."""
    held: dict[str, list[float]] = {}
    for key in keys:
        load = loads[key]
        if load.node is None:
            continue
        slot = held.setdefault(load.node, [0.0, 0.0])
        slot[0] += load.cpu_cores
        slot[1] += load.gpus
    return held


def free_capacity(
    nodes: Mapping[str, NodeCapacity],
    loads: Mapping[Key, PodLoad],
    decor_pods: set[Key],
) -> dict[str, NodeCapacity]:
    """Per schedulable node, what is left for DECOR's trainer pods: allocatable minus every
    pod (``loads``: every pod's, :func:`pod_loads`) that is not one of ``decor_pods``
    (DECOR's trainers, planned by the planner)."""
    used = _held(loads, [key for key in loads if key not in decor_pods])
    free = {}
    for name, node in nodes.items():
        if not node.schedulable:
            continue
        cpu, gpu = used.get(name, [0.0, 0.0])
        free[name] = NodeCapacity(
            name=name, cpu_cores=max(0.0, node.cpu_cores - cpu), gpus=max(0.0, node.gpus - gpu)
        )
    return free


def planner_nodes(
    free: Mapping[str, NodeCapacity],
    loads: Mapping[Key, PodLoad],
    decor_pods: set[Key],
    unplaced_overhead_cpu_cores: float,
) -> list[Node]:
    """The nodes as the planner sees them, by name: ``free`` less what DECOR's trainer pods
    hold beside their trainers (the metrics sidecar, the template's bounded containers: not
    the planner's to hand out), and less ``unplaced_overhead_cpu_cores`` on every node (what
    the pods still to be created will bring beside theirs, on a node not yet known)."""
    overhead = dict.fromkeys(free, unplaced_overhead_cpu_cores)
    for key in decor_pods:
        load = loads[key]
        if load.node in overhead:
            overhead[load.node] += load.overhead_cpu_cores
    return [
        Node(name=n.name, cpu_cores=max(0.0, n.cpu_cores - overhead[n.name]), gpus=n.gpus)
        for n in sorted(free.values(), key=lambda n: n.name)
    ]


def grow_room(
    free: Mapping[str, NodeCapacity] | None,
    loads: Mapping[Key, PodLoad],
    decor_pods: set[Key],
) -> Room:
    """Room per node for this period's creates and grows: ``free`` (None: nodes unseen, no
    limit) minus what DECOR's trainers hold now (each at max(requested, applied))."""
    if free is None:
        return Room(None)
    left = {name: [node.cpu_cores, node.gpus] for name, node in free.items()}
    for key in decor_pods:
        load = loads[key]
        if load.node in left:
            left[load.node][0] -= load.cpu_cores
            left[load.node][1] -= load.gpus
    return Room({name: (max(0.0, v[0]), max(0.0, v[1])) for name, v in left.items()})


# ---------------------------------------------------------------------------------------
# Where a GPU job's pods go


def per_node(pods: Pods) -> dict[str, float]:
    """What ``pods`` hold on each of their nodes (cores or GPUs)."""
    if len(pods) == 1:  # (the common case, kept cheap)
        return {pods[0][0]: pods[0][1]}
    out: dict[str, float] = {}
    for node, amount in pods:
        out[node] = out.get(node, 0.0) + amount
    return out


def pod_gpu_counts(total: int, per_pod: int) -> list[int]:
    """GPUs per pod for a grant of ``total`` GPUs in pods of at most ``per_pod`` GPUs each:
    ceil(total / per_pod) pods, as even as possible (sizes differ by at most one GPU), the
    largest first. ``per_pod <= 0``: one pod holds them all; ``total == 0``: no pod.

    (5, 2) -> [2, 2, 1]; (4, 3) -> [2, 2]. Raises ValueError for a negative ``total``."""
    if total < 0:
        raise ValueError(f"a grant of {total} GPUs: a GPU count is never negative")
    if total == 0:
        return []
    if per_pod <= 0:
        return [total]
    pods = -(-total // per_pod)
    size, larger = divmod(total, pods)
    return [size + 1] * larger + [size] * (pods - larger)


def pack_pods(
    counts: Sequence[int], free: Mapping[str, float], names: Sequence[str], first: Mapping[str, int]
) -> Pods | None:
    """Pods of ``counts`` GPUs (``pod_gpu_counts``: the larger first, of sizes ``big`` and
    ``big - 1``) put on the nodes ``names`` with ``free`` GPUs; None when no placement holds
    them all. A node may hold several pods of the job.

    Exact, by a greedy that is optimal here: of t pods on a node with f free GPUs, at most
    min(t, f - t * small) can be big (small = big - 1; all t while t * big <= f when the pods
    are of one size), a concave function of t. Adding the pods one at a time, each where it
    costs the fewest big places, therefore ends with the most big places that any spread of
    the pods over the nodes allows: the pods fit iff that is at least the number of big ones.
    (Largest-first best fit is not exact: pods 3, 3, 2, 2 on 6 and 4 free GPUs.) Ties go to
    the nodes in ``first``, up to that many pods each (where the job's pods run now), then to
    the node a big pod would leave with the least free (best fit: large holes stay for large
    pods), then by name."""
    if not counts:
        return ()
    big, small = counts[0], counts[-1]

    def big_places(f: float, t: int) -> int | None:
        """Of ``t`` pods on a node with ``f`` free GPUs, how many can be big; None: t do not fit."""
        if t * small > f + EPS:
            return None
        return t if big == small else min(t, int(f + EPS) - t * small)

    taken = dict.fromkeys(names, 0)
    heap: list[tuple[int, bool, float, str]] = []

    def offer(node: str) -> None:  # the node's next pod, ranked by the big places it costs
        t, f = taken[node], free[node]
        now, then = big_places(f, t), big_places(f, t + 1)
        if now is not None and then is not None:
            heapq.heappush(heap, (now - then, t >= first.get(node, 0), f - (t + 1) * big, node))

    for node in names:
        offer(node)
    order: list[str] = []  # the nodes, as they take their first pod
    for _ in counts:
        if not heap:
            return None
        node = heapq.heappop(heap)[3]
        order += [node] if taken[node] == 0 else []
        taken[node] += 1
        offer(node)
    bigs_left = counts.count(big)
    bigs: list[tuple[str, float]] = []
    smalls: list[tuple[str, float]] = []
    for node in order:
        n_big = min(big_places(free[node], taken[node]) or 0, bigs_left)
        bigs_left -= n_big
        bigs += [(node, float(big))] * n_big
        smalls += [(node, float(small))] * (taken[node] - n_big)
    return tuple(bigs + smalls) if bigs_left == 0 else None


# ---------------------------------------------------------------------------------------
# Reservations of one period's commits


class Book:
    """Free cores and whole GPUs per node as reservations are made (mutable, not locked): the
    planner books a plan's grants on one, and a period's commits reserve on one (:class:`Room`).
    ``gpu`` picks the resource: GPUs (True) or cores (False)."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        nodes = list(nodes)
        self.names = sorted(n.name for n in nodes)
        self.free_cpu = {n.name: max(0.0, n.cpu_cores) for n in nodes}
        self.free_gpu = {n.name: whole_gpus(n.gpus) for n in nodes}

    def copy(self) -> Self:
        """An independent copy (a trial booking); the node names are shared (never changed)."""
        other = self.__class__.__new__(self.__class__)
        other.names = self.names
        other.free_cpu, other.free_gpu = dict(self.free_cpu), dict(self.free_gpu)
        return other

    def book(self, gpu: bool) -> dict[str, float]:
        """Free GPUs (``gpu``) or cores per node."""
        return self.free_gpu if gpu else self.free_cpu

    def reserve(self, gpu: bool, pods: Pods) -> None:
        """Take what ``pods`` hold from their nodes (rounded to 1e-9: sums stay exact)."""
        book = self.book(gpu)
        for node, amount in pods:
            if amount:
                book[node] = round(book[node] - amount, 9)

    def release(self, gpu: bool, pods: Pods) -> None:
        """Give back what ``pods`` hold on their nodes."""
        self.reserve(gpu, tuple((node, -amount) for node, amount in pods))

    def best_fit(self, gpu: bool, amount: float) -> str | None:
        """The node where ``amount`` fits leaving the least free (ties: name); None if none."""
        book = self.book(gpu)
        fits = [(book[n], n) for n in self.names if book[n] >= amount - EPS]
        return min(fits)[1] if fits else None

    def most_free(self, gpu: bool) -> str | None:
        """The node with the most free (ties: name); None without nodes."""
        book = self.book(gpu)
        return min(self.names, key=lambda n: (-book[n], n)) if self.names else None

    def holds(self, pods: Pods) -> bool:
        """Whether GPU ``pods`` fit where they are placed, each node holding all of its pods."""
        return all(
            self.free_gpu.get(node, -math.inf) >= amount - EPS
            for node, amount in per_node(pods).items()
        )

    def pack(self, counts: Sequence[int], first: Mapping[str, int]) -> Pods | None:
        """GPU pods of ``counts`` packed onto the nodes (:func:`pack_pods`); None: no fit."""
        return pack_pods(counts, self.free_gpu, self.names, first)


class Room:
    """What a period's commits may still reserve: creating and growing DECOR's trainers, on
    the planner's own :class:`Book` of cores and whole GPUs per node.

    Starts at what the node can give DECOR minus what its trainers hold now (each at
    max(requested, applied), :func:`grow_room`); shrinks asked for this period free nothing
    until they land, so a grow never meets a node that is still full (no Deferred resize by
    design). ``None`` capacity: the operator cannot see nodes; nothing is limited. Jobs commit
    concurrently: every reservation holds the lock.
    """

    def __init__(self, free: Mapping[str, tuple[float, float]] | None) -> None:
        nodes = None if free is None else [Node(n, cpu, gpus) for n, (cpu, gpus) in free.items()]
        self.book = None if nodes is None else Book(nodes)
        self._lock = threading.Lock()

    @property
    def free(self) -> dict[str, list[float]] | None:
        """[cores, GPUs] left per node (a copy); None: nothing is limited."""
        if self.book is None:
            return None
        return {n: [self.book.free_cpu[n], self.book.free_gpu[n]] for n in self.book.names}

    def take(self, node: str | None, cpu: float = 0.0, gpus: float = 0.0) -> bool:
        """Reserve ``cpu`` cores and ``gpus`` on ``node``; False (nothing taken) if they do
        not fit. A pod not yet on a node (None) is the scheduler's to place: the first node
        by name with room will do."""
        if self.book is None:
            return True
        with self._lock:
            book = self.book
            for name in [node] if node is not None else book.names:
                if name not in book.free_cpu:
                    continue
                if cpu <= book.free_cpu[name] + EPS and gpus <= book.free_gpu[name] + EPS:
                    book.reserve(False, ((name, cpu),))
                    book.reserve(True, ((name, gpus),))
                    return True
            return False

    def take_pods(self, gpus: Sequence[int]) -> bool:
        """Reserve a GPU count per pod (:func:`pod_gpu_counts`), each on any node with room
        (the scheduler places them), packed as the planner packs them (:func:`pack_pods`,
        exact); all or nothing."""
        if self.book is None:
            return True
        with self._lock:
            pods = self.book.pack(sorted(gpus, reverse=True), {})
            if pods is None:
                return False
            self.book.reserve(True, pods)
            return True

    def take_placement(self, pods: Pods) -> bool:
        """Reserve the planner's own placement (``Grant.pods``: GPUs per pod and its node), as
        it is; all or nothing. Jobs commit in any order: the plan placed them all at once."""
        if self.book is None:
            return True
        with self._lock:
            if not self.book.holds(pods):
                return False
            self.book.reserve(True, pods)
            return True

    def take_new(self, placed: Pods, cores: float = 0.0, gpu_counts: Sequence[int] = ()) -> bool:
        """Reserve a new trainer: GPU pods of ``gpu_counts``, else ``cores`` (a CPU trainer's
        pod, what it holds beside the trainer included), where the planner placed them
        (``placed``: its ``Grant.pods``), else (no plan) where the scheduler could: packed as
        the planner packs, or on the first node by name with room. All or nothing."""
        if gpu_counts:
            return self.take_placement(placed) if placed else self.take_pods(gpu_counts)
        return self.take(placed[0][0] if placed else None, cpu=cores)

    def take_up_to(self, node: str | None, cpu: float) -> float:
        """Reserve as much of ``cpu`` cores on ``node`` as is free; returns what was taken."""
        if self.book is None:
            return cpu
        with self._lock:
            if node is None or node not in self.book.free_cpu:
                return 0.0
            taken = max(0.0, min(cpu, self.book.free_cpu[node]))
            self.book.reserve(False, ((node, taken),))
            return taken
