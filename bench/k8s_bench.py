"""The benchmark's cluster runtime: one grid run as a DeadlineTrainingJob on a real cluster.

``python -m bench.harness --runtime k8s`` uses it. Against the cluster in ``$KUBECONFIG`` (the test
bed: ``make cluster-up images``, ``. cluster/env.sh``; see docs/cluster.md) it

* applies the CRD and starts the checkout's operator **out of cluster** from this venv
  (``python -m decor.cli operator``, all namespaces) once per grid, so an edit of
  ``operator/decor/core/control.py`` is measured without an image rebuild (:class:`OperatorProcess`);
* per run, creates a namespace, creates the job (the harness's manifest plus the trainer
  image, ``imagePullPolicy: Never`` and memory bounds, :func:`cluster_manifest`), moves its
  deadline with ``kubectl patch`` at the scenario's time, runs the disturbance on the host,
  polls the job and its pod every :data:`SAMPLE_PERIOD_S` until ``status.outcome`` is set,
  and deletes the namespace (:func:`run_job`);
* integrates the pod's CPU limit over time into core-seconds (:func:`integrate_cores`) and
  takes the finish, deviation and resize count from the operator's status
  (:func:`outcome_of`).

Pure parts (tested in tests/unit/test_bench_k8s.py): the subset, the manifest, CPU
quantities, the integration, the outcome and the event schedule.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from decor.api import model, vocabulary
from decor.core import build

from bench import benchlib as bl

ROOT = Path(__file__).resolve().parents[1]
CRD_FILE = ROOT / "crds" / "deadlinetrainingjobs.yaml"
TRAINER_IMAGE = os.environ.get("DECOR_TRAINER_IMAGE", "localhost/decor/trainer:0.1.0")
# The cluster subset of the benchmark: the three reference workloads, the feasible
# settings, both controllers, two repetitions (60 runs, about 45 min on a 2-core machine).
K8S_WORKLOADS = ("resnet", "vgg", "lstm")
K8S_SCENARIOS = ("d1.5", "d1.8", "d2.5", "move-0.8", "disturb")
K8S_POLICIES = ("decor", "decor-nn")
K8S_REPETITIONS = 2
SAMPLE_PERIOD_S = 0.5
UNSCHEDULABLE_GRACE_S = 20.0
SIDECAR_CPU = build.sidecar_cpu_cores()  # the metrics sidecar's CPU request
POD_MEMORY = {"requests": {"memory": "512Mi"}, "limits": {"memory": "1536Mi"}}
NAMESPACE_PREFIX = "decor-bench-"
RUN_TIMEOUT_MIN_S = 300.0  # a run is abandoned after max(this, 3 x its deadline + 120 s)
BUSY_LOOP = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\nwhile True:\n    pass\n"


# ---------------------------------------------------------------------------------------
# Pure parts


def k8s_grid(base: bl.Grid) -> bl.Grid:
    """The cluster subset of ``base``: the reference workloads; d1.5, d1.8, d2.5, move-0.8
    and disturb; decor and decor-nn; two repetitions. The harness's ``--workloads``,
    ``--scenarios``, ``--policies`` and ``--reps`` narrow it."""
    return replace(
        base,
        name="k8s",
        workloads=tuple(w for w in base.workloads if w.name in K8S_WORKLOADS) or base.workloads,
        scenarios=K8S_SCENARIOS,
        reps={p: K8S_REPETITIONS for p in K8S_POLICIES},
        policy_scenarios={},
    )


def cluster_manifest(doc: dict[str, Any], name: str, image: str = TRAINER_IMAGE) -> dict[str, Any]:
    """The harness's manifest made runnable on the test bed (as tests/e2e build theirs)."""
    doc = copy.deepcopy(doc)
    doc["metadata"] = {"name": name}
    pod = doc["spec"]["template"].setdefault("spec", {})
    pod["terminationGracePeriodSeconds"] = 5
    container = pod["containers"][0]
    container["image"] = image
    container["imagePullPolicy"] = "Never"
    container["resources"] = copy.deepcopy(POD_MEMORY)
    return doc


def pod_cpu_limit(pod: dict[str, Any], container: str = "trainer") -> float | None:
    """The CPU limit in effect (cores): what the kubelet applied after an in-place resize,
    else what the pod's spec asks for; None when neither is readable."""
    applied = build.applied_cpu_cores(pod, container)
    return applied if applied is not None else build.desired_cpu_cores(pod, container)


