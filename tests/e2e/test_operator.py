"""The operator on a real cluster: the checks of tracker issue 4.

Most tests run the operator in a subprocess on this machine (``python -m decor.cli operator
--namespace NS``, the same entry point the image runs), serving only the test's namespace,
so tests can kill and restart it. One test installs the Helm chart and checks its RBAC.

Numbers the tests print (``-s`` shows them): deviation from the deadline, resizes, how long a
moved deadline took to raise the allocation.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.api import vocabulary
from decor.api.model import ManifestError, format_cpu, parse_job, quantity_value
from decor.core import build
from decor.core.control import SpeedFit
from hostile_jobs import hostile_manifests

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "deadlinetrainingjobs.yaml"
CHART = REPO / "helm" / "decor"
CHECKPOINT_HOST_ROOT = "/var/lib/decor/checkpoints"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Command prefix that runs on the node (kind: `docker exec decor-control-plane`); empty on the
# test bed, whose node is this machine.
NODE_EXEC = shlex.split(os.environ.get("DECOR_E2E_NODE_EXEC", ""))

# CPU bounds of the test jobs: the test bed has 2 cores shared with the control plane.
# cluster/e2e.sh runs the tests not marked `alone` in DECOR_E2E_LANES lanes at once, each with
# its own operator, which sees only its own namespace: the lanes' jobs fit the node together
# only if each stays within its share. The lanes' trainers together hold at most
# LANES_TRAINER_CORES of the node's 2 cores (400m each for three lanes, 600m for two, 300m for
# four); the rest is for their metrics sidecars (50m each), their operators, the tests
# themselves and the control plane. With 500m each for three lanes (1.5 cores), a trainer at
# MAX ran 10-20 % slower than its quota beside the others, and jobs sized to need 85 % of MAX
# ended 6-21 % late. Alone, a test's job may take 1.5 cores (the trainer's one thread runs no
# faster above one core; the rest is room for the control plane).
LANES = max(1, int(os.environ.get("DECOR_E2E_LANES", "1")))
LANES_TRAINER_CORES = 1.2
CPU_MAX_CORES = 1.5 if LANES == 1 else round(min(1.5, LANES_TRAINER_CORES / LANES), 1)
CPU_MAX = format_cpu(CPU_MAX_CORES)
# The floor: 100m, or a quarter of a lane's max where that is less (75m for four lanes), so
# that a job sized for its lane (below) has as much room above its floor as with three. On an
# Intel Xeon VM the test ResNet's narrowest width ran 0.083 s a step in the pod, and jobs
# sized to need just over 250m finished 6-8 % early at a 250m floor; with four lanes and a
# 100m floor, a quota test's job sized for its 300m lane needed less than the floor and ended
# 13.8 % early.
CPU_MIN = format_cpu(min(0.1, CPU_MAX_CORES / 4))
# The jobs' sizes (steps, samples, the cores a moved deadline needs) were chosen for an 800m
# lane. With more lanes a lane's trainer gets less (400m for three), and the sizes
# shrink by the same factor, so that a job needs the same fraction of its lane: a job
# still has to be throttled, and still has room to make up lost time. Never above 1: alone, a
# trainer's one thread runs no faster than at one core, and the sizes stay as chosen.
LANE_SCALE = min(1.0, CPU_MAX_CORES / 0.8)


def lane_steps(steps: int) -> int:
    """``steps`` (sized for an 800m lane) for this run's lanes (``LANE_SCALE``) and this
    machine's speed (:func:`machine_scale`)."""
    return machine_steps(steps * LANE_SCALE)


def machine_steps(steps: float) -> int:
    """``steps`` (sized for a ResNet step of ``RESNET_STEP_S_AT_ONE_CORE``) for this
    machine's speed (:func:`machine_scale`): the job takes the time it was sized for."""
    return max(1, round(steps * machine_scale()))


def one_gpu_steps_per_epoch(seconds: float, epochs: int) -> int:
    """Steps per epoch of a GPU job whose ``epochs`` take about ``seconds`` at one GPU (fewer
    steps on a slower machine): the bed's GPUs are advertised, each one CPU worker, and the
    trainer is limited to the lane's ``CPU_MAX`` (its one thread runs no faster above one
    core)."""
    return machine_steps(seconds * min(1.0, CPU_MAX_CORES) / RESNET_STEP_S_AT_ONE_CORE / epochs)


def steps_total(manifest: dict[str, Any]) -> int:
    """The number of steps a job manifest asks for."""
    return int(manifest["spec"]["epochs"]) * int(manifest["spec"]["stepsPerEpoch"])


# The acceptance bound of issue 4: |finish - deadline| <= 5% of the deadline's span.
DEVIATION_BOUND_PERCENT = 5.0


# The jobs' sizes (steps, deadlines, floors) were chosen for a ResNet step (width 16, batch
# 32) of about this long at one core. Machines differ by 2x and more (an AMD EPYC VM ran
# 0.05 s), and a job that runs twice as fast finishes early at its floor whatever the law
# does: the model is widened instead, until a step takes about this long here.
RESNET_STEP_S_AT_ONE_CORE = 0.09
RESNET_WIDTHS = (16, 17, 18, 20, 22, 24, 28, 32)
RESNET_BATCH = 32


def _resnet_step_s(width: int) -> float:
    """Seconds per training step of the test ResNet at ``width``, one thread: the fastest of
    five rounds of six steps. Other work on the machine only ever slows a round down, so the
    fastest round is the machine's own speed (the median of three rounds once measured
    0.1322 s on a VM whose other runs measured 0.105-0.111 s, and the e2e suite, its lane
    count decided by this step, ran three lanes instead of four)."""
    from decor_trainer.workloads import WorkloadConfig, build_workload

    workload = build_workload(WorkloadConfig(name="resnet", width=width, batch_size=RESNET_BATCH))
    model, optimizer = workload.model, workload.optimizer()
    rounds = []
    for timed in (False, True, True, True, True, True):  # a warm-up round, then five timed ones
        started = time.perf_counter()
        for i in range(6):
            inputs, targets = workload.batch(i)
            optimizer.zero_grad()
            workload.loss(model(inputs), targets).backward()
            optimizer.step()
        if timed:
            rounds.append((time.perf_counter() - started) / 6)
    return min(rounds)


@functools.cache
def resnet_measure() -> str:
    """``WIDTH:STEP_S``: the narrowest ResNet width whose step at one thread takes at least
    85 % of ``RESNET_STEP_S_AT_ONE_CORE`` on this machine, and that step (seconds), measured
    once per session; or ``DECOR_E2E_RESNET_WIDTH`` where cluster/e2e.sh measured it before the
    lanes started (a bare width: the step is not known)."""
    measured = os.environ.get("DECOR_E2E_RESNET_WIDTH")
    if measured:
        return measured
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for width in RESNET_WIDTHS:
            step_s = _resnet_step_s(width)
            if step_s >= 0.85 * RESNET_STEP_S_AT_ONE_CORE or width == RESNET_WIDTHS[-1]:
                print(f"\n[e2e] ResNet width {width}: {step_s:.3f} s a step at one thread")
                return f"{width}:{step_s:.4f}"
    finally:
        torch.set_num_threads(threads)
    raise AssertionError("unreachable: the last width is always taken")


