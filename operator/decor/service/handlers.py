"""The kopf layer: watch DeadlineTrainingJobs (and, through :mod:`decor.adapter.watch`, their
pods and the nodes) into one live view, and run one control loop for the whole operator over
it (:mod:`decor.service.loop`).

kopf's event handlers only feed :class:`views.ClusterView` and wake the loop when a job's
spec changes; the loop (in :mod:`decor.service.loop`) reads every due job's progress in one batch,
asks each job's law, plans, and acts (:mod:`decor.service.job`). Everything that decides lives in
``control.py`` and ``planner.py``; everything that talks to the API server lives in
``kube.py`` (and ``watch.py`` for the pod and cluster-wide watches); progress comes from
``metrics.py``; pod bodies, patches, conditions and events are built by ``build.py``.

Where status goes, on purpose: the loop writes ``status`` itself through the status
subresource (every field is declared in the CRD); handlers return None, so kopf writes no
``status.<handler_id>``; kopf's own bookkeeping goes to ``decor.dev/`` annotations.

Several replicas: with leader election on (``DECOR_LEADER_ELECTION``), every replica runs
kopf and its watches (kopf runs standalone: its own peering would pause the standby's
watches), and only the replica that holds the Lease runs control periods and writes
(:mod:`decor.service.election`). The handlers themselves write nothing and the operator keeps no
finalizer on jobs, so a job's deletion needs no replica at all (its pods and claims are
owned by it: the garbage collector removes them).

Configuration lives in :mod:`decor.service.config`, the operator's own metrics in
:mod:`decor.service.operator_metrics`; this module is the only one that imports kopf, and only the
entry point (``decor operator``) imports it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf
from prometheus_client import CollectorRegistry

from decor.adapter.kube import Kube, KubeError
from decor.adapter.watch import Watches
from decor.api import vocabulary
from decor.core.crd_revision import REFUSE, WARN, crd_unreadable, judge_crd
from decor.core.views import ClusterView
from decor.service.config import (
    DEFAULT_OPERATOR_METRICS_PORT,
    ENV_HEALTH_ADDRESS,
    ENV_HEALTH_PORT,
    ENV_LEADER_LEASE_NAMESPACE,
    ENV_LOG_LEVEL,
    ENV_METRICS_ADDRESS,
    ENV_METRICS_PORT,
    ENV_PROMETHEUS_URL,
    OperatorConfig,
    watch_namespaces,
)
from decor.service.election import LeaderElection
from decor.service.loop import IDLE_PERIOD_S, ControlLoop
from decor.service.operator_metrics import OperatorMetrics

log = logging.getLogger("decor.operator")


@dataclass
class Runtime:
    """What every handler shares: configuration, API access, metrics, the view and loop."""

    config: OperatorConfig
    kube: Kube
    metrics: OperatorMetrics
    view: ClusterView = field(default_factory=ClusterView)
    loop: ControlLoop = field(init=False)
    namespaces: tuple[str, ...] = ()  # served (empty: all)
    watch: Watches = field(init=False)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    specs_seen: dict[tuple[str, str], tuple[Any, ...]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    election: LeaderElection | None = None
    io_loop: asyncio.AbstractEventLoop | None = None
    period_lock: threading.Lock = field(default_factory=threading.Lock)
    """Held while a control period runs (in a worker thread that outlives a cancel)."""

    def __post_init__(self) -> None:
        if self.config.leader_election:
            self.election = LeaderElection(
                self.kube,
                self.config.lease_namespace or "default",
                self.config.lease_name,
                self.config.leader_identity,
                self.config.lease_timings,
                self.metrics,
                on_acting=self._wake_from_thread,
            )
            self.kube.may_write = self.election.acting
        else:
            self.metrics.leader.set(1.0)
        self.loop = ControlLoop(
            self.view,
            kube=self.kube,
            config=self.config,
            operator_metrics=self.metrics,
            acting_term=self.election.term if self.election is not None else None,
        )
        if self.config.watch_nodes:
            self.watch = Watches.cluster(self.view, self.kube.api_client)
        else:
            self.watch = Watches.trainer_pods(self.view, self.kube.api_client, self.namespaces)

    def run_period(self) -> float:
        """One control period (in a worker thread); see :meth:`ControlLoop.run_period`."""
        with self.period_lock:
            return self.loop.run_period()

    def release_lease(self) -> None:
        """Free the leader's Lease once no period, no status write and no Event is in flight
        any more (shutdown; the fence is up, so nothing new is sent): each waited for at most
        the API client's timeout."""
        if self.election is None:
            return
        if self.period_lock.acquire(timeout=self.kube.timeout_s):
            self.loop.status_writer.flush(self.kube.timeout_s)
            self.period_lock.release()
        self.election.release()

    def _wake_from_thread(self) -> None:
        """Wake the control loop from another thread (this replica has just begun to act)."""
        if self.io_loop is not None:
            self.io_loop.call_soon_threadsafe(self.wake.set)


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """The operator's Runtime, created from the environment on first use."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(
                config=OperatorConfig.from_env(),
                kube=Kube.from_environment(),
                metrics=OperatorMetrics(CollectorRegistry()),
            )
        return _runtime


def set_runtime(value: Runtime | None) -> None:
    """Install (or clear) the Runtime; run_operator and tests use this."""
    global _runtime
    with _runtime_lock:
        _runtime = value


# ============================================================================================
# kopf handlers: feed the views, wake the loop


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """Keep kopf's bookkeeping out of status; post only warnings as Events; no CRD scanning."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=vocabulary.ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=vocabulary.ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = vocabulary.FINALIZER
    # Our own Events describe what the controller did; kopf posts only handler failures.
    settings.posting.level = logging.WARNING
    # Serve only what exists at start-up: no list/watch on CRDs or namespaces (least RBAC).
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330


