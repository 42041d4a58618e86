"""The Pod Security ``restricted`` judge (operator/decor/core/podsecurity.py).

A minimal pod that restricted (v1.35) admits passes with no findings; each mutation of it in
the tables breaks exactly the rules named (or none, for the allowed variants), at the field
named; and no JSON-like value of any shape makes :func:`check_restricted` raise.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from decor.core import podsecurity
from decor.core.podsecurity import RULES, Finding, check_restricted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

Pod = dict[str, Any]
Mutation = Callable[[Pod], None]

GOOD_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def restricted_pod() -> Pod:
    """The smallest pod restricted admits: non-root and RuntimeDefault seccomp at pod level,
    one container that drops every capability and cannot escalate."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "resnet-0", "namespace": "ml", "labels": {"app": "decor"}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "trainer",
                    "image": "localhost/decor/trainer:0.1.0",
                    "securityContext": copy.deepcopy(GOOD_CONTEXT),
                    "ports": [{"containerPort": 9090, "name": "metrics"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }


def container(name: str, **fields: Any) -> dict[str, Any]:
    """A container that passes restricted on its own (under the pod's securityContext)."""
    return {"name": name, "image": "busybox", "securityContext": copy.deepcopy(GOOD_CONTEXT), **fields}  # fmt: skip


# --- mutations -------------------------------------------------------------------------------


def put(*path: str | int, value: Any) -> Mutation:
    """Set ``value`` at ``path`` (keys and list indexes), creating objects on the way."""

    def mutate(pod: Pod) -> None:
        node: Any = pod
        for key in path[:-1]:
            if isinstance(key, str):
                node = node.setdefault(key, {})
            else:
                node = node[key]
        node[path[-1]] = value

    return mutate


def drop(*path: str | int) -> Mutation:
    """Remove the key at ``path``."""

    def mutate(pod: Pod) -> None:
        node: Any = pod
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return mutate


def add(kind: str, item: Any) -> Mutation:
    """Append ``item`` to the list ``spec.<kind>`` (containers, initContainers, volumes...)."""

    def mutate(pod: Pod) -> None:
        pod["spec"].setdefault(kind, []).append(item)

    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(pod: Pod) -> None:
        for mutation in mutations:
            mutation(pod)

    return mutate


def sc(*path: str, value: Any) -> Mutation:
    """Set a field of the trainer container's securityContext."""
    return put("spec", "containers", 0, "securityContext", *path, value=value)


def pod_sc(*path: str, value: Any) -> Mutation:
    """Set a field of the pod's securityContext."""
    return put("spec", "securityContext", *path, value=value)


def trainer(*path: str | int, value: Any) -> Mutation:
    """Set a field of the trainer container."""
    return put("spec", "containers", 0, *path, value=value)


def annotate(key: str, value: Any) -> Mutation:
    return put("metadata", "annotations", key, value=value)


TRAINER = "spec.containers[trainer]"
TRAINER_SC = f"{TRAINER}.securityContext"
POD_SC = "spec.securityContext"
APPARMOR = "container.apparmor.security.beta.kubernetes.io"
SECCOMP_POD = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER = "container.seccomp.security.alpha.kubernetes.io"
NO_SECCOMP_AT_POD = drop("spec", "securityContext", "seccompProfile")
NO_NON_ROOT_AT_POD = drop("spec", "securityContext", "runAsNonRoot")

# (case, mutation, the rules broken, one field named)
REFUSED: list[tuple[str, Mutation, set[str], str]] = [
    # hostProcess
    ("hostProcess-pod", pod_sc("windowsOptions", "hostProcess", value=True), {"hostProcess"}, f"{POD_SC}.windowsOptions.hostProcess"),
    ("hostProcess-container", sc("windowsOptions", "hostProcess", value=True), {"hostProcess"}, f"{TRAINER_SC}.windowsOptions.hostProcess"),
    ("hostProcess-string", sc("windowsOptions", "hostProcess", value="false"), {"hostProcess"}, f"{TRAINER_SC}.windowsOptions.hostProcess"),
    ("windowsOptions-list", pod_sc("windowsOptions", value=[]), {"hostProcess"}, f"{POD_SC}.windowsOptions"),
    # hostNamespaces
    ("hostNetwork", put("spec", "hostNetwork", value=True), {"hostNamespaces"}, "spec.hostNetwork"),
    ("hostPID", put("spec", "hostPID", value=True), {"hostNamespaces"}, "spec.hostPID"),
    ("hostIPC", put("spec", "hostIPC", value=True), {"hostNamespaces"}, "spec.hostIPC"),
    ("hostNetwork-string", put("spec", "hostNetwork", value="yes"), {"hostNamespaces"}, "spec.hostNetwork"),
    ("hostNetwork-zero", put("spec", "hostNetwork", value=0), {"hostNamespaces"}, "spec.hostNetwork"),
    # privileged
    ("privileged", sc("privileged", value=True), {"privileged"}, f"{TRAINER_SC}.privileged"),
    ("privileged-int", sc("privileged", value=1), {"privileged"}, f"{TRAINER_SC}.privileged"),
    ("privileged-init", add("initContainers", container("setup", securityContext={**GOOD_CONTEXT, "privileged": True})), {"privileged"}, "spec.initContainers[setup].securityContext.privileged"),
    ("privileged-ephemeral", add("ephemeralContainers", container("debug", securityContext={**GOOD_CONTEXT, "privileged": True})), {"privileged"}, "spec.ephemeralContainers[debug].securityContext.privileged"),
    # capabilities
    ("capabilities-unset", drop("spec", "containers", 0, "securityContext", "capabilities"), {"capabilities"}, f"{TRAINER_SC}.capabilities.drop"),
    ("capabilities-null", sc("capabilities", value=None), {"capabilities"}, f"{TRAINER_SC}.capabilities.drop"),
    ("drop-lowercase", sc("capabilities", "drop", value=["all"]), {"capabilities"}, f"{TRAINER_SC}.capabilities.drop"),
    ("drop-string", sc("capabilities", "drop", value="ALL"), {"capabilities"}, f"{TRAINER_SC}.capabilities.drop"),
    ("drop-other", sc("capabilities", "drop", value=["NET_RAW"]), {"capabilities"}, f"{TRAINER_SC}.capabilities.drop"),
    ("add-sys-admin", sc("capabilities", "add", value=["SYS_ADMIN"]), {"capabilities"}, f"{TRAINER_SC}.capabilities.add[SYS_ADMIN]"),
    ("add-baseline-only", sc("capabilities", "add", value=["NET_BIND_SERVICE", "CHOWN"]), {"capabilities"}, f"{TRAINER_SC}.capabilities.add[CHOWN]"),
    ("add-cap-prefix", sc("capabilities", "add", value=["CAP_NET_BIND_SERVICE"]), {"capabilities"}, f"{TRAINER_SC}.capabilities.add[CAP_NET_BIND_SERVICE]"),
    ("add-not-a-list", sc("capabilities", "add", value="NET_BIND_SERVICE"), {"capabilities"}, f"{TRAINER_SC}.capabilities.add"),
    ("add-non-string", sc("capabilities", "add", value=[7]), {"capabilities"}, f"{TRAINER_SC}.capabilities.add[0]"),
    # hostPathVolumes (and volumeTypes: hostPath is not an allowed source either)
    ("hostPath", put("spec", "volumes", 0, value={"name": "data", "hostPath": {"path": "/"}}), {"hostPathVolumes", "volumeTypes"}, "spec.volumes[data].hostPath"),
    ("hostPath-empty", add("volumes", {"name": "root", "hostPath": {}}), {"hostPathVolumes", "volumeTypes"}, "spec.volumes[root].hostPath"),
    # hostPorts
    ("hostPort", trainer("ports", 0, "hostPort", value=9090), {"hostPorts"}, f"{TRAINER}.ports[0].hostPort"),
    ("hostPort-string-zero", trainer("ports", 0, "hostPort", value="0"), {"hostPorts"}, f"{TRAINER}.ports[0].hostPort"),
    ("hostPort-false", trainer("ports", 0, "hostPort", value=False), {"hostPorts"}, f"{TRAINER}.ports[0].hostPort"),
    ("ports-object", trainer("ports", value={"containerPort": 80}), {"hostPorts"}, f"{TRAINER}.ports"),
    ("hostPort-init", add("initContainers", container("setup", ports=[{"containerPort": 1, "hostPort": 1}])), {"hostPorts"}, "spec.initContainers[setup].ports[0].hostPort"),
    # appArmor
    ("apparmor-pod", pod_sc("appArmorProfile", value={"type": "Unconfined"}), {"appArmor"}, f"{POD_SC}.appArmorProfile.type"),
    ("apparmor-container", sc("appArmorProfile", value={"type": "Unconfined"}), {"appArmor"}, f"{TRAINER_SC}.appArmorProfile.type"),
    ("apparmor-no-type", sc("appArmorProfile", value={}), {"appArmor"}, f"{TRAINER_SC}.appArmorProfile.type"),
    ("apparmor-string", sc("appArmorProfile", value="RuntimeDefault"), {"appArmor"}, f"{TRAINER_SC}.appArmorProfile"),
    ("apparmor-annotation", annotate(f"{APPARMOR}/trainer", "unconfined"), {"appArmor"}, f"metadata.annotations[{APPARMOR}/trainer]"),
    ("apparmor-annotation-int", annotate(f"{APPARMOR}/trainer", 1), {"appArmor"}, f"metadata.annotations[{APPARMOR}/trainer]"),
    ("annotations-list", put("metadata", "annotations", value=["x"]), {"appArmor", "seccomp"}, "metadata.annotations"),
    # seLinux
    ("selinux-type", pod_sc("seLinuxOptions", value={"type": "spc_t"}), {"seLinux"}, f"{POD_SC}.seLinuxOptions.type"),
    ("selinux-user", pod_sc("seLinuxOptions", value={"user": "system_u"}), {"seLinux"}, f"{POD_SC}.seLinuxOptions.user"),
    ("selinux-role", sc("seLinuxOptions", value={"role": "sysadm_r"}), {"seLinux"}, f"{TRAINER_SC}.seLinuxOptions.role"),
    ("selinux-container-type", sc("seLinuxOptions", value={"type": "unconfined_t"}), {"seLinux"}, f"{TRAINER_SC}.seLinuxOptions.type"),
    ("selinux-type-int", sc("seLinuxOptions", value={"type": 0}), {"seLinux"}, f"{TRAINER_SC}.seLinuxOptions.type"),
    ("selinux-list", sc("seLinuxOptions", value=["container_t"]), {"seLinux"}, f"{TRAINER_SC}.seLinuxOptions"),
    # procMount
    ("procMount-unmasked", sc("procMount", value="Unmasked"), {"procMount"}, f"{TRAINER_SC}.procMount"),
    ("procMount-bool", sc("procMount", value=True), {"procMount"}, f"{TRAINER_SC}.procMount"),
    # seccomp
    ("seccomp-pod-unconfined", pod_sc("seccompProfile", value={"type": "Unconfined"}), {"seccomp"}, f"{POD_SC}.seccompProfile.type"),
    ("seccomp-pod-unset", NO_SECCOMP_AT_POD, {"seccomp"}, f"{TRAINER_SC}.seccompProfile"),
    ("seccomp-pod-null", pod_sc("seccompProfile", value=None), {"seccomp"}, f"{TRAINER_SC}.seccompProfile"),
    ("seccomp-pod-no-type", pod_sc("seccompProfile", value={}), {"seccomp"}, f"{POD_SC}.seccompProfile.type"),
    ("seccomp-container-unconfined", sc("seccompProfile", value={"type": "Unconfined"}), {"seccomp"}, f"{TRAINER_SC}.seccompProfile.type"),
    ("seccomp-container-string", sc("seccompProfile", value="RuntimeDefault"), {"seccomp"}, f"{TRAINER_SC}.seccompProfile"),
    ("seccomp-not-every-container", both(NO_SECCOMP_AT_POD, sc("seccompProfile", value={"type": "RuntimeDefault"}), add("initContainers", container("setup"))), {"seccomp"}, "spec.initContainers[setup].securityContext.seccompProfile"),
    ("seccomp-annotation-pod", annotate(SECCOMP_POD, "unconfined"), {"seccomp"}, f"metadata.annotations[{SECCOMP_POD}]"),
    ("seccomp-annotation-container", annotate(f"{SECCOMP_CONTAINER}/trainer", "unconfined"), {"seccomp"}, f"metadata.annotations[{SECCOMP_CONTAINER}/trainer]"),
    # sysctls
    ("sysctl-unsafe", pod_sc("sysctls", value=[{"name": "kernel.msgmax", "value": "65536"}]), {"sysctls"}, f"{POD_SC}.sysctls[kernel.msgmax]"),
    ("sysctl-one-of-two", pod_sc("sysctls", value=[{"name": "net.ipv4.tcp_syncookies", "value": "1"}, {"name": "net.core.somaxconn", "value": "1024"}]), {"sysctls"}, f"{POD_SC}.sysctls[net.core.somaxconn]"),
    ("sysctl-slash-form", pod_sc("sysctls", value=[{"name": "net/ipv4/tcp_syncookies", "value": "1"}]), {"sysctls"}, f"{POD_SC}.sysctls[net/ipv4/tcp_syncookies]"),
    ("sysctl-no-name", pod_sc("sysctls", value=[{"value": "1"}]), {"sysctls"}, f"{POD_SC}.sysctls[0]"),
    ("sysctls-object", pod_sc("sysctls", value={"kernel.shm_rmid_forced": "1"}), {"sysctls"}, f"{POD_SC}.sysctls"),
    # probeHost
    ("liveness-httpGet-host", trainer("livenessProbe", value={"httpGet": {"host": "10.0.0.1", "port": 80}}), {"probeHost"}, f"{TRAINER}.livenessProbe.httpGet.host"),
    ("readiness-tcpSocket-host", trainer("readinessProbe", value={"tcpSocket": {"host": "metadata", "port": 80}}), {"probeHost"}, f"{TRAINER}.readinessProbe.tcpSocket.host"),
    ("startup-httpGet-host", trainer("startupProbe", value={"httpGet": {"host": "localhost", "port": 80}}), {"probeHost"}, f"{TRAINER}.startupProbe.httpGet.host"),
    ("preStop-httpGet-host", trainer("lifecycle", value={"preStop": {"httpGet": {"host": "node", "port": 80}}}), {"probeHost"}, f"{TRAINER}.lifecycle.preStop.httpGet.host"),
    ("postStart-tcpSocket-host", trainer("lifecycle", value={"postStart": {"tcpSocket": {"host": "node", "port": 80}}}), {"probeHost"}, f"{TRAINER}.lifecycle.postStart.tcpSocket.host"),
    ("probe-host-int", trainer("livenessProbe", value={"httpGet": {"host": 0, "port": 80}}), {"probeHost"}, f"{TRAINER}.livenessProbe.httpGet.host"),
    ("probe-httpGet-list", trainer("livenessProbe", value={"httpGet": []}), {"probeHost"}, f"{TRAINER}.livenessProbe.httpGet"),
    # volumeTypes
    ("volume-nfs", add("volumes", {"name": "shared", "nfs": {"server": "nfs", "path": "/"}}), {"volumeTypes"}, "spec.volumes[shared].nfs"),
    ("volume-gitRepo", add("volumes", {"name": "src", "gitRepo": {"repository": "x"}}), {"volumeTypes"}, "spec.volumes[src].gitRepo"),
    ("volume-unknown-key", put("spec", "volumes", 0, "fancy", value={}), {"volumeTypes"}, "spec.volumes[data].fancy"),
    ("volume-string", add("volumes", "scratch"), {"volumeTypes", "hostPathVolumes"}, "spec.volumes[scratch]"),
    ("volumes-object", put("spec", "volumes", value={"name": "data"}), {"volumeTypes", "hostPathVolumes"}, "spec.volumes"),
    # privilegeEscalation
    ("escalation-true", sc("allowPrivilegeEscalation", value=True), {"privilegeEscalation"}, f"{TRAINER_SC}.allowPrivilegeEscalation"),
    ("escalation-null", sc("allowPrivilegeEscalation", value=None), {"privilegeEscalation"}, f"{TRAINER_SC}.allowPrivilegeEscalation"),
    ("escalation-unset", drop("spec", "containers", 0, "securityContext", "allowPrivilegeEscalation"), {"privilegeEscalation"}, f"{TRAINER_SC}.allowPrivilegeEscalation"),
    ("escalation-string", sc("allowPrivilegeEscalation", value="false"), {"privilegeEscalation"}, f"{TRAINER_SC}.allowPrivilegeEscalation"),
    ("escalation-zero", sc("allowPrivilegeEscalation", value=0), {"privilegeEscalation"}, f"{TRAINER_SC}.allowPrivilegeEscalation"),
    ("escalation-init", add("initContainers", {"name": "setup", "image": "busybox", "securityContext": {"capabilities": {"drop": ["ALL"]}}}), {"privilegeEscalation"}, "spec.initContainers[setup].securityContext.allowPrivilegeEscalation"),
    ("escalation-sidecar", add("initContainers", {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "securityContext": {"capabilities": {"drop": ["ALL"]}}}), {"privilegeEscalation"}, "spec.initContainers[proxy].securityContext.allowPrivilegeEscalation"),
    ("escalation-ephemeral", add("ephemeralContainers", {"name": "debug", "image": "busybox", "securityContext": {"capabilities": {"drop": ["ALL"]}}}), {"privilegeEscalation"}, "spec.ephemeralContainers[debug].securityContext.allowPrivilegeEscalation"),
    # runAsNonRoot
    ("nonroot-pod-false", pod_sc("runAsNonRoot", value=False), {"runAsNonRoot"}, f"{POD_SC}.runAsNonRoot"),
    ("nonroot-pod-unset", NO_NON_ROOT_AT_POD, {"runAsNonRoot"}, f"{TRAINER_SC}.runAsNonRoot"),
    ("nonroot-pod-and-container-null", both(pod_sc("runAsNonRoot", value=None), sc("runAsNonRoot", value=None)), {"runAsNonRoot"}, f"{TRAINER_SC}.runAsNonRoot"),
    ("nonroot-pod-string", pod_sc("runAsNonRoot", value="true"), {"runAsNonRoot"}, f"{POD_SC}.runAsNonRoot"),
    ("nonroot-container-false", sc("runAsNonRoot", value=False), {"runAsNonRoot"}, f"{TRAINER_SC}.runAsNonRoot"),
    ("nonroot-container-int", sc("runAsNonRoot", value=1), {"runAsNonRoot"}, f"{TRAINER_SC}.runAsNonRoot"),
    ("nonroot-not-every-container", both(NO_NON_ROOT_AT_POD, sc("runAsNonRoot", value=True), add("initContainers", container("setup"))), {"runAsNonRoot"}, "spec.initContainers[setup].securityContext.runAsNonRoot"),
    ("nonroot-hostUsers-false", both(NO_NON_ROOT_AT_POD, put("spec", "hostUsers", value=False)), {"runAsNonRoot"}, f"{TRAINER_SC}.runAsNonRoot"),
    # runAsUser
    ("runAsUser-pod-root", pod_sc("runAsUser", value=0), {"runAsUser"}, f"{POD_SC}.runAsUser"),
    ("runAsUser-container-root", sc("runAsUser", value=0), {"runAsUser"}, f"{TRAINER_SC}.runAsUser"),
    ("runAsUser-string", sc("runAsUser", value="1000"), {"runAsUser"}, f"{TRAINER_SC}.runAsUser"),
    ("runAsUser-bool", sc("runAsUser", value=True), {"runAsUser"}, f"{TRAINER_SC}.runAsUser"),
    ("runAsUser-ephemeral-root", add("ephemeralContainers", container("debug", securityContext={**GOOD_CONTEXT, "runAsUser": 0})), {"runAsUser"}, "spec.ephemeralContainers[debug].securityContext.runAsUser"),
    # malformed structure: whatever cannot be read is refused by every rule that reads it
    ("securityContext-string", trainer("securityContext", value="restricted"), {"hostProcess", "privileged", "capabilities", "appArmor", "seLinux", "procMount", "seccomp", "privilegeEscalation", "runAsNonRoot", "runAsUser"}, TRAINER_SC),
    ("securityContext-null", trainer("securityContext", value=None), {"capabilities", "privilegeEscalation"}, f"{TRAINER_SC}.allowPrivilegeEscalation"),
    ("container-string", put("spec", "containers", 0, value="trainer"), {"hostProcess", "privileged", "capabilities", "hostPorts", "appArmor", "seLinux", "procMount", "seccomp", "probeHost", "privilegeEscalation", "runAsNonRoot", "runAsUser"}, "spec.containers[trainer]"),
    ("container-null", put("spec", "containers", 0, value=None), {"capabilities", "privilegeEscalation"}, "spec.containers[0].securityContext.allowPrivilegeEscalation"),
    ("containers-object", put("spec", "containers", value={"name": "trainer"}), {"hostProcess", "privileged", "capabilities", "hostPorts", "appArmor", "seLinux", "procMount", "seccomp", "probeHost", "privilegeEscalation", "runAsNonRoot", "runAsUser"}, "spec.containers"),
    ("pod-securityContext-list", put("spec", "securityContext", value=[]), {"hostProcess", "appArmor", "seLinux", "seccomp", "sysctls", "runAsNonRoot", "runAsUser"}, POD_SC),
    ("spec-string", put("spec", value="restricted"), set(RULES), "spec"),
]  # fmt: skip

# (case, mutation): variants restricted admits
ADMITTED: list[tuple[str, Mutation]] = [
    ("false-host-fields", both(*(put("spec", key, value=False) for key in ("hostNetwork", "hostPID", "hostIPC")), put("spec", "hostUsers", value=True))),
    ("null-host-fields", both(*(put("spec", key, value=None) for key in ("hostNetwork", "hostPID", "hostIPC")))),
    ("hostProcess-false", both(pod_sc("windowsOptions", value={"hostProcess": False}), sc("windowsOptions", "hostProcess", value=None))),
    ("privileged-false", sc("privileged", value=False)),
    ("add-net-bind-service", sc("capabilities", "add", value=["NET_BIND_SERVICE"])),
    ("drop-all-and-more", sc("capabilities", "drop", value=["NET_RAW", "ALL"])),
    ("hostPath-null", put("spec", "volumes", 0, "hostPath", value=None)),
    ("hostPort-zero", trainer("ports", 0, "hostPort", value=0)),
    ("hostPort-null", trainer("ports", 0, "hostPort", value=None)),
    ("apparmor-runtime-default", both(pod_sc("appArmorProfile", value={"type": "RuntimeDefault"}), sc("appArmorProfile", value={"type": "Localhost", "localhostProfile": "decor"}))),
    ("apparmor-annotations", both(annotate(f"{APPARMOR}/trainer", "runtime/default"), annotate(f"{APPARMOR}/setup", "localhost/decor"), annotate(f"{APPARMOR}/x", ""))),
    ("other-annotations", annotate("decor.dev/job", "resnet")),
    ("selinux-allowed", both(pod_sc("seLinuxOptions", value={"type": "container_t", "level": "s0:c1,c2"}), sc("seLinuxOptions", value={"type": "container_engine_t", "user": "", "role": None}))),
    ("selinux-other-types", both(pod_sc("seLinuxOptions", value={"type": "container_init_t"}), sc("seLinuxOptions", value={"type": "container_kvm_t"}))),
    ("procMount-default", sc("procMount", value="Default")),
    ("seccomp-localhost-pod", pod_sc("seccompProfile", value={"type": "Localhost", "localhostProfile": "decor.json"})),
    ("seccomp-every-container", both(NO_SECCOMP_AT_POD, sc("seccompProfile", value={"type": "RuntimeDefault"}), add("initContainers", container("setup", securityContext={**GOOD_CONTEXT, "seccompProfile": {"type": "Localhost", "localhostProfile": "x"}})))),
    ("seccomp-container-overrides-pod", sc("seccompProfile", value={"type": "Localhost", "localhostProfile": "x"})),
    ("seccomp-annotations", both(annotate(SECCOMP_POD, "runtime/default"), annotate(f"{SECCOMP_CONTAINER}/trainer", "localhost/x"))),
    ("safe-sysctls", pod_sc("sysctls", value=[{"name": name, "value": "1"} for name in sorted(podsecurity._SAFE_SYSCTLS)])),
    ("sysctls-null", pod_sc("sysctls", value=None)),
    ("probes-without-host", both(trainer("livenessProbe", value={"httpGet": {"path": "/healthz", "port": 8080, "host": ""}}), trainer("readinessProbe", value={"tcpSocket": {"port": 8080}}), trainer("startupProbe", value={"exec": {"command": ["true"]}}), trainer("lifecycle", value={"preStop": {"sleep": {"seconds": 5}}, "postStart": {"httpGet": {"port": 80, "host": None}}}))),
    ("allowed-volume-types", put("spec", "volumes", value=[
        {"name": "cm", "configMap": {"name": "cfg"}},
        {"name": "csi", "csi": {"driver": "x"}},
        {"name": "down", "downwardAPI": {"items": []}},
        {"name": "scratch", "emptyDir": {"medium": "Memory"}},
        {"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "img", "image": {"reference": "localhost/decor/data:1"}},
        {"name": "pvc", "persistentVolumeClaim": {"claimName": "ckpt"}},
        {"name": "proj", "projected": {"sources": []}},
        {"name": "sec", "secret": {"secretName": "token"}},
        {"name": "bare"},
    ])),
    ("nonroot-every-container", both(NO_NON_ROOT_AT_POD, sc("runAsNonRoot", value=True), add("initContainers", container("setup", securityContext={**GOOD_CONTEXT, "runAsNonRoot": True})))),
    ("nonroot-container-true-under-pod", sc("runAsNonRoot", value=True)),
    ("nonroot-container-null-under-pod", sc("runAsNonRoot", value=None)),
    ("runAsUser-nonzero", both(pod_sc("runAsUser", value=1000), sc("runAsUser", value=65534), pod_sc("runAsGroup", value=0))),
    ("native-sidecar", add("initContainers", container("proxy", restartPolicy="Always"))),
    ("init-and-ephemeral", both(add("initContainers", container("setup")), add("ephemeralContainers", container("debug")))),
    ("unknown-keys", both(put("spec", "futureField", value={"x": 1}), trainer("futureField", value=True), sc("futureField", value=[1]), put("extra", value=None))),
]  # fmt: skip


def mutated(mutation: Mutation) -> Pod:
    pod = restricted_pod()
    mutation(pod)
    return pod


def test_the_minimal_restricted_pod_passes() -> None:
    assert check_restricted(restricted_pod()) == []


@pytest.mark.parametrize(
    ("mutation", "rules", "field"), [pytest.param(m, r, f, id=case) for case, m, r, f in REFUSED]
)
def test_each_refused_variant_breaks_exactly_its_rules(
    mutation: Mutation, rules: set[str], field: str
) -> None:
    findings = check_restricted(mutated(mutation))
    assert {f.rule for f in findings} == rules
    assert field in [f.field for f in findings]
    for finding in findings:
        assert finding.message and "restricted" in finding.message
        assert str(finding) == f"{finding.field}: {finding.message}"


@pytest.mark.parametrize("mutation", [pytest.param(m, id=case) for case, m in ADMITTED])
def test_each_admitted_variant_passes(mutation: Mutation) -> None:
    assert check_restricted(mutated(mutation)) == []


def test_every_rule_has_a_refused_case() -> None:
    covered = {rule for _, _, rules, _ in REFUSED for rule in rules if len(rules) <= 2}
    assert covered == set(RULES)


def test_rules_are_the_stable_names() -> None:
    assert RULES == (
        "hostProcess", "hostNamespaces", "privileged", "capabilities", "hostPathVolumes",
        "hostPorts", "appArmor", "seLinux", "procMount", "seccomp", "sysctls", "probeHost",
        "volumeTypes", "privilegeEscalation", "runAsNonRoot", "runAsUser",
    )  # fmt: skip
    constants = {v for k, v in vars(podsecurity).items() if k.startswith("RULE_")}
    assert constants == set(RULES)


def test_findings_name_the_container() -> None:
    pod = mutated(
        both(
            sc("privileged", value=True),
            add("initContainers", container("proxy", restartPolicy="Always", securityContext={})),
            put("spec", "hostNetwork", value=True),
        )
    )
    findings = check_restricted(pod)
    by_field = {f.field: f for f in findings}
    assert by_field[f"{TRAINER_SC}.privileged"].container == "trainer"
    escalation = by_field["spec.initContainers[proxy].securityContext.allowPrivilegeEscalation"]
    assert escalation.container == "proxy"
    assert by_field["spec.hostNetwork"].container is None
    assert str(by_field["spec.hostNetwork"]).startswith("spec.hostNetwork: is true; ")


def test_annotation_findings_name_their_container() -> None:
    pod = mutated(annotate(f"{APPARMOR}/trainer", "unconfined"))
    (finding,) = check_restricted(pod)
    assert (finding.rule, finding.container) == ("appArmor", "trainer")


def test_pod_level_unset_seccomp_is_reported_on_each_container() -> None:
    pod = mutated(both(NO_SECCOMP_AT_POD, add("initContainers", container("setup"))))
    assert [f.field for f in check_restricted(pod)] == [
        f"{TRAINER_SC}.seccompProfile",
        "spec.initContainers[setup].securityContext.seccompProfile",
    ]


def test_unnamed_containers_and_volumes_are_named_by_index() -> None:
    pod = mutated(
        both(
            put("spec", "containers", 0, "name", value=None),
            sc("privileged", value=True),
            put("spec", "volumes", 0, "name", value=7),
            put("spec", "volumes", 0, "nfs", value={}),
        )
    )
    assert [f.field for f in check_restricted(pod)] == [
        "spec.containers[0].securityContext.privileged",
        "spec.volumes[0].nfs",
    ]


def test_one_finding_per_rule_and_field() -> None:
    findings = check_restricted(mutated(trainer("securityContext", value=5)))
    assert len(findings) == len({(f.rule, f.field) for f in findings}) == 10


def test_finding_is_frozen_and_prints_field_then_message() -> None:
    finding = Finding("privileged", "spec.containers[a].securityContext.privileged", "is true")
    assert str(finding) == "spec.containers[a].securityContext.privileged: is true"
    assert finding.container is None
    with pytest.raises(AttributeError):
        finding.rule = "x"  # type: ignore[misc]


# --- property: never raises, whatever the shape ------------------------------------------------

KNOWN_KEYS = [
    "spec", "metadata", "annotations", "containers", "initContainers", "ephemeralContainers",
    "securityContext", "volumes", "name", "hostNetwork", "hostPID", "hostIPC", "hostUsers",
    "privileged", "capabilities", "add", "drop", "ports", "hostPort", "appArmorProfile", "type",
    "seLinuxOptions", "user", "role", "procMount", "seccompProfile", "sysctls", "livenessProbe",
    "readinessProbe", "startupProbe", "lifecycle", "postStart", "preStop", "httpGet", "tcpSocket",
    "host", "hostPath", "nfs", "emptyDir", "allowPrivilegeEscalation", "runAsNonRoot",
    "runAsUser", "windowsOptions", "hostProcess", "futureField",
    f"{APPARMOR}/trainer", SECCOMP_POD,
]  # fmt: skip
ALPHABET = "abcxyzALL_/.-0 "


def words(max_size: int) -> st.SearchStrategy[str]:
    # not st.text(): that caches Unicode tables under ./.hypothesis
    return st.lists(st.sampled_from(ALPHABET), max_size=max_size).map("".join)


keys = st.sampled_from(KNOWN_KEYS) | words(8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.sampled_from(["ALL", "NET_BIND_SERVICE", "RuntimeDefault", "Unconfined", "Default", ""])
    | words(10)
)
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)
PROPERTY = settings(
    max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def assert_well_formed(findings: Any) -> None:
    assert isinstance(findings, list)
    for finding in findings:
        assert isinstance(finding, Finding)
        assert finding.rule in RULES
        assert isinstance(finding.field, str) and finding.field
        assert isinstance(finding.message, str) and finding.message
        assert finding.container is None or isinstance(finding.container, str)
        str(finding)


@PROPERTY
@given(json_like)
def test_any_json_like_value_gives_findings_not_exceptions(value: Any) -> None:
    before = copy.deepcopy(value)
    assert_well_formed(check_restricted(value))
    assert value == before  # pure: the input is not changed


def objects_in(pod: Pod) -> list[Any]:
    """Every object node of ``pod`` (where a mutation may set a key)."""
    found: list[Any] = []
    stack: list[Any] = [pod]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def rich_pod() -> Pod:
    """The restricted pod with one of every optional structure, for mutations to land in."""
    return mutated(
        both(
            add("initContainers", container("proxy", restartPolicy="Always")),
            add("ephemeralContainers", container("debug")),
            trainer("livenessProbe", value={"httpGet": {"port": 80}}),
            trainer("lifecycle", value={"preStop": {"tcpSocket": {"port": 80}}}),
            pod_sc("sysctls", value=[{"name": "net.ipv4.tcp_syncookies", "value": "1"}]),
            pod_sc("seLinuxOptions", value={"type": "container_t"}),
            sc("appArmorProfile", value={"type": "RuntimeDefault"}),
            annotate(f"{APPARMOR}/trainer", "runtime/default"),
        )
    )


@PROPERTY
@given(st.data())
def test_random_mutations_of_a_restricted_pod_give_findings_not_exceptions(
    data: st.DataObject,
) -> None:
    pod = rich_pod()
    for _ in range(data.draw(st.integers(min_value=1, max_value=5), label="mutations")):
        node = data.draw(st.sampled_from(objects_in(pod)), label="object")
        key = data.draw(st.sampled_from(sorted(node)) | keys if node else keys, label="key")
        node[key] = data.draw(json_like, label="value")
    before = copy.deepcopy(pod)
    findings = check_restricted(pod)
    assert_well_formed(findings)
    assert pod == before
    assert check_restricted(pod) == findings  # deterministic
