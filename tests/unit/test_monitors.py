"""The chart's Prometheus Operator monitors, Grafana dashboard and kube-state-metrics config.

The rendered ServiceMonitor and PodMonitor are validated against the monitoring.coreos.com
CRD schemas of a pinned prometheus-operator release (``hack/monitoring-crds.sh`` fetches them
through the Go module proxy into the cache). Every PromQL expression of the dashboard must
name only series that something DECOR ships publishes: the trainer's metrics, the operator's,
or the kube-state-metrics config in the chart. helm and go are needed; without them these
tests skip locally with the reason and fail in CI (``CI=true``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from decor_trainer import contract

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "decor"
DASHBOARD = CHART / "dashboards" / "decor.json"
KSM_CONFIG = CHART / "files" / "kube-state-metrics-decor.yaml"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ALL_ON = (
    "monitoring.serviceMonitor.enabled=true",
    "monitoring.podMonitor.enabled=true",
    "monitoring.grafanaDashboard.enabled=true",
    "monitoring.kubeStateMetrics.enabled=true",
)
HELM_TIMEOUT_S = 60
FETCH_TIMEOUT_S = 600


def missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


@cache
def helm_binary() -> str | None:
    """helm on PATH after sourcing cluster/env.sh (or on the plain PATH)."""
    result = subprocess.run(
        ["bash", "-c", f'. "{REPO / "cluster" / "env.sh"}" >/dev/null 2>&1; printf %s "$PATH"'],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    path = result.stdout if result.returncode == 0 and result.stdout else None
    return shutil.which("helm", path=path) or shutil.which("helm")


def render(*sets: str) -> list[dict[str, Any]]:
    helm = helm_binary()
    if helm is None:
        missing("helm not found on PATH after sourcing cluster/env.sh")
    args = [str(helm), "template", "decor", str(CHART), "--namespace", "decor-system"]
    for item in sets:
        args += ["--set", item]
    result = subprocess.run(args, capture_output=True, text=True, timeout=HELM_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.fixture(scope="module")
def monitor_schemas() -> dict[str, dict[str, Any]]:
    """kind -> the openAPIV3Schema of the pinned monitoring.coreos.com CRD."""
    if shutil.which("go") is None:
        missing("go not on PATH: hack/monitoring-crds.sh fetches the CRDs with go mod download")
    result = subprocess.run(
        ["bash", str(REPO / "hack" / "monitoring-crds.sh")],
        capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    schemas: dict[str, dict[str, Any]] = {}
    for path in Path(result.stdout.strip()).glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        schemas[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    assert set(schemas) == {"PodMonitor", "ServiceMonitor"}
    return schemas


def test_monitors_are_off_by_default() -> None:
    docs = render()
    assert not of_kind(docs, "ServiceMonitor")
    assert not of_kind(docs, "PodMonitor")
    assert not [d for d in of_kind(docs, "ConfigMap") if "dashboard" in d["metadata"]["name"]]


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_rendered_monitor_is_valid_for_the_pinned_crd(
    kind: str, monitor_schemas: dict[str, dict[str, Any]]
) -> None:
    (monitor,) = of_kind(render(*ALL_ON), kind)
    jsonschema.validate(monitor, monitor_schemas[kind])


def test_schema_validation_rejects_a_broken_monitor(
    monitor_schemas: dict[str, dict[str, Any]],
) -> None:
    """The check can fail: a misspelt interval and a port given as a list are refused."""
    (monitor,) = of_kind(render(*ALL_ON), "PodMonitor")
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "one second"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, monitor_schemas["PodMonitor"])
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "1s"
    monitor["spec"]["podMetricsEndpoints"][0]["port"] = ["metrics"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, monitor_schemas["PodMonitor"])


def test_pod_monitor_selects_trainer_pods_at_the_control_period() -> None:
    (monitor,) = of_kind(render(*ALL_ON, "monitoring.trainerInterval=5s"), "PodMonitor")
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "decor-operator"}
    assert spec["namespaceSelector"] == {"any": True}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"  # the sidecar's port name (build.py)
    assert endpoint["interval"] == endpoint["scrapeTimeout"] == "5s"
    (scoped,) = of_kind(render(*ALL_ON, "watchNamespaces={ml,ml-dev}"), "PodMonitor")
    assert scoped["spec"]["namespaceSelector"] == {"matchNames": ["ml", "ml-dev"]}


def test_service_monitor_selects_the_operators_metrics_service() -> None:
    docs = render(*ALL_ON, "monitoring.labels.release=kube-prometheus-stack")
    (monitor,) = of_kind(docs, "ServiceMonitor")
    services = [s for s in of_kind(docs, "Service") if s["metadata"]["name"].endswith("-metrics")]
    (service,) = services
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_dashboard_configmap_carries_the_json_with_the_sidecar_label() -> None:
    (configmap,) = [
        d
        for d in of_kind(render(*ALL_ON), "ConfigMap")
        if d["metadata"]["name"].endswith("-dashboard")
    ]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["decor.json"]) == json.loads(DASHBOARD.read_text())


# --- the dashboard's queries -----------------------------------------------------------------


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the dashboard (panels and template variables)."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(query["query"])
    return exprs


def published_series() -> set[str]:
    """Series names that the trainer, the operator and the chart's KSM config publish."""

    trainer = {
        v
        for k, v in vars(contract).items()
        if k.isupper() and isinstance(v, str) and v.startswith("decor_")
    }
    trainer = {
        f"{n}_total" if n in (contract.STEPS_COMPLETED, contract.SAMPLES_COMPLETED) else n
        for n in trainer
    }
    from decor.service.operator_metrics import OperatorMetrics
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    OperatorMetrics(registry)
    operator = {s.name for family in registry.collect() for s in family.samples}
    operator |= {
        f"{family.name}_bucket" for family in registry.collect() if family.type == "histogram"
    }
    ksm = yaml.safe_load(KSM_CONFIG.read_text())
    (resource,) = ksm["spec"]["resources"]
    prefix = resource["metricNamePrefix"]
    kube_state = {f"{prefix}_{m['name']}" for m in resource["metrics"]}
    return trainer | operator | kube_state