def integrate_cores(
    samples: list[tuple[float, float | None]], start_s: float, end_s: float, initial: float
) -> float:
    """Core-seconds from ``start_s`` to ``end_s`` of a piecewise-constant allocation.

    ``samples`` are (time, cores) in time order, each value holding until the next sample;
    ``initial`` holds before the first sample (the pod is created at the initial
    allocation), and a None (no pod seen) keeps the previous value.
    """
    if end_s <= start_s:
        return 0.0
    total, t_prev, cores = 0.0, start_s, initial
    for t_s, value in samples:
        if t_s >= end_s:
            break
        if t_s > t_prev:
            total += cores * (t_s - t_prev)
            t_prev = t_s
        if value is not None:
            cores = value
    return total + cores * (end_s - t_prev)


def count_changes(samples: list[tuple[float, float | None]], eps: float = 0.0005) -> int:
    """How often the sampled allocation changed (a cross-check of the operator's count)."""
    values = [v for _, v in samples if v is not None]
    return sum(1 for a, b in zip(values, values[1:], strict=False) if abs(a - b) > eps)


def pod_max_cores(allocatable: float, requested: float, machine_cores: int) -> float:
    """MAX of a benchmark job: what the node can still schedule for the trainer, its
    metrics sidecar's request (build.SIDECAR_RESOURCES) left aside, in whole millicores."""
    free = min(allocatable, float(machine_cores)) - requested - SIDECAR_CPU
    return math.floor(round(free * 1000, 6)) / 1000.0


