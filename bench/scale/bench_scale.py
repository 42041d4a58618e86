"""``make bench-scale``: the real operator driving hundreds of DeadlineTrainingJobs on the
scale test bed (cluster/scale/: real etcd, kube-apiserver, kube-scheduler and Prometheus;
kwok's fake nodes; the SIMULATED trainer fleet of :mod:`simulator`), measured.

For each size: a fresh scale bed (``scale-up.sh``), the operator as one process with the
chart's default settings, the jobs created, a warm-up, then a measurement window in which a
share of the jobs get their deadline patched; after it every job runs to its end. Measured:

* operator CPU (cores, mean over the window) and resident memory (max), from /proc;
* the operator's API requests per second by verb and resource: the API server's audit log,
  every request of the operator's own client identity (user ``decor-operator``) received in
  the window (kwok, the scheduler and the simulator have identities of their own);
  ``apiserver_request_total`` of all clients is recorded beside it;
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decor import vocabulary

from bench.scale import fleet, measure

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

OPERATOR_USER = "decor-operator"
NAMESPACE = "scale"
RESULTS = REPO / "docs/benchmarks/scale/results.json"
PROC_SAMPLE_S = 1.0
"""How often the operator's /proc is read."""
POLL_S = 2.0
"""How often the driver looks at the jobs while waiting."""
REQUEST_TIMEOUT_S = 30.0


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
        "SCALE_PKI SCALE_NODE_CPU_CORES SCALE_NODE_GPUS"
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