PROMQL_WORDS = frozenset(
    {"sum", "by", "rate", "clamp", "time", "histogram_quantile", "label_values", "le", "and", "or"}
)


def series_in(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords,
    label names (inside braces or by (...)), string contents or Grafana variables."""
    stripped = re.sub(r'"[^"]*"', '""', expr)
    stripped = re.sub(r"\{[^}]*\}", "", stripped)
    stripped = re.sub(r"\bby\s*\([^)]*\)", "", stripped)
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)
    stripped = re.sub(r"\$\w+", "", stripped)
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", stripped))
    if stripped.startswith("label_values("):
        names.discard("namespace")
    return names - PROMQL_WORDS


def test_series_parser_finds_names_and_skips_labels() -> None:
    assert series_in('sum by (kind) (rate(a_total{namespace=~"$ns"}[5m])) / (b > 0)') == {
        "a_total",
        "b",
    }


def test_every_dashboard_query_names_only_published_series() -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    published = published_series()
    used: set[str] = set()
    for expr in exprs:
        assert expr.count("(") == expr.count(")"), expr
        names = series_in(expr)
        assert names, f"no series in {expr!r}"
        assert names <= published, f"{expr!r} names unpublished {names - published}"
        used |= names
    # the panels the issue asks for: progress, set point, allocation, conditions, operator
    assert {
        "decor_steps_completed_total",
        "decor_job_start_time_seconds",
        "decor_job_deadline_seconds",
        "decor_job_allocation",
        "decor_job_condition",
        "decor_operator_jobs",
        "decor_operator_reconcile_errors_total",
    } <= used


def test_kube_state_metrics_config_reads_declared_status_fields() -> None:
    crd = yaml.safe_load((REPO / "crds" / "deadlinetrainingjobs.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    ksm = yaml.safe_load(KSM_CONFIG.read_text())
    for metric in ksm["spec"]["resources"][0]["metrics"]:
        path = metric["each"]["gauge"]["path"]
        assert path[0] == "status" and path[1] in status["properties"], metric["name"]
