"""Pure builders for the operator: pod bodies, patches, status, conditions and events.

Dict in, dict out: nothing here talks to the API server or reads a clock (times are passed
in as Unix seconds). ``handlers.py`` decides *when* to build what; ``kube.py`` sends it.
The readers at the end interpret a pod the API server returned (applied CPU, resize
conditions) and are pure too.

Units: CPU allocations are cores (float, 1.25 = ``1250m``), GPU allocations whole counts
(float for the control law, ``"2"`` on the pod); times are Unix seconds.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from decor_trainer import contract

from decor.api import vocabulary
from decor.api.model import (
    GPU_RESOURCE,
    JobSpec,
    ManifestError,
    format_cpu,
    format_time,
    parse_cpu_cores,
    parse_time,
    quantity_value,
)
from decor.core import control, podsecurity, quota
from decor.core.policy import (
    VOLUME_CLAIM,
    VOLUME_HOST_PATH,
    CheckpointStorage,
    TemplatePolicy,
    Violation,
    check_pod,
)

# --- names shared with the cluster ---------------------------------------------------------

SIDECAR_NAME = "decor-metrics"
SIDECAR_MODULE = "decor_trainer.sidecar"
PROGRESS_VOLUME = "decor-progress"
PROGRESS_DIR = "/var/run/decor"
PROGRESS_FILE = f"{PROGRESS_DIR}/progress.json"
CHECKPOINT_VOLUME = "decor-checkpoint"
DEFAULT_CHECKPOINT_HOST_ROOT = "/var/lib/decor/checkpoints"
"""hostPath root for checkpoints when the template mounts nothing at spec.checkpoint.path.

A hostPath survives pod recreation on the same node (an emptyDir does not); on a multi-node
cluster mount a PersistentVolumeClaim at spec.checkpoint.path in the template instead.
"""
CHECKPOINT_CLAIM_SUFFIX = "-checkpoint"
"""A job's own checkpoint claim is ``NAME-checkpoint`` (policy.CheckpointStorage ``claim``)."""
CHECKPOINT_OWNER_NAME = "decor-checkpoint-owner"
"""Init container that hands a hostPath checkpoint directory (made by the kubelet, owned by
root) to the trainer's user; only with hostPath storage, which ``restricted`` refuses anyway."""
CHECKPOINT_ACCESS_MODES = ["ReadWriteOnce"]

# Who the trainer and the sidecar run as unless the template says otherwise: the images'
# non-root user (trainer_image/Dockerfile). Pod Security Admission ``restricted`` needs
# runAsNonRoot, no privilege escalation, all capabilities dropped and a seccomp profile.
TRAINER_UID = 1000
TRAINER_GID = 1000
ROOT_UID = 0
SECCOMP_PROFILE = {"type": "RuntimeDefault"}
DEFAULT_RESTART_POLICY = "OnFailure"
"""A crashed trainer restarts in place and resumes from its checkpoint; a finished one stays."""

# The metrics sidecar is tiny (reads a ~200-byte file per scrape): 50m is far more than a
# scrape a second needs, so its CPU limit never throttles it; the memory limit keeps a bug
# from taking the node.
SIDECAR_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"cpu": "50m", "memory": "64Mi"},
}
"""DECOR's own containers (the metrics sidecar, the checkpoint owner): bounded like any
container beside the trainer, requests = limits, so that the planner counts them exactly and
a namespace whose ResourceQuota covers ``limits.cpu`` accepts the pod. Measured: the sidecar
imports in ~0.1 CPU-second and holds ~20 MiB; a scrape costs about a millisecond."""
PROGRESS_VOLUME_SIZE = "1Mi"

BATCH_POLICY_NAMES = {
    "fixedGlobal": contract.POLICY_FIXED_GLOBAL,
    "scaleWithWorkers": contract.POLICY_SCALE_WITH_WORKERS,
}
"""spec.resources.batchPolicy in the trainer's words (decor_trainer.distributed)."""

EVENT_MESSAGE_MAX_CHARS = 1024


# ============================================================================================
# Settings and allocations


def effective_deadline_s(spec: JobSpec, start_s: float) -> float:
    """Absolute deadline in Unix seconds (spec.deadline, or start + spec.duration)."""
    return spec.deadline_s(start_s)


def format_allocation(mode: str, allocation: float) -> str:
    """A Kubernetes quantity: CPU in millicores (``1250m``), GPUs as a count (``2``)."""
    if mode == "gpu":
        return str(int(round(allocation)))
    return format_cpu(allocation)


def parse_allocation(mode: str, quantity: Any) -> float | None:
    """Cores or GPUs from a quantity the API server returned; None when unreadable."""
    if quantity is None:
        return None
    try:
        if mode == "gpu":
            return float(int(str(quantity)))
        return parse_cpu_cores(str(quantity), "quantity")
    except (ManifestError, ValueError):
        return None


