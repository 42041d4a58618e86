"""``make bench-scale``: the real operator driving hundreds of DeadlineTrainingJobs on the
scale test bed (cluster/scale/: real etcd, kube-apiserver, kube-scheduler and Prometheus;
kwok's fake nodes; the SIMULATED trainer fleet of :mod:`simulator`), measured.

For each size: a fresh scale bed (``scale-up.sh``), the operator as ``--replicas`` processes
(default 2, as the chart) electing a leader through a Lease in the bed's ``decor-system``
namespace, with the chart's default settings, the jobs created, a warm-up, then a
measurement window in which a share of the jobs get their deadline patched; after it every
job runs to its end. Measured:

* which replica led the window: the Lease's holder and each replica's
  ``decor_operator_leader`` gauge at the window's start and end (:mod:`replicas`);
* the leader's CPU (cores, mean over the window) and resident memory (max), from /proc, and
  the standby's beside them;
* the operator's API requests per second by verb and resource: the API server's audit log,
  every request of the replicas' own client identities (user ``decor-operator-N`` for
  replica N) received in the window, all replicas together and each on its own (kwok, the
  scheduler and the simulator have identities of their own); ``apiserver_request_total`` of
  all clients is recorded beside it;
* Prometheus queries per second: Prometheus's ``prometheus_http_requests_total`` for
  ``/api/v1/query``;
* control-period drift: the operator's ``decor_operator_period_lateness_seconds`` histogram
  over the window (p99 as Prometheus's ``histogram_quantile`` computes it);
* deadline patch to resize: for each patch, the operator's answer (its status write of the
  new deadline, seen by the driver's job watch) and the first resize after the patch (a CPU
  pod's resources change in its spec, or a GPU pod's deletion for its restart, seen by the
  driver's own pod watch); an answer came with a resize when that resize was seen within 1 s
  of it. Patch to resize is measured over the answers that came with one; the first resize
  of any cause after each patch is recorded beside it (``measure.patch_answers``);
* every job's ``status.outcome.deviationPercent`` at its end.

Results: one record per run in docs/benchmarks/scale/results.json (the report is generated
from it by :mod:`report`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from decor.api import vocabulary
from decor.core import leader as lease_records
from decor.service import config as operator_config

from bench.scale import fleet, measure, replicas

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

NAMESPACE = "scale"
RESULTS = REPO / "docs/benchmarks/scale/results.json"
PROC_SAMPLE_S = 1.0
"""How often the operator's /proc is read."""
POLL_S = 2.0
"""How often the driver looks at the jobs while waiting."""
REQUEST_TIMEOUT_S = 30.0
NOT_FOUND = 404
LEASE_NAME = operator_config.DEFAULT_LEASE_NAME
DEFAULT_REPLICAS = 2
"""Operator processes per run, as the chart's ``replicaCount``."""
STOP_TIMEOUT_S = 30.0
"""How long a replica may take to stop on SIGTERM before it is killed."""


@dataclass(frozen=True)
class Size:
    """One run's shape."""

    jobs: int
    duration_s: tuple[float, float]  # each job's deadline, relative to its start
    warmup_s: float  # from the last job created to the window
    window_s: float
    patch_share: float = 0.1


GRIDS: dict[str, list[Size]] = {
    "full": [
        Size(100, (720.0, 900.0), 120.0, 300.0),
        Size(300, (720.0, 900.0), 120.0, 300.0),
        Size(1000, (780.0, 960.0), 180.0, 300.0),
    ],
    "smoke": [Size(50, (150.0, 180.0), 40.0, 60.0)],
    "tiny": [Size(6, (90.0, 110.0), 30.0, 30.0, patch_share=0.5)],  # the harness's own check
}


