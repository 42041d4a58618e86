"""The kopf layer: watch DeadlineTrainingJobs (and their pods and the nodes) into one live
view, and run one control loop for the whole operator over it (:mod:`decor.loop`).

kopf's event handlers only feed :class:`views.ClusterView` and wake the loop when a job's
spec changes; the loop (in :mod:`decor.loop`) reads every due job's progress in one batch,
asks each job's law, plans, and acts (:mod:`decor.job`). Everything that decides lives in
``control.py`` and ``planner.py``; everything that talks to the API server lives in
``kube.py`` (and ``watch.py`` for the cluster-wide watches); progress comes from
``metrics.py``; pod bodies, patches, conditions and events are built by ``build.py``.

Where status goes, on purpose: the loop writes ``status`` itself through the status
subresource (every field is declared in the CRD); handlers return None, so kopf writes no
``status.<handler_id>``; kopf's own bookkeeping goes to ``decor.dev/`` annotations.

Operator metrics (prometheus_client, no per-job labels): ``decor_operator_actuations_total``
{kind}, ``decor_operator_reconcile_errors_total``, ``decor_operator_jobs`` {phase},
``decor_operator_reconcile_duration_seconds``, ``decor_operator_period_lateness_seconds``,
``decor_operator_plan_duration_seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from decor import build, metrics, planner
from decor.kube import Kube
from decor.lifecycle import ACTUATIONS
from decor.loop import IDLE_PERIOD_S, ControlLoop
from decor.model import API_GROUP, API_VERSION, PLURAL
from decor.policy import CheckpointStorage, TemplatePolicy
from decor.views import ClusterView
from decor.watch import ClusterWatch

log = logging.getLogger("decor.operator")

# --- configuration (environment) -----------------------------------------------------------

ENV_PROMETHEUS_URL = "DECOR_PROMETHEUS_URL"
"""Base URL of a Prometheus server to read progress from; unset: scrape pods directly."""
ENV_METRICS_PORT = "DECOR_METRICS_PORT"
"""Port of the operator's own /metrics (0 disables it)."""
ENV_LOG_LEVEL = "DECOR_LOG_LEVEL"
"""DEBUG, INFO (default), WARNING or ERROR."""
ENV_SIDECAR_IMAGE = "DECOR_SIDECAR_IMAGE"
"""Image of the metrics sidecar; unset: the trainer's own image."""
ENV_METRICS_ADDRESS = "DECOR_METRICS_ADDRESS"
"""Address the operator's own /metrics binds to (default 0.0.0.0)."""
ENV_HEALTH_ADDRESS = "DECOR_HEALTH_ADDRESS"
"""Address kopf's liveness endpoint binds to (default 0.0.0.0)."""
ENV_HEALTH_PORT = "DECOR_HEALTH_PORT"
"""Port of kopf's liveness endpoint /healthz (unset: none)."""
ENV_SCRAPE_VIA = "DECOR_SCRAPE_VIA"
"""How to reach a trainer's /metrics without Prometheus: ``direct`` (pod IP, the default) or
``apiserver`` (the API server's pod proxy: for an operator outside the pod network)."""
SCRAPE_DIRECT = "direct"
SCRAPE_APISERVER = "apiserver"
ENV_WATCH_NAMESPACE = "DECOR_WATCH_NAMESPACE"
"""Serve only this namespace when run_operator is given none (empty: all namespaces)."""
ENV_WATCH_NODES = "DECOR_WATCH_NODES"
"""``true`` (default): watch nodes and every pod cluster-wide so the planner knows capacity;
``false``: no arbitration (each job gets what its law asks; for a namespaced install)."""
ENV_PLANNER_POLICY = "DECOR_PLANNER_POLICY"
"""The planner's policy: decor (default), elasticflow, edf, decor-nn or none."""
ENV_STALL_TIMEOUT_S = "DECOR_STALL_TIMEOUT_SECONDS"
"""A running trainer that completes no step for this long is reported Stalled (default 120)."""
ENV_UNSCHEDULABLE_WAIT_S = "DECOR_UNSCHEDULABLE_WAIT_SECONDS"
"""How long a trainer pod may stay unschedulable before the job falls back (default 120)."""
ENV_MAX_POD_FAILURES = "DECOR_MAX_POD_FAILURES"
"""Trainer crashes, or pods lost, a job survives before it is Failed (default 5)."""
ENV_MIN_PERIOD_S = "DECOR_MIN_PERIOD_SECONDS"
"""The shortest control period any job runs at (the admin's floor over spec.control)."""

