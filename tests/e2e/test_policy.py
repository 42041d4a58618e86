"""Safe to install on a shared cluster (issue 12, items 1, 2 and 5), on a real cluster.

- In a namespace that enforces Pod Security ``restricted``, a job with claim checkpoint
  storage runs to its deadline through a checkpoint restart: its pods pass admission, its
  claim goes with the job unless the job keeps it.
- Templates asking for host access, privilege or ``nodeName`` are refused by the API server
  (the CRD's CEL rules), naming the field.
- Templates asking for what only the operator can judge (service account, priority class,
  tolerations, capabilities, root, host ports) are refused by the operator with an Event and a
  condition naming the field and no pod; the same template gets a pod once the admin allows it
  (the operator's ``DECOR_ALLOW*`` environment, as the chart's ``templatePolicy`` sets it).
- The chart's ServiceAccount (namespaced install) may do what the operator does and nothing
  else.

The test bed has no volume provisioner: the restricted test makes, as the cluster admin would,
a PersistentVolume (a node directory) pre-bound to the job's claim. Helpers and the operator
process come from test_operator.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.api import vocabulary
from decor.api.model import ManifestError, parse_job
from decor.core import build, policy
from test_operator import (
    CHART,
    CRD_FILE,
    DEVIATION_BOUND_PERCENT,
    NODE_EXEC,
    OperatorProcess,
    _kubectl,
    create_job,
    delete_jobs,
    get_job,
    helm_or_skip,
    job_events,
    job_manifest,
    job_status,
    lane_steps,
    report,
    steps_total,
    trainer_pods,
    wait_succeeded,
)

pytestmark = pytest.mark.e2e

API_GROUP = "decor.dev"
PLURAL = "deadlinetrainingjobs"
# Where the admin-made PersistentVolumes of these tests keep their data on the node.
PV_ROOT = "/var/lib/decor/e2e-volumes"
PV_SIZE = "1Gi"


# ============================================================================================
# fixtures and helpers


@pytest.fixture(scope="module")
def crd(kube: Any) -> None:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kube.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", f"crd/{PLURAL}.{API_GROUP}"
    )


@pytest.fixture
def start_operator(
    kube: Any, namespace: str, crd: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[dict[str, str]], OperatorProcess]]:
    """Start (or restart) the test's operator with extra environment, e.g. an allowance."""
    process = OperatorProcess(kube.kubeconfig, namespace, tmp_path / "operator.log")

    def start(env: dict[str, str]) -> OperatorProcess:
        process.stop()
        for key in [k for k in os.environ if k.startswith("DECOR_ALLOW")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        process.start()
        return process

    try:
        yield start
    finally:
        delete_jobs(kube, namespace, process)
        process.stop()
        print(f"\n----- operator log (tail) -----\n{process.log_text()[-20000:]}")


def node_sh(script: str) -> str:
    """Run ``script`` on the node (this machine on the test bed, DECOR_E2E_NODE_EXEC on kind)."""
    result = subprocess.run(
        [*NODE_EXEC, "sh", "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout


@pytest.fixture
def admin_volume(kube: Any) -> Iterator[Callable[[str, str], str]]:
    """``make(namespace, claim)``: a PersistentVolume pre-bound to that claim, on a node
    directory any user may write (hostPath PVs get no fsGroup), as a cluster admin makes
    them where no provisioner exists. Returns its directory; removed afterwards."""
    made: list[tuple[str, str]] = []

    def make(namespace: str, claim: str) -> str:
        name = f"decor-e2e-{uuid.uuid4().hex[:10]}"
        directory = f"{PV_ROOT}/{name}"
        node_sh(f"mkdir -p '{directory}' && chmod 0777 '{directory}'")
        kube.core.create_persistent_volume(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {"decor.dev/e2e": "true"}},
                "spec": {
                    "capacity": {"storage": PV_SIZE},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "hostPath": {"path": directory, "type": "Directory"},
                    "claimRef": {"namespace": namespace, "name": claim},
                },
            }
        )
        made.append((name, directory))
        return directory

    try:
        yield make
    finally:
        for name, directory in made:
            try:
                kube.core.delete_persistent_volume(name)
                node_sh(f"rm -rf '{directory}'")
            except Exception as exc:  # noqa: BLE001 - cleanup must not mask the result
                print(f"warning: could not remove PersistentVolume {name}: {exc}")


def restrict(kube: Any, namespace: str) -> None:
    """Enforce Pod Security ``restricted`` in ``namespace`` and check that it bites."""
    kube.kubectl(
        "label", "namespace", namespace, "--overwrite",
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )  # fmt: skip
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "not-restricted"},
        "spec": {"containers": [{"name": "c", "image": "localhost/decor/trainer:0.1.0"}]},
    }

    def refused() -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            kube.core.create_namespaced_pod(namespace, plain, dry_run="All")
        except ApiException as exc:
            return exc.status == 403 and "restricted" in str(exc.body)
        return False

    kube.wait_for(refused, 30, f"Pod Security 'restricted' to be enforced in {namespace}")