@kopf.on.startup()
async def dtj_operator_startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure_kopf(settings)
    current = runtime()
    log.info(
        "decor operator: progress from %s; planner %s over %s",
        current.config.prometheus_url or "the pods' /metrics endpoints (no Prometheus)",
        current.config.planner_policy,
        "the nodes it watches" if current.config.watch_nodes else "no nodes (no arbitration)",
    )
    current.watch.start()
    current.io_loop = asyncio.get_running_loop()
    if current.election is not None:
        log.info(
            "leader election: %s, Lease %s/%s",
            current.config.leader_identity,
            current.config.lease_namespace,
            current.config.lease_name,
        )
        current.election.start()
    current.task = asyncio.create_task(_run_loop(current))


@kopf.on.cleanup()
async def dtj_operator_cleanup(**_: Any) -> None:
    current = runtime()
    io_loop = asyncio.get_running_loop()
    if current.election is not None:  # first the fence: no write is sent from now on
        await io_loop.run_in_executor(None, current.election.stop)
    current.watch.stop()
    if current.task is not None:
        current.task.cancel()
        await asyncio.gather(current.task, return_exceptions=True)
    await io_loop.run_in_executor(None, current.release_lease)
    current.loop.close()


async def _run_loop(current: Runtime) -> None:
    """The control loop: a period in a worker thread, then sleep until the next job is due
    or a job's spec changes."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            wait_s = await loop.run_in_executor(None, current.run_period)
        except Exception:  # noqa: BLE001 - the loop must survive anything
            log.exception("control period failed")
            current.metrics.reconcile_errors.inc()
            wait_s = IDLE_PERIOD_S
        try:
            await asyncio.wait_for(current.wake.wait(), timeout=max(0.01, wait_s))
        except TimeoutError:
            pass
        current.wake.clear()


def _spec_seen(body: Mapping[str, Any]) -> tuple[Any, ...]:
    spec = body.get("spec") or {}
    return tuple(
        repr(spec.get(k))
        for k in ("deadline", "duration", "suspend", "resources", "priority", "control")
    )


@kopf.on.event(vocabulary.API_GROUP, vocabulary.API_VERSION, vocabulary.PLURAL)
async def dtj_event(*, body: kopf.Body, event: Mapping[str, Any], **_: Any) -> None:
    """Keep the view of jobs current; a changed deadline, suspend or allocation bounds
    makes the job due at once (a moved deadline is acted on within a period)."""
    current = runtime()
    raw = dict(body)
    key = (
        str(body.get("metadata", {}).get("namespace") or "default"),
        str(body["metadata"]["name"]),
    )
    deleted = event.get("type") == "DELETED"
    current.view.put_job(raw, deleted=deleted)
    seen = _spec_seen(raw)
    if deleted:
        current.specs_seen.pop(key, None)
        return
    before = current.specs_seen.get(key)
    if before != seen:
        if before is not None:
            log.info("%s/%s: spec changed; the job is due now", key[0], key[1])
        current.specs_seen[key] = seen
        current.loop.wake(key)
        current.wake.set()


# ============================================================================================
# Entry point


def _setup_logging(level: str | None) -> None:
    name = (level or os.environ.get(ENV_LOG_LEVEL) or "INFO").upper()
    logging.basicConfig(
        level=getattr(logging, name, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if name != "DEBUG":  # kopf's per-event chatter is debugging material
        logging.getLogger("kopf").setLevel(max(logging.INFO, getattr(logging, name, logging.INFO)))
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def start_metrics_server(port: int, registry: CollectorRegistry, address: str = "0.0.0.0") -> Any:
    """Serve the operator's metrics on ``port`` (0: not at all). Returns the server or None."""
    if port <= 0:
        return None
    from prometheus_client import start_http_server

    started = start_http_server(port, addr=address, registry=registry)
    log.info("operator metrics on http://%s:%d/metrics", address, port)
    # prometheus_client >= 0.17 returns (server, thread); older ones (Debian's) return None
    # and serve from a daemon thread that ends with the process.
    return started[0] if isinstance(started, tuple) else None


