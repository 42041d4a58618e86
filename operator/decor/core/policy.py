"""What the cluster admin allows a job's pod template to ask for, and where checkpoints live.

DECOR creates pods on behalf of whoever may create a DeadlineTrainingJob, so a template must
not get more than its author could have been trusted with. The API server refuses what a CEL
rule in the CRD can say (host namespaces, privileged containers, hostPath volumes,
``nodeName``); :func:`check_template` refuses the rest at run time and re-checks those, in
case the CRD in the cluster lacks its rules. The admin's allowances come from the chart's
``templatePolicy`` values as environment variables (:meth:`TemplatePolicy.from_env`).

How the operator uses it: before creating a job's first pod, call
``check_template(spec.template, policy)``; a non-empty list means: create no pod, set a
False condition with reason :data:`vocabulary.REASON_TEMPLATE_REFUSED` and post a Warning Event of that
reason, both with :func:`describe` of the list as message (each entry names its field).

:class:`CheckpointStorage` is the admin's choice of the volume the operator mounts at
``spec.checkpoint.path`` when the template mounts none there (``from_env``).

Pure apart from the two ``from_env`` readers: no I/O, no clock. docs/security.md explains
every check and allowance.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from decor.api.model import GPU_RESOURCE, JobSpec, quantity_value
from decor.core import podsecurity

# --- the admin's allowances: environment variables (the chart's templatePolicy values) ------

ENV_ALLOW_HOST_ACCESS = "DECOR_ALLOW_HOST_ACCESS"
"""true: host namespaces, host ports, privileged containers, hostPath volumes (the CRD's CEL
rules refuse them too: docs/security.md says how an admin lifts both)."""
ENV_ALLOW_NODE_NAME = "DECOR_ALLOW_NODE_NAME"
"""true: a template may pin its pod to a node with ``spec.nodeName`` (bypasses the scheduler)."""
ENV_ALLOW_RUN_AS_ROOT = "DECOR_ALLOW_RUN_AS_ROOT"
"""true: a template may run a container as root (``runAsUser: 0`` / ``runAsNonRoot: false``)
or allow privilege escalation."""
ENV_ALLOWED_CAPABILITIES = "DECOR_ALLOWED_CAPABILITIES"
"""Comma-separated Linux capabilities a container may add (e.g. ``IPC_LOCK``); ``*``: any."""
ENV_ALLOWED_PRIORITY_CLASSES = "DECOR_ALLOWED_PRIORITY_CLASSES"
"""Comma-separated PriorityClass names a template may use; ``*``: any."""
ENV_ALLOWED_SERVICE_ACCOUNTS = "DECOR_ALLOWED_SERVICE_ACCOUNTS"
"""Comma-separated ServiceAccount names besides ``default``; ``*``: any."""
ENV_ALLOWED_TOLERATION_KEYS = "DECOR_ALLOWED_TOLERATION_KEYS"
"""Comma-separated taint keys a template may tolerate (e.g. ``nvidia.com/gpu``); ``*``: any."""

ENV_ALLOWED_CLAIMS = "DECOR_ALLOWED_CLAIMS"
"""Comma-separated ``NAMESPACE/CLAIM`` PersistentVolumeClaims a job may mount (its
``spec.checkpoint.claimName`` or a template volume); ``NAMESPACE/*``: any in that namespace;
``*``: any. Claims DECOR makes for a job need no allowance."""
ENV_ALLOW_RESOURCE_CLAIMS = "DECOR_ALLOW_RESOURCE_CLAIMS"
"""true: pod-level ``resources`` and DRA ``resourceClaims`` (the planner cannot count them)."""
ENV_MAX_GRACE_PERIOD = "DECOR_MAX_GRACE_PERIOD_SECONDS"
"""The longest ``terminationGracePeriodSeconds`` a template may ask for (default
:data:`DEFAULT_MAX_GRACE_PERIOD_S`); the operator also deletes trainers with at most this."""
DEFAULT_MAX_GRACE_PERIOD_S = 60
"""A checkpoint takes seconds; a longer grace period keeps capacity the planner has already
given to another job (a trainer that ignores SIGTERM holds it until SIGKILL)."""
ENV_DENIED_METADATA_PREFIXES = "DECOR_DENIED_METADATA_PREFIXES"
"""Comma-separated label/annotation key prefixes a template may not set, besides DECOR's own
(e.g. ``sidecar.istio.io/,app.kubernetes.io/``)."""

RESERVED_METADATA_PREFIX = "decor.dev/"
"""Labels and annotations under this prefix are DECOR's alone: a template may set none."""
RESERVED_NAME_PREFIX = "decor-"
"""Containers and volumes named so are DECOR's (its sidecar, checkpoint and progress volumes):
a template may name none, so that nothing of the user's stands in for them."""
SELECTOR_LABELS = frozenset({"app.kubernetes.io/managed-by"})
"""Labels outside ``decor.dev/`` that DECOR sets and selects its pods on."""

ANY = "*"
"""In an allowance list: everything."""
DEFAULT_SERVICE_ACCOUNT = "default"
"""The namespace's own ServiceAccount: always allowed (it is what a pod gets anyway)."""


_TRUE = frozenset({"1", "true", "yes", "on"})

# --- checkpoint storage: environment variables (the chart's trainer.checkpoint values) ------

ENV_CHECKPOINT_VOLUME = "DECOR_CHECKPOINT_VOLUME"
"""``claim`` (a PersistentVolumeClaim per job) or ``hostPath`` (a node directory)."""
ENV_CHECKPOINT_STORAGE_CLASS = "DECOR_CHECKPOINT_STORAGE_CLASS"
"""StorageClass of per-job claims; empty: the cluster's default class."""
ENV_CHECKPOINT_SIZE = "DECOR_CHECKPOINT_SIZE"
"""Requested size of per-job claims (a Kubernetes quantity, e.g. ``1Gi``)."""
ENV_CHECKPOINT_HOST_ROOT = "DECOR_CHECKPOINT_HOST_ROOT"
"""hostPath root of checkpoint directories (``ROOT/NAMESPACE/NAME/UID``)."""
ENV_OPERATOR_IMAGE = "DECOR_OPERATOR_IMAGE"
"""The operator's own image (the chart sets it to the image it runs): the only image DECOR
runs as root, to hand a hostPath checkpoint directory to the trainer's user. Never the
user's image: a user's image run as root on a host directory would be root on the host."""

VOLUME_CLAIM = "claim"
VOLUME_HOST_PATH = "hostPath"
CHECKPOINT_VOLUMES: tuple[str, ...] = (VOLUME_CLAIM, VOLUME_HOST_PATH)
DEFAULT_CHECKPOINT_SIZE = "1Gi"
DEFAULT_CHECKPOINT_HOST_ROOT = "/var/lib/decor/checkpoints"
DEFAULT_OPERATOR_IMAGE = "localhost/decor/operator:0.1.0"
"""What ``make images`` builds and imports (an operator started by hand on the test bed)."""


@dataclass(frozen=True)
class Violation:
    """One thing a template asks for that the policy refuses.

    ``field``: the path in the job, e.g. ``spec.template.spec.containers[0].securityContext
    .privileged``; ``message``: what is refused and which allowance would permit it.
    """

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


MAX_VIOLATIONS_SHOWN = 20
"""A condition message or Event names at most this many refused fields (then a count)."""


def describe(violations: Iterable[Violation]) -> str:
    """One line for a condition message or an Event: the violations, ``; `` separated, the
    first :data:`MAX_VIOLATIONS_SHOWN` of them and how many more (bounded in size)."""
    found = list(violations)
    shown = "; ".join(str(v) for v in found[:MAX_VIOLATIONS_SHOWN])
    more = len(found) - MAX_VIOLATIONS_SHOWN
    return f"{shown}; and {more} more" if more > 0 else shown


def _names(text: str | None) -> frozenset[str]:
    return frozenset(part.strip() for part in (text or "").split(",") if part.strip())


def _flag(text: str | None) -> bool:
    return (text or "").strip().lower() in _TRUE


def _seconds(text: str | None, default: int) -> int:
    text = (text or "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"{ENV_MAX_GRACE_PERIOD} must be a whole number of seconds, got {text!r}"
        ) from None


def _allowed(name: str, allowed: frozenset[str]) -> bool:
    return ANY in allowed or name in allowed


@dataclass(frozen=True)
class TemplatePolicy:
    """What the admin allows beyond the restricted default (everything off / empty)."""

    allow_host_access: bool = False
    allow_node_name: bool = False
    allow_run_as_root: bool = False
    allowed_capabilities: frozenset[str] = field(default_factory=frozenset)
    allowed_priority_classes: frozenset[str] = field(default_factory=frozenset)
    allowed_service_accounts: frozenset[str] = field(default_factory=frozenset)
    allowed_toleration_keys: frozenset[str] = field(default_factory=frozenset)
    denied_metadata_prefixes: frozenset[str] = field(default_factory=frozenset)
    allow_resource_claims: bool = False
    allowed_claims: frozenset[str] = field(default_factory=frozenset)
    max_grace_period_s: int = DEFAULT_MAX_GRACE_PERIOD_S

    def __post_init__(self) -> None:
        if self.max_grace_period_s < 0:
            raise ValueError(f"{ENV_MAX_GRACE_PERIOD} must be >= 0, got {self.max_grace_period_s}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TemplatePolicy:
        """The policy from ``DECOR_ALLOW*`` variables (unset: the restricted default)."""
        env = os.environ if environ is None else environ
        return cls(
            allow_host_access=_flag(env.get(ENV_ALLOW_HOST_ACCESS)),
            allow_node_name=_flag(env.get(ENV_ALLOW_NODE_NAME)),
            allow_run_as_root=_flag(env.get(ENV_ALLOW_RUN_AS_ROOT)),
            allowed_capabilities=frozenset(
                c.upper().removeprefix("CAP_") for c in _names(env.get(ENV_ALLOWED_CAPABILITIES))
            ),
            allowed_priority_classes=_names(env.get(ENV_ALLOWED_PRIORITY_CLASSES)),
            allowed_service_accounts=_names(env.get(ENV_ALLOWED_SERVICE_ACCOUNTS)),
            allowed_toleration_keys=_names(env.get(ENV_ALLOWED_TOLERATION_KEYS)),
            denied_metadata_prefixes=_names(env.get(ENV_DENIED_METADATA_PREFIXES)),
            allow_resource_claims=_flag(env.get(ENV_ALLOW_RESOURCE_CLAIMS)),
            allowed_claims=_names(env.get(ENV_ALLOWED_CLAIMS)),
            max_grace_period_s=_seconds(env.get(ENV_MAX_GRACE_PERIOD), DEFAULT_MAX_GRACE_PERIOD_S),
        )


TEMPLATE = "spec.template"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _check_security_context(
    context: Mapping[str, Any], where: str, policy: TemplatePolicy, *, container: bool
) -> list[Violation]:
    """Root, privilege escalation, privileged and capabilities of a (pod or container)
    securityContext at ``where``."""
    found: list[Violation] = []
    if not policy.allow_run_as_root:
        if context.get("runAsUser") == 0:
            found.append(
                Violation(f"{where}.runAsUser", f"runs as root; {_ask(ENV_ALLOW_RUN_AS_ROOT)}")
            )
        if context.get("runAsNonRoot") is False:
            found.append(
                Violation(
                    f"{where}.runAsNonRoot", f"may run as root; {_ask(ENV_ALLOW_RUN_AS_ROOT)}"
                )
            )
        if container and context.get("allowPrivilegeEscalation") is True:
            found.append(
                Violation(
                    f"{where}.allowPrivilegeEscalation",
                    f"privilege escalation is refused; {_ask(ENV_ALLOW_RUN_AS_ROOT)}",
                )
            )
    if not container:
        return found
    if context.get("privileged") is True and not policy.allow_host_access:
        found.append(
            Violation(
                f"{where}.privileged",
                f"privileged containers are refused; {_ask(ENV_ALLOW_HOST_ACCESS)}",
            )
        )
    added = _list(_mapping(context.get("capabilities")).get("add"))
    refused = [
        str(c)
        for c in added
        if not _allowed(str(c).upper().removeprefix("CAP_"), policy.allowed_capabilities)
    ]
    if refused:
        found.append(
            Violation(
                f"{where}.capabilities.add",
                f"adding {', '.join(refused)} is refused; {_ask(ENV_ALLOWED_CAPABILITIES)}",
            )
        )
    return found


def _ask(env: str) -> str:
    return f"the cluster admin can allow it (operator variable {env}, docs/security.md)"


BOUNDED_RESOURCES = ("cpu", "memory")
"""What every container besides the trainer must limit, with requests equal to limits: the
planner counts it beside the trainer's allocation (docs/security.md)."""
PLAIN_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
"""Resources any container may name; ``hugepages-*`` too. Anything else (an accelerator, an
extended resource) only the trainer may have, and only what DECOR allocates."""


def _plain(resource: str) -> bool:
    return resource in PLAIN_RESOURCES or resource.startswith("hugepages-")


def _check_resources(
    container: Mapping[str, Any], at: str, policy: TemplatePolicy, *, trainer: bool, mode: str
) -> list[Violation]:
    """A container's ``resources``: claims refused unless allowed; only
    plain resources, except the GPU DECOR allocates to a GPU trainer; a container other than
    the trainer limits CPU and memory, with requests equal to limits."""
    resources = _mapping(container.get("resources"))
    found: list[Violation] = []
    if resources.get("claims") and not policy.allow_resource_claims:
        found.append(
            Violation(
                f"{at}.resources.claims",
                f"resource claims are refused; {_ask(ENV_ALLOW_RESOURCE_CLAIMS)}",
            )
        )
    limits, requests = _mapping(resources.get("limits")), _mapping(resources.get("requests"))
    for kind, values in (("limits", limits), ("requests", requests)):
        for name in values:
            if _plain(str(name)) or (trainer and mode == "gpu" and name == GPU_RESOURCE):
                continue
            found.append(
                Violation(
                    f"{at}.resources.{kind}[{name}]",
                    "only the trainer gets accelerators, as many as DECOR allocates"
                    if trainer or name == GPU_RESOURCE
                    else "only the trainer may ask for resources beyond cpu and memory",
                )
            )
    if trainer:
        return found
    for name in BOUNDED_RESOURCES:
        limit = quantity_value(limits.get(name))
        if limit is None or limit <= 0:
            found.append(
                Violation(
                    f"{at}.resources.limits.{name}",
                    "a container beside the trainer needs a limit (the planner counts it)",
                )
            )
        elif name in requests and quantity_value(requests.get(name)) != limit:
            found.append(
                Violation(f"{at}.resources.requests.{name}", "must equal the limit (or be unset)")
            )
    return found


POD_SPEC_FIELDS = frozenset(
    {
        "containers", "initContainers", "volumes", "securityContext", "restartPolicy",
        "nodeSelector", "affinity", "topologySpreadConstraints", "tolerations",
        "priorityClassName", "preemptionPolicy", "serviceAccountName", "serviceAccount",
        "automountServiceAccountToken", "terminationGracePeriodSeconds", "imagePullSecrets",
        "dnsPolicy", "dnsConfig", "enableServiceLinks", "hostname", "subdomain",
        "setHostnameAsFQDN", "os", "nodeName", "hostNetwork", "hostPID", "hostIPC",
        "resources", "resourceClaims",
    }
)  # fmt: skip
"""The PodSpec fields a template may set (an allowlist: the rules above judge several of
them). Refused: whatever would take the pod out of DECOR's or the scheduler's hands or share
what is not the job's: ``runtimeClassName``, ``schedulerName``, ``schedulingGates``,
``shareProcessNamespace``, ``hostAliases``, ``hostUsers``, ``overhead``, ``priority``,
``readinessGates``, ``activeDeadlineSeconds``, ``ephemeralContainers`` and any unknown key."""
CONTAINER_FIELDS = frozenset(
    {
        "name", "image", "imagePullPolicy", "command", "args", "workingDir", "ports", "env",
        "envFrom", "resources", "resizePolicy", "volumeMounts", "volumeDevices",
        "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
        "terminationMessagePath", "terminationMessagePolicy", "securityContext", "stdin",
        "stdinOnce", "tty",
    }
)  # fmt: skip
"""The Container fields a template's container may set; an init container may also set
``restartPolicy: Always`` (a native sidecar)."""


def _check_fields(spec: Mapping[str, Any], where: str) -> list[Violation]:
    """Keys of the pod spec and of its containers outside the allowlists."""
    found = [
        Violation(f"{where}.{key}", "this pod field is not allowed in a DECOR job's template")
        for key in spec
        if key not in POD_SPEC_FIELDS
    ]
    for kind in ("containers", "initContainers"):
        for i, raw in enumerate(_list(spec.get(kind))):
            for key in _mapping(raw):
                if key in CONTAINER_FIELDS or (kind == "initContainers" and key == "restartPolicy"):
                    continue
                found.append(
                    Violation(
                        f"{where}.{kind}[{i}].{key}",
                        "this container field is not allowed in a DECOR job's template",
                    )
                )
    return found


def _check_reserved_names(spec: Mapping[str, Any], where: str) -> list[Violation]:
    found: list[Violation] = []
    for kind in ("containers", "initContainers", "ephemeralContainers", "volumes"):
        for i, raw in enumerate(_list(spec.get(kind))):
            name = str(_mapping(raw).get("name") or "")
            if name.startswith(RESERVED_NAME_PREFIX):
                found.append(
                    Violation(
                        f"{where}.{kind}[{i}].name",
                        f"names starting {RESERVED_NAME_PREFIX!r} are DECOR's own ({name!r})",
                    )
                )
    return found


def _check_metadata(metadata: Mapping[str, Any], policy: TemplatePolicy) -> list[Violation]:
    """Labels and annotations that are DECOR's (``decor.dev/``, the labels it selects its pods
    on) or under a prefix the admin denies: refused, never silently overwritten."""
    denied = (RESERVED_METADATA_PREFIX, *sorted(policy.denied_metadata_prefixes))
    found: list[Violation] = []
    for kind in ("labels", "annotations"):
        for key in _mapping(metadata.get(kind)):
            name = str(key)
            prefix = next((p for p in denied if name.startswith(p)), None)
            if prefix is None and not (kind == "labels" and name in SELECTOR_LABELS):
                continue
            why = (
                "is DECOR's own"
                if prefix in (None, RESERVED_METADATA_PREFIX)
                else f"is under {prefix!r}, denied by the cluster admin "
                f"({ENV_DENIED_METADATA_PREFIXES})"
            )
            found.append(Violation(f"{TEMPLATE}.metadata.{kind}[{name}]", f"this key {why}"))
    return found


def claim_allowed(namespace: str, claim: str, policy: TemplatePolicy) -> bool:
    """Whether the admin lets jobs in ``namespace`` mount the claim ``claim``."""
    allowed = policy.allowed_claims
    return ANY in allowed or f"{namespace}/{claim}" in allowed or f"{namespace}/*" in allowed


def check_claims(spec: JobSpec, policy: TemplatePolicy) -> list[Violation]:
    """Claims a job names (``spec.checkpoint.claimName``, template volumes) that the admin
    does not allow: a claim is the job's own only when DECOR made it for this job."""
    named: list[tuple[str, str]] = []
    if spec.checkpoint.claim_name:
        named.append(("spec.checkpoint.claimName", spec.checkpoint.claim_name))
    volumes = _list(_mapping(spec.template.get("spec")).get("volumes"))
    for i, raw in enumerate(volumes):
        claim = _mapping(_mapping(raw).get("persistentVolumeClaim")).get("claimName")
        if claim:
            named.append((f"{TEMPLATE}.spec.volumes[{i}].persistentVolumeClaim", str(claim)))
    return [
        Violation(
            where,
            f"the claim {claim!r} is not this job's (another job's data may be on it); "
            f"{_ask(ENV_ALLOWED_CLAIMS)} as {spec.namespace}/{claim}",
        )
        for where, claim in named
        if not claim_allowed(spec.namespace, claim, policy)
    ]


def check_template(
    template: Mapping[str, Any], policy: TemplatePolicy, mode: str = "cpu"
) -> list[Violation]:
    """Everything in ``template`` (a job's ``spec.template``) that ``policy`` refuses.

    Checked: labels and annotations that are DECOR's or under a denied prefix; host namespaces (``hostNetwork``, ``hostPID``, ``hostIPC``), host ports,
    privileged containers and hostPath volumes (``allow_host_access``); ``nodeName``
    (``allow_node_name``); root users and privilege escalation (``allow_run_as_root``); added
    capabilities, ``terminationGracePeriodSeconds`` (at most ``max_grace_period_s``),
    ``priorityClassName``, ``serviceAccountName`` other than ``default``, and
    tolerations, each against its allowance list. Containers, init containers and
    ephemeral containers are all checked. Returns [] when the template may run.
    """
    spec = _mapping(template.get("spec"))
    where = f"{TEMPLATE}.spec"
    found: list[Violation] = _check_metadata(_mapping(template.get("metadata")), policy)
    found += _check_host_access(spec, where, policy)
    found += _check_node_name(spec, where, policy)
    found += _check_security_context(
        _mapping(spec.get("securityContext")), f"{where}.securityContext", policy, container=False
    )
    found += _check_pod_resources(spec, where, policy)
    found += _check_fields(spec, where)
    found += _check_reserved_names(spec, where)
    found += _check_containers(spec, where, policy, mode)
    found += _check_grace_period(spec, where, policy)
    found += _check_priority_class(spec, where, policy)
    found += _check_service_accounts(spec, where, policy)
    found += _check_tolerations(spec, where, policy)
    return found


def _check_host_access(
    spec: Mapping[str, Any], where: str, policy: TemplatePolicy
) -> list[Violation]:
    """Host namespaces and hostPath volumes, unless ``allow_host_access``."""
    found: list[Violation] = []
    if not policy.allow_host_access:
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(key) is True:
                found.append(
                    Violation(
                        f"{where}.{key}",
                        f"host namespaces are refused; {_ask(ENV_ALLOW_HOST_ACCESS)}",
                    )
                )
        for i, volume in enumerate(_list(spec.get("volumes"))):
            if "hostPath" in _mapping(volume):
                found.append(
                    Violation(
                        f"{where}.volumes[{i}].hostPath",
                        f"hostPath volumes are refused (use a PersistentVolumeClaim); "
                        f"{_ask(ENV_ALLOW_HOST_ACCESS)}",
                    )
                )
    return found


def _check_node_name(
    spec: Mapping[str, Any], where: str, policy: TemplatePolicy
) -> list[Violation]:
    """``nodeName`` (it bypasses the scheduler), unless ``allow_node_name``."""
    found: list[Violation] = []
    if spec.get("nodeName") and not policy.allow_node_name:
        found.append(
            Violation(
                f"{where}.nodeName",
                f"pinning a node bypasses the scheduler (use nodeSelector); "
                f"{_ask(ENV_ALLOW_NODE_NAME)}",
            )
        )
    return found


def _check_pod_resources(
    spec: Mapping[str, Any], where: str, policy: TemplatePolicy
) -> list[Violation]:
    """Pod-level ``resources`` and ``resourceClaims`` (the planner cannot count them),
    unless ``allow_resource_claims``."""
    found: list[Violation] = []
    if not policy.allow_resource_claims:
        for key in ("resources", "resourceClaims"):
            if spec.get(key):
                found.append(
                    Violation(
                        f"{where}.{key}",
                        f"pod-level resources and resource claims are refused (the planner "
                        f"cannot count them); {_ask(ENV_ALLOW_RESOURCE_CLAIMS)}",
                    )
                )
    return found


def _check_containers(
    spec: Mapping[str, Any], where: str, policy: TemplatePolicy, mode: str
) -> list[Violation]:
    """Every container, init container and ephemeral container: its resources (the first
    container is the trainer, sized for ``mode``), its security context, and its host ports
    (unless ``allow_host_access``)."""
    found: list[Violation] = []
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for i, raw in enumerate(_list(spec.get(kind))):
            container = _mapping(raw)
            at = f"{where}.{kind}[{i}]"
            trainer = kind == "containers" and i == 0
            found += _check_resources(container, at, policy, trainer=trainer, mode=mode)
            found += _check_security_context(
                _mapping(container.get("securityContext")),
                f"{at}.securityContext",
                policy,
                container=True,
            )
            if policy.allow_host_access:
                continue
            for j, port in enumerate(_list(container.get("ports"))):
                if _mapping(port).get("hostPort"):
                    found.append(
                        Violation(
                            f"{at}.ports[{j}].hostPort",
                            f"host ports are refused; {_ask(ENV_ALLOW_HOST_ACCESS)}",
                        )
                    )
    return found


def _check_grace_period(
    spec: Mapping[str, Any], where: str, policy: TemplatePolicy
) -> list[Violation]:
    """``terminationGracePeriodSeconds``: an integer of at most ``max_grace_period_s``."""
    found: list[Violation] = []
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (
        isinstance(grace, bool) or not isinstance(grace, int) or grace > policy.max_grace_period_s
    ):
        found.append(
            Violation(
                f"{where}.terminationGracePeriodSeconds",
                f"{grace!r} is more than the {policy.max_grace_period_s} s a trainer may keep "
                f"its resources after being asked to stop; {_ask(ENV_MAX_GRACE_PERIOD)}",
            )
        )
    return found


def _check_priority_class(
    spec: Mapping[str, Any], where: str, policy: TemplatePolicy
) -> list[Violation]:
    """``priorityClassName``: one of ``allowed_priority_classes``."""
    found: list[Violation] = []
    priority_class = spec.get("priorityClassName")
    if priority_class and not _allowed(str(priority_class), policy.allowed_priority_classes):
        found.append(
            Violation(
                f"{where}.priorityClassName",
                f"priority class {priority_class!r} is not allowed; "
                f"{_ask(ENV_ALLOWED_PRIORITY_CLASSES)}",
            )
        )
    return found


def _check_service_accounts(
    spec: Mapping[str, Any], where: str, policy: TemplatePolicy
) -> list[Violation]:
    """``serviceAccountName`` and ``serviceAccount``: ``default`` or one of
    ``allowed_service_accounts``."""
    found: list[Violation] = []
    for key in ("serviceAccountName", "serviceAccount"):
        account = spec.get(key)
        if (
            account
            and account != DEFAULT_SERVICE_ACCOUNT
            and not _allowed(str(account), policy.allowed_service_accounts)
        ):
            found.append(
                Violation(
                    f"{where}.{key}",
                    f"service account {account!r} is not allowed (only {DEFAULT_SERVICE_ACCOUNT!r}); "
                    f"{_ask(ENV_ALLOWED_SERVICE_ACCOUNTS)}",
                )
            )
    return found


def _check_tolerations(
    spec: Mapping[str, Any], where: str, policy: TemplatePolicy
) -> list[Violation]:
    """Each toleration's key: one of ``allowed_toleration_keys`` (an empty key tolerates
    every taint: only ``*`` allows it)."""
    found: list[Violation] = []
    for i, raw in enumerate(_list(spec.get("tolerations"))):
        toleration = _mapping(raw)
        key = str(toleration.get("key") or "")
        # An empty key with operator Exists tolerates every taint: only "*" allows it.
        if not _allowed(key or ANY, policy.allowed_toleration_keys):
            found.append(
                Violation(
                    f"{where}.tolerations[{i}]",
                    f"tolerating {'every taint' if not key else repr(key)} is not allowed; "
                    f"{_ask(ENV_ALLOWED_TOLERATION_KEYS)}",
                )
            )
    return found


# ============================================================================================
# The built pod


_HOST_ACCESS_RULES = frozenset(
    {
        podsecurity.RULE_HOST_NAMESPACES,
        podsecurity.RULE_HOST_PORTS,
        podsecurity.RULE_PRIVILEGED,
        podsecurity.RULE_HOST_PATH_VOLUMES,
    }
)
_ROOT_RULES = frozenset(
    {
        podsecurity.RULE_RUN_AS_NON_ROOT,
        podsecurity.RULE_RUN_AS_USER,
        podsecurity.RULE_PRIVILEGE_ESCALATION,
    }
)
_ADDED_CAPABILITY = re.compile(r"\.capabilities\.add\[([^\]]*)\]$")


def _allowance(finding: podsecurity.Finding, policy: TemplatePolicy) -> tuple[bool, str | None]:
    """Whether the admin's allowances admit ``finding``, and the variable that would."""
    if finding.rule in _HOST_ACCESS_RULES or (
        finding.rule == podsecurity.RULE_VOLUME_TYPES and finding.field.endswith(".hostPath")
    ):
        return policy.allow_host_access, ENV_ALLOW_HOST_ACCESS
    if finding.rule in _ROOT_RULES:
        return policy.allow_run_as_root, ENV_ALLOW_RUN_AS_ROOT
    added = _ADDED_CAPABILITY.search(finding.field)
    if finding.rule == podsecurity.RULE_CAPABILITIES and added:
        name = added.group(1).upper().removeprefix("CAP_")
        return _allowed(name, policy.allowed_capabilities), ENV_ALLOWED_CAPABILITIES
    return False, None


def check_pod(
    pod: Mapping[str, Any],
    policy: TemplatePolicy,
    decor_own: Callable[[podsecurity.Finding], bool] = lambda _: False,
) -> list[Violation]:
    """Everything in ``pod`` (a pod as DECOR built it, every container it adds included)
    outside Pod Security ``restricted`` (:mod:`decor.core.podsecurity`, an allowlist) that the
    admin's allowances do not admit. ``decor_own``: the findings that are DECOR's own doing
    on the admin's explicit choice (the hostPath checkpoint volume and its owner container,
    when the admin chose hostPath storage). Each violation names the pod's field."""
    found: list[Violation] = []
    for finding in podsecurity.check_restricted(pod):
        if decor_own(finding):
            continue
        allowed, variable = _allowance(finding, policy)
        if allowed:
            continue
        hint = f"; {_ask(variable)}" if variable else ""
        found.append(
            Violation(
                f"pod {finding.field}",
                f"{finding.message} (Pod Security restricted, {finding.rule}){hint}",
            )
        )
    return found


# ============================================================================================
# Checkpoint storage


@dataclass(frozen=True)
class CheckpointStorage:
    """The volume the operator mounts at ``spec.checkpoint.path`` when the template has none.

    ``volume``: ``claim`` — a PersistentVolumeClaim per job (``build.checkpoint_claim_name``),
    of ``storage_class`` (None: the cluster's default class) and ``size``, owned by the job so
    that deleting the job deletes it unless ``spec.checkpoint.keep``; passes Pod Security
    Admission ``restricted``. ``hostPath`` — ``host_root/NAMESPACE/NAME/UID`` on the node
    (single node only; not allowed by ``restricted`` or ``baseline``; never cleaned up); the
    kubelet makes that directory as root, and an init container of ``owner_image`` (the
    operator's own image, never the user's) hands it to the trainer's user.
    A job naming its own claim (``spec.checkpoint.claimName``) overrides both.
    """

    volume: str = VOLUME_HOST_PATH
    storage_class: str | None = None
    size: str = DEFAULT_CHECKPOINT_SIZE
    host_root: str = DEFAULT_CHECKPOINT_HOST_ROOT
    owner_image: str = DEFAULT_OPERATOR_IMAGE

    def __post_init__(self) -> None:
        if self.volume not in CHECKPOINT_VOLUMES:
            raise ValueError(
                f"{ENV_CHECKPOINT_VOLUME} must be one of {', '.join(CHECKPOINT_VOLUMES)}, "
                f"got {self.volume!r}"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CheckpointStorage:
        """From ``DECOR_CHECKPOINT_*``; unset volume: ``hostPath`` (the chart sets ``claim``)."""
        env = os.environ if environ is None else environ
        return cls(
            volume=(env.get(ENV_CHECKPOINT_VOLUME) or VOLUME_HOST_PATH).strip(),
            storage_class=(env.get(ENV_CHECKPOINT_STORAGE_CLASS) or "").strip() or None,
            size=(env.get(ENV_CHECKPOINT_SIZE) or DEFAULT_CHECKPOINT_SIZE).strip(),
            host_root=(env.get(ENV_CHECKPOINT_HOST_ROOT) or DEFAULT_CHECKPOINT_HOST_ROOT).strip(),
            owner_image=(env.get(ENV_OPERATOR_IMAGE) or DEFAULT_OPERATOR_IMAGE).strip(),
        )