def resnet_width() -> int:
    return int(resnet_measure().split(":")[0])


SLOW_MACHINE_MARGIN = 1.15
"""A machine is slower than the jobs' sizes assume when even the narrowest width's step takes
more than this times ``RESNET_STEP_S_AT_ONE_CORE``."""


@functools.cache
def machine_scale() -> float:
    """At most 1: on a machine where even the narrowest ResNet steps slower than the jobs'
    sizes assume (by more than ``SLOW_MACHINE_MARGIN``), the jobs' steps (``lane_steps``)
    shrink by designed / measured step time, so that a job takes the time it was designed
    for and needs the same share of its cores; 1 elsewhere. (A VM that ran the narrowest
    width at 0.15-0.18 s a step, against 0.09, had every lane job Infeasible at MAX.)"""
    _, _, step = resnet_measure().partition(":")
    if not step or float(step) <= SLOW_MACHINE_MARGIN * RESNET_STEP_S_AT_ONE_CORE:
        return 1.0
    return RESNET_STEP_S_AT_ONE_CORE / float(step)


# ============================================================================================
# helpers


def custom(kube: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(kube.api_client)


def now_utc() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_manifest(
    name: str,
    image: str,
    *,
    epochs: int = 4,
    steps_per_epoch: int | None = None,
    duration: str | None = None,
    deadline: str | None = None,
    resources: dict[str, Any] | None = None,
    control: dict[str, Any] | None = None,
    extra_args: list[str] | None = None,
    checkpoint: bool = True,
    trainer_cpu: str | None = None,
) -> dict[str, Any]:
    """A job of the test ResNet (``extra_args`` after the trainer's own). ``trainer_cpu``: a
    GPU job's CPU limit (and request) for its trainer container, where its lane needs one (a
    CPU job's limit is the operator's allocation)."""
    cpu = {"cpu": trainer_cpu} if trainer_cpu is not None else {}
    spec: dict[str, Any] = {
        "epochs": epochs,
        "stepsPerEpoch": lane_steps(100) if steps_per_epoch is None else steps_per_epoch,
        "resources": resources
        or {"mode": "cpu", "min": CPU_MIN, "max": CPU_MAX, "initial": CPU_MAX},
        "control": control or {"policy": "decor", "periodSeconds": 1},
        "template": {
            "spec": {
                "terminationGracePeriodSeconds": 30,
                "containers": [
                    {
                        "name": "trainer",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-m", "decor_trainer.train"],
                        "args": [
                            "--workload",
                            "resnet",
                            "--batch-size",
                            str(RESNET_BATCH),
                            "--width",
                            str(resnet_width()),
                            "--checkpoint-every-s",
                            "0",
                            *(extra_args or []),
                        ],  # fmt: skip
                        "resources": {
                            "requests": {"memory": "512Mi", **cpu},
                            "limits": {"memory": "1536Mi", **cpu},
                        },
                    }
                ],
            }
        },
        "metrics": {"port": 9100, "path": "/metrics"},
    }
    if duration is not None:
        spec["duration"] = duration
    if deadline is not None:
        spec["deadline"] = deadline
    if checkpoint:
        spec["checkpoint"] = {"path": "/ckpt"}
    return {
        "apiVersion": f"{vocabulary.API_GROUP}/{vocabulary.API_VERSION}",
        "kind": "DeadlineTrainingJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def create_job(kube: Any, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create the job, once the lane's earlier tests have left the node (their pods hold
    the lane's share until they are gone)."""
    parse_job({**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}})
    kube.wait_for_the_lanes_share()
    return custom(kube).create_namespaced_custom_object(
        vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL, manifest
    )


def get_job(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    return custom(kube).get_namespaced_custom_object(
        vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL, name
    )


def job_status(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    return get_job(kube, namespace, name).get("status") or {}


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    for item in status.get("conditions") or []:
        if item["type"] == type_:
            return item
    return {}


def job_events(kube: Any, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events about the job, oldest first."""
    events = kube.core.list_namespaced_event(
        namespace,
        field_selector=f"involvedObject.kind=DeadlineTrainingJob,involvedObject.name={name}",
    ).items
    events.sort(key=lambda e: (str(e.first_timestamp or e.event_time or ""), e.metadata.name))
    return [(e.type, e.reason, e.message) for e in events]


def reasons(kube: Any, namespace: str, name: str) -> list[str]:
    return [reason for _type, reason, _message in job_events(kube, namespace, name)]


def trainer_pods(kube: Any, namespace: str, job: str) -> list[Any]:
    return kube.core.list_namespaced_pod(namespace, label_selector=f"decor.dev/job={job}").items


def trainer_spec_cpu(pod: Any) -> str:
    return pod.spec.containers[0].resources.limits["cpu"]


def cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000.0 if quantity.endswith("m") else float(quantity)


def trainer_restarts(pod: Any) -> int:
    return sum(
        cs.restart_count for cs in pod.status.container_statuses or [] if cs.name == "trainer"
    )


def read_node_file(path: Path) -> str:
    """A file on the node (the checkpoint hostPath): here, or through DECOR_E2E_NODE_EXEC."""
    if not NODE_EXEC:
        return path.read_text()
    result = subprocess.run(
        [*NODE_EXEC, "cat", str(path)], capture_output=True, text=True, timeout=30, check=True
    )
    return result.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_succeeded(kube: Any, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        status = job_status(kube, namespace, name)
        if status.get("phase") == "Failed":
            raise AssertionError(f"job {name} failed: {status}")
        return status if status.get("phase") == "Succeeded" else None

    return kube.wait_for(done, timeout, f"job {namespace}/{name} to succeed", interval=1.0,
                         describe=lambda: json.dumps(job_status(kube, namespace, name), indent=1)[:4000])  # fmt: skip


def wait_progress(kube: Any, namespace: str, name: str, fraction: float, timeout: float) -> None:
    """Wait until the job reports at least ``fraction`` of its steps done."""

    def reached() -> dict[str, Any] | None:
        status = job_status(kube, namespace, name)
        return status if (status.get("progress") or 0) >= fraction else None

    kube.wait_for(reached, timeout, f"{fraction:.0%} of the steps")


def holds_for(probe: Any, seconds: float, what: str) -> None:
    """Assert that ``probe()`` stays true, polled every second for ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        assert probe(), f"no longer true: {what}"
        if time.monotonic() >= deadline:
            return
        time.sleep(1.0)


def report(name: str, status: dict[str, Any], **extra: Any) -> None:
    outcome = status.get("outcome") or {}
    items = {
        "deviation%": outcome.get("deviationPercent"),
        "late": outcome.get("late"),
        "resizes": status.get("resizes"),
        "restarts": status.get("restarts"),
        "pods": status.get("podsCreated"),
        **extra,
    }
    line = f"[e2e {name}] " + " ".join(f"{k}={v}" for k, v in items.items())
    print("\n" + line)
    outcomes = os.environ.get("DECOR_E2E_OUTCOMES")
    if outcomes and items["deviation%"] is not None:  # cluster/e2e.sh lists them by margin
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        with open(outcomes, "a") as file:
            file.write(f"{items['deviation%']:+8.2f}  {line}  {test}\n")


# ============================================================================================
# fixtures


@pytest.fixture(scope="session")
def crd(kube: Any) -> None:
    """The CRD from crds/ is applied (server-side) and Established."""
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kube.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        f"crd/{vocabulary.PLURAL}.{vocabulary.API_GROUP}",
    )


class OperatorProcess:
    """``decor operator`` for one namespace (or more), in a subprocess this test can kill and
    restart."""

    def __init__(
        self,
        kubeconfig: str,
        namespace: str,
        log_path: Path,
        *,
        more_namespaces: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.more_namespaces = more_namespaces  # served too: --namespace each
        self.env = env or {}  # more DECOR_* settings (e.g. leader election's)
        self.log_path = log_path
        self.metrics_port = free_port()
        self.prometheus_url: str | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None
        env = {
            **os.environ,
            "KUBECONFIG": self.kubeconfig,
            "DECOR_METRICS_PORT": str(self.metrics_port),
            "DECOR_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            # Off the test bed (kind) this machine is outside the pod network.
            "DECOR_SCRAPE_VIA": "apiserver" if NODE_EXEC else "direct",
            **self.env,
        }
        args = [sys.executable, "-m", "decor.cli", "operator", "--namespace", self.namespace]
        for namespace in self.more_namespaces:
            args += ["--namespace", namespace]
        if self.prometheus_url:
            args += ["--prometheus-url", self.prometheus_url]
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start {time.strftime('%H:%M:%S')} {' '.join(args)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, like a crashed or evicted operator."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def metrics(self) -> dict[str, float]:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (local)
            text = response.read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                samples[key] = float(value)
        return samples

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def operator(
    kube: Any, namespace: str, crd: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[OperatorProcess]:
    """A running operator for the test's namespace (started by the test when it needs
    Prometheus first). Its log is printed at teardown: pytest shows it when the test fails."""
    process = OperatorProcess(kube.kubeconfig, namespace, tmp_path / "operator.log")
    if "prometheus" not in request.fixturenames:
        process.start()
    try:
        yield process
    finally:
        # Jobs carry kopf's finalizer: delete them while the operator still runs, or the
        # namespace would hang in Terminating.
        delete_jobs(kube, namespace, process)
        process.stop()
        print(f"\n----- operator log (tail) -----\n{process.log_text()[-20000:]}")


def delete_jobs(kube: Any, namespace: str, process: OperatorProcess | None = None) -> None:
    """Delete the namespace's jobs while an operator runs (it removes kopf's finalizers).

    Should no operator remove them within a minute, strip them, so that the namespace can
    go; the test has its verdict already.
    """
    api = custom(kube)

    def remaining() -> list[dict[str, Any]]:
        return api.list_namespaced_custom_object(
            vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL
        )["items"]

    try:
        api.delete_collection_namespaced_custom_object(
            vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL
        )
        # Their pods at once, with a 1 s grace, before the garbage collector deletes them with
        # their own (a trainer that checkpoints holds its cores for up to 30 s, and the kubelet
        # does not shorten a kill it has begun): the next tests need the cores. Only theirs:
        # an operator installed in the namespace still has to release the jobs.
        kube.core.delete_collection_namespaced_pod(
            namespace, grace_period_seconds=1, label_selector=vocabulary.LABEL_JOB
        )
        if process is not None and (process.process is None or process.process.poll() is not None):
            process.start()  # a test that stopped it: the finalizers still need an operator
        kube.wait_for(lambda: not remaining(), 60, "the operator to release the deleted jobs")
    except Exception as exc:  # noqa: BLE001 - cleanup must not mask the test's result
        print(f"warning: jobs in {namespace} not released ({exc}); removing their finalizers")
        for job in remaining():
            api.patch_namespaced_custom_object(
                vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL, job["metadata"]["name"],
                {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json",
            )  # fmt: skip


# ============================================================================================
# 1. bad manifests are rejected by the API server, naming the field

VALID = job_manifest("valid", "localhost/decor/trainer:0.1.0", duration="90s")


def _edited(path: str, value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    manifest = json.loads(json.dumps(base or VALID))
    node = manifest
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    if value is _DELETE:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value
    return manifest


_DELETE = object()
GPU_VALID = _edited("spec.resources", {"mode": "gpu", "min": 1, "max": 2, "initial": 1})

BAD_MANIFESTS = [
    # (id, manifest, field the API server names, field the model names)
    ("deadline-and-duration", _edited("spec.deadline", "2030-01-01T00:00:00Z"), "spec.deadline", "spec.deadline"),
    ("neither-deadline-nor-duration", _edited("spec.duration", _DELETE), "spec.deadline", "spec.deadline"),
    ("min-above-max", _edited("spec.resources.min", "1600m"), "spec.resources.min", "spec.resources.min"),
    ("initial-above-max", _edited("spec.resources.initial", 2), "spec.resources.initial", "spec.resources.initial"),
    ("initial-below-min", _edited("spec.resources", {"min": "1", "max": "2", "initial": "500m"}),
     "spec.resources.initial", "spec.resources.initial"),
    ("initial-below-default-min", _edited("spec.resources", {"max": "2", "initial": "500m"}),
     "spec.resources.initial", "spec.resources.initial"),
    ("fractional-gpus", _edited("spec.resources.max", "1500m", GPU_VALID), "spec.resources.max", "spec.resources.max"),
    ("gpu-without-checkpoint", _edited("spec.checkpoint", _DELETE, GPU_VALID), "spec.checkpoint", "spec.checkpoint.path"),
    ("zero-epochs", _edited("spec.epochs", 0), "spec.epochs", "spec.epochs"),
    ("missing-epochs", _edited("spec.epochs", _DELETE), "spec.epochs", "spec.epochs"),
    ("unknown-mode", _edited("spec.resources.mode", "tpu"), "spec.resources.mode", "spec.resources.mode"),
    ("bad-duration", _edited("spec.duration", "soon"), "spec.duration", "spec.duration"),
    ("bad-deadline", _edited("spec.deadline", "tomorrow", _edited("spec.duration", _DELETE)), "spec.deadline", "spec.deadline"),
    ("bad-quantity", _edited("spec.resources.min", "lots"), "spec.resources.min", "spec.resources.min"),
    ("no-containers", _edited("spec.template.spec.containers", []), "spec.template.spec.containers", "spec.template.spec.containers"),
    ("unknown-policy", _edited("spec.control.policy", "pid"), "spec.control.policy", "spec.control.policy"),
    ("port-out-of-range", _edited("spec.metrics.port", 70000), "spec.metrics.port", "spec.metrics.port"),
    ("unknown-field", _edited("spec.deadlineSlack", "5s"), "spec.deadlineSlack", "spec.deadlineSlack"),
    ("batch-policy-on-cpu", _edited("spec.resources.batchPolicy", "fixedGlobal"), "spec.resources.batchPolicy", "spec.resources.batchPolicy"),
    ("unknown-batch-policy", _edited("spec.resources.batchPolicy", "linear", GPU_VALID), "spec.resources.batchPolicy", "spec.resources.batchPolicy"),
]  # fmt: skip


@pytest.mark.parametrize(("manifest", "server_field", "model_field"), [c[1:] for c in BAD_MANIFESTS],
                         ids=[c[0] for c in BAD_MANIFESTS])  # fmt: skip
def test_bad_manifests_are_rejected_naming_the_field(
    kube: Any,
    namespace: str,
    crd: None,
    tmp_path: Path,
    manifest: dict[str, Any],
    server_field: str,
    model_field: str,
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    # kubectl apply validates strictly (unknown fields are errors) and the API server runs
    # the schema and the CEL rules; --dry-run=server stores nothing.
    result = subprocess.run(
        [_kubectl(), "--kubeconfig", kube.kubeconfig, "-n", namespace, "apply", "--dry-run=server", "-f", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert server_field in result.stderr, result.stderr
    # The local runtime (decor run --local) rejects the same manifest, naming the same field.
    with pytest.raises(ManifestError) as caught:
        parse_job(manifest)
    assert caught.value.field.startswith(model_field), caught.value


@pytest.mark.parametrize(
    "manifest",
    [
        VALID,
        GPU_VALID,
        _edited("spec.resources.batchPolicy", "scaleWithWorkers", GPU_VALID),
        _edited("spec.resources", {"mode": "cpu", "min": "0.5", "max": 2, "initial": "1500m"}),
        _edited("spec.resources", {"max": "500m"}),  # min defaults to max when max < 1
        _edited("spec.deadline", "2030-01-01T00:00:00Z", _edited("spec.duration", _DELETE)),
        _edited("spec.duration", 3600),
        _edited("spec.duration", "1h30m"),
    ],
    ids=[
        "cpu",
        "gpu",
        "gpu-batch-policy",
        "fractional-cores",
        "max-only",
        "deadline",
        "duration-seconds",
        "duration-string",
    ],
)
def test_good_manifests_are_accepted(
    kube: Any, namespace: str, crd: None, manifest: dict[str, Any]
) -> None:
    parse_job(manifest)
    custom(kube).create_namespaced_custom_object(
        vocabulary.API_GROUP,
        vocabulary.API_VERSION,
        namespace,
        vocabulary.PLURAL,
        manifest,
        dry_run="All",
    )


def _kubectl() -> str:
    exe = os.environ.get("KUBECTL")
    if exe:
        return exe
    cached = sorted(Path("/var/cache/decor").glob("kubectl-layer-*/bin/kubectl"))
    return str(cached[-1]) if cached else "kubectl"


# ============================================================================================
# 2. a CPU job meets its deadline by in-place resizes


RESIZED_TO = re.compile(r"-> (\S+) in place")  # a Resized Event: "cpu 240m -> 230m in place: ..."


def test_cpu_job_meets_its_deadline_by_resizing_in_place(
    kube: Any, namespace: str, operator: OperatorProcess, trainer_image: str
) -> None:
    # 400 steps in 150 s need about 0.3-0.5 cores with the trainer's one thread (it ended at
    # 330m on a quiet machine; with two threads it needed ~0.5), so the controller must
    # throttle, with room for the machine's other tenants to slow it down 2-3x for a while.
    create_job(kube, namespace, job_manifest("cpu-deadline", trainer_image, duration="150s"))
    status = wait_succeeded(kube, namespace, "cpu-deadline", timeout=300)
    outcome = status["outcome"]
    (pod,) = trainer_pods(kube, namespace, "cpu-deadline")
    resized = [m for _t, r, m in job_events(kube, namespace, "cpu-deadline") if r == "Resized"]
    report(
        "cpu-deadline",
        status,
        final_cpu=trainer_spec_cpu(pod),
        trainer_restarts=trainer_restarts(pod),
    )
    assert abs(outcome["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, outcome
    assert status["resizes"] >= 3, status
    assert len(resized) == status["resizes"]  # an Event for every actuation
    # It was throttled: the law held it below MAX (a job a fraction of a second behind at
    # its very end goes to MAX for its last steps: the final allocation says nothing).
    targets = [cores(found.group(1)) for m in resized if (found := RESIZED_TO.search(m))]
    assert len(targets) == len(resized), resized
    assert sum(t < CPU_MAX_CORES for t in targets) >= 3, resized
    assert trainer_restarts(pod) == 0  # resized in place, never restarted
    assert status["podsCreated"] == 1
    assert condition(status, "Complete")["status"] == "True"
    assert condition(status, "DeadlineMissed")["status"] == ("True" if outcome["late"] else "False")
    assert "Completed" in reasons(kube, namespace, "cpu-deadline")
    metrics = operator.metrics()
    assert metrics['decor_operator_actuations_total{kind="resize"}'] == status["resizes"]
    assert metrics['decor_operator_jobs{phase="Succeeded"}'] == 1.0


# ============================================================================================
# 3. moving the deadline earlier raises the allocation within 10 s


def test_moving_the_deadline_earlier_raises_the_allocation_within_10s(
    kube: Any, namespace: str, operator: OperatorProcess, trainer_image: str
) -> None:
    name = "moved-deadline"
    create_job(
        kube,
        namespace,
        job_manifest(name, trainer_image, deadline=rfc3339(now_utc() + timedelta(minutes=15))),
    )

    # In an 800m lane (LANE_SCALE): throttled to <= 300m, then a deadline that needs 600m,
    # and the allocation must rise by 250m.
    low_cores, needed_cores, rise_cores = 0.3 * LANE_SCALE, 0.6 * LANE_SCALE, 0.25 * LANE_SCALE

    def throttled_down() -> str | None:
        status = job_status(kube, namespace, name)
        allocation = status.get("allocation")
        return (
            allocation
            if allocation and cores(allocation) <= low_cores and status.get("stepsDone", 0) > 10
            else None
        )

    low = kube.wait_for(throttled_down, 180, f"the job to be throttled down to <= {low_cores:g}")
    stepped = job_status(kube, namespace, name)
    remaining = stepped["stepsTotal"] - stepped["stepsDone"]
    # A deadline that needs about needed_cores by the speed seen so far (the sub-core fit):
    # twice the throttled allocation, and feasible with a 1.3x margin in a lane (alone, the
    # trainer runs one thread per whole core of its limit, so 1500m runs as fast as one core).
    coefficients = SpeedFit(**stepped["controller"]["fit"]).coefficients()
    assert coefficients is not None, stepped["controller"]
    a, b = coefficients
    needed_s = remaining * (a / needed_cores + b)
    new_deadline = rfc3339(now_utc() + timedelta(seconds=max(30.0, needed_s)))
    started = time.monotonic()
    kube.kubectl(
        "-n",
        namespace,
        "patch",
        "dtj",
        name,
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"deadline": new_deadline}}),
    )

    def raised() -> str | None:
        (pod,) = [
            p for p in trainer_pods(kube, namespace, name) if not p.metadata.deletion_timestamp
        ]
        cpu = trainer_spec_cpu(pod)
        return cpu if cores(cpu) >= cores(low) + rise_cores else None

    new_cpu = kube.wait_for(
        raised, 30, "the allocation to rise after the deadline moved", interval=0.2
    )
    reaction_s = time.monotonic() - started
    status = job_status(kube, namespace, name)
    report(name, status, low=low, raised_to=new_cpu, reaction_s=round(reaction_s, 2))
    assert reaction_s <= 10.0
    # The period that resized writes the new deadline to status right after the resize.
    kube.wait_for(
        lambda: job_status(kube, namespace, name)["deadline"] == new_deadline,
        5,
        "status.deadline to show the moved deadline",
    )
    assert "DeadlineChanged" in reasons(kube, namespace, name)
    final = wait_succeeded(kube, namespace, name, timeout=300)
    report(name + "-final", final)
    # The CPU plan aims a fraction of a second before the (moved) deadline: a hair either side.
    assert abs(final["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, final["outcome"]


# ============================================================================================
# 4. the operator killed mid-job: state kept, still finishes near the deadline


def test_operator_restart_keeps_the_controller_state(
    kube: Any, namespace: str, operator: OperatorProcess, trainer_image: str
) -> None:
    name = "restart"
    create_job(kube, namespace, job_manifest(name, trainer_image, duration="150s"))

    def running_a_while() -> dict[str, Any] | None:
        status = job_status(kube, namespace, name)
        return status if (status.get("controller") or {}).get("decisions", 0) >= 15 else None

    kube.wait_for(running_a_while, 180, "15 controller decisions")
    operator.kill()
    before = job_status(kube, namespace, name)
    (pod_before,) = trainer_pods(kube, namespace, name)
    time.sleep(8)  # the outage under test: the trainer runs on, nobody controls it
    operator.start()

    def resumed() -> dict[str, Any] | None:
        status = job_status(kube, namespace, name)
        return (
            status
            if status["controller"]["decisions"] > before["controller"]["decisions"]
            else None
        )

    after = kube.wait_for(resumed, 60, "the restarted operator to continue the control loop")
    assert after["startTime"] == before["startTime"]
    assert after["deadline"] == before["deadline"]
    assert after["controller"]["fit"]["sw"] > 0  # the learned speed model survived
    final = wait_succeeded(kube, namespace, name, timeout=300)
    (pod_after,) = trainer_pods(kube, namespace, name)
    report(name, final, decisions_before_kill=before["controller"]["decisions"])
    assert pod_after.metadata.uid == pod_before.metadata.uid  # adopted, not recreated
    assert final["podsCreated"] == 1
    assert trainer_restarts(pod_after) == 0
    assert abs(final["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, final["outcome"]


# ============================================================================================
# 5. a GPU job goes from 1 to 2 nvidia.com/gpu and resumes from its checkpoint


# In one lane with test_failures' GPU fall-back test: the lanes' GPU tests fit the bed's 8
# advertised GPUs together.
@pytest.mark.xdist_group("one-to-two-gpus")
def test_gpu_change_restarts_from_the_checkpoint(
    kube: Any, namespace: str, operator: OperatorProcess, trainer_image: str
) -> None:
    name = "gpu"
    # The test bed's GPUs are advertised, not real: each is one CPU worker, and the pod's
    # trainer is limited to the lane's CPU_MAX (its template's CPU limit), which its workers
    # share. Its steps take about 60 s at 1 GPU (its one thread runs no faster above one
    # core; fewer steps on a slower machine): far too long for 40 s, short enough at 2 by
    # the speed model (which assumes speed-up until it sees otherwise), so the controller
    # asks for a second GPU. (Two workers share the same cores and the global batch: the job
    # then runs late, which is not what this test is about.)
    manifest = job_manifest(
        name,
        trainer_image,
        epochs=6,
        steps_per_epoch=one_gpu_steps_per_epoch(60.0, epochs=6),
        duration="40s",
        resources={"mode": "gpu", "min": 1, "max": 2, "initial": 1},
        control={"policy": "decor", "periodSeconds": 2, "restartCostSeconds": 2},
        extra_args=["--step-log", "/ckpt/steps.log"],
        trainer_cpu=CPU_MAX,
    )
    job = create_job(kube, namespace, manifest)
    first = kube.wait_for(lambda: trainer_pods(kube, namespace, name), 60, "the first trainer pod")[
        0
    ]
    assert first.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"

    def second_pod() -> Any:
        pods = [p for p in trainer_pods(kube, namespace, name) if p.metadata.name == f"{name}-1"]
        return pods[0] if pods else None

    pod = kube.wait_for(second_pod, 180, "a second trainer pod with more GPUs")
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
    final = wait_succeeded(kube, namespace, name, timeout=300)
    report(name, final)
    assert final["restarts"] == 1
    assert final["podsCreated"] == 2
    assert "Restarting" in reasons(kube, namespace, name)
    logs = kube.core.read_namespaced_pod_log(f"{name}-1", namespace, container="trainer")
    resumed = [line for line in logs.splitlines() if "resumed from" in line]
    assert resumed, logs[-2000:]
    # Every step ran exactly once across both pods: the resume was at the saved step.
    step_log = Path(CHECKPOINT_HOST_ROOT, namespace, name, job["metadata"]["uid"], "steps.log")
    steps = [int(line) for line in read_node_file(step_log).split()]
    total = steps_total(manifest)
    assert sorted(steps) == list(range(total)), f"steps repeated or lost: {len(steps)} lines"
    saved_step = int(resumed[0].split(" at step ")[1].split("/")[0])
    assert 0 < saved_step < total
    assert steps.index(saved_step) == saved_step  # the new pod continued right there


# ============================================================================================
# 5b. a trainer pod deleted mid-run is recreated and resumes from its checkpoint


def test_lost_pod_is_recreated_from_its_checkpoint(
    kube: Any, namespace: str, operator: OperatorProcess, trainer_image: str
) -> None:
    name = "lost"
    # 620 steps in 180 s (for an 800m lane) need well above MIN (100m) even with the
    # trainer's one thread and after the time lost to the recreation, and far below one core
    # (400 steps ran at MIN on a fast day and the job finished 11% early). At the lane's max
    # they take about 60 % of the deadline: it also pays for two pods' start-up and the
    # restart, which lane_steps does not scale (78 % with 800 steps: a job so sized in a
    # restricted namespace finished 5.6 % late on a slow VM).
    manifest = job_manifest(
        name,
        trainer_image,
        steps_per_epoch=lane_steps(155),
        duration="180s",
        extra_args=["--step-log", "/ckpt/steps.log"],
    )
    job = create_job(kube, namespace, manifest)

    wait_progress(kube, namespace, name, 0.33, 180)
    kube.core.delete_namespaced_pod(f"{name}-0", namespace)  # as an eviction or a drain would

    def recreated() -> Any:
        pods = [p for p in trainer_pods(kube, namespace, name) if p.metadata.name == f"{name}-1"]
        return pods[0] if pods else None

    kube.wait_for(recreated, 90, "a replacement trainer pod")
    # The PodLost Event is sent beside the periods (in order with the job's status writes,
    # not with its pods): it may land a moment after the replacement pod.
    kube.wait_for(
        lambda: (
            ("Warning", "PodLost") in {(t, r) for t, r, _m in job_events(kube, namespace, name)}
        ),
        10,
        "the PodLost Event",
    )
    final = wait_succeeded(kube, namespace, name, timeout=300)
    report(name, final)
    assert final["podFailures"] == 1
    assert final["podsCreated"] == 2
    logs = kube.core.read_namespaced_pod_log(f"{name}-1", namespace, container="trainer")
    assert "resumed from" in logs, logs[-2000:]
    step_log = Path(CHECKPOINT_HOST_ROOT, namespace, name, job["metadata"]["uid"], "steps.log")
    steps = [int(line) for line in read_node_file(step_log).split()]
    assert sorted(steps) == list(range(steps_total(manifest))), "steps repeated or lost"
    # One lost pod costs the trainer's restart, which the controller makes up for.
    assert abs(final["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, final["outcome"]


# ============================================================================================
# 6. a deadline already in the past: Infeasible, an Event, and MAX


def test_deadline_in_the_past_is_infeasible_and_runs_at_max(
    kube: Any, namespace: str, operator: OperatorProcess, trainer_image: str
) -> None:
    name = "past"
    past = rfc3339(now_utc() - timedelta(minutes=1))
    # An initial below MAX (half of it: within every lane's bounds), so that MAX is seen.
    initial = format_cpu(CPU_MAX_CORES / 2)
    resources = {"mode": "cpu", "min": CPU_MIN, "max": CPU_MAX, "initial": initial}
    create_job(
        kube,
        namespace,
        job_manifest(name, trainer_image, epochs=2, deadline=past, resources=resources),
    )

    def infeasible() -> dict[str, Any] | None:
        status = job_status(kube, namespace, name)
        found = condition(status, "Infeasible")
        return found if found.get("status") == "True" else None

    found = kube.wait_for(infeasible, 60, "the Infeasible condition")
    assert found["reason"] == "DeadlineInPast"
    events = job_events(kube, namespace, name)
    assert ("Warning", "DeadlineInPast") in {(t, r) for t, r, _m in events}
    (pod,) = kube.wait_for(lambda: trainer_pods(kube, namespace, name), 30, "the trainer pod")
    assert trainer_spec_cpu(pod) == CPU_MAX  # MAX, not spec.resources.initial
    final = wait_succeeded(kube, namespace, name, timeout=300)
    (pod,) = trainer_pods(kube, namespace, name)
    report(name, final)
    assert trainer_spec_cpu(pod) == CPU_MAX
    assert final["resizes"] == 0
    assert final["outcome"]["late"] is True
    assert condition(final, "DeadlineMissed")["status"] == "True"


# ============================================================================================
# 7. Prometheus stops mid-job: MetricsUnavailable, allocation held, recovery


# Targets come from a file the test writes: Debian's Prometheus is built without Kubernetes
# service discovery. The labels are what a kubernetes_sd pod scrape attaches (operations.md).
PROMETHEUS_CONFIG = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: decor-trainers
    file_sd_configs:
      - files: [{targets}]
  # kube-state-metrics keeps the labels it exports (namespace, job), as kube-prometheus-stack
  # scrapes it.
  - job_name: kube-state-metrics
    honor_labels: true
    file_sd_configs:
      - files: [{state_targets}]
"""


class PrometheusProcess:
    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        self.targets = workdir / "targets.json"
        self.targets.write_text("[]")
        self.state_targets = workdir / "state-targets.json"
        self.state_targets.write_text("[]")
        self.config.write_text(
            PROMETHEUS_CONFIG.format(targets=self.targets, state_targets=self.state_targets)
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.log: Any = None

    def scrape(self, namespace: str, pod: Any, port: int) -> None:
        """Scrape ``pod`` (with the namespace/pod labels of a Kubernetes pod scrape)."""
        self.scrape_pods(namespace, [pod], port)

    def scrape_pods(self, namespace: str, pods: list[Any], port: int) -> None:
        """Scrape exactly ``pods`` from now on."""
        targets = [
            {
                "targets": [f"{pod.status.pod_ip}:{port}"],
                "labels": {"namespace": namespace, "pod": pod.metadata.name},
            }
            for pod in pods
        ]
        text = json.dumps(targets)
        if self.targets.read_text() == text:
            return
        tmp = self.targets.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.targets)

    def start(self) -> None:
        self.log = open(self.workdir / "prometheus.log", "ab")  # noqa: SIM115 - closed in stop()
        log = self.log
        self.process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:  # noqa: S310
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        if self.log is not None:
            self.log.close()
            self.log = None


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusProcess]:
    binary = shutil.which("prometheus")
    if binary is None:
        reason = (
            "prometheus not on PATH (Debian: apt-get install --no-install-recommends prometheus)"
        )
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    process = PrometheusProcess(binary, tmp_path)
    try:
        yield process
    finally:
        process.stop()


def test_prometheus_outage_holds_the_allocation_and_recovers(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,
    prometheus: PrometheusProcess,
    trainer_image: str,
) -> None:
    name = "prom"
    prometheus.start()
    kube.wait_for(prometheus.ready, 60, "Prometheus to be ready")
    operator.prometheus_url = prometheus.url
    operator.start()
    # 800 steps: the job can still meet 180 s after running at MAX (one core's speed: one
    # thread) until Prometheus first scrapes it (with 400 steps, 65% of the job was done by then and
    # even MIN finished 31% early).
    create_job(
        kube,
        namespace,
        job_manifest(name, trainer_image, steps_per_epoch=lane_steps(200), duration="180s"),
    )

    def pod_with_ip() -> Any:
        pods = [p for p in trainer_pods(kube, namespace, name) if p.status.pod_ip]
        return pods[0] if pods else None

    prometheus.scrape(namespace, kube.wait_for(pod_with_ip, 60, "the trainer pod's IP"), 9100)

    def steady() -> dict[str, Any] | None:
        status = job_status(kube, namespace, name)
        ok = condition(status, "MetricsUnavailable").get("status") == "False"
        return status if ok and status.get("stepsDone", 0) >= 30 else None

    kube.wait_for(steady, 180, "progress read through Prometheus")
    prometheus.stop()

    def unavailable() -> dict[str, Any] | None:
        status = job_status(kube, namespace, name)
        return status if condition(status, "MetricsUnavailable").get("status") == "True" else None

    during = kube.wait_for(unavailable, 30, "MetricsUnavailable after Prometheus stopped")
    assert ("Warning", "MetricsUnavailable") in {
        (t, r) for t, r, _m in job_events(kube, namespace, name)
    }
    (pod,) = trainer_pods(kube, namespace, name)
    held = trainer_spec_cpu(pod)
    resizes = during["resizes"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # observing the outage: nothing may move
        (pod,) = trainer_pods(kube, namespace, name)
        assert trainer_spec_cpu(pod) == held
        assert job_status(kube, namespace, name)["resizes"] == resizes
        time.sleep(1)
    prometheus.start()

    def recovered() -> dict[str, Any] | None:
        status = job_status(kube, namespace, name)
        return status if condition(status, "MetricsUnavailable").get("status") == "False" else None

    kube.wait_for(recovered, 60, "MetricsUnavailable to clear after Prometheus came back")
    assert "MetricsRecovered" in reasons(kube, namespace, name)
    final = wait_succeeded(kube, namespace, name, timeout=400)
    report(name, final, held=held)
    assert abs(final["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, final["outcome"]


# ============================================================================================
# 8. the Helm-installed operator runs a job; its RBAC denies what it does not need


def _helm() -> str | None:
    env_sh = REPO / "cluster" / "env.sh"
    path = os.environ.get("PATH", "")
    if env_sh.exists():
        result = subprocess.run(
            ["bash", "-c", f'. "{env_sh}" >/dev/null 2>&1; printf %s "$PATH"'],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        path = result.stdout or path
    return shutil.which("helm", path=path)


def helm_or_skip() -> str:
    """helm, found on the test bed's PATH; the test is skipped without it (failed in CI)."""
    helm = _helm()
    if helm is None:
        reason = "helm not found on PATH after sourcing cluster/env.sh"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return helm


def assert_refused(kube: Any, namespace: str, names: list[str]) -> None:
    """Each job ends refused: a False Admitted condition TemplateRefused (or InvalidSpec, for
    what the model refuses) and a Warning Event of that reason, and no pod at all."""
    refusals = {vocabulary.REASON_TEMPLATE_REFUSED, vocabulary.REASON_INVALID_SPEC}

    def refused(name: str) -> bool:
        conditions = job_status(kube, namespace, name).get("conditions") or []
        reasons = {c.get("reason") for c in conditions} & refusals
        events = {reason for _t, reason, _m in job_events(kube, namespace, name)}
        return bool(reasons) and bool(events & (refusals | {vocabulary.EVENT_INVALID_SPEC}))

    for name in names:
        kube.wait_for(
            lambda name=name: refused(name), 60, f"{name} refused (condition and Event)",
            describe=lambda name=name: json.dumps(job_status(kube, namespace, name))[:2000],
        )  # fmt: skip
        assert trainer_pods(kube, namespace, name) == [], name


def operator_pod_within_its_memory(kube: Any, namespace: str) -> None:
    """The chart's operator never restarted (no OOM kill) and its memory (the kubelet's
    working set) is under the chart's limit."""
    (pod,) = kube.core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/name=decor"
    ).items
    (status,) = pod.status.container_statuses
    assert status.restart_count == 0, status.last_state
    limit = helm_values()["resources"]["limits"]["memory"]
    limit_bytes = quantity_value(limit)
    # the kubelet's own account of the container (its summary API), not the operator's
    response = kube.core.connect_get_node_proxy_with_path(
        pod.spec.node_name, "stats/summary", _preload_content=False
    )
    summary = json.loads(response.data)
    (entry,) = [p for p in summary["pods"] if p["podRef"]["name"] == pod.metadata.name]
    (container,) = [c for c in entry["containers"] if c["name"] == "operator"]
    rss = float(container["memory"]["workingSetBytes"])
    print(f"operator working set {rss / 2**20:.0f} MiB (limit {limit})")
    assert limit_bytes is not None and rss < limit_bytes


def helm_values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))


# The test bed's registry (cluster/registry.sh; containerd pulls from it over plain HTTP). The
# Helm test pushes both images there and installs from it. Set DECOR_E2E_REGISTRY empty where
# the nodes cannot reach it (kind): the test then installs the images loaded into the nodes.
REGISTRY = os.environ.get("DECOR_E2E_REGISTRY", "127.0.0.1:5000")


def push_images(registry: str, tag: str | None = None) -> dict[str, str]:
    """``make images REGISTRY=... REGISTRY_INSECURE=1`` (``IMAGE_TAG=tag`` when given), as
    docs/operations.md tells a user (builds both images, from cache here, and pushes them;
    niced, so that the other lane's jobs keep their pace): the chart values of the
    ``helm install`` lines it prints."""
    result = subprocess.run(
        ["nice", "-n", "19", "make", "-s", "images", f"REGISTRY={registry}",
         "REGISTRY_INSECURE=1"],
        cwd=REPO, capture_output=True, text=True, timeout=1800, check=False,
        env={**os.environ, "IMAGE_TAG": tag} if tag else None,
    )  # fmt: skip
    assert result.returncode == 0, f"make images REGISTRY={registry}:\n{result.stderr[-4000:]}"
    return dict(re.findall(r"--set ([\w.]+)=(\S+)", result.stdout))


def registry_tags(registry: str, repository: str) -> list[str]:
    """The tags the registry holds for ``repository`` (its HTTP API, plain HTTP)."""
    url = f"http://{registry}/v2/{repository}/tags/list"
    with urllib.request.urlopen(url, timeout=10) as response:
        return list(json.load(response).get("tags") or [])


def pulled(kube: Any, namespace: str, pod: str, image: str) -> bool:
    """The kubelet pulled ``image`` for ``pod`` (a Pulled Event: the runtime resolved the name
    at its registry, which ``imagePullPolicy: Always`` makes it do even for a present image)."""
    events = kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod},reason=Pulled"
    ).items
    return any((e.message or "").startswith(f'Successfully pulled image "{image}"') for e in events)


def test_helm_installed_operator_runs_a_job_with_least_privilege(
    kube: Any, namespace: str, crd: None, trainer_image: str, operator_image: str
) -> None:
    helm = helm_or_skip()
    if REGISTRY:  # from the registry, pulled: what a real cluster does
        images = push_images(REGISTRY)
        repository, tag = images["image.repository"], images["image.tag"]
        job_image, pull_policy = images["trainer.sidecarImage"], "Always"
        assert repository == f"{REGISTRY}/decor/operator", images
        assert job_image == f"{REGISTRY}/decor/trainer:{tag}", images
        for name in ("decor/operator", "decor/trainer"):
            assert tag in registry_tags(REGISTRY, name), f"{name}:{tag} not in {REGISTRY}"
        registry_values = ["--set", f"trainer.sidecarImage={job_image}"]
    else:  # the images loaded into the nodes
        repository, tag = operator_image.rsplit(":", 1)
        job_image, pull_policy, registry_values = trainer_image, "Never", []
    base = [helm, "--kubeconfig", kube.kubeconfig, "-n", namespace]
    subprocess.run(
        [*base, "install", "decor", str(CHART), "--set", f"watchNamespaces={{{namespace}}}",
         "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
         "--set", f"image.pullPolicy={pull_policy}", *registry_values,
         "--set", "logLevel=DEBUG",
         # one operator pod (the lane's CPU share; two replicas: test_failover.py)
         "--set", "replicaCount=1", "--set", "leaderElection.enabled=false",
         # the test bed has no volume provisioner (test_policy.py covers claims)
         "--set", "trainer.checkpoint.volume=hostPath"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        kube.kubectl(
            "-n", namespace, "rollout", "status", "deployment/decor", "--timeout=120s", timeout=150
        )
        (operator_pod,) = kube.core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/name=decor"
        ).items
        assert operator_pod.spec.containers[0].image == f"{repository}:{tag}"
        if REGISTRY:
            operator_image_ref = f"{repository}:{tag}"
            kube.wait_for(
                lambda: pulled(kube, namespace, operator_pod.metadata.name, operator_image_ref),
                60, f"a Pulled Event of {operator_image_ref} for the operator's pod",
            )  # fmt: skip
            print(f"operator pulled from {REGISTRY}: imageID "
                  f"{operator_pod.status.container_statuses[0].image_id}")  # fmt: skip
        honest = job_manifest("helm-job", job_image, epochs=3, duration="90s")
        honest["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = pull_policy
        # Explicit nulls are unset: the pod still gets every restricted default.
        honest["spec"]["template"]["spec"]["securityContext"] = {
            "runAsUser": None, "runAsNonRoot": None, "seccompProfile": None,
        }  # fmt: skip
        honest["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {
            "allowPrivilegeEscalation": None
        }
        create_job(kube, namespace, honest)
        # Beside it, in a namespace without any Pod Security label, one hostile job per class.
        hostile = hostile_manifests(honest)
        for manifest in hostile.values():  # not through create_job: its parse refuses some
            custom(kube).create_namespaced_custom_object(
                vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL, manifest
            )
        assert_refused(kube, namespace, [m["metadata"]["name"] for m in hostile.values()])
        (pod,) = kube.wait_for(
            lambda: trainer_pods(kube, namespace, "helm-job"), 60, "the honest job's pod"
        )
        assert pod.spec.security_context.run_as_non_root is True
        assert pod.spec.security_context.run_as_user == build.TRAINER_UID
        if REGISTRY:  # the trainer and its metrics sidecar, from the registry too
            assert pod.spec.containers[0].image == job_image
            sidecars = [c for c in pod.spec.init_containers or [] if c.name == build.SIDECAR_NAME]
            assert [c.image for c in sidecars] == [job_image]
            kube.wait_for(
                lambda: pulled(kube, namespace, pod.metadata.name, job_image),
                180, f"a Pulled Event of {job_image} for the trainer's pod",
            )  # fmt: skip
        assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
        trainer = pod.spec.containers[0].security_context
        assert trainer.allow_privilege_escalation is False
        # `helm upgrade` to a new operator image tag, with changed values, while the job runs:
        # the operator's pod is replaced, the trainer is not, and the new operator continues
        # the job from its status. (The new tag is this build pushed again under another
        # name, as a release would be: the rollout and the state hand-over are what is tested,
        # not code that differs between the two.)
        kube.wait_for(
            lambda: job_status(kube, namespace, "helm-job").get("phase") == "Running",
            120, "the honest job to run before the upgrade",
        )  # fmt: skip
        new_tag = f"{tag}-next"
        image_values = []
        if REGISTRY:
            pushed = push_images(REGISTRY, new_tag)
            assert pushed["image.tag"] == new_tag, pushed
            image_values = ["--set", f"image.tag={new_tag}"]
        subprocess.run(
            [*base, "upgrade", "decor", str(CHART), "--reuse-values", *image_values,
             "--set", "logLevel=INFO", "--set", "faults.stallTimeoutSeconds=150"],
            check=True, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        kube.kubectl(
            "-n", namespace, "rollout", "status", "deployment/decor", "--timeout=120s", timeout=150
        )
        (upgraded,) = kube.core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/name=decor"
        ).items
        assert upgraded.metadata.uid != operator_pod.metadata.uid, "the operator was not replaced"
        env = {e.name: e.value for e in upgraded.spec.containers[0].env or []}
        assert env.get("DECOR_STALL_TIMEOUT_SECONDS") == "150", env
        if REGISTRY:
            new_ref = f"{repository}:{new_tag}"
            assert upgraded.spec.containers[0].image == new_ref
            kube.wait_for(
                lambda: pulled(kube, namespace, upgraded.metadata.name, new_ref),
                60, f"a Pulled Event of {new_ref} for the upgraded operator's pod",
            )  # fmt: skip
        final = wait_succeeded(kube, namespace, "helm-job", timeout=300)
        (after,) = trainer_pods(kube, namespace, "helm-job")
        assert after.metadata.uid == pod.metadata.uid, "the upgrade replaced the trainer pod"
        assert int(final.get("podsCreated") or 0) == 1, final
        report("helm-job", final)
        assert abs(final["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, final[
            "outcome"
        ]
        assert_refused(kube, namespace, [m["metadata"]["name"] for m in hostile.values()])
        operator_pod_within_its_memory(kube, namespace)

        account = f"system:serviceaccount:{namespace}:decor"

        def can_i(*args: str) -> bool:
            out = kube.kubectl("auth", "can-i", "--as", account, *args, check=False).strip()
            return out == "yes"

        allowed = [
            ("patch", "pods", "--subresource=resize", "-n", namespace),
            ("create", "pods", "-n", namespace),
            ("delete", "pods", "-n", namespace),
            ("patch", "deadlinetrainingjobs.decor.dev", "--subresource=status", "-n", namespace),
            ("watch", "deadlinetrainingjobs.decor.dev", "-n", namespace),
            ("create", "events", "-n", namespace),
            ("create", "services", "-n", namespace),  # a several-pod job's rendezvous
        ]
        denied = [
            ("delete", "services", "-n", namespace),
            ("patch", "pods", "-n", namespace),  # only the resize subresource
            ("update", "pods", "-n", namespace),
            ("get", "secrets", "-n", namespace),
            ("create", "deadlinetrainingjobs.decor.dev", "-n", namespace),
            ("delete", "deadlinetrainingjobs.decor.dev", "-n", namespace),
            ("create", "deployments.apps", "-n", namespace),
            ("list", "pods", "-n", "default"),  # a Role: nothing outside its namespace
            ("list", "customresourcedefinitions.apiextensions.k8s.io"),
            ("list", "nodes"),
        ]
        for args in allowed:
            assert can_i(*args), f"should be allowed: {args}"
        for args in denied:
            assert not can_i(*args), f"should be denied: {args}"
    finally:
        # The operator removes its finalizers from the jobs it deletes: jobs first, then it.
        delete_jobs(kube, namespace)
        print(kube.kubectl("-n", namespace, "logs", "deployment/decor", "--tail=200", check=False))
        subprocess.run([*base, "uninstall", "decor"], capture_output=True, timeout=120, check=False)