def run_size(size: Size, args: argparse.Namespace) -> dict[str, Any]:
    env = bed_env()
    profiles = json.loads((REPO / "docs/benchmarks/results.json").read_text())["profiles"]
    curves = fleet.curves_from_profiles(profiles)
    rates = {name: curve.steps_per_s for name, curve in curves.items()}
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
    bed = {
        **os.environ,
        "PY": sys.executable,
        "DECOR_SCALE_CPU_NODES": str(cpu_nodes),
        "DECOR_SCALE_GPU_NODES": str(gpu_nodes),
    }
    print(f"== {size.jobs} jobs: {cpu_nodes} CPU + {gpu_nodes} GPU kwok nodes", flush=True)
    subprocess.run(["bash", "cluster/scale/scale-down.sh"], cwd=REPO, env=bed, check=True)
    subprocess.run(
        ["bash", "cluster/scale/scale-up.sh"], cwd=REPO, env=bed, check=True, stdout=sys.stderr
    )
    state = Path(env["SCALE_STATE"])
    driver = Api(str(state / "driver.kubeconfig"))
    prometheus = f"http://127.0.0.1:{env['SCALE_PROMETHEUS_PORT']}"
    metrics_port = args.operator_metrics_port
    operator_log = open(state / "logs/operator.log", "ab")  # noqa: SIM115 - closed below
    profile_out = state / "logs/operator-profile.json"
    command = [sys.executable, "-m", "decor.cli", "operator"]
    if args.profile:
        command = [sys.executable, "-m", "bench.scale.profile_operator", "--out", str(profile_out)]
    operator = subprocess.Popen(
        command,
        cwd=REPO,
        env={
            **os.environ,
            "KUBECONFIG": str(state / "operator.kubeconfig"),
            # The chart's defaults (helm/decor/values.yaml), cluster-wide:
            "DECOR_PROMETHEUS_URL": prometheus,
            "DECOR_METRICS_PORT": str(metrics_port),
            "DECOR_WATCH_NAMESPACES": "",
            "DECOR_WATCH_NODES": "true",
            "DECOR_PLANNER_POLICY": "decor",
            "DECOR_MIN_PERIOD_SECONDS": "1",
            "DECOR_LOG_LEVEL": "INFO",
            # The jobs tolerate kwok's taint; a template policy allows it only when told so.
            "DECOR_ALLOWED_TOLERATION_KEYS": measure.KWOK_TOLERATION["key"],
        },
        stdout=operator_log,
        stderr=subprocess.STDOUT,
    )
    watch, answers = ResizeWatch(driver), AnswerWatch(driver)
    try:
        driver.raw(driver.core.create_namespace, {"metadata": {"name": NAMESPACE}})
        watch.start()
        answers.start()
        for plan in plans:
            driver.raw(
                driver.custom.create_namespaced_custom_object,
                vocabulary.API_GROUP,
                vocabulary.API_VERSION,
                NAMESPACE,
                vocabulary.PLURAL,
                measure.job_manifest(plan, NAMESPACE, args.period_s),
            )
        created_s = time.time()
        print(f"  {len(plans)} jobs created; warm-up {size.warmup_s:.0f}s", flush=True)
        proc: list[measure.ProcSample] = []
        stop_sampling = threading.Event()

        def sample() -> None:
            while not stop_sampling.is_set():
                try:
                    proc.append(read_proc(operator.pid))
                except OSError:
                    return
                stop_sampling.wait(PROC_SAMPLE_S)

        time.sleep(max(0.0, created_s + size.warmup_s - time.time()))  # a fixed warm-up
        running = sum(
            1
            for j in driver.jobs()
            if (j.get("status") or {}).get("phase") == vocabulary.PHASE_RUNNING
        )
        print(f"  window starts: {running}/{size.jobs} jobs Running", flush=True)
        operator_before = measure.parse_metrics(
            http_text(f"http://127.0.0.1:{metrics_port}/metrics")
        )
        api_before = measure.parse_metrics(driver.get_text("/metrics"))
        prom_before = measure.parse_metrics(http_text(f"{prometheus}/metrics"))
        start_s = time.time()  # after the reads: the counters' window holds the audit window
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        patches = schedule_patches(driver, watch, plans, size, start_s, args.seed, rates)
        time.sleep(max(0.0, start_s + size.window_s - time.time()))  # the window's length
        end_s = time.time()
        stop_sampling.set()
        sampler.join()
        operator_after = measure.parse_metrics(
            http_text(f"http://127.0.0.1:{metrics_port}/metrics")
        )
        api_after = measure.parse_metrics(driver.get_text("/metrics"))
        prom_after = measure.parse_metrics(http_text(f"{prometheus}/metrics"))
        print(f"  window done ({end_s - start_s:.0f}s); waiting for every job to end", flush=True)
        horizon_s = created_s + size.duration_s[1] * 1.5 + 120.0
        wait_until(
            "every job to end",
            max(0.0, horizon_s - time.time()),
            lambda: all(
                (j.get("status") or {}).get("phase") in vocabulary.TERMINAL_PHASES
                for j in driver.jobs()
            ),
        )
        jobs = driver.jobs()
    finally:
        watch.stopped.set()
        answers.stopped.set()
        operator.send_signal(signal.SIGTERM)
        try:
            operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
        operator_log.close()
    mode_of = {p.name: p.mode for p in plans}
    patch_detail = []
    for job, sent_s, call_s in patches:
        changed = watch.first_change_after(job, sent_s)
        latency = None if changed is None else round(changed - sent_s, 3)
        answered = answers.first_change_after(job, sent_s)
        patch_detail.append(
            {
                "job": job,
                "mode": mode_of[job],
                "to_resize_s": latency,
                "to_answer_s": None if answered is None else round(answered - sent_s, 3),
                "sent_unix_s": round(sent_s, 3),
                "patch_call_s": round(call_s, 3),
            }
        )
    deviation_of = {
        str(j["metadata"]["name"]): float(j["status"]["outcome"]["deviationPercent"])
        for j in jobs
        if ((j.get("status") or {}).get("outcome") or {}).get("deviationPercent") is not None
    }
    outcomes = Counter(str((j.get("status") or {}).get("phase")) for j in jobs)
    with open(env["SCALE_AUDIT_LOG"]) as log_file:
        operator_requests = measure.audit_counts(log_file, OPERATOR_USER, start_s, end_s)
    all_requests = {
        (labels.get("verb", ""), labels.get("resource", "")): value
        - measure.metric_sum(api_before, "apiserver_request_total", **labels)
        for labels, value in api_after.get("apiserver_request_total", [])
    }
    query = "/api/v1/query"
    queries = measure.metric_sum(
        prom_after, "prometheus_http_requests_total", handler=query
    ) - measure.metric_sum(prom_before, "prometheus_http_requests_total", handler=query)
    loop_costs: dict[str, Any] = {}
    for key, name in (
        ("commit", vocabulary.METRIC_RECONCILE_DURATION),
        ("plan", vocabulary.METRIC_PLAN_DURATION),
    ):
        count, total = measure.histogram_mean_delta(operator_before, operator_after, name)
        loop_costs[f"{key}s_in_window"] = int(count)
        loop_costs[f"{key}_s_mean"] = round(total / count, 5) if count else None
        loop_costs[f"{key}_s_total"] = round(total, 3)
    record = measure.build_record(
        jobs=size.jobs,
        period_s=args.period_s,
        window_s=end_s - start_s,
        proc=proc,
        operator_requests=operator_requests,
        all_requests=all_requests,
        prometheus_queries=queries,
        lateness_buckets=measure.histogram_delta(
            operator_before, operator_after, vocabulary.METRIC_PERIOD_LATENESS
        ),
        patches=patch_detail,
        resize_timeout_s=args.resize_timeout_s,
        deviations_pct=list(deviation_of.values()),
        outcomes=outcomes,
        extra={
            "gpu_jobs": sum(1 for p in plans if p.mode == "gpu"),
            "kwok_nodes": {"cpu": cpu_nodes, "gpu": gpu_nodes},
            "scrape_interval_s": float(os.environ.get("DECOR_SCALE_SCRAPE_INTERVAL_S", "5")),
            "running_at_window_start": running,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine_cores": os.cpu_count(),
            "loop": loop_costs,
            "deviation_by_group": measure.deviation_by_group(
                deviation_of, plans, (job for job, _, _ in patches)
            ),
            "patches": patch_detail,
            "patch_answers": measure.patch_answers(patch_detail),
            "worst_jobs": measure.worst_jobs(jobs, mode_of),
        },
    )
    if args.profile and profile_out.exists():
        record["profile"] = json.loads(profile_out.read_text())
        record["note"] = "profiled run: a stack sampler ran inside the operator (CPU inflated)"
    if args.keep_logs:  # scale-down deletes the bed's state, its logs included
        args.keep_logs.mkdir(parents=True, exist_ok=True)
        shutil.copy(state / "logs/operator.log", args.keep_logs / f"operator-{size.jobs}.log")
    subprocess.run(["bash", "cluster/scale/scale-down.sh"], cwd=REPO, env=bed, check=True)
    return record


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