DEFAULT_OPERATOR_METRICS_PORT = 8080
DEFAULT_MIN_PERIOD_S = 1.0
READ_TIMEOUT_S = 2.0
"""Total time one progress read may take (a Prometheus query or one trainer's /metrics)."""
COMMIT_WORKERS = 8
"""Jobs whose actuation and status write run at once in a period (API calls wait on the
network, so a thousand jobs' commits one after another would outlast a 10 s period)."""
SCRAPE_WORKERS = 16
"""Trainer endpoints scraped at once when there is no Prometheus."""
STARTUP_GRACE_S = 180.0
"""How long a new trainer pod may run without a progress sample before MetricsUnavailable.

Importing PyTorch and building the model takes tens of seconds on a small VM; until the
first sample the allocation stays where the pod started, which is what the law wants.
"""
UNSCHEDULABLE_WAIT_S = 120.0
"""How long a trainer pod may stay unschedulable before the job falls back to what last ran."""
UNSCHEDULABLE_HOLD_S = 600.0
"""After such a fallback, how long the job asks for no more than what it fell back to."""
STALL_TIMEOUT_S = 120.0
"""A running trainer that completes no step for this long is reported Stalled."""
MAX_POD_FAILURES = 5
"""Trainer pods lost or failed that are recreated before the job is marked Failed."""
FINALIZER = "decor.dev/finalizer"
ANNOTATION_PREFIX = "decor.dev"


@dataclass(frozen=True)
class OperatorConfig:
    """How the operator reads progress and builds pods (from the environment by default)."""

    prometheus_url: str | None = None
    sidecar_image: str | None = None
    checkpoint_storage: CheckpointStorage = field(default_factory=CheckpointStorage)
    template_policy: TemplatePolicy = field(default_factory=TemplatePolicy)
    startup_grace_s: float = STARTUP_GRACE_S
    max_pod_failures: int = MAX_POD_FAILURES
    unschedulable_wait_s: float = UNSCHEDULABLE_WAIT_S
    unschedulable_hold_s: float = UNSCHEDULABLE_HOLD_S
    stall_timeout_s: float = STALL_TIMEOUT_S
    scrape_via: str = SCRAPE_DIRECT
    instance: str = field(default_factory=socket.gethostname)
    watch_nodes: bool = True
    planner_policy: str = planner.POLICY_DECOR
    min_period_s: float = DEFAULT_MIN_PERIOD_S
    read_timeout_s: float = READ_TIMEOUT_S
    read_wait_s: float = metrics.READ_WAIT_S
    scrape_workers: int = SCRAPE_WORKERS
    commit_workers: int = COMMIT_WORKERS

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> OperatorConfig:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            "prometheus_url": env.get(ENV_PROMETHEUS_URL) or None,
            "sidecar_image": env.get(ENV_SIDECAR_IMAGE) or None,
            "checkpoint_storage": CheckpointStorage.from_env(env),
            "template_policy": TemplatePolicy.from_env(env),
            "scrape_via": env.get(ENV_SCRAPE_VIA) or SCRAPE_DIRECT,
            "watch_nodes": (env.get(ENV_WATCH_NODES) or "true").lower() not in ("0", "false", "no"),
            "planner_policy": env.get(ENV_PLANNER_POLICY) or planner.POLICY_DECOR,
            "min_period_s": float(env.get(ENV_MIN_PERIOD_S) or DEFAULT_MIN_PERIOD_S),
            "stall_timeout_s": float(env.get(ENV_STALL_TIMEOUT_S) or STALL_TIMEOUT_S),
            "unschedulable_wait_s": float(
                env.get(ENV_UNSCHEDULABLE_WAIT_S) or UNSCHEDULABLE_WAIT_S
            ),
            "max_pod_failures": int(env.get(ENV_MAX_POD_FAILURES) or MAX_POD_FAILURES),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class OperatorMetrics:
    """The operator's own Prometheus metrics, in ``registry``. No per-job labels."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.actuations = Counter(
            "decor_operator_actuations",
            "Allocation changes and pod lifecycle actions the operator carried out, by kind "
            "(resize, restart, create, suspend).",
            ["kind"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "decor_operator_reconcile_errors",
            "Control periods that ended in an error (API or unexpected); the job is retried "
            "next period.",
            registry=registry,
        )
        self.jobs = Gauge(
            "decor_operator_jobs",
            "DeadlineTrainingJobs this operator serves, by phase.",
            ["phase"],
            registry=registry,
        )
        self.reconcile_seconds = Histogram(
            "decor_operator_reconcile_duration_seconds",
            "Wall time of one job's actuation and status write in a control period.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=registry,
        )
        self.period_lateness = Histogram(
            "decor_operator_period_lateness_seconds",
            "How late a job's control period ran after it was due.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=registry,
        )
        self.plan_seconds = Histogram(
            "decor_operator_plan_duration_seconds",
            "Wall time of one planner call over every active job.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )
        self.jobs_total = Gauge(
            "decor_operator_jobs_tracked",
            "DeadlineTrainingJobs in the operator's view (any phase).",
            registry=registry,
        )
        for kind in ACTUATIONS:
            self.actuations.labels(kind=kind)
        self._phases: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._publish()

    def job_phase(self, key: tuple[str, str], phase: str | None) -> None:
        """Record a job's phase (None: the job is gone)."""
        with self._lock:
            if phase is None:
                self._phases.pop(key, None)
            else:
                self._phases[key] = phase
            self._publish()

    def _publish(self) -> None:
        counts = dict.fromkeys(build.PHASES, 0)
        for phase in self._phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        for phase, count in counts.items():
            self.jobs.labels(phase=phase).set(count)


