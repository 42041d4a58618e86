"""One control loop for the whole operator.

Each period, in named steps:

1. ``snapshot``   freeze the live views of jobs, pods and nodes (fed by watches);
2. ``read``       one batched progress read for every due job (one Prometheus query, or
                  bounded parallel scrapes of the trainers' endpoints, waited on at most
                  half a second: a slow endpoint costs its own job a sample, not the
                  others their period);
3. ``prepare``    each due job's lifecycle and law (:meth:`JobController.prepare`): its demand;
4. ``plan``       the pure planner over every active job's latest demand and the nodes'
                  free capacity (:func:`planner.plan`, the nodes from :mod:`decor.core.capacity`);
5. ``commit``     each due job acts on its grant as far as its node has room now
                  (``capacity.Room``: the planner's placement, reserved on the same model),
                  and writes status when something a user sees changed (with several
                  commit workers the write is sent in the background, in order per job:
                  :mod:`decor.service.status_writer`; the period waits for none). The
                  jobs' Events, from both prepare and commit, go the same way, in order
                  with their status writes.

A job is due when its own period (``spec.control.periodSeconds``, at least the operator's
minimum) has passed, or at once when its spec changed (a deadline patch wakes the loop); a
job whose spec changed runs first and alone, ahead of the other due jobs. A period runs at
most :data:`PERIOD_JOBS` due jobs, the longest overdue first, so that it stays short (and a
patch's wait for the period in progress with it) however many jobs are due. A period also
runs, after the due ones, the jobs that will be due within :func:`ahead_s` (a tenth of their
own period, at most a second): jobs due close together share a period's fixed work (the
snapshot, the read, the plan over every job), and having run together they stay together,
so the number of periods follows the spread of periods, not the number of jobs. A loop that has
fallen behind (its longest-overdue job :data:`LAGGING_S` late) takes :data:`LAGGING_PERIOD_JOBS`
instead, so that each period's fixed work (the snapshot, the read, the plan over every job)
is shared by more jobs until it has caught up.

With several replicas (leader election, :mod:`decor.service.election`), only the acting one runs
periods; a standby keeps its views warm and runs none. Each time this replica begins to act
(a new term) it forgets its job controllers, so that every job is reloaded from the status
the previous leader wrote and is due at once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from decor_trainer import contract

from decor.adapter import scrape
from decor.adapter.kube import Kube, KubeError
from decor.api.model import DEFAULT_METRICS_PATH
from decor.core import build, capacity, group, planner, progress
from decor.core.capacity import NodeCapacity, Room
from decor.core.views import ClusterView, Key, Snapshot, quotas_left
from decor.service.config import OperatorConfig
from decor.service.job import STATUS_WRITES_PER_S, JobController
from decor.service.operator_metrics import OperatorMetrics
from decor.service.status_writer import StatusWriter

log = logging.getLogger("decor.operator")

ActingTerm = Callable[[], int | None]
"""The leader election's current term while this replica acts, else None (a standby)."""

ProgressReader = Callable[[Snapshot, list[Key]], Mapping[progress.PodKey, progress.ProgressRead]]
"""Step 2: every running trainer pod's progress (or why there is none) for the due jobs."""

IDLE_PERIOD_S = 1.0
"""How often the loop looks at the views when no job is due sooner."""
PERIOD_JOBS = 50
"""At most this many due jobs run in one period, the longest overdue first; the rest run in
the next period, at once. A period then lasts a fraction of a second whatever the number of
jobs, and a job whose spec changed waits for no more than that before it runs."""
LAGGING_S = 1.0
"""When the longest-overdue due job is this many seconds late, the loop has fallen behind."""
LAGGING_PERIOD_JOBS = 2 * PERIOD_JOBS
"""How many due jobs a period runs while the loop has fallen behind. At 1,000 jobs a
period's fixed work (snapshot, progress read, plan) is about 150 ms against about 6 ms per
job: twice the jobs per period is about a fifth more jobs a second, and a job whose spec
changed waits for a period about twice as long (a few tenths of a second) while it lasts."""


AHEAD_S = 1.0
"""The most a job is run ahead of its period's end to share a period with the due jobs."""
AHEAD_SHARE = 0.1
"""...and at most this share of its own period (a 2 s period: 0.2 s)."""


