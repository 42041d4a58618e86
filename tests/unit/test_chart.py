"""The Helm chart: its CRD copy equals the single source, values are documented, and the
rendered templates (``helm template``) have the operator, least-privilege RBAC and metrics.

helm comes from ``cluster/env.sh`` (kubectl 1.35 / helm 4 on PATH). Without it the template
tests skip locally with the reason and fail in CI (``CI=true``), where it must be present.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "decor"


def test_chart_crds_equal_the_single_source_byte_for_byte() -> None:
    source = sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    copied = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert source == copied == ["deadlinetrainingjobs.yaml"]
    for name in source:
        assert (CHART / "crds" / name).read_bytes() == (REPO / "crds" / name).read_bytes(), (
            f"helm/decor/crds/{name} differs from crds/{name}: copy it (make crds)"
        )


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "decor"
    assert chart["appVersion"] == "0.1.0"
    assert chart["kubeVersion"].startswith(">=1.35")


def _undocumented_keys(lines: list[str]) -> list[str]:
    """Dotted keys of values.yaml that nothing documents.

    A key is documented by a comment line right above it. An undocumented key is still fine
    when it is a section whose direct children are all fine; the insides of a documented key
    (e.g. resources.requests.cpu) need no comments of their own.
    """
    entries: list[tuple[int, str, bool]] = []  # indent, key, comment above
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "-")) or ":" not in stripped:
            continue
        previous = lines[number - 1].strip() if number else ""
        entries.append(
            (len(line) - len(line.lstrip()), stripped.split(":", 1)[0], previous.startswith("#"))
        )

    def check(start: int, stop: int, prefix: str) -> list[str]:
        missing: list[str] = []
        i = start
        while i < stop:
            indent, key, documented = entries[i]
            end = i + 1
            while end < stop and entries[end][0] > indent:
                end += 1
            if not documented:
                if end == i + 1:  # an undocumented leaf
                    missing.append(prefix + key)
                else:
                    missing += check(i + 1, end, f"{prefix}{key}.")
            i = end
        return missing

    return check(0, len(entries), "")


def test_every_values_key_is_documented() -> None:
    text = (CHART / "values.yaml").read_text()
    top = yaml.safe_load(text)
    assert {
        "image",
        "prometheus",
        "metrics",
        "resources",
        "logLevel",
        "watchNamespaces",
        "rbac",
    } <= set(top)
    assert _undocumented_keys(text.splitlines()) == []


def test_values_documentation_check_finds_gaps() -> None:
    assert _undocumented_keys(["a:", "  # -- doc", "  b: 1", "  c:", "    d: 1", "e: 2"]) == [
        "a.c.d",
        "e",
    ]
    assert _undocumented_keys(["# -- doc", "a:", "  b: 1"]) == []


# --- helm template ---------------------------------------------------------------------------


@cache
def helm_binary() -> str | None:
    """helm on PATH after sourcing cluster/env.sh (or on the plain PATH)."""
    env_sh = REPO / "cluster" / "env.sh"
    path = os.environ.get("PATH", "")
    if env_sh.exists():
        result = subprocess.run(
            ["bash", "-c", f'. "{env_sh}" >/dev/null 2>&1; printf %s "$PATH"'],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if result.returncode == 0 and result.stdout:
            path = result.stdout
    return shutil.which("helm", path=path)


@pytest.fixture(scope="module")
def helm() -> str:
    found = helm_binary()
    if found is None:
        reason = (
            "helm not found on PATH after sourcing cluster/env.sh (run cluster/install-tools.sh)"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def render(helm: str, *sets: str) -> list[dict[str, Any]]:
    args = [helm, "template", "decor", str(CHART), "--namespace", "decor-system"]
    for item in sets:
        args += ["--set", item]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def by_kind(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in documents}


def test_helm_lint(helm: str) -> None:
    result = subprocess.run(
        [helm, "lint", str(CHART)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_render_is_clusterwide(helm: str) -> None:
    objects = by_kind(render(helm))
    assert set(objects) == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",  # the leader election's Lease
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    }
    deployment = objects["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "localhost/decor/operator:0.1.0"
    assert container["command"] == ["decor", "operator"]
    env = container_env(container)
    assert env["DECOR_WATCH_NAMESPACES"] == ""
    assert env["DECOR_PROMETHEUS_URL"] == ""
    assert env["DECOR_METRICS_PORT"] == "8080"
    assert env["DECOR_LOG_LEVEL"] == "INFO"
    # the one image DECOR runs as root (hostPath checkpoints) is the operator's own
    assert env["DECOR_OPERATOR_IMAGE"] == container["image"]
    assert pod["serviceAccountName"] == "decor"
    assert deployment["spec"]["replicas"] == 2  # one acts, one stands by
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    binding = objects["ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "decor", "namespace": "decor-system"}
    ]
    service = objects["Service"]
    assert service["spec"]["ports"][0]["port"] == 8080
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_a_slow_start_is_left_to_the_startup_probe(helm: str) -> None:
    """The liveness probe applies only once /healthz has answered: until then the startup
    probe gives the operator health.startupSeconds (a start at a 50m request on a busy node
    took over a minute, and the liveness probe killed it in a loop)."""

    def operator_container(*sets: str) -> dict[str, Any]:
        (container,) = by_kind(render(helm, *sets))["Deployment"]["spec"]["template"]["spec"][
            "containers"
        ]
        return container

    container = operator_container()
    startup, liveness = container["startupProbe"], container["livenessProbe"]
    assert startup["httpGet"] == liveness["httpGet"] == {"path": "/healthz", "port": "health"}
    assert startup["periodSeconds"] * startup["failureThreshold"] == 300
    assert "initialDelaySeconds" not in liveness  # the startup probe gates it
    assert (
        operator_container("health.startupSeconds=600")["startupProbe"]["failureThreshold"] == 120
    )


def named(documents: list[dict[str, Any]], kind: str, name: str = "decor") -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def granted(role: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    return {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


# The calls of operator/decor/adapter/kube.py and kopf's watches (rbac.yaml says which is which).
OPERATOR_RIGHTS = {
    ("decor.dev", "deadlinetrainingjobs"): ["list", "watch"],
    ("decor.dev", "deadlinetrainingjobs/status"): ["patch"],
    ("", "pods"): ["create", "delete", "get", "list", "watch"],
    ("", "pods/resize"): ["patch"],
    ("", "events"): ["create"],
    ("", "services"): ["create", "get"],  # the rendezvous Service of a several-pod GPU job
    ("", "limitranges"): ["list"],  # without the capacity view (which watches them)
}


def test_rbac_is_least_privilege(helm: str) -> None:
    role = named(render(helm), "ClusterRole")
    assert granted(role) == {
        **OPERATOR_RIGHTS,
        ("", "persistentvolumeclaims"): [
            "create",
            "get",
        ],  # the default: a checkpoint claim per job
    }
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]


def test_host_path_checkpoints_need_no_claim_rights(helm: str) -> None:
    documents = render(helm, "trainer.checkpoint.volume=hostPath")
    assert granted(named(documents, "ClusterRole")) == OPERATOR_RIGHTS
    container = named(documents, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "DECOR_CHECKPOINT_VOLUME", "value": "hostPath"} in container["env"]


def test_namespaced_install_has_nothing_cluster_scoped(helm: str) -> None:
    documents = render(helm, "watchNamespaces={ml,ml-dev}")
    kinds = sorted(d["kind"] for d in documents)
    assert kinds == [
        "Deployment", "PodDisruptionBudget", "Role", "Role", "Role", "RoleBinding", "RoleBinding",
        "RoleBinding", "Service", "ServiceAccount",
    ]  # fmt: skip
    served = [d for d in documents if d["metadata"]["name"] == "decor"]  # (decor-leader: the Lease)
    roles = {d["metadata"]["namespace"]: d for d in served if d["kind"] == "Role"}
    bindings = {d["metadata"]["namespace"]: d for d in served if d["kind"] == "RoleBinding"}
    assert set(roles) == set(bindings) == {"ml", "ml-dev"}
    for namespace in ("ml", "ml-dev"):
        assert roles[namespace]["metadata"]["name"] == "decor"
        assert granted(roles[namespace]) == {
            **OPERATOR_RIGHTS,
            ("", "persistentvolumeclaims"): ["create", "get"],
        }
        assert bindings[namespace]["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "decor",
        }
        assert bindings[namespace]["subjects"] == [
            {"kind": "ServiceAccount", "name": "decor", "namespace": "decor-system"}
        ]
    env = operator_env(documents)
    assert (env["DECOR_WATCH_NAMESPACES"], env["DECOR_WATCH_NODES"]) == ("ml,ml-dev", "false")


def test_a_namespaced_install_with_node_capacity_adds_that_cluster_role_only(helm: str) -> None:
    documents = render(helm, "watchNamespaces={ml,ml-dev}", "planner.watchNodes=true")
    cluster_scoped = sorted(
        (d["kind"], d["metadata"]["name"]) for d in documents if d["kind"].startswith("Cluster")
    )
    assert cluster_scoped == [
        ("ClusterRole", "decor-capacity"),
        ("ClusterRoleBinding", "decor-capacity"),
    ]
    assert granted(named(documents, "ClusterRole", "decor-capacity")) == {
        ("", "nodes"): ["list", "watch"],
        ("", "pods"): ["list", "watch"],
        ("", "resourcequotas"): ["list", "watch"],
        ("", "limitranges"): ["list", "watch"],
    }
    assert sorted(d["metadata"]["namespace"] for d in documents if d["kind"] == "Role") == [
        "decor-system",  # the leader election's Lease
        "ml",
        "ml-dev",
    ]
    assert operator_env(documents)["DECOR_WATCH_NODES"] == "true"


def test_the_crd_revision_check_reads_that_one_crd_only(helm: str) -> None:
    crd = {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "resourceNames": ["deadlinetrainingjobs.decor.dev"],
        "verbs": ["get"],
    }
    assert named(render(helm), "ClusterRole", "decor-crd")["rules"] == [crd]
    binding = named(render(helm), "ClusterRoleBinding", "decor-crd")
    assert binding["roleRef"]["name"] == "decor-crd"
    namespaced = render(helm, "watchNamespaces={ml}", "rbac.checkCRD=true")
    assert named(namespaced, "ClusterRole", "decor-crd")["rules"] == [crd]
    names = [d["metadata"]["name"] for d in render(helm, "rbac.checkCRD=false")]
    assert "decor-crd" not in names


def test_watch_namespaces_are_named_once_and_checked(helm: str) -> None:
    # the deprecated watchNamespace joins the list; a comma-separated string is a list too
    env = operator_env(render(helm, "watchNamespaces={ml,ml-dev,ml}", "watchNamespace=team-a"))
    assert env["DECOR_WATCH_NAMESPACES"] == "ml,ml-dev,team-a"
    assert operator_env(render(helm, r"watchNamespaces=a\,b"))["DECOR_WATCH_NAMESPACES"] == "a,b"
    for bad in ("ML", "ml_dev", "ml-*", "-ml"):
        result = subprocess.run(
            [helm, "template", "decor", str(CHART), "--set", f"watchNamespaces={{ok,{bad}}}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode != 0, bad
        assert f'"{bad}" is not a namespace name' in result.stderr, result.stderr


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment; a value from the downward API as ``<fieldPath>``."""
    return {
        e["name"]: e["value"] if "value" in e else f"<{e['valueFrom']['fieldRef']['fieldPath']}>"
        for e in container["env"]
    }


