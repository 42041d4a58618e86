"""The template policy (operator/decor/core/policy.py): what a job's pod template may ask for, the
admin's allowances read from the environment, and the checkpoint storage settings.

Each forbidden field is refused by default with a violation naming its path, and accepted
once the matching allowance is set; the pods the operator builds from an accepted template
pass the same checks (the operator never adds what it would refuse).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from decor.api import vocabulary
from decor.api.model import parse_job
from decor.core import build, policy
from decor.core.policy import CheckpointStorage, TemplatePolicy, Violation, check_template

RESTRICTED = TemplatePolicy()
BOUNDED = {"limits": {"cpu": "100m", "memory": "64Mi"}}
"""What a container beside the trainer must have (requests default to limits)."""


def template(**pod_spec: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "trainer", "image": "localhost/decor/trainer:0.1.0"}],
        **pod_spec,
    }
    return {"metadata": {"labels": {"team": "vision"}}, "spec": spec}


def with_container(key: str, value: Any, kind: str = "containers") -> dict[str, Any]:
    tpl = template()
    container = {"name": "c", "image": "busybox", "resources": BOUNDED, key: value}
    if kind == "containers":
        tpl["spec"]["containers"][0][key] = value
    else:
        tpl["spec"][kind] = [container]
    return tpl


def fields(violations: list[Violation]) -> list[str]:
    return [v.field for v in violations]


# (case, template, the field named, the allowance that admits it)
FORBIDDEN: list[tuple[str, dict[str, Any], str, TemplatePolicy]] = [
    ("hostNetwork", template(hostNetwork=True), "spec.template.spec.hostNetwork",
     TemplatePolicy(allow_host_access=True)),
    ("hostPID", template(hostPID=True), "spec.template.spec.hostPID",
     TemplatePolicy(allow_host_access=True)),
    ("hostIPC", template(hostIPC=True), "spec.template.spec.hostIPC",
     TemplatePolicy(allow_host_access=True)),
    ("hostPath", template(volumes=[{"name": "ok", "emptyDir": {}},
                                   {"name": "root", "hostPath": {"path": "/"}}]),
     "spec.template.spec.volumes[1].hostPath", TemplatePolicy(allow_host_access=True)),
    ("hostPort", with_container("ports", [{"containerPort": 80, "hostPort": 80}]),
     "spec.template.spec.containers[0].ports[0].hostPort", TemplatePolicy(allow_host_access=True)),
    ("privileged", with_container("securityContext", {"privileged": True}),
     "spec.template.spec.containers[0].securityContext.privileged",
     TemplatePolicy(allow_host_access=True)),
    ("privileged-init", with_container("securityContext", {"privileged": True}, "initContainers"),
     "spec.template.spec.initContainers[0].securityContext.privileged",
     TemplatePolicy(allow_host_access=True)),
    ("capabilities", with_container("securityContext", {"capabilities": {"add": ["SYS_ADMIN"]}}),
     "spec.template.spec.containers[0].securityContext.capabilities.add",
     TemplatePolicy(allowed_capabilities=frozenset({"SYS_ADMIN"}))),
    ("escalation", with_container("securityContext", {"allowPrivilegeEscalation": True}),
     "spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation",
     TemplatePolicy(allow_run_as_root=True)),
    ("root-container", with_container("securityContext", {"runAsUser": 0}),
     "spec.template.spec.containers[0].securityContext.runAsUser",
     TemplatePolicy(allow_run_as_root=True)),
    ("root-pod", template(securityContext={"runAsNonRoot": False}),
     "spec.template.spec.securityContext.runAsNonRoot", TemplatePolicy(allow_run_as_root=True)),
    ("nodeName", template(nodeName="node-1"), "spec.template.spec.nodeName",
     TemplatePolicy(allow_node_name=True)),
    ("priorityClass", template(priorityClassName="system-node-critical"),
     "spec.template.spec.priorityClassName",
     TemplatePolicy(allowed_priority_classes=frozenset({"system-node-critical"}))),
    ("serviceAccount", template(serviceAccountName="deployer"),
     "spec.template.spec.serviceAccountName",
     TemplatePolicy(allowed_service_accounts=frozenset({"deployer"}))),
    ("serviceAccount-legacy", template(serviceAccount="deployer"),
     "spec.template.spec.serviceAccount",
     TemplatePolicy(allowed_service_accounts=frozenset({"deployer"}))),
    ("toleration", template(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]),
     "spec.template.spec.tolerations[0]",
     TemplatePolicy(allowed_toleration_keys=frozenset({"nvidia.com/gpu"}))),
    ("toleration-everything", template(tolerations=[{"operator": "Exists"}]),
     "spec.template.spec.tolerations[0]", TemplatePolicy(allowed_toleration_keys=frozenset("*"))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("tpl", "field", "allowance"),
    [pytest.param(t, f, a, id=case) for case, t, f, a in FORBIDDEN],
)
def test_each_forbidden_field_is_refused_by_name_and_admitted_by_its_allowance(
    tpl: dict[str, Any], field: str, allowance: TemplatePolicy
) -> None:
    refused = check_template(tpl, RESTRICTED)
    assert fields(refused) == [field]
    assert str(refused[0]).startswith(f"{field}: ")
    assert "docs/security.md" in refused[0].message
    assert check_template(tpl, allowance) == []


def test_a_plain_template_passes() -> None:
    assert check_template(template(), RESTRICTED) == []


def test_harmless_values_of_checked_fields_pass() -> None:
    tpl = template(
        hostNetwork=False,
        serviceAccountName="default",
        nodeName="",
        securityContext={"runAsNonRoot": True, "runAsUser": 1234},
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    )
    tpl["spec"]["containers"][0]["securityContext"] = {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert check_template(tpl, RESTRICTED) == []


def test_every_violation_is_reported_at_once() -> None:
    tpl = template(hostNetwork=True, hostPID=True, nodeName="n", priorityClassName="high")
    tpl["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert sorted(fields(check_template(tpl, RESTRICTED))) == sorted(
        [
            "spec.template.spec.hostNetwork",
            "spec.template.spec.hostPID",
            "spec.template.spec.nodeName",
            "spec.template.spec.priorityClassName",
            "spec.template.spec.containers[0].securityContext.privileged",
        ]
    )
    message = policy.describe(check_template(tpl, RESTRICTED))
    assert message.count("; spec.template") == 4


def test_allowance_lists_admit_only_what_they_name() -> None:
    tpl = with_container("securityContext", {"capabilities": {"add": ["IPC_LOCK", "NET_ADMIN"]}})
    allow_ipc = TemplatePolicy(allowed_capabilities=frozenset({"IPC_LOCK"}))
    (refused,) = check_template(tpl, allow_ipc)
    assert "NET_ADMIN" in refused.message and "IPC_LOCK" not in refused.message
    tolerations = template(tolerations=[{"key": "a"}, {"key": "b"}])
    allow_a = TemplatePolicy(allowed_toleration_keys=frozenset({"a"}))
    assert fields(check_template(tolerations, allow_a)) == ["spec.template.spec.tolerations[1]"]
    # a named key does not admit "every taint"
    assert check_template(template(tolerations=[{"operator": "Exists"}]), allow_a) != []


def test_from_env_reads_the_admins_allowances() -> None:
    environ = {
        policy.ENV_ALLOW_HOST_ACCESS: "true",
        policy.ENV_ALLOW_NODE_NAME: "no",
        policy.ENV_ALLOW_RUN_AS_ROOT: "1",
        policy.ENV_ALLOWED_CAPABILITIES: "cap_ipc_lock, NET_ADMIN",
        policy.ENV_ALLOWED_PRIORITY_CLASSES: "training,",
        policy.ENV_ALLOWED_SERVICE_ACCOUNTS: "*",
        policy.ENV_ALLOWED_TOLERATION_KEYS: "nvidia.com/gpu",
    }
    assert TemplatePolicy.from_env(environ) == TemplatePolicy(
        allow_host_access=True,
        allow_node_name=False,
        allow_run_as_root=True,
        allowed_capabilities=frozenset({"IPC_LOCK", "NET_ADMIN"}),
        allowed_priority_classes=frozenset({"training"}),
        allowed_service_accounts=frozenset({"*"}),
        allowed_toleration_keys=frozenset({"nvidia.com/gpu"}),
    )
    assert TemplatePolicy.from_env({}) == RESTRICTED
    assert (
        check_template(template(serviceAccountName="anyone"), TemplatePolicy.from_env(environ))
        == []
    )


def test_checkpoint_storage_from_env() -> None:
    assert CheckpointStorage.from_env({}) == CheckpointStorage(volume="hostPath")
    storage = CheckpointStorage.from_env(
        {
            policy.ENV_CHECKPOINT_VOLUME: "claim",
            policy.ENV_CHECKPOINT_STORAGE_CLASS: "fast",
            policy.ENV_CHECKPOINT_SIZE: "5Gi",
        }
    )
    assert (storage.volume, storage.storage_class, storage.size) == ("claim", "fast", "5Gi")
    assert (
        CheckpointStorage.from_env({policy.ENV_CHECKPOINT_STORAGE_CLASS: ""}).storage_class is None
    )
    with pytest.raises(ValueError, match=policy.ENV_CHECKPOINT_VOLUME):
        CheckpointStorage.from_env({policy.ENV_CHECKPOINT_VOLUME: "nfs"})


# --- the pods the operator builds pass the policy and Pod Security "restricted" ----------------


def job(template_spec: dict[str, Any] | None = None, **checkpoint: Any) -> dict[str, Any]:
    tpl = template(**(template_spec or {}))
    return {
        "apiVersion": "decor.dev/v1alpha1",
        "kind": "DeadlineTrainingJob",
        "metadata": {"name": "resnet", "namespace": "ml", "uid": "u-1", "generation": 1},
        "spec": {
            "duration": "90s",
            "epochs": 2,
            "resources": {"mode": "cpu", "max": 2},
            "template": tpl,
            "checkpoint": {"path": "/ckpt", **checkpoint},
        },
    }


RESTRICTED_VOLUME_KINDS = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
     "projected", "secret"}
)  # fmt: skip


def restricted_problems(pod: dict[str, Any]) -> list[str]:
    """What Pod Security Admission ``restricted`` (v1.35) would refuse in ``pod``; [] passes.

    The checks of the standard that a pod built by the operator could fail: host namespaces,
    privileged, capabilities, hostPath and other volume types, privilege escalation,
    non-root and seccomp.
    """
    spec = pod["spec"]
    problems: list[str] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            problems.append(key)
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_KINDS:
            problems.append(f"volume {volume['name']}: {sorted(kinds)}")
    pod_context = spec.get("securityContext") or {}
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    for container in [*spec["containers"], *(spec.get("initContainers") or [])]:
        name = container["name"]
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            problems.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation != false")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{name}: capabilities.drop lacks ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: capabilities.add {capabilities['add']}")
        non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
        if non_root is not True:
            problems.append(f"{name}: runAsNonRoot != true")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            problems.append(f"{name}: runAsUser 0")
        seccomp = (context.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile {seccomp}")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{name}: hostPort")
    return problems


def test_the_restricted_check_itself_finds_problems() -> None:
    body = job()
    pod = build.build_trainer_pod(body, parse_job(body), 1.0, "resnet-0")  # hostPath storage
    problems = restricted_problems(pod)
    assert any("hostPath" in p for p in problems)
    assert f"{build.CHECKPOINT_OWNER_NAME}: runAsNonRoot != true" in problems


@pytest.mark.parametrize("checkpoint", [{}, {"claimName": "my-data"}])
def test_pods_with_claim_storage_pass_restricted_and_the_policy(checkpoint: dict[str, Any]) -> None:
    body = job(**checkpoint)
    storage = CheckpointStorage(volume="claim")
    pod = build.build_trainer_pod(
        body, parse_job(body), 1.0, "resnet-0", checkpoint_storage=storage
    )
    assert restricted_problems(pod) == []
    assert policy.check_pod(pod, RESTRICTED) == []


def test_a_template_with_its_own_restricted_settings_keeps_them() -> None:
    body = job({"securityContext": {"runAsUser": 2000, "runAsGroup": 3000}})
    body["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["NET_RAW"]},
    }
    storage = CheckpointStorage(volume="claim")
    pod = build.build_trainer_pod(body, parse_job(body), 1.0, "p", checkpoint_storage=storage)
    assert pod["spec"]["securityContext"]["runAsUser"] == 2000
    assert pod["spec"]["securityContext"]["runAsGroup"] == 3000
    trainer = pod["spec"]["containers"][0]["securityContext"]
    assert trainer["readOnlyRootFilesystem"] is True
    assert trainer["capabilities"]["drop"] == ["NET_RAW", "ALL"]
    assert restricted_problems(pod) == []


def test_an_admin_allowed_root_template_is_not_made_non_root() -> None:
    body = job({"securityContext": {"runAsUser": 0}})
    tpl = copy.deepcopy(body["spec"]["template"])
    assert fields(check_template(tpl, RESTRICTED)) == [
        "spec.template.spec.securityContext.runAsUser"
    ]
    assert check_template(tpl, TemplatePolicy(allow_run_as_root=True)) == []
    pod = build.build_trainer_pod(body, parse_job(body), 1.0, "p")
    assert "runAsNonRoot" not in pod["spec"]["securityContext"]  # it would refuse to start


@pytest.mark.parametrize(
    ("kind", "key"),
    [
        ("annotations", "decor.dev/group-pods"),
        ("annotations", "decor.dev/allocation"),
        ("labels", "decor.dev/role"),
        ("labels", "decor.dev/job"),
        ("labels", "app.kubernetes.io/managed-by"),
    ],
)
def test_metadata_that_is_decors_own_is_refused(kind: str, key: str) -> None:
    tpl = template()
    tpl["metadata"].setdefault(kind, {})[key] = "3000000"
    found = check_template(tpl, RESTRICTED)
    assert fields(found) == [f"spec.template.metadata.{kind}[{key}]"]
    assert "DECOR's own" in found[0].message
    # no allowance admits it
    assert fields(check_template(tpl, TemplatePolicy(allow_host_access=True))) == fields(found)


def test_the_reserved_keys_cover_every_label_and_annotation_decor_sets() -> None:

    body = job()
    pod = build.build_trainer_pod(body, parse_job(body), 1.0, "resnet-0")
    keys = [*pod["metadata"]["labels"], vocabulary.LABEL_ROLE, vocabulary.LABEL_LEADER]
    keys += [k for k in pod["metadata"]["annotations"] if not k.startswith("prometheus.io/")]
    for key in keys:
        if key == "team":  # the template's own
            continue
        assert key.startswith(policy.RESERVED_METADATA_PREFIX) or key in policy.SELECTOR_LABELS


def test_the_admin_can_deny_further_metadata_prefixes() -> None:
    tpl = template()
    tpl["metadata"]["annotations"] = {"sidecar.istio.io/inject": "true", "note": "x"}
    assert check_template(tpl, RESTRICTED) == []
    denied = TemplatePolicy.from_env({policy.ENV_DENIED_METADATA_PREFIXES: "sidecar.istio.io/"})
    found = check_template(tpl, denied)
    assert fields(found) == ["spec.template.metadata.annotations[sidecar.istio.io/inject]"]
    assert policy.ENV_DENIED_METADATA_PREFIXES in found[0].message


def test_explicit_nulls_are_unset_and_the_restricted_defaults_apply() -> None:
    """``runAsUser: null`` and friends once passed the checks and survived ``setdefault``:
    the pod had no runAsNonRoot, seccomp profile or allowPrivilegeEscalation at all."""
    nulls = {
        "runAsUser": None,
        "runAsNonRoot": None,
        "seccompProfile": None,
        "allowPrivilegeEscalation": None,
        "capabilities": None,
    }
    body = job({"securityContext": dict(nulls), "volumes": [None]})
    body["spec"]["template"]["spec"]["containers"][0]["securityContext"] = dict(nulls)
    body["spec"]["template"]["spec"]["containers"][0]["env"] = [None, {"name": "A", "value": None}]
    spec = parse_job(body)
    pod = build.build_trainer_pod(
        body, spec, 1.0, "resnet-0", checkpoint_storage=CheckpointStorage(volume="claim")
    )
    assert restricted_problems(pod) == []

    def nulls_in(value: Any) -> int:
        if isinstance(value, dict):
            return sum(v is None or nulls_in(v) for v in value.values())
        if isinstance(value, list):
            return sum(v is None or nulls_in(v) for v in value)
        return 0

    assert nulls_in(pod) == 0
    context = pod["spec"]["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == build.TRAINER_UID
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    trainer = pod["spec"]["containers"][0]["securityContext"]
    assert trainer["allowPrivilegeEscalation"] is False
    assert trainer["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize(
    ("grace", "refused"), [(None, False), (0, False), (60, False), (61, True), (31536000, True),
                           ("60", True), (True, True)],
)  # fmt: skip
def test_a_grace_period_beyond_the_cap_is_refused(grace: Any, refused: bool) -> None:
    tpl = template() if grace is None else template(terminationGracePeriodSeconds=grace)
    found = check_template(tpl, RESTRICTED)
    assert fields(found) == (
        ["spec.template.spec.terminationGracePeriodSeconds"] if refused else []
    )
    if refused:
        assert policy.ENV_MAX_GRACE_PERIOD in found[0].message
    raised = TemplatePolicy.from_env({policy.ENV_MAX_GRACE_PERIOD: "31536000"})
    assert check_template(tpl, raised) == [] or not isinstance(grace, int) or grace is True


def test_trainers_are_deleted_within_the_cap_whatever_their_own_grace_period() -> None:
    def pod(grace: Any) -> dict[str, Any]:
        return {"spec": {} if grace is None else {"terminationGracePeriodSeconds": grace}}

    assert build.grace_period_s(pod(None), RESTRICTED) == build.DEFAULT_GRACE_PERIOD_S == 30
    assert build.grace_period_s(pod(10), RESTRICTED) == 10
    assert build.grace_period_s(pod(31536000), RESTRICTED) == policy.DEFAULT_MAX_GRACE_PERIOD_S
    assert build.grace_period_s(pod(31536000), TemplatePolicy(max_grace_period_s=5)) == 5
    with pytest.raises(ValueError, match=policy.ENV_MAX_GRACE_PERIOD):
        TemplatePolicy.from_env({policy.ENV_MAX_GRACE_PERIOD: "a year"})