def ahead_s(period_s: float) -> float:
    """How long before its period's end a job may run with a period already running."""
    return min(AHEAD_S, AHEAD_SHARE * period_s)


LIMIT_RANGES_TTL_S = 30.0
"""Without the capacity view (which watches LimitRanges), a namespace's LimitRanges are
listed at most this often: they change seldom, and a new one is obeyed within this time."""


class _StepTimes:
    """The wall time of a period's steps (:data:`vocabulary.PERIOD_STEPS`), each from the
    end of the one before."""

    def __init__(self) -> None:
        self.started_s = self.last_s = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def end(self, step: str) -> None:
        now_s = time.perf_counter()
        self.seconds[step] = now_s - self.last_s
        self.last_s = now_s

    def total_s(self) -> float:
        return self.last_s - self.started_s


class ControlLoop:
    """The operator's single control loop over a :class:`ClusterView`."""

    def __init__(
        self,
        view: ClusterView,
        *,
        kube: Kube,
        config: OperatorConfig,
        operator_metrics: OperatorMetrics,
        clock: Callable[[], float] = time.time,
        read_progress: ProgressReader | None = None,
        acting_term: ActingTerm | None = None,
    ) -> None:
        """``read_progress``: replaces step 2's reads (a simulated trainer fleet, tests);
        ``acting_term``: the leader election's term (None: this replica always acts)."""
        self.view = view
        self.read_progress = read_progress
        self.kube = kube
        self.config = config
        self.metrics = operator_metrics
        self.clock = clock
        self.controllers: dict[Key, JobController] = {}
        self.planner_settings = planner.PlannerSettings(
            policy=config.planner_policy, lost_deadline=config.lost_deadline
        )
        self._woken: set[Key] = set()
        self._woken_lock = threading.Lock()
        self._scraper: scrape.Scraper | None = None
        self.acting_term = acting_term
        self._term: int | None = None
        self._waiting_logged = False  # the wait for the first lists is logged once
        self._unlisted_logged: set[str] = set()  # so is a namespace's wait for its pod list
        self._listed_limit_ranges: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        # With several commit workers the jobs' status writes and Events leave the period's
        # path, and the commit workers are kept from one period to the next.
        background = config.commit_workers > 1
        self.status_writer = StatusWriter(
            kube,
            config.commit_workers if background else 0,
            acting_term,
            operator_metrics.events_dropped.inc,
        )
        self._commit_pool = (
            ThreadPoolExecutor(config.commit_workers, thread_name_prefix="decor-commit")
            if background
            else None
        )

    def close(self) -> None:
        """Stop the background reads and send the status writes still waiting (the
        operator is shutting down)."""
        if self._scraper is not None:
            self._scraper.close()
        if self._commit_pool is not None:
            self._commit_pool.shutdown(wait=False, cancel_futures=True)
        self.status_writer.close()

    def wake(self, key: Key) -> None:
        """Make the job due at the next period, whatever its own period (its spec changed)."""
        with self._woken_lock:
            self._woken.add(key)

    # --- one period ---------------------------------------------------------------------------

    def run_period(self) -> float:
        """Run the due jobs through one period. Returns seconds until the next job is due
        (0 when more are due than one period runs); a standby runs none."""
        if not self._acting() or not self._listed():
            return IDLE_PERIOD_S
        steps = _StepTimes()
        now = self.clock()
        # The woken set before the snapshot: a spec change is in the view before its wake
        # (handlers.dtj_event), so a wake taken here is one whose change the snapshot holds;
        # one that comes after stays for the next period.
        woken = self._take_woken()
        snapshot = self.view.snapshot()
        due = self._due_jobs(snapshot, now, woken)
        steps.end("snapshot")
        reader = self.read_progress or self._read_progress
        progress = reader(snapshot, due) if due else {}
        steps.end("read")
        for key in due:
            self._prepare(snapshot, key, progress, now)
        steps.end("prepare")
        decor_pods = set(snapshot.trainer_pods())
        free = (
            capacity.free_capacity(snapshot.nodes, snapshot.loads, decor_pods)
            if snapshot.nodes_known
            else None
        )
        grants = self._plan(snapshot, decor_pods, free, now)
        steps.end("plan")
        room = capacity.grow_room(free, snapshot.loads, decor_pods)
        self._commit_all(sorted(due, key=self._commit_order), grants, room, now)
        steps.end("commit")
        if due:
            self.metrics.period_seconds.observe(steps.total_s())
            for step, seconds in steps.seconds.items():
                self.metrics.period_steps.labels(step=step).observe(seconds)
        self.metrics.jobs_total.set(len(self.controllers))
        self.metrics.status_writes_waiting.set(self.status_writer.backlog())
        waits = [c.next_due_s - self.clock() for c in self.controllers.values() if not c.done]
        return max(0.0, min(waits, default=IDLE_PERIOD_S))

    def _listed(self) -> bool:
        """Whether every cluster-wide watch that feeds the view has listed once. Before that
        (the operator has just started) a job seen without its pod would be taken for one
        whose pod was lost, and a second trainer made, and the planner would plan without the
        nodes and quotas still to come; a watch the API refuses (no RBAC for it) holds every
        period. A namespace's own pod watch holds only its jobs (:meth:`_due_jobs`)."""
        if self.view.listed:
            return True
        if not self._waiting_logged:
            log.warning("control loop: waiting for the watches' first lists (pods, nodes, quotas)")
            self._waiting_logged = True
        return False

    def _log_unlisted(self, namespace: str) -> None:
        if namespace not in self._unlisted_logged:
            log.warning("control loop: the jobs in %s wait for its first list of pods", namespace)
            self._unlisted_logged.add(namespace)

    def _acting(self) -> bool:
        """Whether this replica acts this period; a change of term forgets every job's
        controller (what it remembered may be older than what another leader wrote)."""
        if self.acting_term is None:
            return True
        term = self.acting_term()
        if term != self._term:
            log.info("control loop: %s", "standing by" if term is None else f"acting (term {term})")
            for key in self.controllers:
                self.metrics.job_phase(key, None)
            self.controllers.clear()
            self.metrics.jobs_total.set(0)  # a standby counts none: sums over replicas hold
            self._term = term
        return term is not None

    def _take_woken(self) -> set[Key]:
        with self._woken_lock:
            woken, self._woken = self._woken, set()
        return woken

    def _due_jobs(self, snapshot: Snapshot, now: float, woken: set[Key]) -> list[Key]:
        """Jobs whose period has come, then those due within :func:`ahead_s` (none unless one
        has come), at most :data:`PERIOD_JOBS` of them (a loop that has fallen behind:
        :data:`LAGGING_PERIOD_JOBS`), the longest overdue first; controllers for new jobs are
        made and deleted jobs forgotten. Jobs whose spec changed go first and alone: a deadline patch is answered without waiting
        behind the period of every other due job (those follow in the next period, at once)."""
        for key in list(self.controllers):
            if key not in snapshot.jobs:
                self.metrics.job_phase(key, None)
                self.status_writer.forget(key)
                del self.controllers[key]
        due, changed = [], []
        unlisted = self.view.unlisted_namespaces
        for key, body in snapshot.jobs.items():
            if key[0] in unlisted:
                self._log_unlisted(key[0])
                continue
            controller = self.controllers.get(key)
            uid = str(body["metadata"].get("uid"))
            if controller is None or controller.uid != uid:
                controller = JobController(
                    key[0],
                    key[1],
                    uid,
                    kube=self.kube,
                    config=self.config,
                    operator_metrics=self.metrics,
                    clock=self.clock,
                    status_writer=self.status_writer,
                )
                self.controllers[key] = controller
            if controller.done:
                continue
            if key in woken:
                changed.append(key)
            elif controller.next_due_s <= now + ahead_s(controller.period_s):
                due.append(key)
        if changed:
            changed.sort()
            with self._woken_lock:  # many at once (the operator's first sight of every job)
                self._woken.update(changed[PERIOD_JOBS:])
            changed = changed[:PERIOD_JOBS]
        else:
            # New jobs (next_due_s -inf) first, then the longest overdue, then those run
            # ahead: only a period with a job that is due runs any.
            due = sorted(due, key=lambda k: (self.controllers[k].next_due_s, k))
            if due and self.controllers[due[0]].next_due_s > now:
                due = []
            behind = bool(due) and now - self.controllers[due[0]].next_due_s >= LAGGING_S
            due = due[: LAGGING_PERIOD_JOBS if behind else PERIOD_JOBS]
        for key in changed or due:
            lateness_s = now - self.controllers[key].next_due_s
            if math.isfinite(lateness_s) and lateness_s >= 0:  # not those run ahead
                self.metrics.period_lateness.observe(lateness_s)
        return sorted(changed or due)

    def _read_progress(
        self, snapshot: Snapshot, due: list[Key]
    ) -> dict[progress.PodKey, progress.ProgressRead]:
        """Step 2: progress of every running trainer pod of the due jobs, in one read."""
        running: dict[progress.PodKey, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
        for key in due:
            body = snapshot.jobs[key]
            for pod in snapshot.job_pods(key[0], str(body["metadata"].get("uid"))):
                if (
                    build.pod_phase(pod) == "Running"
                    and not build.is_terminating(pod)
                    and not group.is_worker(pod)  # rank 0's pod alone reports progress
                ):
                    running[(key[0], pod["metadata"]["name"])] = (body, pod)
        if not running:
            return {}
        if self.config.prometheus_url:
            try:
                pod_ips = {
                    k: str((pod.get("status") or {}).get("podIP") or "")
                    for k, (_body, pod) in running.items()
                }
                reads = scrape.prometheus_progress_all(
                    self.config.prometheus_url, self.config.read_timeout_s, pod_ips
                )
            except progress.MetricsError as exc:
                return dict.fromkeys(running, exc)
            missing = progress.MetricsError(
                "Prometheus has no progress series scraped from this pod yet"
            )
            return {k: reads.get(k, missing) for k in running}
        if self._scraper is None:
            self._scraper = scrape.Scraper(self.config.scrape_workers, self.config.read_wait_s)
        return self._scraper.read(
            {k: self._fetcher(body, pod) for k, (body, pod) in running.items()}
        )

    def _fetcher(self, body: Mapping[str, Any], pod: Mapping[str, Any]) -> Callable[[], str]:
        raw = (body.get("spec") or {}).get("metrics") or {}
        port = int(raw.get("port") or contract.DEFAULT_METRICS_PORT)
        path = str(raw.get("path") or DEFAULT_METRICS_PATH)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if self.config.scrape_via == "apiserver":

            def via_apiserver() -> str:
                try:
                    return self.kube.pod_proxy_get(namespace, name, port, path)
                except KubeError as exc:
                    raise progress.MetricsError(str(exc)) from exc

            return via_apiserver
        url = build.metrics_url(pod, port, path)
        if url is None:

            def no_ip() -> str:
                raise progress.MetricsError(f"pod {name} has no IP yet")

            return no_ip
        return scrape.url_fetcher(url, self.config.read_timeout_s)

    def _prepare(
        self,
        snapshot: Snapshot,
        key: Key,
        progress: Mapping[progress.PodKey, progress.ProgressRead],
        now: float,
    ) -> None:
        """Step 3 for one job; a failure costs this job its period, never the others'."""
        controller = self.controllers[key]
        body = snapshot.jobs[key]
        pods = snapshot.job_pods(key[0], controller.uid)
        by_pod = {
            pod["metadata"]["name"]: progress[(key[0], pod["metadata"]["name"])]
            for pod in pods
            if (key[0], pod["metadata"]["name"]) in progress
        }
        try:
            limit_ranges = self._limit_ranges(snapshot, key[0], now)
            controller.prepare(body, pods, by_pod, now, limit_ranges)
        except Exception as exc:  # noqa: BLE001 - one bad job must not stop the loop
            self._failed(controller, exc)
        controller.next_due_s = now + controller.period_s

    def _limit_ranges(self, snapshot: Snapshot, namespace: str, now: float) -> list[dict[str, Any]]:
        """The LimitRanges of ``namespace``: the snapshot's with the capacity view (watched),
        else listed, at most every :data:`LIMIT_RANGES_TTL_S` (a failed list keeps what the
        last one said: it costs no job its period)."""
        if snapshot.nodes_known:
            return snapshot.namespace_limit_ranges(namespace)
        listed_s, limit_ranges = self._listed_limit_ranges.get(namespace, (-math.inf, []))
        if now - listed_s < LIMIT_RANGES_TTL_S:
            return limit_ranges
        try:
            limit_ranges = self.kube.list_limit_ranges(namespace)
        except KubeError as exc:
            log.warning("%s: LimitRanges not read (%s); next try in %gs", namespace, exc,
                        LIMIT_RANGES_TTL_S)  # fmt: skip
        self._listed_limit_ranges[namespace] = (now, limit_ranges)
        return limit_ranges

    def _plan(
        self,
        snapshot: Snapshot,
        decor_pods: set[Key],
        free: Mapping[str, NodeCapacity] | None,
        now: float,
    ) -> Mapping[str, planner.Grant] | None:
        """Step 4: the planner over every active job's latest demand, each node's ``free``
        capacity and what each namespace's ResourceQuotas leave. None when the operator cannot see nodes (a namespaced install): every job
        then gets what its law asks."""
        if free is None:
            return None
        active = [c for c in self.controllers.values() if c.demand and not c.done]
        demands = [c.demand for c in active if c.demand]
        if not demands:
            return {}
        # What DECOR's pods hold beside their trainers (the metrics sidecar, the template's
        # bounded containers) is not the planner's to hand out; a pod still to be created
        # brings its own too, on any node.
        unplaced = sum(c.overhead_cpu_cores for c in active if c.demand and c.demand.node is None)
        nodes = capacity.planner_nodes(free, snapshot.loads, decor_pods, unplaced)
        # The namespaces' ResourceQuotas, what the planned jobs' trainers charge now given back
        # (a trainer being deleted stays charged until it is gone).
        planned = (
            pod
            for c in active
            for pod in snapshot.job_pods(c.namespace, c.uid)
            if not build.is_terminating(pod)
        )
        quotas = quotas_left(snapshot, planned)
        started = time.perf_counter()
        result = planner.plan(demands, nodes, now, self.planner_settings, quotas)
        self.metrics.plan_seconds.observe(time.perf_counter() - started)
        return result.grants

    def _commit_order(self, key: Key) -> tuple[float, str]:
        """Earliest deadline first: when room is short, the most urgent grows first."""
        demand = self.controllers[key].demand
        deadline = demand.deadline_s if demand and demand.deadline_s is not None else math.inf
        return (deadline, f"{key[0]}/{key[1]}")

    def _commit_all(
        self,
        due: list[Key],
        grants: Mapping[str, planner.Grant] | None,
        room: Room,
        now: float,
    ) -> None:
        """Step 5 for every due job, several at once (each job's calls are its own; the room
        they share is locked), handed out in commit order so the most urgent asks first. Each
        job's routine status writes get the fleet's share (:data:`STATUS_WRITES_PER_S`)."""
        spread_s = sum(1 for c in self.controllers.values() if not c.done) / STATUS_WRITES_PER_S
        for key in due:
            self.controllers[key].status_spread_s = spread_s
        pool = self._commit_pool
        if pool is None or len(due) <= 1:
            for key in due:
                self._commit(key, grants, room, now)
            return
        for future in [pool.submit(self._commit, key, grants, room, now) for key in due]:
            future.result()

    def _commit(
        self,
        key: Key,
        grants: Mapping[str, planner.Grant] | None,
        room: Room,
        now: float,
    ) -> None:
        """Step 5 for one job."""
        controller = self.controllers[key]
        grant = None if grants is None else grants.get(controller.plan_key)
        started = time.perf_counter()
        try:
            keep_going = controller.commit(grant, room, now)
        except Exception as exc:  # noqa: BLE001 - one bad job must not stop the loop
            self._failed(controller, exc)
            keep_going = True
        self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
        if not keep_going:
            controller.done = True
            controller.demand = None

    def _failed(self, controller: JobController, exc: Exception) -> None:
        self.metrics.reconcile_errors.inc()
        controller.demand = None
        log.warning(
            "%s/%s: control period failed: %s",
            controller.namespace,
            controller.name,
            exc,
            exc_info=not isinstance(exc, KubeError),
        )