# ============================================================================================
# The trainer pod


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    """Owner reference to the job: deleting the job garbage-collects its pods.

    ``blockOwnerDeletion`` is left unset: it would need update rights on the job's
    finalizers, which least-privilege RBAC does not grant.
    """
    meta = job["metadata"]
    return {
        "apiVersion": f"{vocabulary.API_GROUP}/{vocabulary.API_VERSION}",
        "kind": vocabulary.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def checkpoint_host_path(job: Mapping[str, Any], root: str = DEFAULT_CHECKPOINT_HOST_ROOT) -> str:
    """``ROOT/NAMESPACE/NAME/UID``: the UID keeps a re-created job from resuming an old run."""
    meta = job["metadata"]
    namespace = meta.get("namespace") or "default"
    return f"{root.rstrip('/')}/{namespace}/{meta['name']}/{meta['uid']}"


def pod_name(job_name: str, index: int) -> str:
    """Name of the job's ``index``-th trainer pod (0, 1, ...)."""
    return f"{job_name}-{index}"


def upsert_env(env: list[dict[str, Any]], name: str, value: str) -> list[dict[str, Any]]:
    return [e for e in env if e.get("name") != name] + [{"name": name, "value": value}]


def _mount_covers(mounts: Iterable[Mapping[str, Any]], path: str) -> bool:
    """Whether a volumeMount is at ``path`` or one of its parent directories."""
    target = path.rstrip("/") + "/"
    for mount in mounts:
        mount_path = str(mount.get("mountPath", "")).rstrip("/") + "/"
        if target.startswith(mount_path):
            return True
    return False


def checkpoint_claim_name(job_name: str) -> str:
    """Name of the PersistentVolumeClaim the operator makes for a job's checkpoints."""
    return f"{job_name}{CHECKPOINT_CLAIM_SUFFIX}"


def needs_checkpoint_volume(spec: JobSpec) -> bool:
    """Whether the operator adds a volume at ``spec.checkpoint.path`` (the template mounts
    nothing there)."""
    if not spec.checkpoint.path:
        return False
    mounts = spec.trainer_container.get("volumeMounts") or []
    return not _mount_covers(mounts, spec.checkpoint.path)


def build_checkpoint_claim(
    job: Mapping[str, Any], spec: JobSpec, storage: CheckpointStorage
) -> dict[str, Any] | None:
    """The PersistentVolumeClaim to create before the job's first pod, or None (no checkpoint
    path, the template mounts its own volume, the job names its own claim, or ``storage`` is
    hostPath). Owned by the job, so deleting the job deletes it, unless
    ``spec.checkpoint.keep`` (then a new job of the same name resumes from it).
    """
    if not needs_checkpoint_volume(spec) or spec.checkpoint.claim_name:
        return None
    if storage.volume != VOLUME_CLAIM:
        return None
    meta = job["metadata"]
    metadata: dict[str, Any] = {
        "name": checkpoint_claim_name(meta["name"]),
        "namespace": meta.get("namespace") or spec.namespace,
        "labels": {
            vocabulary.LABEL_JOB: meta["name"],
            vocabulary.LABEL_JOB_UID: meta["uid"],
            vocabulary.LABEL_MANAGED_BY: vocabulary.MANAGED_BY,
        },
    }
    if not spec.checkpoint.keep:
        metadata["ownerReferences"] = [owner_reference(job)]
    claim_spec: dict[str, Any] = {
        "accessModes": list(CHECKPOINT_ACCESS_MODES),
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class:
        claim_spec["storageClassName"] = storage.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": claim_spec,
    }


def claim_is_jobs(claim: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """Whether ``claim`` was made by DECOR for ``job`` itself (its uid), not for an earlier
    job of the same name (``keep``) nor by anyone else."""
    labels = (claim.get("metadata") or {}).get("labels") or {}
    return (
        bool(labels.get(vocabulary.LABEL_JOB_UID))
        and labels.get(vocabulary.LABEL_JOB_UID) == job["metadata"]["uid"]
    )


def _restricted_container(container: Mapping[str, Any]) -> dict[str, Any]:
    """``container`` with no privilege escalation and ALL capabilities dropped, unless its
    securityContext says otherwise (policy.check_template refuses what is not allowed)."""
    result = dict(container)
    context = dict(result.get("securityContext") or {})
    context.setdefault("allowPrivilegeEscalation", False)
    capabilities = dict(context.get("capabilities") or {})
    drop = list(capabilities.get("drop") or [])
    if "ALL" not in drop:
        drop.append("ALL")
    capabilities["drop"] = drop
    context["capabilities"] = capabilities
    result["securityContext"] = context
    return result


def _restricted_pod_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's securityContext with the restricted defaults where the template sets none."""
    result = dict(context)
    result.setdefault("runAsUser", TRAINER_UID)
    result.setdefault("runAsGroup", TRAINER_GID)
    result.setdefault("fsGroup", TRAINER_GID)
    result.setdefault("fsGroupChangePolicy", "OnRootMismatch")
    if result.get("runAsUser") != ROOT_UID:  # an admin-allowed root template keeps root
        result.setdefault("runAsNonRoot", True)
    result.setdefault("seccompProfile", dict(SECCOMP_PROFILE))
    return result


def build_trainer_pod(
    job: Mapping[str, Any],
    spec: JobSpec,
    allocation: float,
    name: str,
    *,
    sidecar_image: str | None = None,
    checkpoint_host_root: str = DEFAULT_CHECKPOINT_HOST_ROOT,
    checkpoint_storage: CheckpointStorage | None = None,
) -> dict[str, Any]:
    """The trainer pod for ``job`` (its body as the API server returned it) at ``allocation``.

    Starts from ``spec.template`` and adds: the owner reference and ``decor.dev/job`` label;
    the first container's allocation (CPU: requests = limits = ``allocation`` cores with
    ``resizePolicy cpu: NotRequired``, so it can be resized in place; GPU:
    ``nvidia.com/gpu`` = ``allocation``); the environment of docs/contract.md; an emptyDir
    for the progress file; a checkpoint volume unless the template mounts one at
    ``spec.checkpoint.path``; the metrics sidecar as a native sidecar (an init container with
    ``restartPolicy: Always``, the trainer's image unless ``sidecar_image``); and
    ``prometheus.io/*`` scrape annotations.

    The checkpoint volume is the job's own claim (``spec.checkpoint.claimName``), else per
    ``checkpoint_storage`` the claim of :func:`build_checkpoint_claim` or a hostPath below
    its root (None: hostPath below ``checkpoint_host_root``, with an init container that
    hands the directory to the trainer's user). Every container gets no privilege
    escalation and ALL capabilities dropped, and the pod runs as :data:`TRAINER_UID`
    (non-root) with seccomp RuntimeDefault, unless the template sets these itself: the pod
    passes Pod Security Admission ``restricted`` unless the template or hostPath storage
    asks for more. Labels and annotations of the operator win over the template's.
    """
    template = copy.deepcopy(spec.template)
    template_meta = dict(template.get("metadata") or {})
    pod_spec: dict[str, Any] = dict(template.get("spec") or {})
    containers = [dict(c) for c in pod_spec["containers"]]
    trainer = containers[0]
    if spec.resources.mode == "cpu":  # resized in place
        trainer["resizePolicy"] = _cpu_resized_in_place(trainer)
    trainer["resources"] = _trainer_resources(trainer, spec, allocation)
    trainer["env"] = _trainer_env(trainer, spec, allocation)
    storage = checkpoint_storage or CheckpointStorage(host_root=checkpoint_host_root)
    volumes, trainer["volumeMounts"], host_path_checkpoint = _volumes(
        job, spec, pod_spec, trainer, storage
    )
    pod_security = _restricted_pod_context(pod_spec.get("securityContext") or {})
    init_containers = _init_containers(
        spec, pod_spec, trainer, pod_security, storage, host_path_checkpoint, sidecar_image
    )
    pod_spec.update(
        containers=[_restricted_container(c) for c in containers],
        initContainers=init_containers,
        volumes=volumes,
        restartPolicy=_completing_restart_policy(pod_spec),
        securityContext=pod_security,
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _pod_metadata(job, spec, template_meta, name, allocation),
        "spec": pod_spec,
    }


PLANNED_NODE_WEIGHT = 100
"""The weight of a new trainer pod's preference for the node the planner placed it on (the
most a preferred term may have): with the default scheduler profile it outweighs the spread
by free CPU and memory, which knows nothing of GPUs."""


def with_planned_node(pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    """``pod`` preferring ``node`` (a preferred node affinity on the node's name, beside any the
    template has): the kube-scheduler puts it where the planner booked its room when that
    room is there, and anywhere else it fits when not. Without it the scheduler spreads new
    pods over the emptiest nodes, and the planner's books and the cluster disagree until the
    next period: on the scale bed a GPU job restarting for a new count was booked on one
    node, scheduled on another, and shorted there by jobs the planner had put on it. Given
    to GPU pods only (:func:`group.planned_nodes` says why)."""
    placed = copy.deepcopy(dict(pod))
    spec = placed["spec"]
    affinity = spec["affinity"] = dict(spec.get("affinity") or {})
    node_affinity = affinity["nodeAffinity"] = dict(affinity.get("nodeAffinity") or {})
    key = "preferredDuringSchedulingIgnoredDuringExecution"
    node_affinity[key] = [
        *(node_affinity.get(key) or []),
        {
            "weight": PLANNED_NODE_WEIGHT,
            "preference": {
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]
            },
        },
    ]
    return placed


def _cpu_resized_in_place(trainer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The trainer's ``resizePolicy`` with ``cpu: NotRequired`` first (its CPU is resized in
    place), the template's other entries after it."""
    policies = [p for p in trainer.get("resizePolicy") or [] if p.get("resourceName") != "cpu"]
    return [{"resourceName": "cpu", "restartPolicy": "NotRequired"}, *policies]


def _init_containers(
    spec: JobSpec,
    pod_spec: Mapping[str, Any],
    trainer: Mapping[str, Any],
    pod_security: Mapping[str, Any],
    storage: CheckpointStorage,
    host_path_checkpoint: str | None,
    sidecar_image: str | None,
) -> list[dict[str, Any]]:
    """The template's init containers, restricted (any of the operator's own names dropped),
    with the checkpoint owner first for hostPath storage and the metrics sidecar last (the
    trainer's image and pull policy unless ``sidecar_image``)."""
    init_containers = [
        _restricted_container(c)
        for c in pod_spec.get("initContainers") or []
        if c.get("name") not in (SIDECAR_NAME, CHECKPOINT_OWNER_NAME)
    ]
    if host_path_checkpoint is not None:
        owner = _checkpoint_owner(host_path_checkpoint, trainer, pod_security, storage.owner_image)
        init_containers.insert(0, owner)
    image = sidecar_image or trainer.get("image")
    pull_policy = trainer.get("imagePullPolicy", "IfNotPresent")
    init_containers.append(_metrics_sidecar(spec, image, pull_policy))
    return init_containers


def _completing_restart_policy(pod_spec: Mapping[str, Any]) -> Any:
    """The template's restart policy, except ``Always`` (a pod that always restarts could
    never complete): then, as when unset, :data:`DEFAULT_RESTART_POLICY`."""
    restart_policy = pod_spec.get("restartPolicy") or DEFAULT_RESTART_POLICY
    if restart_policy == "Always":
        restart_policy = DEFAULT_RESTART_POLICY
    return restart_policy


def _pod_metadata(
    job: Mapping[str, Any],
    spec: JobSpec,
    template_meta: Mapping[str, Any],
    name: str,
    allocation: float,
) -> dict[str, Any]:
    """The pod's metadata: its name and namespace, the owner reference to ``job``, and the
    template's labels and annotations with the operator's after them (which win): the job's
    name and managed-by labels, the Prometheus scrape annotations and the allocation the pod
    was built for."""
    job_meta = job["metadata"]
    labels = {
        **(template_meta.get("labels") or {}),
        vocabulary.LABEL_JOB: job_meta["name"],
        vocabulary.LABEL_MANAGED_BY: vocabulary.MANAGED_BY,
    }
    annotations = {
        **(template_meta.get("annotations") or {}),
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.metrics.port),
        "prometheus.io/path": spec.metrics.path,
        vocabulary.ANNOTATION_ALLOCATION: format_allocation(spec.resources.mode, allocation),
    }
    return {
        "name": name,
        "namespace": job_meta.get("namespace") or spec.namespace,
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [owner_reference(job)],
    }


def _trainer_resources(
    trainer: Mapping[str, Any], spec: JobSpec, allocation: float
) -> dict[str, Any]:
    """The trainer's resources: the template's, with the allocation as requests = limits
    (CPU cores, or ``nvidia.com/gpu``)."""
    resources = {
        k: dict(v) for k, v in (trainer.get("resources") or {}).items() if isinstance(v, dict)
    }
    requests = resources.setdefault("requests", {})
    limits = resources.setdefault("limits", {})
    if spec.resources.mode == "cpu":
        requests["cpu"] = limits["cpu"] = format_cpu(allocation)
    else:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = format_allocation("gpu", allocation)
    return resources


def _trainer_env(
    trainer: Mapping[str, Any], spec: JobSpec, allocation: float
) -> list[dict[str, Any]]:
    """The trainer's environment (docs/contract.md); ours replace same-named entries of the
    template."""
    env = [dict(e) for e in trainer.get("env") or []]
    env = upsert_env(env, contract.ENV_EPOCHS, str(spec.epochs))
    if spec.steps_per_epoch is not None:
        env = upsert_env(env, contract.ENV_STEPS_PER_EPOCH, str(spec.steps_per_epoch))
    if spec.checkpoint.path:
        env = upsert_env(env, contract.ENV_CHECKPOINT_DIR, spec.checkpoint.path)
    env = upsert_env(env, contract.ENV_METRICS_PORT, str(spec.metrics.port))
    env = upsert_env(env, contract.ENV_PROGRESS_FILE, PROGRESS_FILE)
    if spec.resources.mode == "gpu":
        env = upsert_env(env, contract.ENV_WORKERS, format_allocation("gpu", allocation))
        if spec.resources.batch_policy is not None:
            policy = BATCH_POLICY_NAMES[spec.resources.batch_policy]
            env = upsert_env(env, contract.ENV_BATCH_POLICY, policy)
    return env


def _volumes(
    job: Mapping[str, Any],
    spec: JobSpec,
    pod_spec: Mapping[str, Any],
    trainer: Mapping[str, Any],
    storage: CheckpointStorage,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """The pod's volumes and the trainer's mounts: the progress file, and the checkpoint
    unless the template provides one; and the checkpoint path when it is a hostPath (its
    directory is handed to the trainer's user), else None."""
    volumes = [dict(v) for v in pod_spec.get("volumes") or []]
    mounts = [dict(m) for m in trainer.get("volumeMounts") or []]
    volume_names = {v.get("name") for v in volumes}
    if PROGRESS_VOLUME not in volume_names:
        # In memory: the trainer replaces the file after every step, and a rename on a disk
        # filesystem costs up to ~1 ms (measured: up to 12% of a small step on ext4).
        volumes.append(
            {
                "name": PROGRESS_VOLUME,
                "emptyDir": {"medium": "Memory", "sizeLimit": PROGRESS_VOLUME_SIZE},
            }
        )
    if not _mount_covers(mounts, PROGRESS_DIR):
        mounts.append({"name": PROGRESS_VOLUME, "mountPath": PROGRESS_DIR})
    host_path_checkpoint: str | None = None
    if spec.checkpoint.path and not _mount_covers(mounts, spec.checkpoint.path):
        if CHECKPOINT_VOLUME not in volume_names:
            if spec.checkpoint.claim_name or storage.volume == VOLUME_CLAIM:
                claim = spec.checkpoint.claim_name or checkpoint_claim_name(job["metadata"]["name"])
                volumes.append(
                    {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim}}
                )
            else:
                host_path_checkpoint = spec.checkpoint.path
                volumes.append(
                    {
                        "name": CHECKPOINT_VOLUME,
                        "hostPath": {
                            "path": checkpoint_host_path(job, storage.host_root),
                            "type": "DirectoryOrCreate",
                        },
                    }
                )
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": spec.checkpoint.path})
    return volumes, mounts, host_path_checkpoint


def _metrics_sidecar(spec: JobSpec, image: str | None, pull_policy: str) -> dict[str, Any]:
    """The metrics sidecar: a native sidecar (an init container that always restarts)
    serving /metrics from the progress file, read-only, as no one in particular."""
    return {
        "name": SIDECAR_NAME,
        "image": image,
        "imagePullPolicy": pull_policy,
        "restartPolicy": "Always",
        "command": [
            "python3",
            "-m",
            SIDECAR_MODULE,
            "--file",
            PROGRESS_FILE,
            "--port",
            str(spec.metrics.port),
        ],
        "ports": [{"name": "metrics", "containerPort": spec.metrics.port, "protocol": "TCP"}],
        "resources": copy.deepcopy(SIDECAR_RESOURCES),
        "volumeMounts": [{"name": PROGRESS_VOLUME, "mountPath": PROGRESS_DIR, "readOnly": True}],
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _checkpoint_owner(
    path: str, trainer: Mapping[str, Any], pod_security: Mapping[str, Any], image: str
) -> dict[str, Any]:
    """The init container that hands a hostPath checkpoint directory (the kubelet makes it
    as root) to the trainer's user: the operator's own ``image``, never the user's (it runs
    as root on a host directory), with CHOWN alone, changing the owner of that one directory
    (not recursively: what is below it was written by the trainer's user, and a tree the
    user wrote is not walked as root)."""
    trainer_context = trainer.get("securityContext") or {}
    uid = trainer_context.get("runAsUser", pod_security["runAsUser"])
    gid = trainer_context.get("runAsGroup", pod_security.get("runAsGroup", uid))
    return {
        "name": CHECKPOINT_OWNER_NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["chown", f"{uid}:{gid}", path],
        "resources": copy.deepcopy(SIDECAR_RESOURCES),
        "volumeMounts": [{"name": CHECKPOINT_VOLUME, "mountPath": path}],
        "securityContext": {
            "runAsUser": ROOT_UID,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
            "seccompProfile": dict(SECCOMP_PROFILE),
        },
    }


def host_path_checkpoint_finding(finding: podsecurity.Finding) -> bool:
    """A Pod Security finding that hostPath checkpoint storage brings, the admin's explicit
    choice: DECOR's own hostPath volume and the init container that hands it to the
    trainer's user (a template may name no volume or container ``decor-*``)."""
    return finding.container == CHECKPOINT_OWNER_NAME or finding.field.startswith(
        f"spec.volumes[{CHECKPOINT_VOLUME}]."
    )


def judge_pods(
    pods: Sequence[Mapping[str, Any]],
    template_policy: TemplatePolicy,
    storage: CheckpointStorage,
) -> list[Violation]:
    """What the built ``pods`` (every container DECOR adds included) have beyond Pod Security
    ``restricted`` and the admin's allowances, each field once (a group's pods are alike);
    [] when they may be created. HostPath checkpoint storage, the admin's explicit choice,
    brings its own volume and owner container, and only those (:func:`host_path_checkpoint_finding`)."""
    own = host_path_checkpoint_finding if storage.volume == VOLUME_HOST_PATH else None
    found: dict[str, Violation] = {}
    for pod in pods:
        for violation in check_pod(pod, template_policy, own or (lambda _: False)):
            found.setdefault(violation.field, violation)
    return list(found.values())


def build_resize_patch(cores: float, container: str) -> dict[str, Any]:
    """Strategic-merge patch for the pod's ``resize`` subresource: CPU requests = limits."""
    quantity = format_cpu(cores)
    return {
        "spec": {
            "containers": [
                {
                    "name": container,
                    "resources": {"requests": {"cpu": quantity}, "limits": {"cpu": quantity}},
                }
            ]
        }
    }


# ============================================================================================
# Conditions


def get_condition(conditions: Sequence[Mapping[str, Any]], type_: str) -> dict[str, Any] | None:
    for condition in conditions:
        if condition.get("type") == type_:
            return dict(condition)
    return None


def condition_is_true(conditions: Sequence[Mapping[str, Any]], type_: str) -> bool:
    found = get_condition(conditions, type_)
    return found is not None and found.get("status") == "True"


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    *,
    now_s: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """A new list with condition ``type_`` set; ``status`` None means ``Unknown``.

    ``lastTransitionTime`` changes only when the status does (Kubernetes convention);
    reason, message and observedGeneration always follow the latest call. Order is kept,
    new types are appended.
    """
    text = "Unknown" if status is None else ("True" if status else "False")
    new: dict[str, Any] = {
        "type": type_,
        "status": text,
        "reason": reason,
        "message": message[:EVENT_MESSAGE_MAX_CHARS],
        "lastTransitionTime": format_time(now_s),
    }
    if generation is not None:
        new["observedGeneration"] = generation
    result: list[dict[str, Any]] = []
    replaced = False
    for old in conditions:
        if old.get("type") != type_:
            result.append(dict(old))
            continue
        if old.get("status") == text and old.get("lastTransitionTime"):
            new["lastTransitionTime"] = old["lastTransitionTime"]
        result.append(new)
        replaced = True
    if not replaced:
        result.append(new)
    return result


def conditions_for_decision(
    conditions: Sequence[Mapping[str, Any]],
    decision_condition: str,
    message: str,
    *,
    now_s: float,
    generation: int | None = None,
    deadline_was_past: bool = False,
) -> list[dict[str, Any]]:
    """Conditions after one controller decision (``decision_condition`` from control.py).

    One decision sets the condition it names to True and the ones it rules out to False.
    ``MetricsUnavailable`` leaves the others as they were (nothing new is known).
    ``deadline_was_past``: the deadline had already passed when it was set, which keeps
    Infeasible True with reason DeadlineInPast.
    """
    result = [dict(c) for c in conditions]
    for type_, status, reason, text in _decision_updates(
        decision_condition, message, deadline_was_past
    ):
        result = set_condition(
            result, type_, status, reason, text, now_s=now_s, generation=generation
        )
    return result


# One condition to set: (type, status (None: Unknown), reason, message).
_Update = tuple[str, bool | None, str, str]

_NOT_MISSED: _Update = (
    vocabulary.CONDITION_DEADLINE_MISSED,
    False,
    vocabulary.REASON_BEFORE_DEADLINE,
    "the deadline has not passed",
)


def _decision_updates(
    decision_condition: str, message: str, deadline_was_past: bool
) -> list[_Update]:
    """The conditions one decision sets, in order: ``MetricsUnavailable`` alone when no
    progress was sampled; else metrics OK, not complete, then what the decision judged
    (:func:`_judged_updates`)."""
    if decision_condition == vocabulary.CONDITION_METRICS_UNAVAILABLE:
        return [
            (
                vocabulary.CONDITION_METRICS_UNAVAILABLE,
                True,
                vocabulary.REASON_NO_PROGRESS_SAMPLE,
                message,
            )
        ]
    sampled: list[_Update] = [
        (
            vocabulary.CONDITION_METRICS_UNAVAILABLE,
            False,
            vocabulary.REASON_METRICS_OK,
            "progress was sampled",
        ),
        (vocabulary.CONDITION_COMPLETE, False, vocabulary.REASON_RUNNING, "steps remain"),
    ]
    return sampled + _judged_updates(decision_condition, message, deadline_was_past)


FEASIBLE_MESSAGE = "max is enough to make the deadline"
"""Infeasible cleared (reason Feasible)."""


def _infeasible_update(deadline_was_past: bool) -> _Update:
    """Infeasible as a decision that does not name it leaves it: True (DeadlineInPast) when
    the deadline had passed when it was set, else False (Feasible)."""
    if deadline_was_past:
        return (
            vocabulary.CONDITION_INFEASIBLE,
            True,
            vocabulary.REASON_DEADLINE_IN_PAST,
            "the deadline had passed when it was set; running at max",
        )
    return (
        vocabulary.CONDITION_INFEASIBLE,
        False,
        vocabulary.REASON_FEASIBLE,
        FEASIBLE_MESSAGE,
    )


def _judged_updates(decision_condition: str, message: str, past: bool) -> list[_Update]:
    """The condition the decision names set True and those it rules out set False, with the
    decision's ``message`` (``past``: the deadline had passed when it was set)."""
    infeasible = _infeasible_update(past)
    on_track, at_risk = vocabulary.CONDITION_ON_TRACK, vocabulary.CONDITION_AT_RISK
    if decision_condition == vocabulary.DECISION_STARTING:
        starting: _Update = (on_track, None, vocabulary.REASON_MEASURING_SPEED, message)
        return [starting, infeasible] if past else [starting]
    if decision_condition == vocabulary.CONDITION_ON_TRACK:
        reason = vocabulary.REASON_PREDICTED_ON_TIME
        return [
            (on_track, True, reason, message),
            (at_risk, False, reason, message),
            infeasible,
            _NOT_MISSED,
        ]
    if decision_condition == vocabulary.CONDITION_AT_RISK:
        reason = (
            vocabulary.REASON_BEHIND_AT_MAX
            if "set point" in message
            else vocabulary.REASON_NEEDS_NEAR_MAX
        )
        return [
            (on_track, False, reason, message),
            (at_risk, True, reason, message),
            infeasible,
            _NOT_MISSED,
        ]
    if decision_condition == vocabulary.CONDITION_INFEASIBLE:
        reason = vocabulary.REASON_DEADLINE_IN_PAST if past else vocabulary.REASON_EVEN_MAX_TOO_SLOW
        missed: _Update = (
            (
                vocabulary.CONDITION_DEADLINE_MISSED,
                True,
                vocabulary.REASON_DEADLINE_PASSED,
                "the deadline has passed",
            )
            if past
            else _NOT_MISSED
        )
        return [
            (on_track, False, reason, message),
            (at_risk, True, reason, message),
            (vocabulary.CONDITION_INFEASIBLE, True, reason, message),
            missed,
        ]
    if decision_condition == vocabulary.CONDITION_DEADLINE_MISSED:
        reason = vocabulary.REASON_DEADLINE_PASSED
        return [
            (on_track, False, reason, message),
            (at_risk, True, reason, message),
            *([infeasible] if past else []),
            (vocabulary.CONDITION_DEADLINE_MISSED, True, reason, message),
        ]
    return []


def conditions_for_deadline(
    conditions: Sequence[Mapping[str, Any]],
    deadline_was_past: bool,
    *,
    now_s: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Conditions right after a deadline was set or moved (before any new decision).

    A deadline already in the past makes Infeasible True (reason DeadlineInPast) at once, so
    it is visible even while the trainer pod is still starting; moving it to the future again
    clears that (other Infeasible reasons are the controller's to clear).
    """
    current = get_condition(conditions, vocabulary.CONDITION_INFEASIBLE) or {}
    if deadline_was_past:
        return set_condition(
            conditions, vocabulary.CONDITION_INFEASIBLE, True, vocabulary.REASON_DEADLINE_IN_PAST,
            "the deadline had passed when it was set; running at max",
            now_s=now_s, generation=generation,
        )  # fmt: skip
    if current.get("reason") == vocabulary.REASON_DEADLINE_IN_PAST:
        return set_condition(
            conditions, vocabulary.CONDITION_INFEASIBLE, False, vocabulary.REASON_FEASIBLE, "the deadline moved to the future",
            now_s=now_s, generation=generation,
        )  # fmt: skip
    return [dict(c) for c in conditions]


def conditions_at_admission(
    deadline_was_past: bool, *, now_s: float, generation: int | None = None
) -> list[dict[str, Any]]:
    """Conditions of a job the operator has just taken on (no progress seen yet)."""
    conditions = set_condition(
        [], vocabulary.CONDITION_ON_TRACK, None, vocabulary.REASON_MEASURING_SPEED, "waiting for the first progress sample",
        now_s=now_s, generation=generation,
    )  # fmt: skip
    return conditions_for_deadline(
        conditions, deadline_was_past, now_s=now_s, generation=generation
    )


def conditions_for_completion(
    conditions: Sequence[Mapping[str, Any]],
    finished_s: float,
    deadline_s: float,
    *,
    now_s: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Conditions of a finished job: Complete True, DeadlineMissed says whether it was late."""
    late = finished_s > deadline_s
    result = [dict(c) for c in conditions]
    delta = finished_s - deadline_s
    when = (
        f"{abs(delta):.1f}s {'after' if late else 'before'} the deadline"
        if math.isfinite(delta)
        else "no deadline (best effort)"
    )
    for type_, status, reason, message in (
        (
            vocabulary.CONDITION_COMPLETE,
            True,
            vocabulary.REASON_FINISHED,
            f"all planned steps done, {when}",
        ),
        (
            vocabulary.CONDITION_DEADLINE_MISSED,
            late,
            vocabulary.REASON_FINISHED_LATE if late else vocabulary.REASON_FINISHED_ON_TIME,
            when,
        ),
        (vocabulary.CONDITION_ON_TRACK, False, vocabulary.REASON_FINISHED, "finished"),
        (vocabulary.CONDITION_AT_RISK, False, vocabulary.REASON_FINISHED, "finished"),
        (vocabulary.CONDITION_METRICS_UNAVAILABLE, False, vocabulary.REASON_FINISHED, "finished"),
    ):
        result = set_condition(
            result, type_, status, reason, message, now_s=now_s, generation=generation
        )
    return result


def conditions_for_failure(
    conditions: Sequence[Mapping[str, Any]],
    why: str,
    *,
    now_s: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Conditions of a job given up on: Complete False, and no prediction stays standing
    (OnTrack, AtRisk and MetricsUnavailable False: nothing runs to be on track or at risk)."""
    result = [dict(c) for c in conditions]
    for type_, message in (
        (vocabulary.CONDITION_COMPLETE, why),
        (vocabulary.CONDITION_ON_TRACK, "the job failed"),
        (vocabulary.CONDITION_AT_RISK, "the job failed"),
        (vocabulary.CONDITION_METRICS_UNAVAILABLE, "the job failed"),
    ):
        result = set_condition(
            result,
            type_,
            False,
            vocabulary.REASON_TRAINER_FAILED,
            message,
            now_s=now_s,
            generation=generation,
        )
    return result


def conditions_for_stall(
    conditions: Sequence[Mapping[str, Any]],
    stalled_for_s: float,
    stall_timeout_s: float,
    *,
    now_s: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Stalled after a progress sample: True once the trainer's steps have not moved for
    more than ``stall_timeout_s`` (``stalled_for_s``: seconds they have stood still, >= 0),
    False once they move again; a job never stalled gets no Stalled condition."""
    stalled = stalled_for_s > stall_timeout_s
    if not stalled and not condition_is_true(conditions, vocabulary.CONDITION_STALLED):
        return [dict(c) for c in conditions]
    return set_condition(
        conditions,
        vocabulary.CONDITION_STALLED,
        stalled,
        vocabulary.REASON_NO_NEW_STEPS if stalled else vocabulary.REASON_STEPS_MOVING,
        f"no step completed for {stalled_for_s:.0f}s" if stalled else "steps complete again",
        now_s=now_s,
        generation=generation,
    )


def conditions_for_unread_progress(
    conditions: Sequence[Mapping[str, Any]],
    deadline_s: float,
    *,
    best_effort: bool,
    now_s: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """After a period with no progress sample (Stalled stays as it is: nothing is known of
    the steps): DeadlineMissed turns True once the deadline (``deadline_s``, Unix s) has
    passed, since steps remain as far as anyone can tell."""
    if (
        best_effort
        or now_s <= deadline_s
        or condition_is_true(conditions, vocabulary.CONDITION_DEADLINE_MISSED)
    ):
        return [dict(c) for c in conditions]
    return set_condition(
        conditions,
        vocabulary.CONDITION_DEADLINE_MISSED,
        True,
        vocabulary.REASON_DEADLINE_PASSED,
        "the deadline passed and no progress can be read",
        now_s=now_s,
        generation=generation,
    )


def deadline_was_past(conditions: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the deadline in force had already passed when it was set, as the conditions
    say (Infeasible True with reason DeadlineInPast, which :func:`conditions_for_deadline`
    sets and clears)."""
    infeasible = get_condition(conditions, vocabulary.CONDITION_INFEASIBLE) or {}
    return (
        infeasible.get("status") == "True"
        and infeasible.get("reason") == vocabulary.REASON_DEADLINE_IN_PAST
    )


def became_true(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], type_: str
) -> bool:
    """Whether condition ``type_`` turned True between two condition lists."""
    return condition_is_true(after, type_) and not condition_is_true(before, type_)


# ============================================================================================
# Status


def build_outcome(finished_s: float, deadline_s: float, start_s: float) -> dict[str, Any]:
    """``status.outcome``: deviation = (finish - deadline) / (deadline - start) x 100 (+ late)."""
    span_s = deadline_s - start_s
    deviation = 100.0 * (finished_s - deadline_s) / span_s if span_s > 0 else math.inf
    outcome: dict[str, Any] = {
        "finishedAt": format_time(finished_s),
        "finishedAtSeconds": round(finished_s, 3),
        "late": finished_s > deadline_s,
    }
    if math.isfinite(deviation):
        outcome["deviationPercent"] = round(deviation, 3)
    return outcome


def build_status(
    *,
    phase: str,
    mode: str,
    start_s: float,
    deadline_s: float,
    state: control.State,
    applied: float | None,
    desired: float | None,
    observation: control.Observation | None = None,
    eta_s: float | None = None,
    generation: int | None = None,
    conditions: Sequence[Mapping[str, Any]] = (),
    pod: str | None = None,
    epochs_done: float | None = None,
) -> dict[str, Any]:
    """The operator-owned part of ``status`` after one period (for a merge patch).

    Fields with nothing to report are None, which a merge patch removes; the counters
    (podsCreated, resizes, restarts, podFailures) and outcome are maintained by the caller.
    """
    status: dict[str, Any] = {
        "phase": phase,
        "startTime": format_time(start_s),
        "deadline": format_time(deadline_s) if math.isfinite(deadline_s) else None,
        "controller": state.to_dict(),
        "allocation": format_allocation(mode, applied) if applied is not None else None,
        "desiredAllocation": format_allocation(mode, desired) if desired is not None else None,
        "conditions": [dict(c) for c in conditions],
        "podName": pod,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    if observation is not None:
        status["stepsDone"] = int(observation.steps_done)
        status["stepsTotal"] = int(observation.steps_total)
        status["progress"] = round(observation.progress, 4)
        status["trainerStatus"] = build_trainer_status(observation, eta_s)
    if epochs_done is not None and math.isfinite(epochs_done):
        status["epochsDone"] = int(epochs_done)
    if eta_s is not None and math.isfinite(eta_s):
        status["eta"] = format_time(eta_s)
    return status


PERCENT = 100
"""Percent in a ratio of one (``trainerStatus.progressPercentage`` is 0..100)."""


def build_trainer_status(observation: control.Observation, eta_s: float | None) -> dict[str, Any]:
    """``status.trainerStatus`` in the shape of Kubeflow Trainer's TrainJob (KEP-2779).

    ``progressPercentage``: whole percent of steps done, 0..100 (rounded down, so 100 only
    when every step is done). ``estimatedRemainingSeconds``: whole seconds from the
    observation to the estimated completion ``eta_s`` (Unix s), >= 0; None (removed by the
    merge patch) when there is no estimate. ``lastUpdatedTime``: when the progress sample
    was taken. Dashboards and tools written for TrainJob read these fields unchanged.
    """
    remaining_s: int | None = None
    if eta_s is not None and math.isfinite(eta_s):
        remaining_s = max(0, round(eta_s - observation.time_s))
    return {
        "progressPercentage": int(observation.progress * PERCENT),
        "estimatedRemainingSeconds": remaining_s,
        "lastUpdatedTime": format_time(observation.time_s),
    }


# Fields whose change a user sees (``kubectl get dtj``, conditions); anything else (the
# controller's state, steps done) alone does not cause a status write.
VISIBLE_STATUS_FIELDS = (
    "phase", "deadline", "allocation", "desiredAllocation", "podName", "admission",
    "resizes", "restarts", "podFailures", "outcome", "observedGeneration",
)  # fmt: skip


def visible_status(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a user acts on in ``status``: the visible fields and the conditions (type, status,
    reason; a message whose numbers move every period rides along with the next write)."""
    conditions = tuple(
        (c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []
    )
    return tuple(str(status.get(k)) for k in VISIBLE_STATUS_FIELDS), conditions


def shown_progress(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What ``kubectl get dtj`` shows moving while a job runs: progress to a whole percent,
    ETA to ten seconds."""
    progress = status.get("progress")
    eta = status.get("eta")
    return (
        None if progress is None else int(float(progress) * 100),
        None if not eta else str(eta)[:-2],  # "...:5" of "...:57Z": tens of seconds
    )


# ============================================================================================
# Events


def build_event(
    job: Mapping[str, Any],
    event_type: str,
    reason: str,
    message: str,
    *,
    now_s: float,
    component: str = vocabulary.MANAGED_BY,
    instance: str = "",
    action: str | None = None,
) -> dict[str, Any]:
    """A core/v1 Event about ``job`` (``kubectl describe dtj`` lists it)."""
    meta = job["metadata"]
    namespace = meta.get("namespace") or "default"
    stamp = format_time(now_s)
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": f"{vocabulary.API_GROUP}/{vocabulary.API_VERSION}",
            "kind": vocabulary.KIND,
            "name": meta["name"],
            "namespace": namespace,
            "uid": meta.get("uid"),
        },
        "type": event_type,
        "reason": reason,
        "message": message[:EVENT_MESSAGE_MAX_CHARS],
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": f"{vocabulary.API_GROUP}/{component}",
        "reportingInstance": instance or component,
    }
    if action:
        event["action"] = action
    return event


# ============================================================================================
# Reading pods back (what the API server says is in effect)


@dataclass(frozen=True)
class ResizeState:
    """The pod's in-place resize conditions (Kubernetes >= 1.33).

    ``in_progress``: PodResizeInProgress is True (the kubelet is applying it).
    ``deferred``: PodResizePending with reason Deferred (may fit later).
    ``infeasible``: PodResizePending with reason Infeasible (cannot fit on this node).
    """

    in_progress: bool = False
    deferred: bool = False
    infeasible: bool = False
    message: str = ""

    @property
    def waiting(self) -> bool:
        return self.in_progress or self.deferred


def resize_state(pod: Mapping[str, Any]) -> ResizeState:
    in_progress = deferred = infeasible = False
    messages = []
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        kind = condition.get("type")
        if kind == "PodResizeInProgress":
            in_progress = True
        elif kind == "PodResizePending":
            if condition.get("reason") == "Infeasible":
                infeasible = True
            else:
                deferred = True
        else:
            continue
        if condition.get("message"):
            messages.append(str(condition["message"]))
    return ResizeState(in_progress, deferred, infeasible, "; ".join(messages))


def _container(pod: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == name:
            return dict(container)
    return None


def container_status(pod: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            return dict(status)
    return None


def desired_cpu_cores(pod: Mapping[str, Any], container: str) -> float | None:
    """CPU limit in the pod's spec (what was asked for, resized or not), in cores."""
    spec = _container(pod, container) or {}
    resources = spec.get("resources") or {}
    value = (resources.get("limits") or {}).get("cpu") or (resources.get("requests") or {}).get(
        "cpu"
    )
    return parse_allocation("cpu", value)


def applied_cpu_cores(pod: Mapping[str, Any], container: str) -> float | None:
    """CPU limit the kubelet reports as applied to the running container, in cores.

    From ``status.containerStatuses[].resources.limits.cpu``; None before the container runs.
    """
    status = container_status(pod, container) or {}
    value = ((status.get("resources") or {}).get("limits") or {}).get("cpu")
    return parse_allocation("cpu", value)


def pod_gpu_count(pod: Mapping[str, Any], container: str) -> float | None:
    """``nvidia.com/gpu`` limit of the container (GPUs cannot change in place)."""
    spec = _container(pod, container) or {}
    resources = spec.get("resources") or {}
    value = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
        resources.get("requests") or {}
    ).get(GPU_RESOURCE)
    return parse_allocation("gpu", value)


def pod_allocation(pod: Mapping[str, Any], container: str, mode: str) -> float | None:
    """What the pod's spec asks for its trainer: CPU cores or GPUs."""
    if mode == "gpu":
        return pod_gpu_count(pod, container)
    return desired_cpu_cores(pod, container)


def sidecar_cpu_cores() -> float:
    """CPU the metrics sidecar requests beside the trainer (cores)."""
    return parse_allocation("cpu", SIDECAR_RESOURCES["requests"]["cpu"]) or 0.0


def _beside_trainer(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The containers that run beside the trainer (the first container): the others, and
    native sidecars (init containers with ``restartPolicy: Always``), as the scheduler counts."""
    containers = list(pod_spec.get("containers") or [])[1:]
    return containers + [
        c for c in pod_spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
    ]


def _cpu_request_cores(container: Mapping[str, Any]) -> float:
    resources = container.get("resources") or {}
    value = (resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get(
        "cpu"
    )
    return quantity_value(value) or 0.0


def pod_overhead_cpu_cores(pod: Mapping[str, Any]) -> float:
    """Cores that ``pod`` (a trainer pod) holds beside its trainer: its sidecars, DECOR's and
    the template's (bounded by the policy, requests = limits)."""
    return sum(_cpu_request_cores(c) for c in _beside_trainer(pod.get("spec") or {}))


def job_overhead_cpu_cores(spec: JobSpec) -> float:
    """Cores a trainer pod of ``spec`` will hold beside its trainer: the metrics sidecar and
    the template's own containers beside the trainer."""
    template_spec = spec.template.get("spec") or {}
    return sidecar_cpu_cores() + sum(_cpu_request_cores(c) for c in _beside_trainer(template_spec))


_QUOTA_KEYS = (
    ("requests", "cpu", quota.REQUESTS_CPU),
    ("limits", "cpu", quota.LIMITS_CPU),
    ("requests", "memory", quota.REQUESTS_MEMORY),
    ("limits", "memory", quota.LIMITS_MEMORY),
    ("requests", GPU_RESOURCE, quota.REQUESTS_GPU),
)


def _container_quota_usage(container: Mapping[str, Any]) -> dict[str, float]:
    """What one container charges a quota; a request left out is its limit (the API server's
    defaulting)."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}
    kinds = {"requests": requests, "limits": limits}
    return {
        name: quantity_value(kinds[kind].get(resource)) or 0.0
        for kind, resource, name in _QUOTA_KEYS
    }


def pod_quota_usage(pod: Mapping[str, Any]) -> dict[str, float]:
    """What ``pod`` charges its namespace's ResourceQuota, per ``quota.CHARGED`` resource (cores,
    bytes, GPUs, one pod), as Kubernetes counts it: its containers and native sidecars
    together, or its largest init container if that is more. A finished pod charges nothing."""
    if pod_phase(pod) in ("Succeeded", "Failed"):
        return {}
    spec = pod.get("spec") or {}
    total: dict[str, float] = {name: 0.0 for _, _, name in _QUOTA_KEYS}
    inits = list(spec.get("initContainers") or [])
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    for container in [*(spec.get("containers") or []), *sidecars]:
        for name, amount in _container_quota_usage(container).items():
            total[name] += amount
    for init in (c for c in inits if c.get("restartPolicy") != "Always"):
        for name, amount in _container_quota_usage(init).items():
            total[name] = max(total[name], amount)
    total[quota.PODS] = 1.0
    return total


def pod_charge_beside(pods: Sequence[Mapping[str, Any]], mode: str) -> quota.Amounts:
    """What each trainer pod of ``pods`` (built by this operator) charges a quota beside its
    allocation (the first container's cores or GPUs): the most of any of them, per resource."""
    most: dict[str, float] = {}
    for pod in pods:
        trainer = str(((pod.get("spec") or {}).get("containers") or [{}])[0].get("name"))
        allocation = pod_allocation(pod, trainer, mode) or 0.0
        for name, amount in quota.pod_charge_beside(pod_quota_usage(pod), mode, allocation):
            most[name] = max(most.get(name, 0.0), amount)
    return tuple(sorted(most.items()))


def termination_steps(pod: Mapping[str, Any], container: str) -> tuple[float, float] | None:
    """(done, planned) from the trainer's termination message ``steps=DONE/PLANNED`` (what
    decor_trainer leaves when it exits); None when there is none."""
    status = container_status(pod, container) or {}
    terminated = (status.get("state") or {}).get("terminated") or {}
    message = str(terminated.get("message") or "")
    for line in message.splitlines():
        if line.startswith("steps="):
            done, _, planned = line[len("steps=") :].partition("/")
            try:
                return float(done), float(planned)
            except ValueError:
                return None
    return None


def unschedulable_since_s(pod: Mapping[str, Any]) -> float | None:
    """When the scheduler said the pod does not fit anywhere (Unix s); None if it has not."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            try:
                return parse_time(
                    condition.get("lastTransitionTime"), "lastTransitionTime"
                ).timestamp()
            except ManifestError:
                return None
    return None


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


DEFAULT_GRACE_PERIOD_S = 30
"""Kubernetes' own default ``terminationGracePeriodSeconds``."""


def grace_period_s(pod: Mapping[str, Any], template_policy: TemplatePolicy) -> int:
    """The seconds to give ``pod`` to stop: its own grace period, at most the admin's cap."""
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    if isinstance(own, bool) or not isinstance(own, int) or own < 0:
        own = DEFAULT_GRACE_PERIOD_S
    return min(own, template_policy.max_grace_period_s)


def pod_phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def container_running(pod: Mapping[str, Any], container: str) -> bool:
    status = container_status(pod, container) or {}
    return "running" in (status.get("state") or {})


def container_finished_s(pod: Mapping[str, Any], container: str) -> float | None:
    """When the container terminated (Unix s), from its state or last state."""
    status = container_status(pod, container) or {}
    for key in ("state", "lastState"):
        terminated = (status.get(key) or {}).get("terminated") or {}
        if terminated.get("finishedAt"):
            try:
                return parse_time(terminated["finishedAt"], "finishedAt").timestamp()
            except ManifestError:
                return None
    return None


def pod_failure_reason(pod: Mapping[str, Any], container: str) -> str:
    """A one-line reason for a failed pod: the pod's reason, else the container's (its last
    exit when it waits to be restarted)."""
    status = pod.get("status") or {}
    if status.get("reason"):
        return f"{status['reason']}: {status.get('message', '')}".strip(": ")
    found = container_status(pod, container) or {}
    # A container waiting to restart (CrashLoopBackOff) keeps its last exit in lastState.
    terminated = (found.get("state") or {}).get("terminated") or (found.get("lastState") or {}).get(
        "terminated"
    )
    if terminated:
        return f"{terminated.get('reason', 'Error')} (exit code {terminated.get('exitCode')})"
    return "failed"


def metrics_url(pod: Mapping[str, Any], port: int, path: str) -> str | None:
    """``http://POD_IP:PORT/PATH`` of the pod's metrics endpoint; None without an IP yet."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}{path}"