@dataclass
class Runtime:
    """What every handler shares: configuration, API access, metrics, the view and loop."""

    config: OperatorConfig
    kube: Kube
    metrics: OperatorMetrics
    view: ClusterView = field(default_factory=ClusterView)
    loop: ControlLoop = field(init=False)
    watch: ClusterWatch | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    specs_seen: dict[tuple[str, str], tuple[Any, ...]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self.loop = ControlLoop(
            self.view, kube=self.kube, config=self.config, operator_metrics=self.metrics
        )
        if self.config.watch_nodes:
            self.watch = ClusterWatch(self.view, self.kube.api_client)


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
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
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
    if current.watch is not None:
        current.watch.start()
    current.task = asyncio.create_task(_run_loop(current))


@kopf.on.cleanup()
async def dtj_operator_cleanup(**_: Any) -> None:
    current = runtime()
    if current.watch is not None:
        current.watch.stop()
    if current.task is not None:
        current.task.cancel()
        await asyncio.gather(current.task, return_exceptions=True)
    current.loop.close()


async def _run_loop(current: Runtime) -> None:
    """The control loop: a period in a worker thread, then sleep until the next job is due
    or a job's spec changes."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            wait_s = await loop.run_in_executor(None, current.loop.run_period)
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


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
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


async def dtj_pod_event(*, body: kopf.Body, event: Mapping[str, Any], **_: Any) -> None:
    """The job's trainer pods, when the operator does not watch every pod itself."""
    runtime().view.put_pod(dict(body), deleted=event.get("type") == "DELETED")


def register_pod_events() -> None:
    """Watch DECOR's trainer pods through kopf (only without the cluster-wide watch)."""
    kopf.on.event("", "v1", "pods", labels={build.LABEL_JOB: kopf.PRESENT})(dtj_pod_event)


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


def run_operator(
    namespace: str | None = None,
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

    ``namespace``: serve only this namespace (a Role is enough); None: ``$DECOR_WATCH_NAMESPACE``,
    and when that is empty too, all namespaces.
    ``prometheus_url``: read progress from this Prometheus (default ``$DECOR_PROMETHEUS_URL``;
    unset: scrape each trainer pod's /metrics). ``metrics_port``: the operator's own /metrics
    (default ``$DECOR_METRICS_PORT`` or 8080; 0 disables). ``health_port``: kopf's liveness
    endpoint /healthz (default ``$DECOR_HEALTH_PORT``; unset: none). ``standalone``: no kopf
    peering (one replica; no peering CRDs or RBAC needed); otherwise peering with ``priority``.
    """
    _setup_logging(log_level)
    namespace = namespace or os.environ.get(ENV_WATCH_NAMESPACE) or None
    config = OperatorConfig.from_env(prometheus_url=prometheus_url)
    registry = CollectorRegistry()
    set_runtime(
        Runtime(
            config=config, kube=Kube.from_environment(kubeconfig), metrics=OperatorMetrics(registry)
        )
    )
    if not config.watch_nodes:
        register_pod_events()
    if metrics_port is None:
        metrics_port = int(os.environ.get(ENV_METRICS_PORT) or DEFAULT_OPERATOR_METRICS_PORT)
    server = start_metrics_server(
        metrics_port, registry, os.environ.get(ENV_METRICS_ADDRESS) or "0.0.0.0"
    )
    if health_port is None and os.environ.get(ENV_HEALTH_PORT):
        health_port = int(os.environ[ENV_HEALTH_PORT])
    health_address = os.environ.get(ENV_HEALTH_ADDRESS) or "0.0.0.0"
    liveness = f"http://{health_address}:{health_port}/healthz" if health_port else None
    try:
        kopf.run(
            standalone=standalone,
            priority=priority,
            clusterwide=namespace is None,
            namespaces=[namespace] if namespace else (),
            liveness_endpoint=liveness,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        if server is not None:
            server.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m decor.handlers [--namespace NS] [--prometheus-url URL]`` (tests, debugging)."""
    parser = argparse.ArgumentParser(
        prog="python -m decor.handlers", description="Run the DECOR operator."
    )
    parser.add_argument(
        "--namespace", "-n", default=None, help="serve one namespace (default: all)"
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
