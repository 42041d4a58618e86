"""End to end: the tools platform teams run (issue 15) against the real test-bed cluster.

* ``kubectl dtj deadline NAME +1m`` moves a running job's deadline; ``-2m`` then raises the
  allocation (the allocation follows the deadline);
* ``kubectl dtj get`` and ``kubectl dtj plot`` (from the job's status and from Prometheus)
  work on a running job, the PNG with both panels;
* every dashboard query over the trainer's and the operator's metrics returns series from a
  real Prometheus while a job runs. The ``decor_job_*`` queries need kube-state-metrics with
  the chart's config, which the test bed does not run; they are listed, not queried.

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
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_operator import (  # noqa: F401 - fixtures used by name
    OperatorProcess,
    PrometheusProcess,
    cores,
    crd,
    create_job,
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
    create_job(kube, namespace, job_manifest(name, trainer_image, deadline=deadline))
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
    # now much earlier: the law must raise the allocation within a few periods
    (pod,) = [p for p in trainer_pods(kube, namespace, name) if not p.metadata.deletion_timestamp]
    low = cores(trainer_spec_cpu(pod))
    dtj(kube, "-n", namespace, "deadline", name, "-8m")

    def raised() -> float | None:
        pods = [p for p in trainer_pods(kube, namespace, name) if not p.metadata.deletion_timestamp]
        cpu = cores(trainer_spec_cpu(pods[0])) if pods else 0.0
        return cpu if cpu > low else None

    kube.wait_for(raised, 30, "the allocation to rise after kubectl dtj deadline -8m")


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


def test_every_dashboard_query_returns_series_during_a_run(
    kube: Any, namespace: str, operator: OperatorProcess,  # noqa: F811
    prometheus: PrometheusProcess,  # noqa: F811
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
    needs_kube_state_metrics = [e for e in exprs if "decor_job_" in e]
    assert len(needs_kube_state_metrics) < len(exprs)
    for expr in exprs:
        if expr in needs_kube_state_metrics:
            print(f"needs kube-state-metrics (not on the test bed): {expr}")
            continue
        kube.wait_for(lambda e=expr: instant(prometheus.url, e) or None, SERIES_TIMEOUT_S,
                      f"series for {expr}")  # fmt: skip