def save(record: dict[str, Any], path: Path) -> None:
    """Add ``record`` to the results, replacing an earlier run of the same size and period."""
    data = json.loads(path.read_text()) if path.exists() else {"records": []}
    records = [
        r
        for r in data.get("records", [])
        if (r["jobs"], r["period_s"]) != (record["jobs"], record["period_s"])
    ]
    records.append(record)
    data["records"] = sorted(records, key=lambda r: (r["period_s"], r["jobs"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


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
    parser.add_argument("--operator-metrics-port", type=int, default=18080)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help=f"results file (default {RESULTS})")
    parser.add_argument(
        "--keep-logs", type=Path, help="copy each size's operator log here before scale-down"
    )
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the operator under bench/scale/profile_operator.py (where its threads spend "
        "their time, in the record's 'profile'; its CPU numbers then include the sampler)",
    )
    args = parser.parse_args(argv)
    # Stopped with SIGTERM: unwind, so the operator it started is stopped too (an orphaned
    # one keeps its metrics port and would act on the next run's bed).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = args.out or RESULTS
    for size in GRIDS[args.grid]:
        if args.jobs and size.jobs not in args.jobs:
            continue
        record = run_size(size, args)
        print(json.dumps(record, indent=1), flush=True)
        save(record, out)
    if not args.no_report:
        from bench.scale import scale_report as report

        report.write_report(out, out.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