def claim(kube: Any, namespace: str, name: str) -> Any:
    from kubernetes.client.exceptions import ApiException

    try:
        return kube.core.read_namespaced_persistent_volume_claim(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def job_gone(kube: Any, namespace: str, name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        get_job(kube, namespace, name)
    except ApiException as exc:
        return exc.status == 404
    return False


def delete_job(kube: Any, namespace: str, name: str) -> None:
    from kubernetes import client

    client.CustomObjectsApi(kube.api_client).delete_namespaced_custom_object(
        API_GROUP, "v1alpha1", namespace, PLURAL, name
    )
    kube.wait_for(lambda: job_gone(kube, namespace, name), 60, f"job {name} to be deleted")


# ============================================================================================
# 1. restricted namespace: a job meets its deadline through a checkpoint restart


def test_restricted_namespace_job_meets_its_deadline_through_a_checkpoint_restart(
    kube: Any,
    namespace: str,
    start_operator: Callable[[dict[str, str]], OperatorProcess],
    admin_volume: Callable[[str, str], str],
    trainer_image: str,
) -> None:
    name = "restricted"
    claim_name = build.checkpoint_claim_name(name)
    restrict(kube, namespace)
    directory = admin_volume(namespace, claim_name)
    start_operator({policy.ENV_CHECKPOINT_VOLUME: policy.VOLUME_CLAIM})
    # Its steps take about 60 % of the deadline at its 500m max: the deadline also pays for
    # two pods' start-up and a restart, which lane_steps does not scale (with 200 steps an
    # epoch, 78 %: a CI run on a slow VM, a step 0.34 s at max, finished 5.6 % late).
    manifest = job_manifest(
        name,
        trainer_image,
        steps_per_epoch=lane_steps(155),
        duration="180s",
        extra_args=["--step-log", "/ckpt/steps.log"],
    )
    job = create_job(kube, namespace, manifest)

    # The claim comes first and belongs to the job.
    made = kube.wait_for(lambda: claim(kube, namespace, claim_name), 60, "the checkpoint claim")
    assert [(o.kind, o.uid) for o in made.metadata.owner_references or []] == [
        ("DeadlineTrainingJob", job["metadata"]["uid"])
    ]

    def a_third_done() -> dict[str, Any] | None:
        status = job_status(kube, namespace, name)
        return status if (status.get("progress") or 0) >= 0.33 else None

    kube.wait_for(a_third_done, 240, "a third of the steps (the pod passed admission)")
    first = kube.core.read_namespaced_pod(f"{name}-0", namespace)
    security = first.spec.security_context
    assert security.run_as_non_root is True and security.seccomp_profile.type == "RuntimeDefault"
    for container in [*first.spec.containers, *(first.spec.init_containers or [])]:
        assert container.security_context.allow_privilege_escalation is False, container.name
        assert "ALL" in container.security_context.capabilities.drop, container.name
    assert all(v.host_path is None for v in first.spec.volumes)
    kube.core.delete_namespaced_pod(f"{name}-0", namespace)

    kube.wait_for(
        lambda: [p for p in trainer_pods(kube, namespace, name) if p.metadata.name == f"{name}-1"],
        90,
        "a replacement trainer pod (admitted in the restricted namespace)",
    )
    final = wait_succeeded(kube, namespace, name, timeout=300)
    report(name, final)
    assert final["podsCreated"] == 2
    logs = kube.core.read_namespaced_pod_log(f"{name}-1", namespace, container="trainer")
    assert "resumed from" in logs, logs[-2000:]
    bound = claim(kube, namespace, claim_name)
    if bound.spec.volume_name and bound.spec.volume_name.startswith("decor-e2e-"):
        # our admin-made volume (a cluster with a default StorageClass provisions its own)
        steps = [int(line) for line in node_sh(f"cat '{directory}/steps.log'").split()]
        assert sorted(steps) == list(range(steps_total(manifest))), "steps repeated or lost"
    assert abs(final["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, final["outcome"]

    # Deleting the job deletes its checkpoint claim (the garbage collector, via the owner).
    delete_job(kube, namespace, name)
    kube.wait_for(
        lambda: claim(kube, namespace, claim_name) is None, 60, "the claim to go with the job"
    )


def test_a_kept_checkpoint_claim_outlives_its_job(
    kube: Any,
    namespace: str,
    start_operator: Callable[[dict[str, str]], OperatorProcess],
    trainer_image: str,
) -> None:
    name = "kept"
    start_operator({policy.ENV_CHECKPOINT_VOLUME: policy.VOLUME_CLAIM})
    manifest = job_manifest(name, trainer_image, duration="600s")
    manifest["spec"]["checkpoint"]["keep"] = True
    create_job(kube, namespace, manifest)
    claim_name = build.checkpoint_claim_name(name)
    made = kube.wait_for(lambda: claim(kube, namespace, claim_name), 60, "the checkpoint claim")
    assert not made.metadata.owner_references  # nothing for the garbage collector to follow
    delete_job(kube, namespace, name)
    assert claim(kube, namespace, claim_name) is not None
    # A new job of the same name is another job (another uid): it does not silently resume
    # from the kept claim; it is refused naming spec.checkpoint, and no pod is made.
    create_job(kube, namespace, job_manifest(name, trainer_image, duration="600s"))
    message, _condition = kube.wait_for(
        lambda: refusal(kube, namespace, name, "spec.checkpoint"),
        60,
        "the successor refused, naming the kept claim",
        describe=lambda: json.dumps(job_status(kube, namespace, name), indent=1)[:3000],
    )
    assert claim_name in message
    # No pod of the successor. (The deleted job's controller may still have replaced its own
    # garbage-collected pod in the period it saw the deletion: that pod is the deleted job's,
    # by its owner reference, and goes with it.)
    successor = get_job(kube, namespace, name)["metadata"]["uid"]
    owners = [
        {ref.uid for ref in p.metadata.owner_references or ()}
        for p in trainer_pods(kube, namespace, name)
    ]
    assert not any(successor in uids for uids in owners), owners


def test_a_pod_the_api_refuses_is_a_condition_and_one_event_not_a_log_line(
    kube: Any,
    namespace: str,
    start_operator: Callable[[dict[str, str]], OperatorProcess],
    trainer_image: str,
) -> None:
    """A ResourceQuota that admits no pod: the API answers every create with 403. The job
    says so (a False Admitted condition CreateRefused naming the API's answer) and posts one
    Warning Event for its generation, however many periods try again."""
    from kubernetes import client

    kube.core.create_namespaced_resource_quota(
        namespace,
        client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name="no-pods"),
            spec=client.V1ResourceQuotaSpec(hard={"count/pods": "0"}),
        ),
    )
    # Without the capacity view (a namespaced install) the planner does not read quotas, and
    # the API server's quota admission is what refuses the pod (with it the job is Queued
    # naming the quota instead: test_quota_planner.py).
    operator = start_operator({"DECOR_WATCH_NODES": "false"})
    name = "quota"
    create_job(kube, namespace, job_manifest(name, trainer_image, duration="300s"))

    def refused() -> dict[str, Any] | None:
        for c in job_status(kube, namespace, name).get("conditions") or []:
            if c.get("reason") == vocabulary.REASON_CREATE_REFUSED:
                return dict(c)
        return None

    found = kube.wait_for(refused, 60, "a CreateRefused condition")
    assert found["status"] == "False" and "403" in found["message"], found
    assert "quota" in found["message"].lower(), found
    first = job_status(kube, namespace, name).get("podsCreated")
    periods = "decor_operator_period_lateness_seconds_count"
    start = operator.metrics()[periods]
    kube.wait_for(  # five more periods try to create the pod again
        lambda: operator.metrics()[periods] >= start + 5, 30, "five more control periods"
    )
    again = refused()
    assert again is not None and again["lastTransitionTime"] == found["lastTransitionTime"]
    events = [
        (t, m) for t, reason, m in job_events(kube, namespace, name)
        if reason == vocabulary.REASON_CREATE_REFUSED
    ]  # fmt: skip
    assert len(events) == 1 and events[0][0] == "Warning", events
    assert trainer_pods(kube, namespace, name) == []
    assert job_status(kube, namespace, name).get("podsCreated") == first


# ============================================================================================
# 2. what the CRD refuses: the API server names the field


def _with(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    manifest = job_manifest("refused", "localhost/decor/trainer:0.1.0", duration="90s")
    edit(manifest["spec"])
    return manifest


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["template"]["spec"]


def _trainer(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["template"]["spec"]["containers"][0]


CRD_REFUSED = [
    ("hostNetwork", lambda s: _pod(s).update(hostNetwork=True), "spec.template.spec.hostNetwork"),
    ("hostPID", lambda s: _pod(s).update(hostPID=True), "spec.template.spec.hostPID"),
    ("hostIPC", lambda s: _pod(s).update(hostIPC=True), "spec.template.spec.hostIPC"),
    ("nodeName", lambda s: _pod(s).update(nodeName="node-1"), "spec.template.spec.nodeName"),
    ("privileged", lambda s: _trainer(s).update(securityContext={"privileged": True}),
     "spec.template.spec.containers[0].securityContext.privileged"),
    ("privileged-init", lambda s: _pod(s).update(initContainers=[
        {"name": "i", "image": "busybox", "securityContext": {"privileged": True}}]),
     "spec.template.spec.initContainers[0].securityContext.privileged"),
    ("hostPath", lambda s: _pod(s).update(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
     "spec.template.spec.volumes[0].hostPath"),
    ("metrics-query", lambda s: s["metrics"].update(path="/metrics?x=1"), "spec.metrics.path"),
    ("metrics-dotdot", lambda s: s["metrics"].update(path="/a/../metrics"), "spec.metrics.path"),
    ("metrics-scheme-relative", lambda s: s["metrics"].update(path="//evil/metrics"),
     "spec.metrics.path"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "field"), [c[1:] for c in CRD_REFUSED], ids=[c[0] for c in CRD_REFUSED]
)
def test_the_api_server_refuses_host_access_naming_the_field(
    kube: Any,
    namespace: str,
    crd: None,
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], None],
    field: str,
) -> None:
    manifest = _with(edit)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = subprocess.run(
        [_kubectl(), "--kubeconfig", kube.kubeconfig, "-n", namespace, "create", "-f", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert field in result.stderr, result.stderr
    assert kube.core.list_namespaced_pod(namespace).items == []
    if field == "spec.metrics.path":  # the local runtime refuses it too
        with pytest.raises(ManifestError, match="spec.metrics.path"):
            parse_job(manifest)


# ============================================================================================
# 3. what the operator refuses unless the admin allows it


def _service_account(kube: Any, namespace: str) -> None:
    kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "trainer-sa"}})


OPERATOR_REFUSED = [
    # (id, edit, field named, allowance, setup in the namespace)
    ("serviceAccount", lambda s: _pod(s).update(serviceAccountName="trainer-sa"),
     "spec.template.spec.serviceAccountName",
     {policy.ENV_ALLOWED_SERVICE_ACCOUNTS: "trainer-sa"}, _service_account),
    ("toleration", lambda s: _pod(s).update(tolerations=[
        {"key": "decor.dev/e2e", "operator": "Exists", "effect": "NoSchedule"}]),
     "spec.template.spec.tolerations[0]",
     {policy.ENV_ALLOWED_TOLERATION_KEYS: "decor.dev/e2e"}, None),
    ("capabilities", lambda s: _trainer(s).update(
        securityContext={"capabilities": {"add": ["IPC_LOCK"]}}),
     "spec.template.spec.containers[0].securityContext.capabilities.add",
     {policy.ENV_ALLOWED_CAPABILITIES: "IPC_LOCK"}, None),
    ("root", lambda s: _pod(s).update(securityContext={"runAsUser": 0}),
     "spec.template.spec.securityContext.runAsUser",
     {policy.ENV_ALLOW_RUN_AS_ROOT: "true"}, None),
    ("hostPort", lambda s: _trainer(s).update(
        ports=[{"containerPort": 9101, "hostPort": 19101}]),
     "spec.template.spec.containers[0].ports[0].hostPort",
     {policy.ENV_ALLOW_HOST_ACCESS: "true"}, None),
    ("priorityClass", lambda s: _pod(s).update(priorityClassName="decor-e2e-training"),
     "spec.template.spec.priorityClassName",
     {policy.ENV_ALLOWED_PRIORITY_CLASSES: "decor-e2e-training"}, None),
]  # fmt: skip


@pytest.fixture(scope="session")
def priority_class(kube: Any) -> Iterator[str]:
    """A PriorityClass, made by the admin, for the priorityClass case (cluster-wide: the
    cases that use it run in one lane, ``xdist_group("admin-allowances")``). Made once for
    the run, not around each case: the API server's admission cache could still hold the
    class a case before had deleted, so the probe below passed on it, then the delete
    reached the cache and the operator's pod was refused "no PriorityClass" past the test's
    minute (a CI run of the lanes)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    scheduling: Any = client.SchedulingV1Api(kube.api_client)  # takes plain dicts too
    name = "decor-e2e-training"
    try:
        scheduling.create_priority_class({"metadata": {"name": name}, "value": 1000})
    except ApiException as exc:
        if exc.status != 409:  # left by an interrupted run: the same object
            raise
    # The API server's Priority admission reads classes from its own cache, which can lag the
    # create on a loaded node (a CI run saw a pod refused "no PriorityClass" for over 30 s):
    # wait until it admits a pod naming the class (a dry run in the default namespace).
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "decor-e2e-priority-probe"},
        "spec": {"priorityClassName": name, "containers": [{"name": "c", "image": "probe"}]},
    }
    kube.wait_for(
        lambda: kube.core.create_namespaced_pod("default", probe, dry_run="All"),
        120,
        f"the API server's admission to know PriorityClass {name}",
    )
    try:
        yield name
    finally:
        try:
            scheduling.delete_priority_class(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def refusal(kube: Any, namespace: str, name: str, field: str) -> tuple[Any, ...] | None:
    """(event message, condition) once both name ``field``; None before."""
    events = [
        message
        for _type, reason, message in job_events(kube, namespace, name)
        if reason == vocabulary.REASON_TEMPLATE_REFUSED and field in message
    ]
    conditions = [
        c
        for c in job_status(kube, namespace, name).get("conditions") or []
        if c.get("reason") == vocabulary.REASON_TEMPLATE_REFUSED and field in c.get("message", "")
    ]
    return (events[0], conditions[0]) if events and conditions else None


@pytest.mark.parametrize(
    ("edit", "field", "allowance", "setup"),
    [c[1:] for c in OPERATOR_REFUSED],
    ids=[c[0] for c in OPERATOR_REFUSED],
)
# one lane: the PriorityClass fixture is cluster-wide, made and deleted around each case
@pytest.mark.xdist_group("admin-allowances")
def test_the_operator_refuses_what_the_admin_did_not_allow(
    kube: Any,
    namespace: str,
    start_operator: Callable[[dict[str, str]], OperatorProcess],
    priority_class: str,
    trainer_image: str,
    edit: Callable[[dict[str, Any]], None],
    field: str,
    allowance: dict[str, str],
    setup: Callable[[Any, str], None] | None,
) -> None:
    if setup is not None:
        setup(kube, namespace)
    start_operator({})
    refused = job_manifest("refused", trainer_image, duration="300s")
    edit(refused["spec"])
    create_job(kube, namespace, refused)
    message, condition = kube.wait_for(
        lambda: refusal(kube, namespace, "refused", field),
        60,
        f"a {vocabulary.REASON_TEMPLATE_REFUSED} Event and condition naming {field}",
        describe=lambda: json.dumps(job_status(kube, namespace, "refused"), indent=1)[:3000],
    )
    assert condition["status"] in ("True", "False")
    assert "docs/security.md" in message
    assert trainer_pods(kube, namespace, "refused") == []

    # The same template, once the admin allows it, gets its pod.
    delete_job(kube, namespace, "refused")
    start_operator(allowance)
    allowed = job_manifest("allowed", trainer_image, duration="300s")
    edit(allowed["spec"])
    create_job(kube, namespace, allowed)
    kube.wait_for(
        lambda: trainer_pods(kube, namespace, "allowed"), 60, "a trainer pod for the allowed job"
    )


# ============================================================================================
# 4. the chart's ServiceAccount may do what the operator does, and nothing else


def test_the_charts_service_account_is_denied_what_the_operator_does_not_use(
    kube: Any, namespace: str, crd: None, operator_image: str
) -> None:
    helm = helm_or_skip()
    repository, tag = operator_image.rsplit(":", 1)
    base = [helm, "--kubeconfig", kube.kubeconfig, "-n", namespace]
    subprocess.run(
        [*base, "install", "decor", str(CHART), "--set", f"watchNamespaces={{{namespace}}}",
         "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
         "--set", "image.pullPolicy=Never", "--set", "replicaCount=0"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        manifest = subprocess.run(
            [*base, "get", "manifest", "decor"], check=True, capture_output=True, text=True
        ).stdout
        kinds = sorted(d["kind"] for d in yaml.safe_load_all(manifest) if d)
        # the operator's Role in the namespace it serves, and leader election's on its Lease
        assert kinds == [
            "Deployment", "Role", "Role", "RoleBinding", "RoleBinding", "Service", "ServiceAccount"
        ]  # fmt: skip
        account = f"system:serviceaccount:{namespace}:decor"

        def can_i(*args: str) -> bool:
            out = kube.kubectl("auth", "can-i", "--as", account, *args, check=False).strip()
            return out == "yes"

        ns = ("-n", namespace)
        allowed = [
            ("list", "deadlinetrainingjobs.decor.dev", *ns),
            ("watch", "deadlinetrainingjobs.decor.dev", *ns),
            ("patch", "deadlinetrainingjobs.decor.dev", "--subresource=status", *ns),
            ("list", "pods", *ns),
            ("watch", "pods", *ns),
            ("create", "pods", *ns),
            ("delete", "pods", *ns),
            ("patch", "pods", "--subresource=resize", *ns),
            ("create", "events", *ns),
            ("create", "persistentvolumeclaims", *ns),
            ("get", "persistentvolumeclaims", *ns),
            ("create", "services", *ns),
            ("get", "services", *ns),
            ("create", "leases.coordination.k8s.io", *ns),  # leader election
            ("get", "leases.coordination.k8s.io/decor", *ns),
            ("update", "leases.coordination.k8s.io/decor", *ns),
        ]
        denied = [
            ("delete", "services", *ns),
            ("patch", "services", *ns),
            ("list", "services", *ns),
            ("get", "deadlinetrainingjobs.decor.dev", *ns),
            ("patch", "deadlinetrainingjobs.decor.dev", *ns),
            ("create", "deadlinetrainingjobs.decor.dev", *ns),
            ("delete", "deadlinetrainingjobs.decor.dev", *ns),
            ("get", "deadlinetrainingjobs.decor.dev", "--subresource=status", *ns),
            ("patch", "pods", *ns),
            ("update", "pods", *ns),
            ("create", "pods", "--subresource=exec", *ns),
            ("get", "pods", "--subresource=proxy", *ns),
            ("patch", "events", *ns),
            ("delete", "persistentvolumeclaims", *ns),
            ("list", "persistentvolumeclaims", *ns),
            ("get", "secrets", *ns),
            ("list", "configmaps", *ns),
            ("create", "serviceaccounts", "--subresource=token", *ns),
            ("create", "rolebindings.rbac.authorization.k8s.io", *ns),
            ("create", "deployments.apps", *ns),
            ("get", "leases.coordination.k8s.io/another", *ns),  # only its own Lease
            ("update", "leases.coordination.k8s.io/another", *ns),
            ("delete", "leases.coordination.k8s.io/decor", *ns),
            ("list", "leases.coordination.k8s.io", *ns),
            ("list", "pods", "-n", "default"),
            ("list", "deadlinetrainingjobs.decor.dev", "-n", "default"),
            ("list", "nodes"),
            ("list", "persistentvolumes"),
            ("list", "customresourcedefinitions.apiextensions.k8s.io"),
        ]
        wrong = [a for a in allowed if not can_i(*a)] + [d for d in denied if can_i(*d)]
        assert wrong == [], f"allowed but should be denied, or denied but needed: {wrong}"
    finally:
        subprocess.run([*base, "uninstall", "decor"], capture_output=True, timeout=120, check=False)