def unschedulable(pod: dict[str, Any]) -> str | None:
    """The scheduler's message when the pod cannot be placed (the run cannot start)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message") or "Unschedulable")
    return None


@dataclass(frozen=True)
class Outcome:
    start_s: float  # absolute (epoch) start the operator registered (whole seconds)
    finished_s: float | None  # relative to start
    deviation_pct: float | None
    late: bool | None
    resizes: int
    phase: str


def outcome_of(status: dict[str, Any]) -> Outcome | None:
    """Finish, deviation and resizes from a job's status; None until the job has an
    outcome or has failed."""
    outcome = status.get("outcome")
    phase = status.get("phase") or ""
    if not outcome and phase != vocabulary.PHASE_FAILED:
        return None
    start = (
        model.parse_time(status["startTime"], "status.startTime").timestamp()
        if status.get("startTime")
        else math.nan
    )
    finished = None
    if outcome and outcome.get("finishedAtSeconds") is not None:
        finished = float(outcome["finishedAtSeconds"]) - start
    elif outcome and outcome.get("finishedAt"):
        finished = (
            model.parse_time(outcome["finishedAt"], "status.outcome.finishedAt").timestamp() - start
        )
    dev = (outcome or {}).get("deviationPercent")
    return Outcome(
        start_s=start,
        finished_s=finished,
        deviation_pct=None if dev is None else float(dev),
        late=(outcome or {}).get("late"),
        resizes=int(status.get("resizes") or 0),
        phase=phase,
    )


def schedule(scenario: bl.Scenario, deadline_s: float) -> list[tuple[float, str]]:
    """(seconds after the job's start, what) of a scenario: ``move`` / ``disturb-on|off``."""
    events: list[tuple[float, str]] = []
    if scenario.move_to is not None:
        events.append((scenario.move_at_fraction * deadline_s, "move"))
    if scenario.disturb_from is not None and scenario.disturb_to is not None:
        events.append((scenario.disturb_from * deadline_s, "disturb-on"))
        events.append((scenario.disturb_to * deadline_s, "disturb-off"))
    return sorted(events)


def deadline_patch(duration_s: float) -> str:
    """The merge patch that moves a job's relative deadline."""
    return json.dumps({"spec": {"duration": f"{duration_s:.3f}s"}})


# ---------------------------------------------------------------------------------------
# The cluster


def kubectl_exe() -> str:
    found = shutil.which("kubectl")
    if found:
        return found
    cached = sorted(Path("/var/cache/decor").glob("kubectl-layer-*/bin/kubectl"))
    if cached:
        return str(cached[-1])
    raise RuntimeError("no kubectl: `. cluster/env.sh` (or source cluster/ci.sh) first")


def kubectl(*args: str, stdin: str | None = None, check: bool = True, timeout: float = 60) -> str:
    res = subprocess.run(
        [kubectl_exe(), *args], input=stdin, capture_output=True, text=True, timeout=timeout
    )
    if check and res.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout


class Cluster:
    """API clients for ``$KUBECONFIG``."""

    def __init__(self) -> None:
        kubeconfig = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        if not kubeconfig:
            raise RuntimeError("KUBECONFIG is not set: `make cluster-up images; . cluster/env.sh`")
        from kubernetes import client, config

        self.kubeconfig = kubeconfig
        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core.read_namespace("default")

    def node_cpu(self) -> float:
        """Allocatable CPU of the (single) node."""
        nodes = self.core.list_node().items
        return max(
            build.parse_allocation("cpu", ((n.status and n.status.allocatable) or {}).get("cpu"))
            or 0.0
            for n in nodes
        )

    def other_requests(self) -> float:
        """CPU requested by the pods that run now (they keep it from a benchmark job)."""
        total = 0.0
        for pod in self.core.list_pod_for_all_namespaces().items:
            if pod.status and pod.status.phase in ("Succeeded", "Failed"):
                continue
            for c in pod.spec.containers if pod.spec else []:
                requests = (c.resources and c.resources.requests) or {}
                total += build.parse_allocation("cpu", requests.get("cpu")) or 0.0
        return total

    def apply_crd(self) -> None:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            f"crd/{vocabulary.PLURAL}.{vocabulary.API_GROUP}",
        )

    def create_namespace(self, hint: str) -> str:
        from kubernetes import client

        slug = "".join(c if c.isalnum() else "-" for c in hint.lower()).strip("-")[:30]
        name = f"{NAMESPACE_PREFIX}{slug}-{uuid.uuid4().hex[:5]}".replace("--", "-")
        self.core.create_namespace(
            client.V1Namespace(
                metadata=client.V1ObjectMeta(name=name, labels={"decor.dev/bench": "true"})
            )
        )
        wait(lambda: self.core.read_namespaced_service_account("default", name), 60, "SA")
        return name

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return cast(
            dict[str, Any],
            self.custom.get_namespaced_custom_object(
                vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL, name
            ),
        )

    def trainer_pod(self, namespace: str, name: str, pod_name: str | None) -> dict[str, Any] | None:
        if pod_name:
            try:
                pod = self.core.read_namespaced_pod(pod_name, namespace)
                return self.api_client.sanitize_for_serialization(pod)
            except Exception:  # noqa: BLE001 - replaced or gone: look it up by label
                pass
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"decor.dev/job={name}")
        live = [p for p in pods.items if p.metadata and p.metadata.deletion_timestamp is None]
        return self.api_client.sanitize_for_serialization(live[0]) if live else None

    def delete_namespace(self, namespace: str, job: str) -> None:
        """Delete the job while the operator runs (it removes kopf's finalizer), then the
        namespace; strip a finalizer that stays, so nothing hangs in Terminating."""
        try:
            self.custom.delete_namespaced_custom_object(
                vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL, job
            )
        except Exception:  # noqa: BLE001 - already gone
            pass

        def gone() -> bool:
            listed = self.custom.list_namespaced_custom_object(
                vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL
            )
            return not cast(dict[str, Any], listed)["items"]

        try:
            wait(gone, 60, "job deletion")
        except TimeoutError:
            kubectl("-n", namespace, "patch", f"{vocabulary.PLURAL}.{vocabulary.API_GROUP}", job, "--type=merge",
                    "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        from kubernetes import client

        try:
            self.core.delete_namespace(
                namespace, body=client.V1DeleteOptions(grace_period_seconds=0)
            )
        except Exception as exc:  # noqa: BLE001
            print(f"warning: could not delete namespace {namespace}: {exc}", file=sys.stderr)


def wait(probe: Any, timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = probe()
            if value:
                return value
        except Exception:  # noqa: BLE001 - not yet
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    """The checkout's operator, out of cluster, for all namespaces (one per grid)."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> OperatorProcess:
        env = {
            **os.environ,
            "DECOR_METRICS_PORT": str(free_port()),
            "DECOR_LOG_LEVEL": "INFO",
            "DECOR_SCRAPE_VIA": "direct",  # the test bed's host reaches pod IPs
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(ROOT / "operator") + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "decor.cli", "operator"],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                # its own session: a Ctrl-C or timeout for the harness's process group must
                # not stop it before the harness has deleted the job (kopf's finalizer)
                start_new_session=True,
            )  # fmt: skip
        time.sleep(3.0)
        if self.process.poll() is not None:
            raise RuntimeError(f"the operator exited at once; see {self.log_path}")
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __exit__(self, *exc: object) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


# ---------------------------------------------------------------------------------------
# One run


@dataclass
class K8sRun:
    """What one cluster run observed."""

    namespace: str
    outcome: Outcome | None
    samples: list[tuple[float, float | None]] = field(default_factory=list)  # (abs t, cores)
    progress: list[tuple[float, float]] = field(default_factory=list)  # (rel t, steps done)
    notes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    deadline_s: float = math.nan  # final relative deadline

    def core_seconds(self, initial: float) -> float:
        """Allocation from the job's start to the last sample (the whole observed run)."""
        if self.outcome is None or not self.samples:
            return math.nan
        return integrate_cores(self.samples, self.outcome.start_s, self.samples[-1][0], initial)

    def core_seconds_to_finish(self, initial: float) -> float | None:
        o = self.outcome
        if o is None or o.finished_s is None:
            return None
        return integrate_cores(self.samples, o.start_s, o.start_s + o.finished_s, initial)


def run_job(
    cluster: Cluster,
    doc: dict[str, Any],
    scenario: bl.Scenario,
    deadline_s: float,
    initial: float,
    hint: str,
    disturb_processes: int = 1,
    job_name: str = "decor-bench",
) -> K8sRun:
    """Create the namespace and job, drive the scenario, sample until the outcome, clean up."""
    namespace = cluster.create_namespace(hint)
    run = K8sRun(namespace=namespace, outcome=None, deadline_s=deadline_s)
    busy: list[subprocess.Popen[bytes]] = []
    try:
        kubectl(
            "-n", namespace, "create", "-f", "-", stdin=json.dumps(cluster_manifest(doc, job_name))
        )
        created = time.time()
        events = schedule(scenario, deadline_s)
        timeout_s = max(RUN_TIMEOUT_MIN_S, 3 * deadline_s + 120)
        start_s: float | None = None
        pod_name: str | None = None
        while True:
            now = time.time()
            job = cluster.get_job(namespace, job_name)
            status = job.get("status") or {}
            if start_s is None and status.get("startTime"):
                start_s = model.parse_time(status["startTime"], "status.startTime").timestamp()
                run.notes["start_lag_s"] = round(start_s - created, 3)
            pod_name = status.get("podName") or pod_name
            pod = cluster.trainer_pod(namespace, job_name, pod_name) if start_s else None
            run.samples.append((now, pod_cpu_limit(pod) if pod else None))
            why = unschedulable(pod) if pod else None
            if why and now - created > UNSCHEDULABLE_GRACE_S:
                run.error = f"trainer pod unschedulable: {why}"
                break
            if start_s is not None and status.get("stepsDone") is not None:
                run.progress.append((now - start_s, float(status["stepsDone"])))
            while start_s is not None and events and now >= start_s + events[0][0]:
                _, what = events.pop(0)
                if what == "move":
                    assert scenario.move_to is not None
                    new_s = scenario.move_to * deadline_s
                    kubectl("-n", namespace, "patch", f"{vocabulary.PLURAL}.{vocabulary.API_GROUP}", job_name,
                            "--type=merge", "-p", deadline_patch(new_s))  # fmt: skip
                    run.notes["moved_at_s"] = round(time.time() - start_s, 3)
                    run.deadline_s = new_s
                elif what == "disturb-on":
                    busy = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
                            for _ in range(disturb_processes)]  # fmt: skip
                    run.notes["disturb_on_s"] = round(time.time() - start_s, 3)
                else:
                    _stop(busy)
                    run.notes["disturb_off_s"] = round(time.time() - start_s, 3)
            outcome = outcome_of(status)
            if outcome is not None:
                run.outcome = outcome
                if outcome.phase == vocabulary.PHASE_FAILED:
                    run.error = f"job failed: {_conditions(status)}"
                break
            if now - created > timeout_s:
                run.error = f"no outcome after {timeout_s:.0f}s (phase {status.get('phase')})"
                break
            time.sleep(max(0.0, SAMPLE_PERIOD_S - (time.time() - now)))
    finally:
        _stop(busy)
        cluster.delete_namespace(namespace, job_name)
    return run


def _stop(busy: list[subprocess.Popen[bytes]]) -> None:
    for proc in busy:
        if proc.poll() is None:
            proc.terminate()
        proc.wait()
    busy.clear()


def _conditions(status: dict[str, Any]) -> str:
    return "; ".join(
        f"{c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}"
        for c in status.get("conditions") or []
    )[:500]