def check_crd_revision(kube: Kube) -> bool:
    """Log the verdict on the installed CRD's revision (one line); False: refuse to start.

    An unreadable CRD (no ``get`` on it, say) is a warning, and the operator starts.
    """
    try:
        verdict = judge_crd(kube.get_crd(vocabulary.CRD_NAME))
    except KubeError as exc:
        verdict = crd_unreadable(str(exc))
    level = {REFUSE: logging.ERROR, WARN: logging.WARNING}.get(verdict.action, logging.INFO)
    log.log(level, "%s", verdict.message)
    return verdict.action != REFUSE


def _liveness_endpoint(health_port: int | None) -> str | None:
    """kopf's liveness endpoint: on ``health_port`` (default ``$DECOR_HEALTH_PORT``; none
    without either), at ``$DECOR_HEALTH_ADDRESS`` (default all addresses)."""
    if health_port is None and os.environ.get(ENV_HEALTH_PORT):
        health_port = int(os.environ[ENV_HEALTH_PORT])
    health_address = os.environ.get(ENV_HEALTH_ADDRESS) or "0.0.0.0"
    return f"http://{health_address}:{health_port}/healthz" if health_port else None


def _freeze_what_lives_forever() -> None:
    """Keep what exists before the operator serves (modules, classes, the API client's
    models, kopf: about 150,000 objects on the scale bed) out of every later garbage collection: none of it
    becomes garbage, and a full collection walks every object it tracks while the whole
    operator waits (on the scale bed at 1,000 jobs a full collection of the leader took 0.2
    to 0.5 s, about every 8 s)."""
    gc.collect()
    gc.freeze()
    log.info("%d objects kept out of garbage collection", gc.get_freeze_count())


def run_operator(
    namespaces: Sequence[str] | None = None,
    prometheus_url: str | None = None,
    *,
    metrics_port: int | None = None,
    health_port: int | None = None,
    log_level: str | None = None,
    standalone: bool = True,
    priority: int = 0,
    kubeconfig: str | None = None,
    stop_flag: Any = None,
    ready_flag: Any = None,
) -> None:
    """Run the operator until it is stopped (blocking).

    ``namespaces``: serve only these (a Role in each is enough); None or empty:
    ``$DECOR_WATCH_NAMESPACES``, and when that is empty too, all namespaces (ValueError on a
    name that is not a namespace's).
    ``prometheus_url``: read progress from this Prometheus (default ``$DECOR_PROMETHEUS_URL``;
    unset: scrape each trainer pod's /metrics). ``metrics_port``: the operator's own /metrics
    (default ``$DECOR_METRICS_PORT`` or 8080; 0 disables). ``health_port``: kopf's liveness
    endpoint /healthz (default ``$DECOR_HEALTH_PORT``; unset: none). ``standalone``: no kopf
    peering (one replica; no peering CRDs or RBAC needed); otherwise peering with ``priority``.
    Exits (SystemExit 1) before serving anything when the installed CRD is older than needed.
    """
    _setup_logging(log_level)
    served = watch_namespaces(namespaces)
    config = OperatorConfig.from_env(prometheus_url=prometheus_url)
    kube = Kube.from_environment(kubeconfig)
    if not check_crd_revision(kube):
        raise SystemExit(1)
    log.info("serving %s", ", ".join(served) if served else "all namespaces")
    if not os.environ.get(ENV_LEADER_LEASE_NAMESPACE):  # (the chart sets it: its own namespace)
        config = dataclasses.replace(config, lease_namespace=served[0] if served else "default")
    metrics = OperatorMetrics(CollectorRegistry())
    set_runtime(Runtime(config=config, kube=kube, metrics=metrics, namespaces=served))
    if metrics_port is None:
        metrics_port = int(os.environ.get(ENV_METRICS_PORT) or DEFAULT_OPERATOR_METRICS_PORT)
    server = start_metrics_server(
        metrics_port, metrics.registry, os.environ.get(ENV_METRICS_ADDRESS) or "0.0.0.0"
    )
    liveness = _liveness_endpoint(health_port)
    stop_watching_gc = metrics.watch_garbage_collection()
    _freeze_what_lives_forever()
    try:
        kopf.run(
            standalone=standalone,
            priority=priority,
            clusterwide=not served,
            namespaces=served,
            liveness_endpoint=liveness,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        stop_watching_gc()
        if server is not None:
            server.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m decor.service.handlers [--namespace NS]... [--prometheus-url URL]`` (debugging)."""
    parser = argparse.ArgumentParser(
        prog="python -m decor.service.handlers", description="Run the DECOR operator."
    )
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        help="serve this namespace; repeat for several (default: $DECOR_WATCH_NAMESPACES or all)",
    )
    parser.add_argument("--prometheus-url", default=None, help=f"default ${ENV_PROMETHEUS_URL}")
    parser.add_argument(
        "--metrics-port", type=int, default=None, help=f"default ${ENV_METRICS_PORT} or 8080"
    )
    parser.add_argument("--health-port", type=int, default=None, help=f"default ${ENV_HEALTH_PORT}")
    parser.add_argument("--log-level", default=None, help=f"default ${ENV_LOG_LEVEL} or INFO")
    args = parser.parse_args(argv)
    run_operator(
        args.namespace,
        args.prometheus_url,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        log_level=args.log_level,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
