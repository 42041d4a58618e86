"""End to end: the tools platform teams run (issue 15) against the real test-bed cluster.

* ``kubectl dtj deadline NAME +1m`` moves a running job's deadline; ``-Ns`` then (to a
  deadline that needs most of the job's max) raises the allocation (it follows the deadline);
* ``kubectl dtj get`` and ``kubectl dtj plot`` (from the job's status and from Prometheus)
  work on a running job, the PNG with both panels;
* every dashboard query returns series from a real Prometheus while a job runs: the
  trainer's and the operator's metrics, and the ``decor_job_*`` series that kube-state-metrics
  (built by cluster/build-ksm.sh at a pinned version) makes from the job's status with the
  chart's custom-resource-state config.

Run: ``make cluster-up`` then ``pytest -m e2e tests/e2e/test_tools.py`` (KUBECONFIG from
cluster/env.sh, as for the other e2e tests).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from decor.core.control import SpeedFit
from test_operator import (  # noqa: F401 - fixtures used by name
    CPU_MAX_CORES,
    IN_CI,
    OperatorProcess,
    PrometheusProcess,
    cores,
    crd,
    create_job,
    free_port,
    job_manifest,
    job_status,
    now_utc,
    operator,
    prometheus,
    reasons,
    rfc3339,
    trainer_pods,
    trainer_spec_cpu,
)

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "helm" / "decor" / "dashboards" / "decor.json"
KSM_CONFIG = REPO / "helm" / "decor" / "files" / "kube-state-metrics-decor.yaml"
KUBECTL_DTJ = str(Path(sys.executable).with_name("kubectl-dtj"))
MOVE_S = 60.0
REACTION_S = 10.0
RUNNING_TIMEOUT_S = 180.0
SERIES_TIMEOUT_S = 60.0
RATE_WINDOW = "1m"  # what Grafana's $__rate_interval becomes at a 1 s scrape interval


def dtj(kube: Any, *args: str) -> str:
    result = subprocess.run(
        [KUBECTL_DTJ, *args], capture_output=True, text=True, timeout=60, check=False,
        env={"KUBECONFIG": kube.kubeconfig, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def running_with_progress(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    status = job_status(kube, namespace, name)
    ok = status.get("phase") == "Running" and status.get("stepsDone", 0) > 5
    return status if ok and status.get("allocation") else None


def test_kubectl_dtj_moves_the_deadline_and_the_allocation_follows(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811 - the fixture imported above
    trainer_image: str,
) -> None:
    name = "dtj-deadline"
    deadline = rfc3339(now_utc() + timedelta(minutes=10))
    create_job(kube, namespace, job_manifest(name, trainer_image, epochs=12, deadline=deadline))
    before = kube.wait_for(
        lambda: running_with_progress(kube, namespace, name), RUNNING_TIMEOUT_S, "progress"
    )
    out = dtj(kube, "-n", namespace, "deadline", name, "+1m")
    assert name in out
    moved = rfc3339(datetime.fromisoformat(before["deadline"].replace("Z", "+00:00"))
                    + timedelta(seconds=MOVE_S))  # fmt: skip
    kube.wait_for(
        lambda: job_status(kube, namespace, name).get("deadline") == moved or None,
        REACTION_S, "status.deadline to move by +1m",
    )  # fmt: skip
    assert "DeadlineChanged" in reasons(kube, namespace, name)
    # Now much earlier, to a deadline that needs about 85 % of the job's max by the speed it
    # has shown (feasible on a slow machine too: a fixed -8m made the job Infeasible there,
    # and an infeasible job runs as best effort, on what the other lanes leave): the law
    # must raise the allocation within a few periods.
    (pod,) = [p for p in trainer_pods(kube, namespace, name) if not p.metadata.deletion_timestamp]
    low = cores(trainer_spec_cpu(pod))
    shift_s = _earlier_by_s(job_status(kube, namespace, name), share=0.85)
    assert low < 0.85 * min(CPU_MAX_CORES, 1.0), f"the job already holds {low} cores"
    dtj(kube, "-n", namespace, "deadline", name, f"-{shift_s}s")

    def raised() -> float | None:
        pods = [p for p in trainer_pods(kube, namespace, name) if not p.metadata.deletion_timestamp]
        cpu = cores(trainer_spec_cpu(pods[0])) if pods else 0.0
        return cpu if cpu > low else None

    kube.wait_for(raised, 30, f"the allocation to rise after kubectl dtj deadline -{shift_s}s")


def _earlier_by_s(status: dict[str, Any], share: float) -> int:
    """How far to move the deadline earlier (whole seconds) for the job to need ``share`` of
    its max (one core at most: its one thread runs no faster above it) by the speed its law
    has fitted so far."""
    coefficients = SpeedFit(**status["controller"]["fit"]).coefficients()
    assert coefficients is not None, status["controller"]
    a, b = coefficients
    remaining = status["stepsTotal"] - status["stepsDone"]
    needed_s = remaining * (a / (share * min(CPU_MAX_CORES, 1.0)) + b)
    deadline = datetime.fromisoformat(status["deadline"].replace("Z", "+00:00"))
    shift_s = int((deadline - now_utc()).total_seconds() - needed_s)
    assert shift_s > 0, f"the job needs {needed_s:.0f} s at {share:.0%} of its max: {status}"
    return shift_s


def test_kubectl_dtj_get_and_plot(
    kube: Any, namespace: str, operator: OperatorProcess,  # noqa: F811
    prometheus: PrometheusProcess,  # noqa: F811
    trainer_image: str, tmp_path: Path,
) -> None:  # fmt: skip
    prometheus.start()
    kube.wait_for(prometheus.ready, 60, "Prometheus ready")
    operator.start()
    name = "dtj-plot"
    deadline = rfc3339(now_utc() + timedelta(minutes=5))
    create_job(kube, namespace, job_manifest(name, trainer_image, deadline=deadline))
    kube.wait_for(
        lambda: running_with_progress(kube, namespace, name), RUNNING_TIMEOUT_S, "progress"
    )
    (pod,) = trainer_pods(kube, namespace, name)
    prometheus.scrape(namespace, pod, 9100)
    table = dtj(kube, "-n", namespace, "get")
    (line,) = [row for row in table.splitlines() if f" {name} " in f" {row} "]
    assert re.search(r"\d+\.\d%", line), table
    import matplotlib.image

    for extra, source in (([], "job status"), (["--prometheus", prometheus.url], "Prometheus")):
        out = tmp_path / f"{len(extra)}.png"
        said = dtj(kube, "-n", namespace, "plot", name, "-o", str(out), *extra)
        assert source in said
        assert matplotlib.image.imread(out).shape[0] > 100


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def instant(url: str, expr: str) -> list[Any]:
    query = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as response:  # noqa: S310
        return list(json.load(response)["data"]["result"])


class KubeStateMetrics:
    """kube-state-metrics on 127.0.0.1 with the chart's DeadlineTrainingJob config only."""

    def __init__(self, binary: str, kubeconfig: str, workdir: Path) -> None:
        self.port, telemetry_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log = open(workdir / "kube-state-metrics.log", "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                binary,
                f"--kubeconfig={kubeconfig}",
                "--custom-resource-state-only",
                f"--custom-resource-state-config-file={KSM_CONFIG}",
                "--host=127.0.0.1",
                f"--port={self.port}",
                "--telemetry-host=127.0.0.1",
                f"--telemetry-port={telemetry_port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.log.close()


def ksm_binary() -> Path:
    out = subprocess.run(
        ["bash", "-c", f'. "{REPO / "cluster/lib.sh"}"; printf %s "$KSM_BIN"'],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return Path(out) / "kube-state-metrics"


@pytest.fixture
def kube_state_metrics(kube: Any, crd: None, tmp_path: Path) -> Iterator[KubeStateMetrics]:  # noqa: F811
    binary = ksm_binary()
    if not binary.exists():
        reason = f"{binary} not built (bash cluster/build-ksm.sh; make cluster-up builds it)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    process = KubeStateMetrics(str(binary), kube.kubeconfig, tmp_path)
    try:
        yield process
    finally:
        process.stop()


def test_every_dashboard_query_returns_series_during_a_run(
    kube: Any, namespace: str, operator: OperatorProcess,  # noqa: F811
    prometheus: PrometheusProcess,  # noqa: F811
    kube_state_metrics: KubeStateMetrics,
    trainer_image: str,
) -> None:  # fmt: skip
    prometheus.start()
    kube.wait_for(prometheus.ready, 60, "Prometheus ready")
    operator.start()
    name = "dashboard"
    deadline = rfc3339(now_utc() + timedelta(minutes=5))
    create_job(kube, namespace, job_manifest(name, trainer_image, deadline=deadline))
    kube.wait_for(
        lambda: running_with_progress(kube, namespace, name), RUNNING_TIMEOUT_S, "progress"
    )
    (pod,) = trainer_pods(kube, namespace, name)
    targets = [
        {"targets": [f"{pod.status.pod_ip}:9100"], "labels": {"namespace": namespace, "pod": pod.metadata.name}},
        {"targets": [f"127.0.0.1:{operator.metrics_port}"], "labels": {"job": "decor-operator"}},
    ]  # fmt: skip
    prometheus.targets.write_text(json.dumps(targets))
    exprs = [
        e.replace("$__rate_interval", RATE_WINDOW).replace("$namespace", ".+")
        for e in dashboard_exprs()
    ]
    from_job_status = [e for e in exprs if "decor_job_" in e]
    assert 0 < len(from_job_status) < len(exprs)
    prometheus.state_targets.write_text(json.dumps([{"targets": [kube_state_metrics.address]}]))
    for expr in exprs:
        kube.wait_for(lambda e=expr: instant(prometheus.url, e) or None, SERIES_TIMEOUT_S,
                      f"series for {expr}")  # fmt: skip

    # The job's own series carry its namespace and name, and read status as status reads
    # (once the scrape has caught up with a change: the allocation may move between them).
    def as_status() -> dict[str, Any] | None:
        (allocation,) = instant(prometheus.url, f'decor_job_allocation{{job="{name}"}}')
        status = cores(job_status(kube, namespace, name)["allocation"])
        return allocation if abs(float(allocation["value"][1]) - status) <= 0.3 else None

    allocation = kube.wait_for(as_status, SERIES_TIMEOUT_S, "decor_job_allocation as in status")
    assert allocation["metric"]["namespace"] == namespace