def operator_env(documents: list[dict[str, Any]]) -> dict[str, str]:
    return container_env(
        named(documents, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    )


def test_template_policy_and_checkpoint_storage_reach_the_operator(helm: str) -> None:
    from decor.core.policy import CheckpointStorage, TemplatePolicy

    default = operator_env(render(helm))
    assert TemplatePolicy.from_env(default) == TemplatePolicy()  # everything refused
    assert CheckpointStorage.from_env(default) == CheckpointStorage(volume="claim", size="1Gi")
    allowed = operator_env(
        render(
            helm,
            "templatePolicy.allowHostAccess=true",
            "templatePolicy.allowNodeName=true",
            "templatePolicy.allowRunAsRoot=true",
            "templatePolicy.allowedCapabilities={IPC_LOCK,NET_ADMIN}",
            "templatePolicy.allowedPriorityClasses={training}",
            "templatePolicy.allowedServiceAccounts={trainer}",
            "templatePolicy.allowedTolerationKeys={nvidia.com/gpu}",
            "trainer.checkpoint.storageClassName=fast",
            "trainer.checkpoint.size=5Gi",
        )
    )
    assert TemplatePolicy.from_env(allowed) == TemplatePolicy(
        allow_host_access=True,
        allow_node_name=True,
        allow_run_as_root=True,
        allowed_capabilities=frozenset({"IPC_LOCK", "NET_ADMIN"}),
        allowed_priority_classes=frozenset({"training"}),
        allowed_service_accounts=frozenset({"trainer"}),
        allowed_toleration_keys=frozenset({"nvidia.com/gpu"}),
    )
    storage = CheckpointStorage.from_env(allowed)
    assert (storage.volume, storage.storage_class, storage.size) == ("claim", "fast", "5Gi")


def test_the_operators_endpoints_bind_where_the_values_say(helm: str) -> None:
    default = operator_env(render(helm))
    assert (default["DECOR_METRICS_ADDRESS"], default["DECOR_HEALTH_ADDRESS"]) == (
        "0.0.0.0",
        "0.0.0.0",
    )
    local = operator_env(render(helm, "metrics.bindAddress=127.0.0.1", "metrics.port=9090"))
    assert (local["DECOR_METRICS_ADDRESS"], local["DECOR_METRICS_PORT"]) == ("127.0.0.1", "9090")


def test_scraping_through_the_api_server_adds_only_pod_proxy(helm: str) -> None:
    objects = by_kind(render(helm, "trainer.scrapeVia=apiserver"))
    role = named(render(helm, "trainer.scrapeVia=apiserver"), "ClusterRole")
    extra = [r for r in role["rules"] if r["resources"] == ["pods/proxy"]]
    assert extra == [{"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]}]
    container = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "DECOR_SCRAPE_VIA", "value": "apiserver"} in container["env"]


def test_the_deprecated_watch_namespace_renders_a_role_in_that_namespace(helm: str) -> None:
    objects = by_kind(
        render(helm, "watchNamespace=ml", "prometheus.url=http://prom:9090", "logLevel=DEBUG")
    )
    assert "ClusterRole" not in objects and "ClusterRoleBinding" not in objects
    documents = render(helm, "watchNamespace=ml")
    assert named(documents, "Role")["metadata"]["namespace"] == "ml"
    assert named(documents, "RoleBinding")["metadata"]["namespace"] == "ml"
    assert named(documents, "RoleBinding")["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "decor",
    }
    env = container_env(objects["Deployment"]["spec"]["template"]["spec"]["containers"][0])
    assert env["DECOR_WATCH_NAMESPACES"] == "ml"
    assert env["DECOR_PROMETHEUS_URL"] == "http://prom:9090"
    assert env["DECOR_LOG_LEVEL"] == "DEBUG"


def test_optional_objects_can_be_turned_off(helm: str) -> None:
    objects = by_kind(
        render(
            helm,
            "rbac.create=false",
            "rbac.aggregateToUserRoles=false",
            "serviceAccount.create=false",
            "metrics.service.enabled=false",
            "podDisruptionBudget.enabled=false",
        )
    )
    assert set(objects) == {"Deployment"}
    assert objects["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == "default"


def test_crds_are_installed_from_the_crds_folder(helm: str) -> None:
    result = subprocess.run(
        [helm, "template", "decor", str(CHART), "--include-crds"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout) if d]
    assert kinds.count("CustomResourceDefinition") == 1


# --- rights for people, alerts, every operator setting --------------------------------------

JOB = ("decor.dev", "deadlinetrainingjobs")


def test_user_roles_are_aggregated_into_edit_admin_and_view(helm: str) -> None:
    documents = render(helm)
    edit = named(documents, "ClusterRole", "decor-edit")
    view = named(documents, "ClusterRole", "decor-view")
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    assert edit["metadata"]["labels"][aggregate + "edit"] == "true"
    assert edit["metadata"]["labels"][aggregate + "admin"] == "true"
    assert view["metadata"]["labels"][aggregate + "view"] == "true"
    assert aggregate + "view" not in edit["metadata"]["labels"]
    assert granted(edit) == {
        JOB: ["create", "delete", "get", "list", "patch", "update", "watch"]
    }  # no status: only the operator writes it
    assert granted(view) == {JOB: ["get", "list", "watch"]}


def test_user_roles_can_be_turned_off_and_stay_out_of_a_namespaced_install(helm: str) -> None:
    for sets in (["rbac.aggregateToUserRoles=false"], ["watchNamespaces={ml}"]):
        names = [d["metadata"]["name"] for d in render(helm, *sets)]
        assert "decor-edit" not in names and "decor-view" not in names, sets


def test_alerts_are_off_by_default(helm: str) -> None:
    assert "PrometheusRule" not in by_kind(render(helm))


def test_alerts_read_only_series_that_exist(helm: str) -> None:
    import re

    from decor.service.operator_metrics import OperatorMetrics
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    OperatorMetrics(registry)
    exported = {s.name for family in registry.collect() for s in family.samples}
    config = yaml.safe_load((CHART / "files" / "kube-state-metrics-decor.yaml").read_text())
    for resource in config["spec"]["resources"]:
        exported |= {f"{resource['metricNamePrefix']}_{m['name']}" for m in resource["metrics"]}
    documents = render(
        helm,
        "monitoring.prometheusRule.enabled=true",
        "monitoring.prometheusRule.periodLatenessSeconds=30",
        "monitoring.labels.release=kube-prometheus-stack",
    )
    rule = named(documents, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {
        "DecorJobAtRisk",
        "DecorJobMetricsUnavailable",
        "DecorOperatorPeriodsLate",
    }
    assert alerts["DecorOperatorPeriodsLate"]["expr"].endswith("> 30")
    for alert in alerts.values():
        series = set(re.findall(r"\b(decor_[a-z_]+)", alert["expr"]))
        assert series and series <= exported, (alert["alert"], series - exported)
    from decor.api.vocabulary import CONDITION_TYPES

    for alert in ("DecorJobAtRisk", "DecorJobMetricsUnavailable"):
        (condition,) = re.findall(r'type="(\w+)"', alerts[alert]["expr"])
        assert condition in CONDITION_TYPES


def test_the_chart_sets_every_variable_the_operator_reads(helm: str) -> None:
    from decor.core import policy
    from decor.service import config

    variables = {
        value
        for module in (config, policy)
        for name, value in vars(module).items()
        if name.startswith("ENV_") and isinstance(value, str) and value.startswith("DECOR_")
    }
    env = operator_env(render(helm))
    assert variables <= set(env), sorted(variables - set(env))
    tuned = operator_env(
        render(
            helm,
            "faults.stallTimeoutSeconds=300",
            "faults.unschedulableWaitSeconds=60",
            "faults.maxPodFailures=2",
        )
    )
    settings = config.OperatorConfig.from_env(tuned)
    assert (settings.stall_timeout_s, settings.unschedulable_wait_s, settings.max_pod_failures) == (
        300.0,
        60.0,
        2,
    )


def test_two_replicas_elect_one_through_a_lease_with_least_privilege(helm: str) -> None:
    from decor.core import leader
    from decor.service import config

    documents = render(helm)
    role = named(documents, "Role", "decor-leader")
    assert role["metadata"]["namespace"] == "decor-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["decor"],
            "verbs": ["get", "update"],
        },
    ]
    assert named(documents, "RoleBinding", "decor-leader")["roleRef"]["name"] == "decor-leader"
    budget = named(documents, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    deployment = named(documents, "Deployment")
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    pod = deployment["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == (deployment["spec"]["selector"]["matchLabels"])
    )
    env = operator_env(documents)
    assert env["DECOR_LEADER_LEASE_NAMESPACE"] == "<metadata.namespace>"  # the downward API
    assert env["DECOR_LEADER_IDENTITY"] == "<metadata.name>"
    settings = config.OperatorConfig.from_env(env)
    assert settings.leader_election and settings.lease_name == "decor"
    assert settings.lease_timings == leader.LeaseTimings(15.0, 10.0, 2.0)
    tuned = operator_env(
        render(
            helm,
            "leaderElection.leaseDurationSeconds=6",
            "leaderElection.renewDeadlineSeconds=4",
            "leaderElection.retryPeriodSeconds=1",
        )
    )
    assert config.OperatorConfig.from_env(tuned).lease_timings == leader.LeaseTimings(6, 4, 1)


def test_one_replica_may_run_without_election_but_two_may_not(helm: str) -> None:
    documents = render(helm, "replicaCount=1", "leaderElection.enabled=false")
    kinds = sorted(d["kind"] for d in documents)
    assert "Role" not in kinds and "PodDisruptionBudget" not in kinds
    deployment = named(documents, "Deployment")
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    assert operator_env(documents)["DECOR_LEADER_ELECTION"] == "false"
    refused = subprocess.run(
        [helm, "template", "decor", str(CHART), "--set", "leaderElection.enabled=false"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "replicaCount > 1 needs leaderElection.enabled" in refused.stderr