def bed_env() -> dict[str, str]:
    """Ports and places of the scale bed (cluster/scale/lib.sh, read through bash)."""
    names = (
        "SCALE_STATE SCALE_APISERVER_PORT SCALE_PROMETHEUS_PORT SCALE_AUDIT_LOG "
        "SCALE_PKI SCALE_NODE_CPU_CORES SCALE_NODE_GPUS SCALE_LEASE_NAMESPACE"
    ).split()
    script = ". cluster/scale/lib.sh; " + "; ".join(f'echo "{n}=${n}"' for n in names)
    out = subprocess.run(
        ["bash", "-c", script], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


class Api:
    """A small client of the scale API server with one identity's certificate."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)

    def raw(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        response = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S, **kwargs)
        return json.loads(response.data)

    def get_text(self, path: str) -> str:
        """GET a non-resource path (``/metrics``) as text, with this identity's certificate."""
        conf = self.api_client.configuration
        context = ssl.create_default_context(cafile=conf.ssl_ca_cert)
        context.load_cert_chain(conf.cert_file, conf.key_file)
        with urllib.request.urlopen(  # noqa: S310 - the bed's own API server
            conf.host + path, timeout=REQUEST_TIMEOUT_S, context=context
        ) as response:
            return response.read().decode()

    def lease(self, namespace: str, name: str) -> lease_records.LeaseRecord | None:
        """The leader Lease as the replicas wrote it, or None when there is none (yet)."""
        from kubernetes.client.exceptions import ApiException

        try:
            body = self.raw(self.coordination.read_namespaced_lease, name, namespace)
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return None
            raise
        return lease_records.record_from_lease(body)

    def jobs(self) -> list[dict[str, Any]]:
        body = self.raw(
            self.custom.list_namespaced_custom_object,
            vocabulary.API_GROUP,
            vocabulary.API_VERSION,
            NAMESPACE,
            vocabulary.PLURAL,
        )
        return list(body.get("items") or [])


# ---------------------------------------------------------------------------------------------
# Watching pods for resizes, and jobs for the operator's answer to a deadline patch


def watch_forever(
    stopped: threading.Event,
    list_fn: Callable[..., Any],
    args: tuple[Any, ...],
    seen: Callable[[str | None, dict[str, Any], float], None],
    **kwargs: Any,
) -> None:
    """Feed every event of a watch to ``seen`` (type, object, Unix s) until ``stopped``."""
    from kubernetes import watch

    while not stopped.is_set():
        try:
            stream = watch.Watch().stream(
                list_fn, *args, timeout_seconds=300, _request_timeout=330, **kwargs
            )
            for event in stream:
                seen(event.get("type"), event.get("raw_object") or {}, time.time())
        except Exception:  # noqa: BLE001 - keep watching
            stopped.wait(1.0)


@dataclass
class ResizeWatch:
    """The driver's own pod watch: per job, when its trainer's allocation last changed."""

    api: Api
    stopped: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    desired: dict[str, tuple[str, float]] = field(default_factory=dict)  # job -> (pod, alloc)
    changes: dict[str, list[float]] = field(default_factory=dict)  # job -> Unix s of changes

    def start(self) -> None:
        threading.Thread(
            target=watch_forever,
            args=(self.stopped, self.api.core.list_namespaced_pod, (NAMESPACE,), self._seen),
            kwargs={"label_selector": vocabulary.LABEL_JOB},
            daemon=True,
            name="resize-watch",
        ).start()

    def _seen(self, kind: str | None, pod: dict[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        job = (meta.get("labels") or {}).get(vocabulary.LABEL_JOB)
        if not job:
            return
        gpus = fleet.gpus_of(pod)
        allocation = gpus if gpus else fleet.desired_cpu_cores(pod)
        with self.lock:
            before = self.desired.get(job)
            if kind == "DELETED" or meta.get("deletionTimestamp"):
                if before is not None and before[0] == meta.get("name"):
                    self.changes.setdefault(job, []).append(now)  # a GPU restart
                    self.desired.pop(job, None)
                return
            if before is not None and before[0] == meta.get("name") and before[1] != allocation:
                self.changes.setdefault(job, []).append(now)
            self.desired[job] = (str(meta.get("name")), allocation)

    def first_change_after(self, job: str, t_s: float) -> float | None:
        with self.lock:
            return min((c for c in self.changes.get(job, []) if c >= t_s), default=None)

    def allocation(self, job: str) -> float | None:
        with self.lock:
            entry = self.desired.get(job)
            return entry[1] if entry else None


@dataclass
class AnswerWatch:
    """The driver's own job watch: per job, when its ``status.deadline`` changed, i.e. when
    the operator planned with a moved deadline (it writes the new deadline in the period
    that sees the patch, after any resize that period asked for)."""

    api: Api
    stopped: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    deadline: dict[str, str] = field(default_factory=dict)  # job -> status.deadline
    changes: dict[str, list[float]] = field(default_factory=dict)  # job -> Unix s of changes

    def start(self) -> None:
        threading.Thread(
            target=watch_forever,
            args=(
                self.stopped,
                self.api.custom.list_namespaced_custom_object,
                (vocabulary.API_GROUP, vocabulary.API_VERSION, NAMESPACE, "deadlinetrainingjobs"),
                self._seen,
            ),
            daemon=True,
            name="answer-watch",
        ).start()

    def _seen(self, kind: str | None, job: dict[str, Any], now: float) -> None:
        name = str((job.get("metadata") or {}).get("name") or "")
        deadline = (job.get("status") or {}).get("deadline")
        if not name or not deadline or kind == "DELETED":
            return
        with self.lock:
            before = self.deadline.get(name)
            if before is not None and before != deadline:
                self.changes.setdefault(name, []).append(now)
            self.deadline[name] = deadline

    def first_change_after(self, job: str, t_s: float) -> float | None:
        with self.lock:
            return min((c for c in self.changes.get(job, []) if c >= t_s), default=None)


# ---------------------------------------------------------------------------------------------
# The operator's replicas


@dataclass
class Replica:
    """One operator process on the scale bed: its Lease identity (also its client
    identity), its /metrics port, the process, its log."""

    identity: str
    metrics_port: int
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    profile_out: Path

    def metrics(self) -> measure.Metrics:
        return measure.parse_metrics(http_text(f"http://127.0.0.1:{self.metrics_port}/metrics"))


def replica_env(
    index: int, count: int, state: Path, prometheus: str, metrics_port: int, lease_namespace: str
) -> dict[str, str]:
    """Replica ``index`` of ``count``'s environment: the chart's default settings
    (helm/decor/values.yaml), cluster-wide, its own client certificate and metrics port;
    with ``count`` > 1 leader election through the Lease in ``lease_namespace``, at the
    chart's default timings, as the chart runs its replicas."""
    election = count > 1
    return {
        **os.environ,
        "KUBECONFIG": str(state / f"operator-{index}.kubeconfig"),
        "DECOR_PROMETHEUS_URL": prometheus,
        "DECOR_METRICS_PORT": str(metrics_port),
        "DECOR_WATCH_NAMESPACES": "",
        "DECOR_WATCH_NODES": "true",
        "DECOR_PLANNER_POLICY": "decor",
        "DECOR_MIN_PERIOD_SECONDS": "1",
        "DECOR_LOG_LEVEL": "INFO",
        # The jobs tolerate kwok's taint; a template policy allows it only when told so.
        "DECOR_ALLOWED_TOLERATION_KEYS": measure.KWOK_TOLERATION["key"],
        operator_config.ENV_LEADER_ELECTION: "true" if election else "false",
        operator_config.ENV_LEADER_LEASE_NAME: LEASE_NAME,
        operator_config.ENV_LEADER_LEASE_NAMESPACE: lease_namespace,
        operator_config.ENV_LEADER_IDENTITY: replicas.operator_user(index),
    }


def start_replicas(
    args: argparse.Namespace, state: Path, prometheus: str, lease_namespace: str
) -> list[Replica]:
    """Start ``args.replicas`` operator processes (under the stack sampler with
    ``--profile``), each logging to ``logs/operator-N.log`` of the bed."""
    started = []
    for index in range(args.replicas):
        port = args.operator_metrics_port + index
        profile_out = state / f"logs/operator-{index}-profile.json"
        command = [sys.executable, "-m", "decor.cli", "operator"]
        if args.profile:
            sampler = ["-m", "bench.scale.profile_operator", "--out", str(profile_out)]
            command = [sys.executable, *sampler]
        log = open(state / f"logs/operator-{index}.log", "ab")  # noqa: SIM115 - closed on stop
        env = replica_env(index, args.replicas, state, prometheus, port, lease_namespace)
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        started.append(Replica(replicas.operator_user(index), port, process, log, profile_out))
    return started


def stop_replicas(running: Sequence[Replica], leader: str | None) -> None:
    """SIGTERM each replica, the standbys first (so none takes the Lease the leader frees on
    its way out), and wait for it; kill one that does not stop in STOP_TIMEOUT_S."""
    for replica in sorted(running, key=lambda r: r.identity == leader):
        replica.process.send_signal(signal.SIGTERM)
        try:
            replica.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            replica.process.kill()
            replica.process.wait()
        replica.log.close()


@dataclass
class ProcSampler:
    """Reads every replica's /proc once per PROC_SAMPLE_S in a thread: one sample per
    replica per tick (so ticks line up across replicas), until stopped or one has exited."""

    pids: Sequence[int]
    samples: list[list[measure.ProcSample]] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.samples = [[] for _ in self.pids]
        self.thread = threading.Thread(target=self._run, daemon=True, name="proc-sampler")
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                tick = [read_proc(pid) for pid in self.pids]
            except OSError:
                return
            for samples, sample in zip(self.samples, tick, strict=True):
                samples.append(sample)
            self.stopped.wait(PROC_SAMPLE_S)

    def stop(self) -> list[list[measure.ProcSample]]:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()
        return self.samples


# ---------------------------------------------------------------------------------------------
# One run


def read_proc(pid: int) -> measure.ProcSample:
    ticks = os.sysconf("SC_CLK_TCK")
    stat = Path(f"/proc/{pid}/stat").read_text()
    status = Path(f"/proc/{pid}/status").read_text()
    return measure.ProcSample(
        time.time(), measure.parse_proc_stat(stat, ticks), measure.parse_proc_rss(status)
    )


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as response:  # noqa: S310
        return response.read().decode()


def wait_until(what: str, timeout_s: float, check: Callable[[], bool]) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(POLL_S)
    print(f"  timed out after {timeout_s:.0f}s waiting for {what}", flush=True)
    return False


@dataclass
class Window:
    """What the driver read at the measurement window's start and end."""

    start_s: float = 0.0
    end_s: float = 0.0
    running: int = 0
    replicas_before: list[measure.Metrics] = field(default_factory=list)
    replicas_after: list[measure.Metrics] = field(default_factory=list)
    api_before: measure.Metrics = field(default_factory=dict)
    api_after: measure.Metrics = field(default_factory=dict)
    prom_before: measure.Metrics = field(default_factory=dict)
    prom_after: measure.Metrics = field(default_factory=dict)
    lease_before: lease_records.LeaseRecord | None = None
    lease_after: lease_records.LeaseRecord | None = None
    proc: list[list[measure.ProcSample]] = field(default_factory=list)
    patches: list[tuple[str, float, float]] = field(default_factory=list)
    machine_busy_cores: float | None = None  # the whole machine's, from /proc/stat
    machine_steal_cores: float | None = None  # the hypervisor's, from /proc/stat


def plan_size(
    size: Size, args: argparse.Namespace, env: Mapping[str, str]
) -> tuple[list[measure.JobPlan], dict[str, Callable[[float], float]], int, int]:
    """The size's jobs, the simulator's speed curves (workload -> steps/s at an
    allocation) and the kwok nodes (CPU, GPU) that hold them."""
    profiles = json.loads((REPO / "docs/benchmarks/results.json").read_text())["profiles"]
    curves = fleet.curves_from_profiles(profiles)
    rates: dict[str, Callable[[float], float]] = {
        name: curve.steps_per_s for name, curve in curves.items()
    }
    plans = measure.plan_jobs(
        size.jobs,
        gpu_share=args.gpu_share,
        duration_s=size.duration_s,
        target_allocation=(1.2, 3.0),
        rates=rates,
        startup_s=args.startup_s,
        seed=args.seed,
    )
    cpu_nodes, gpu_nodes = measure.nodes_for(
        plans, float(env["SCALE_NODE_CPU_CORES"]), float(env["SCALE_NODE_GPUS"])
    )
    return plans, rates, cpu_nodes, gpu_nodes


@dataclass
class Run:
    """One size's run: what its steps share."""

    size: Size
    args: argparse.Namespace
    plans: list[measure.JobPlan]
    rates: dict[str, Callable[[float], float]]
    driver: Api
    operators: list[Replica]
    prometheus: str
    lease_namespace: str
    watch: ResizeWatch
    answers: AnswerWatch
    window: Window = field(default_factory=Window)


def run_size(size: Size, args: argparse.Namespace) -> dict[str, Any]:
    """One size on a fresh bed: start it, run the operator's replicas and the jobs, measure
    the window, wait for every job to end, take the bed down; the results record."""
    env = bed_env()
    plans, rates, cpu_nodes, gpu_nodes = plan_size(size, args, env)
    bed = {
        **os.environ,
        "PY": sys.executable,
        "DECOR_SCALE_CPU_NODES": str(cpu_nodes),
        "DECOR_SCALE_GPU_NODES": str(gpu_nodes),
        "DECOR_SCALE_OPERATOR_REPLICAS": str(args.replicas),
    }
    print(
        f"== {size.jobs} jobs: {cpu_nodes} CPU + {gpu_nodes} GPU kwok nodes; "
        f"{args.replicas} operator replica(s)",
        flush=True,
    )
    subprocess.run(["bash", "cluster/scale/scale-down.sh"], cwd=REPO, env=bed, check=True)
    subprocess.run(
        ["bash", "cluster/scale/scale-up.sh"], cwd=REPO, env=bed, check=True, stdout=sys.stderr
    )
    state = Path(env["SCALE_STATE"])
    driver = Api(str(state / "driver.kubeconfig"))
    prometheus = f"http://127.0.0.1:{env['SCALE_PROMETHEUS_PORT']}"
    lease_namespace = env["SCALE_LEASE_NAMESPACE"]
    driver.raw(driver.core.create_namespace, {"metadata": {"name": lease_namespace}})
    operators = start_replicas(args, state, prometheus, lease_namespace)
    watches = ResizeWatch(driver), AnswerWatch(driver)
    run = Run(size, args, plans, rates, driver, operators, prometheus, lease_namespace, *watches)
    try:
        jobs = drive(run)
    finally:
        run.watch.stopped.set()
        run.answers.stopped.set()
        lease_after = run.window.lease_after
        stop_replicas(operators, lease_after.holder if lease_after else None)
    record = build_size_record(run, jobs, env["SCALE_AUDIT_LOG"])
    record["kwok_nodes"] = {"cpu": cpu_nodes, "gpu": gpu_nodes}
    if args.keep_logs:  # scale-down deletes the bed's state, its logs included
        args.keep_logs.mkdir(parents=True, exist_ok=True)
        for index in range(len(operators)):
            shutil.copy(
                state / f"logs/operator-{index}.log",
                args.keep_logs / f"operator-{size.jobs}-{index}.log",
            )
        keep_jobs_and_events(driver, jobs, args.keep_logs / f"jobs-{size.jobs}.json")
    subprocess.run(["bash", "cluster/scale/scale-down.sh"], cwd=REPO, env=bed, check=True)
    return record


def keep_jobs_and_events(driver: Api, jobs: Sequence[Mapping[str, Any]], path: Path) -> None:
    """The jobs as they ended and their Events (what each period changed, and why), for a
    look at single jobs after the run."""
    events = driver.raw(driver.core.list_namespaced_event, NAMESPACE).get("items") or []
    kept = [
        {
            "job": e["involvedObject"].get("name"),
            "kind": e["involvedObject"].get("kind"),
            "reason": e.get("reason"),
            "message": e.get("message"),
            "count": e.get("count"),
            "first": e.get("firstTimestamp") or e.get("eventTime"),
            "last": e.get("lastTimestamp") or e.get("eventTime"),
        }
        for e in events
    ]
    path.write_text(json.dumps({"jobs": list(jobs), "events": kept}, indent=1))


def drive(run: Run) -> list[dict[str, Any]]:
    """Create the jobs, warm up, measure the window, then wait for every job to end (at most
    1.5 x the longest deadline + 2 min after the last was created); the jobs at the end."""
    run.watch.start()
    run.answers.start()
    created_s = create_jobs(run.driver, run.plans, run.args.period_s)
    print(f"  {len(run.plans)} jobs created; warm-up {run.size.warmup_s:.0f}s", flush=True)
    time.sleep(max(0.0, created_s + run.size.warmup_s - time.time()))  # a fixed warm-up
    measure_window(run)
    window_s = run.window.end_s - run.window.start_s
    print(f"  window done ({window_s:.0f}s); waiting for every job to end", flush=True)
    horizon_s = created_s + run.size.duration_s[1] * 1.5 + 120.0
    wait_until(
        "every job to end",
        max(0.0, horizon_s - time.time()),
        lambda: all(
            (j.get("status") or {}).get("phase") in vocabulary.TERMINAL_PHASES
            for j in run.driver.jobs()
        ),
    )
    return run.driver.jobs()


def create_jobs(driver: Api, plans: Sequence[measure.JobPlan], period_s: float) -> float:
    """Create the jobs' namespace and every job; returns when the last was created (Unix s)."""
    driver.raw(driver.core.create_namespace, {"metadata": {"name": NAMESPACE}})
    for plan in plans:
        driver.raw(
            driver.custom.create_namespaced_custom_object,
            vocabulary.API_GROUP,
            vocabulary.API_VERSION,
            NAMESPACE,
            vocabulary.PLURAL,
            measure.job_manifest(plan, NAMESPACE, period_s),
        )
    return time.time()


def read_counters(run: Run) -> tuple[list[measure.Metrics], measure.Metrics, measure.Metrics]:
    """Every replica's /metrics, the API server's and Prometheus's, read now."""
    return (
        [replica.metrics() for replica in run.operators],
        measure.parse_metrics(run.driver.get_text("/metrics")),
        measure.parse_metrics(http_text(f"{run.prometheus}/metrics")),
    )


def measure_window(run: Run) -> None:
    """The measurement window: counters, the Lease and the jobs Running at its start; the
    replicas' /proc sampled and deadline patches sent through it; counters and the Lease at
    its end. Fills ``run.window``."""
    window = run.window
    window.running = sum(
        1
        for j in run.driver.jobs()
        if (j.get("status") or {}).get("phase") == vocabulary.PHASE_RUNNING
    )
    print(f"  window starts: {window.running}/{run.size.jobs} jobs Running", flush=True)
    window.lease_before = run.driver.lease(run.lease_namespace, LEASE_NAME)
    window.replicas_before, window.api_before, window.prom_before = read_counters(run)
    window.start_s = time.time()  # after the reads: the counters' window holds the audit window
    machine_before = measure.parse_machine_cpu(Path("/proc/stat").read_text())
    sampler = ProcSampler([replica.process.pid for replica in run.operators])
    sampler.start()
    window.patches = schedule_patches(
        run.driver, run.watch, run.plans, run.size, window.start_s, run.args.seed, run.rates
    )
    time.sleep(max(0.0, window.start_s + run.size.window_s - time.time()))  # the window
    window.end_s = time.time()
    machine_after = measure.parse_machine_cpu(Path("/proc/stat").read_text())
    cores = os.cpu_count() or 1
    window.machine_busy_cores = measure.machine_busy_cores(machine_before, machine_after, cores)
    window.machine_steal_cores = measure.machine_steal_cores(machine_before, machine_after, cores)
    window.proc = sampler.stop()
    window.replicas_after, window.api_after, window.prom_after = read_counters(run)
    window.lease_after = run.driver.lease(run.lease_namespace, LEASE_NAME)
    holder = window.lease_after.holder if window.lease_after else "no Lease"
    print(f"  leader at the window's end: {holder}", flush=True)


def patch_details(run: Run) -> list[dict[str, Any]]:
    """Each deadline patch: when sent, how long the API server took, and the times to the
    operator's answer and to the first resize after it (None: not seen)."""
    mode_of = {p.name: p.mode for p in run.plans}
    details = []
    for job, sent_s, call_s in run.window.patches:
        changed = run.watch.first_change_after(job, sent_s)
        answered = run.answers.first_change_after(job, sent_s)
        details.append(
            {
                "job": job,
                "mode": mode_of[job],
                "to_resize_s": None if changed is None else round(changed - sent_s, 3),
                "to_answer_s": None if answered is None else round(answered - sent_s, 3),
                "sent_unix_s": round(sent_s, 3),
                "patch_call_s": round(call_s, 3),
            }
        )
    return details


def loop_costs(before: measure.Metrics, after: measure.Metrics) -> dict[str, Any]:
    """The control loop in the window: its job commits, plans and periods (count, mean and
    total s), the periods' p50/p99 and the commits slower than 1 s and 5 s, each step of
    the periods (count, total, mean, p99); its status writes still waiting at the window's
    end."""
    costs: dict[str, Any] = {}
    for key, name in (
        ("commit", vocabulary.METRIC_RECONCILE_DURATION),
        ("plan", vocabulary.METRIC_PLAN_DURATION),
        ("loop_period", vocabulary.METRIC_PERIOD_DURATION),
    ):
        count, total = measure.histogram_mean_delta(before, after, name)
        costs[f"{key}s_in_window"] = int(count)
        costs[f"{key}_s_mean"] = round(total / count, 5) if count else None
        costs[f"{key}_s_total"] = round(total, 3)
    periods = measure.histogram_delta(before, after, vocabulary.METRIC_PERIOD_DURATION)
    for q in (0.5, 0.99):
        quantile = measure.histogram_quantile(q, periods)
        costs[f"loop_period_s_p{round(100 * q)}"] = measure.rounded(quantile)
    commits = measure.histogram_delta(before, after, vocabulary.METRIC_RECONCILE_DURATION)
    total = commits[-1][1] if commits else 0.0
    for bound in (1.0, 5.0):
        within = next((count for le, count in commits if le == bound), total)
        costs[f"commits_over_{bound:g}s"] = int(total - within)
    # Where the periods' time went: each step's (the replicas added up; a standby runs none).
    costs["steps"] = {
        step: measure.histogram_summary(
            before, after, vocabulary.METRIC_PERIOD_STEP_DURATION, step=step
        )
        for step in vocabulary.PERIOD_STEPS
    }
    # Status writes sent in the background and not yet answered, at the window's end.
    costs["status_writes_waiting_at_end"] = int(
        measure.metric_sum(after, vocabulary.METRIC_STATUS_WRITES_WAITING)
    )
    return costs


def replica_reads(run: Run, audit_log: str) -> list[replicas.ReplicaRead]:
    """What was read of each replica over the window; its API requests from the audit log."""
    window = run.window
    identities = [replica.identity for replica in run.operators]
    with open(audit_log) as log_file:
        by_user = measure.audit_counts_by_user(log_file, identities, window.start_s, window.end_s)
    return [
        replicas.ReplicaRead(identity, samples, by_user[identity], before, after)
        for identity, samples, before, after in zip(
            identities, window.proc, window.replicas_before, window.replicas_after, strict=True
        )
    ]


def build_size_record(
    run: Run, jobs: Sequence[Mapping[str, Any]], audit_log: str
) -> dict[str, Any]:
    """The results record of one run (:func:`measure.build_record` and the replicas'
    fields): the operator's CPU and RSS are the leader's (all replicas' together when the
    lead moved in the window), its API requests and loop metrics all replicas' together."""
    window, plans = run.window, run.plans
    window_s = window.end_s - window.start_s
    reads = replica_reads(run, audit_log)
    fields = replicas.replica_fields(reads, window.lease_before, window.lease_after, window_s)
    patches = patch_details(run)
    mode_of = {p.name: p.mode for p in plans}
    deviation_of = {
        str(j["metadata"]["name"]): float(j["status"]["outcome"]["deviationPercent"])
        for j in jobs
        if ((j.get("status") or {}).get("outcome") or {}).get("deviationPercent") is not None
    }
    all_requests, queries = _api_and_prometheus_counts(window)
    operator_before = measure.merge_metrics(window.replicas_before)
    operator_after = measure.merge_metrics(window.replicas_after)
    record = measure.build_record(
        jobs=run.size.jobs,
        period_s=run.args.period_s,
        window_s=window_s,
        proc=replicas.acting_samples(reads, fields["leader"]),
        operator_requests=sum((Counter(r.requests) for r in reads), Counter()),
        all_requests=all_requests,
        prometheus_queries=queries,
        lateness_buckets=measure.histogram_delta(
            operator_before, operator_after, vocabulary.METRIC_PERIOD_LATENESS
        ),
        patches=patches,
        resize_timeout_s=run.args.resize_timeout_s,
        deviations_pct=list(deviation_of.values()),
        outcomes=Counter(str((j.get("status") or {}).get("phase")) for j in jobs),
        extra={
            **fields,
            "gpu_jobs": sum(1 for p in plans if p.mode == "gpu"),
            "scrape_interval_s": float(os.environ.get("DECOR_SCALE_SCRAPE_INTERVAL_S", "5")),
            "running_at_window_start": window.running,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine_cores": os.cpu_count(),
            "machine_busy_cores_mean": measure.rounded(window.machine_busy_cores, 3),
            "machine_saturated": measure.saturated(window.machine_busy_cores, os.cpu_count()),
            "machine_steal_cores_mean": measure.rounded(window.machine_steal_cores, 3),
            "loop": loop_costs(operator_before, operator_after),
            "deviation_by_group": measure.deviation_by_group(
                deviation_of, plans, (job for job, _, _ in window.patches)
            ),
            "patches": patches,
            "patch_answers": measure.patch_answers(patches),
            "worst_jobs": measure.worst_jobs(jobs, mode_of),
        },
    )
    profiled = [r for r in run.operators if r.identity == fields["leader"]] or run.operators[:1]
    if run.args.profile and profiled[0].profile_out.exists():
        record["profile"] = json.loads(profiled[0].profile_out.read_text())
        record["note"] = "profiled run: a stack sampler ran inside the operator (CPU inflated)"
    return record


def _api_and_prometheus_counts(window: Window) -> tuple[dict[tuple[str, str], float], float]:
    """Over the window: the API server's requests by (verb, resource), every client's, and
    Prometheus's instant queries."""
    all_requests = {
        (labels.get("verb", ""), labels.get("resource", "")): value
        - measure.metric_sum(window.api_before, "apiserver_request_total", **labels)
        for labels, value in window.api_after.get("apiserver_request_total", [])
    }
    query = {"handler": "/api/v1/query"}
    queries = measure.metric_sum(
        window.prom_after, "prometheus_http_requests_total", **query
    ) - measure.metric_sum(window.prom_before, "prometheus_http_requests_total", **query)
    return all_requests, queries


def schedule_patches(
    api: Api,
    watch: ResizeWatch,
    plans: list[measure.JobPlan],
    size: Size,
    start_s: float,
    seed: int,
    rates: Mapping[str, Callable[[float], float]],
) -> list[tuple[str, float, float]]:
    """Patch ``patch_share`` of the jobs' deadlines at random times in the window's first
    two thirds (so the resize has time to follow): a job below its max gets a deadline that
    needs more but that its max can still meet, one at its max gets more time
    (``measure.patched_remaining_s``; ``rates``: workload -> steps/s at an allocation).
    Returns (job, when the patch was sent, seconds the API server took to accept it) for
    each; runs in a thread until the last is sent."""
    rng = random.Random(seed + 1)
    chosen = rng.sample(plans, max(1, round(len(plans) * size.patch_share)))
    times = sorted(start_s + rng.uniform(0.05, 0.66) * size.window_s for _ in chosen)
    sent: list[tuple[str, float, float]] = []

    def run() -> None:
        for plan, at_s in zip(chosen, times, strict=True):
            time.sleep(max(0.0, at_s - time.time()))  # the patch's scheduled time
            job = api.raw(
                api.custom.get_namespaced_custom_object,
                vocabulary.API_GROUP,
                vocabulary.API_VERSION,
                NAMESPACE,
                vocabulary.PLURAL,
                plan.name,
            )
            status = job.get("status") or {}
            started = status.get("startTime")
            if not started or status.get("phase") != vocabulary.PHASE_RUNNING:
                continue
            elapsed_s = time.time() - measure.parse_time_s(started)
            remaining_s = max(10.0, plan.duration_s - elapsed_s)
            current = watch.allocation(plan.name)
            steps_left = float(status.get("stepsTotal") or 0) - float(status.get("stepsDone") or 0)
            given_s = measure.patched_remaining_s(
                remaining_s,
                max(0.0, steps_left),
                rates[plan.workload](plan.max_allocation),
                at_max=current is not None and current >= plan.max_allocation,
            )
            duration_s = round(elapsed_s + given_s)
            if duration_s == round(plan.duration_s):
                continue  # MAX barely makes the old deadline: a patch would move nothing
            sent_s = time.time()
            api.raw(
                api.custom.patch_namespaced_custom_object,
                vocabulary.API_GROUP,
                vocabulary.API_VERSION,
                NAMESPACE,
                vocabulary.PLURAL,
                plan.name,
                {"spec": {"duration": f"{duration_s}s"}},
                _content_type="application/merge-patch+json",
            )
            sent.append((plan.name, sent_s, time.time() - sent_s))

    thread = threading.Thread(target=run, daemon=True, name="deadline-patches")
    thread.start()
    return sent


def save(record: dict[str, Any], path: Path) -> bool:
    """Add ``record`` to the results, replacing an earlier run of the same size and period;
    except that a run on a saturated machine (``machine_saturated``) does not replace one
    that was not: it is kept apart, in ``saturated_runs``, and False is returned."""
    data = json.loads(path.read_text()) if path.exists() else {"records": []}
    size = (record["jobs"], record["period_s"])
    others: list[dict[str, Any]] = []
    earlier: list[dict[str, Any]] = []
    for r in data.get("records", []):
        (earlier if (r["jobs"], r["period_s"]) == size else others).append(r)
    kept = not record.get("machine_saturated") or all(r.get("machine_saturated") for r in earlier)
    if kept:
        data["records"] = sorted([*others, record], key=lambda r: (r["period_s"], r["jobs"]))
    else:
        data["saturated_runs"] = [*data.get("saturated_runs", []), record]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return kept


def say_if_saturated(record: Mapping[str, Any], kept: bool, out: Path) -> None:
    """Tell on stderr that ``record`` ran on a saturated machine, and whether ``save`` kept it
    as the record of its size (``kept``) or apart."""
    if not record.get("machine_saturated"):
        return
    busy = f"{record.get('machine_busy_cores_mean')} of {record.get('machine_cores')}"
    where = (
        "its figures describe the machine as much as the operator"
        if kept
        else f"the {record['jobs']}-job record of a run with headroom stays in {out}; this one "
        "is kept under saturated_runs"
    )
    print(
        f"bench-scale: the machine was saturated ({busy} cores busy over the window): {where}",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale.bench_scale", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--grid", choices=sorted(GRIDS), default="full")
    parser.add_argument("--jobs", type=int, nargs="*", help="only these sizes of the grid")
    parser.add_argument("--period-s", type=float, default=10.0)
    parser.add_argument("--gpu-share", type=float, default=0.1)
    parser.add_argument("--startup-s", type=float, default=5.0, help="the simulator's")
    parser.add_argument("--resize-timeout-s", type=float, default=30.0)
    parser.add_argument(
        "--replicas",
        type=int,
        default=DEFAULT_REPLICAS,
        help="operator processes electing the one that acts through a Lease (default "
        f"{DEFAULT_REPLICAS}, the chart's replicaCount); 1: one process, no election",
    )
    parser.add_argument(
        "--operator-metrics-port", type=int, default=18080, help="replica N's is this + N"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help=f"results file (default {RESULTS})")
    parser.add_argument(
        "--keep-logs",
        type=Path,
        help="copy each size's operator logs here before scale-down, with the jobs as they "
        "ended and their Events (jobs-N.json)",
    )
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the operator under bench/scale/profile_operator.py (where its threads spend "
        "their time, in the record's 'profile'; its CPU numbers then include the sampler)",
    )
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas: at least 1")
    # Stopped with SIGTERM: unwind, so the operator it started is stopped too (an orphaned
    # one keeps its metrics port and would act on the next run's bed).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = args.out or RESULTS
    for size in GRIDS[args.grid]:
        if args.jobs and size.jobs not in args.jobs:
            continue
        record = run_size(size, args)
        print(json.dumps(record, indent=1), flush=True)
        say_if_saturated(record, save(record, out), out)
    if not args.no_report:
        from bench.scale import scale_report as report

        report.write_report(out, out.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
