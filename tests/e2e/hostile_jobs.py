"""Jobs written as a hostile tenant would, one per class of docs/security.md that the CRD lets
through: each must end refused (a condition and an Event, ``TemplateRefused`` or, for the
oversized template, ``InvalidSpec``) with no pod. Built from an honest job's manifest, so
that nothing but the hostile part differs. tests/unit/test_hostile_templates.py holds the
same classes as table tests; this runs them through the real API server and operator."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

OVERSIZED_TEMPLATE_BYTES = 1_200_000
"""Near the API server's object size limit (about 1.5 MiB in etcd)."""
BOUNDED = {"limits": {"cpu": "100m", "memory": "64Mi"}}


def _pod(m: dict[str, Any]) -> dict[str, Any]:
    return m["spec"]["template"]["spec"]


def _trainer(m: dict[str, Any]) -> dict[str, Any]:
    return _pod(m)["containers"][0]


def _context(m: dict[str, Any]) -> dict[str, Any]:
    return _trainer(m).setdefault("securityContext", {})


def _meta(m: dict[str, Any]) -> dict[str, Any]:
    return m["spec"]["template"].setdefault("metadata", {})


def _oversized(m: dict[str, Any]) -> None:
    value = "x" * 1000
    _trainer(m)["env"] = [
        {"name": f"V{i}", "value": value} for i in range(OVERSIZED_TEMPLATE_BYTES // 1024)
    ]


HOSTILE: dict[str, Callable[[dict[str, Any]], None]] = {
    "group-size": lambda m: _meta(m).update(annotations={"decor.dev/group-pods": "3000000"}),
    "selector-label": lambda m: _meta(m).update(
        labels={"app.kubernetes.io/managed-by": "decor-operator"}
    ),
    "seccomp": lambda m: _context(m).update(seccompProfile={"type": "Unconfined"}),
    "apparmor": lambda m: _context(m).update(appArmorProfile={"type": "Unconfined"}),
    "procmount": lambda m: _context(m).update(procMount="Unmasked"),
    "sysctl": lambda m: _pod(m).update(
        securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}
    ),
    "nfs": lambda m: _pod(m).update(
        volumes=[{"name": "data", "nfs": {"server": "10.0.0.1", "path": "/"}}]
    ),
    "probe-host": lambda m: _trainer(m).update(
        livenessProbe={"httpGet": {"host": "10.0.0.1", "port": 80}}
    ),
    "runtime-class": lambda m: _pod(m).update(runtimeClassName="unsandboxed"),
    "share-pid": lambda m: _pod(m).update(shareProcessNamespace=True),
    "host-aliases": lambda m: _pod(m).update(
        hostAliases=[{"ip": "10.0.0.1", "hostnames": ["kubernetes"]}]
    ),
    "root": lambda m: _context(m).update(runAsUser=0),
    "unbounded-sidecar": lambda m: _pod(m).update(
        initContainers=[
            {
                "name": "helper",
                "image": _trainer(m)["image"],
                "restartPolicy": "Always",
                "command": ["sleep", "infinity"],
            }
        ]
    ),  # fmt: skip
    "pod-resources": lambda m: _pod(m).update(resources={"limits": {"cpu": "8"}}),
    "sidecar-gpu": lambda m: _pod(m)["containers"].append(
        {
            "name": "helper",
            "image": _trainer(m)["image"],
            "resources": {"limits": {**BOUNDED["limits"], "nvidia.com/gpu": "4"}},
        }
    ),  # fmt: skip
    "grace": lambda m: _pod(m).update(terminationGracePeriodSeconds=31536000),
    "claim": lambda m: m["spec"]["checkpoint"].update(claimName="another-job-checkpoint"),
    "decor-volume": lambda m: _pod(m).update(
        volumes=[{"name": "decor-checkpoint", "emptyDir": {}}]
    ),
    "oversized": _oversized,
}


def hostile_manifests(honest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One manifest per class, named ``hostile-CLASS``, each ``honest`` plus its hostile edit."""
    found = {}
    for case, edit in HOSTILE.items():
        manifest = copy.deepcopy(honest)
        manifest["metadata"]["name"] = f"hostile-{case}"
        edit(manifest)
        found[case] = manifest
    return found
