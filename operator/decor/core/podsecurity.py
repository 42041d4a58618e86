"""Judge a built Pod against the Kubernetes Pod Security Standards ``restricted`` profile.

:func:`check_restricted` takes a Pod exactly as it would be sent to the API server (a plain
``{"apiVersion", "kind", "metadata", "spec"}`` mapping) and returns one :class:`Finding` per
field that Pod Security Admission would refuse at level ``restricted``, policy version v1.35
(which includes every ``baseline`` check). An empty list means the pod passes.

The checks follow the upstream ``k8s.io/pod-security-admission/policy`` checks rule by rule
(``check_windowsHostProcess``, ``check_hostNamespaces``, ``check_privileged``,
``check_capabilities_restricted``, ``check_hostPathVolumes``, ``check_hostPorts``,
``check_appArmorProfile``, ``check_seLinuxOptions``, ``check_procMount_restricted``,
``check_seccompProfile_restricted``, ``check_sysctls``, ``check_hostProbesAndHostLifecycle``,
``check_restrictedVolumes``, ``check_allowPrivilegeEscalation``, ``check_runAsNonRoot``,
``check_runAsUser``); :data:`RULES` names them. Every check is an allowlist: a value that is
not explicitly allowed is a finding, so a value of the wrong type, or a field that cannot be
read because something above it is not an object or a list, is refused rather than skipped.
An explicit ``null`` counts as unset. Containers are ``spec.containers``,
``spec.initContainers`` (native sidecars included) and ``spec.ephemeralContainers``.

Deliberately stricter than upstream: pods with ``spec.os.name: windows`` get no exemption
from the seccomp, capabilities and privilege-escalation checks; ``spec.hostUsers: false``
does not relax the runAsNonRoot and runAsUser checks (upstream skips them for such pods from
v1.35); the legacy seccomp annotations (ignored by kubelets since v1.27) must name an allowed
profile; a volume may carry no key but ``name`` and allowed sources (unknown keys included);
and a hostPath volume breaks both ``hostPathVolumes`` and ``volumeTypes`` (upstream
restricted reports it once). What upstream v1.35 allows beyond older lists is allowed here
too: ``image`` volumes, the ``net.ipv4.tcp_rmem``/``tcp_wmem`` sysctls and the SELinux type
``container_engine_t``.

Pure: no I/O, standard library only; it never raises on malformed input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# --- rule names (stable; each names the upstream check it follows) --------------------------

RULE_HOST_PROCESS = "hostProcess"
"""check_windowsHostProcess: ``windowsOptions.hostProcess`` unset or false, pod and containers."""
RULE_HOST_NAMESPACES = "hostNamespaces"
"""check_hostNamespaces: ``spec.hostNetwork``, ``hostPID``, ``hostIPC`` unset or false."""
RULE_PRIVILEGED = "privileged"
"""check_privileged: every container's ``securityContext.privileged`` unset or false."""
RULE_CAPABILITIES = "capabilities"
"""check_capabilities_restricted: drop ``ALL``; add nothing but ``NET_BIND_SERVICE``."""
RULE_HOST_PATH_VOLUMES = "hostPathVolumes"
"""check_hostPathVolumes: no volume has a ``hostPath`` source."""
RULE_HOST_PORTS = "hostPorts"
"""check_hostPorts: every container port's ``hostPort`` unset or 0."""
RULE_APP_ARMOR = "appArmor"
"""check_appArmorProfile: profile type RuntimeDefault or Localhost (field and annotation)."""
RULE_SE_LINUX = "seLinux"
"""check_seLinuxOptions: an allowed ``seLinuxOptions.type``; ``user`` and ``role`` unset."""
RULE_PROC_MOUNT = "procMount"
"""check_procMount_restricted: every container's ``procMount`` unset or ``Default``."""
RULE_SECCOMP = "seccomp"
"""check_seccompProfile_restricted: RuntimeDefault or Localhost at pod level or on every
container, never Unconfined; legacy seccomp annotations name an allowed profile."""
RULE_SYSCTLS = "sysctls"
"""check_sysctls: ``spec.securityContext.sysctls`` names only safe sysctls."""
RULE_PROBE_HOST = "probeHost"
"""check_hostProbesAndHostLifecycle: probes' and lifecycle hooks' ``host`` unset or empty."""
RULE_VOLUME_TYPES = "volumeTypes"
"""check_restrictedVolumes: every volume source is one of the allowed types."""
RULE_PRIVILEGE_ESCALATION = "privilegeEscalation"
"""check_allowPrivilegeEscalation: every container sets ``allowPrivilegeEscalation: false``."""
RULE_RUN_AS_NON_ROOT = "runAsNonRoot"
"""check_runAsNonRoot: ``runAsNonRoot: true`` at pod level or on every container."""
RULE_RUN_AS_USER = "runAsUser"
"""check_runAsUser: ``runAsUser`` is never 0, at pod level or on any container."""

RULES: tuple[str, ...] = (
    RULE_HOST_PROCESS,
    RULE_HOST_NAMESPACES,
    RULE_PRIVILEGED,
    RULE_CAPABILITIES,
    RULE_HOST_PATH_VOLUMES,
    RULE_HOST_PORTS,
    RULE_APP_ARMOR,
    RULE_SE_LINUX,
    RULE_PROC_MOUNT,
    RULE_SECCOMP,
    RULE_SYSCTLS,
    RULE_PROBE_HOST,
    RULE_VOLUME_TYPES,
    RULE_PRIVILEGE_ESCALATION,
    RULE_RUN_AS_NON_ROOT,
    RULE_RUN_AS_USER,
)
"""Every rule name a :class:`Finding` can carry, in the order :func:`check_restricted` runs them."""

# --- what restricted allows (v1.35) ------------------------------------------------------------

_PROFILE_TYPES = frozenset({"RuntimeDefault", "Localhost"})
_SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
# sysctlsAllowedV1Dot32 (the newest set at policy v1.35).
_SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)
# check_restrictedVolumes; ``image`` (OCI image volumes) is allowed since Kubernetes v1.33.
_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_ADDABLE_CAPABILITY = "NET_BIND_SERVICE"
_CONTAINER_KINDS = ("containers", "initContainers", "ephemeralContainers")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_HOOKS = ("postStart", "preStop")
_HOST_HANDLERS = ("httpGet", "tcpSocket")
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
_SECCOMP_CONTAINER_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/"


@dataclass(frozen=True)
class Finding:
    """One way a pod falls outside ``restricted``: the rule, the field, and why."""

    rule: str
    """One of :data:`RULES`."""
    field: str
    """Path of the field in the pod; containers and volumes named by name (else by index),
    e.g. ``spec.containers[trainer].securityContext.allowPrivilegeEscalation``."""
    message: str
    """What is wrong and what restricted allows, one short sentence."""
    container: str | None = None
    """The container's name when the finding is about one container, else None."""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


# --- reading arbitrary JSON-like values without raising ---------------------------------------


@dataclass(frozen=True)
class _Unreadable:
    """Stands for a field below something that is not an object (or not a list)."""

    where: str
    what: str


@dataclass(frozen=True)
class _Item:
    """A container or volume: where it is, its name, and its body (maybe unreadable)."""

    path: str
    name: str | None
    body: Any


def _join(base: str, *keys: str) -> str:
    return ".".join([base, *keys]) if base else ".".join(keys)


def _dig(node: Any, base: str, *keys: str) -> Any:
    """The value at ``keys`` below ``node`` (at path ``base``): None when unset, or
    :class:`_Unreadable` when something on the way is neither unset nor an object."""
    path = base
    for key in keys:
        if node is None or isinstance(node, _Unreadable):
            return node
        if not isinstance(node, Mapping):
            return _Unreadable(path or "pod", "is not an object")
        node = node.get(key)
        path = _join(path, key)
    return node


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


def _label(index: int, item: Any, key: str | None) -> str:
    if isinstance(item, str) and item:
        return item
    if key is not None and isinstance(item, Mapping):
        name = item.get(key)
        if isinstance(name, str) and name:
            return name
    return str(index)


def _entries(value: Any, path: str, key: str | None = None) -> list[tuple[str, Any]] | _Unreadable:
    """``(path[label], item)`` for each item of the list ``value`` (a null item reads as an
    empty object); [] when unset; :class:`_Unreadable` when it is not a list."""
    if value is None:
        return []
    if isinstance(value, _Unreadable):
        return value
    if not _is_list(value):
        return _Unreadable(path, "is not a list")
    return [
        (f"{path}[{_label(i, item, key)}]", {} if item is None else item)
        for i, item in enumerate(value)
    ]


def _containers(pod: Any) -> list[_Item]:
    """Every container, init container and ephemeral container of ``pod``; a container list
    that cannot be read stands as one unreadable ``spec.<kind>[*]`` container."""
    found: list[_Item] = []
    for kind in _CONTAINER_KINDS:
        path = f"spec.{kind}"
        entries = _entries(_dig(pod, "", "spec", kind), path, "name")
        if isinstance(entries, _Unreadable):
            found.append(_Item(f"{path}[*]", None, entries))
            continue
        for item_path, body in entries:
            name = body.get("name") if isinstance(body, Mapping) else None
            found.append(_Item(item_path, name if isinstance(name, str) and name else None, body))
    return found


def _volumes(pod: Any) -> list[_Item]:
    """Every volume of ``pod``; an unreadable list stands as one ``spec.volumes[*]`` volume."""
    entries = _entries(_dig(pod, "", "spec", "volumes"), "spec.volumes", "name")
    if isinstance(entries, _Unreadable):
        return [_Item("spec.volumes[*]", None, entries)]
    return [_Item(path, None, body) for path, body in entries]


def _show(value: Any) -> str:
    """A short description of ``value`` for a message (never a deep repr)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > 64:
        return "a very large number"
    if isinstance(value, int | float):
        return f"{value}"
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    if isinstance(value, Mapping):
        return "an object"
    return "a list" if _is_list(value) else f"a {type(value).__name__}"


# --- predicates ---------------------------------------------------------------------------------


def _unset_or_false(value: Any) -> bool:
    return value is None or value is False


def _unset_or_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value == "")


def _is_none(value: Any) -> bool:
    return value is None


def _is_false(value: Any) -> bool:
    return value is False


def _nonzero_or_unset(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value != 0)


def _zero_or_unset(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0)


def _default_or_unset(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value == "Default")


def _in(allowed: frozenset[str]) -> Callable[[Any], bool]:
    return lambda value: value is None or (isinstance(value, str) and value in allowed)


def _profile_ok(profile: Any) -> bool:
    """A set seccomp or AppArmor profile whose type restricted allows."""
    kind = profile.get("type") if isinstance(profile, Mapping) else None
    return isinstance(kind, str) and kind in _PROFILE_TYPES


def _check(
    rule: str,
    node: Any,
    base: str,
    keys: tuple[str, ...],
    ok: Callable[[Any], bool],
    allowed: str,
    container: str | None = None,
) -> list[Finding]:
    """[] when the value at ``keys`` below ``node`` passes ``ok``, else one finding."""
    value = _dig(node, base, *keys)
    if ok(value):
        return []
    return [_finding(rule, _join(base, *keys), value, allowed, container)]


def _finding(
    rule: str, path: str, value: Any, allowed: str, container: str | None = None, verb: str = "is"
) -> Finding:
    """The finding that ``value`` at ``path`` is not what restricted ``allowed``; when it cannot
    be read, the finding names the field in the way (what is not an object or a list)."""
    if isinstance(value, _Unreadable):
        message = f"{value.what}, so {path} cannot be checked; restricted allows {allowed}"
        return Finding(rule, value.where, message, container)
    return Finding(rule, path, f"{verb} {_show(value)}; restricted allows {allowed}", container)


_SC = "securityContext"
_POD_SC = ("spec", _SC)


# --- the rules ----------------------------------------------------------------------------------


def _host_process(pod: Any, containers: list[_Item]) -> list[Finding]:
    keys = ("windowsOptions", "hostProcess")
    want = "only unset or false"
    found = _check(RULE_HOST_PROCESS, pod, "", (*_POD_SC, *keys), _unset_or_false, want)
    for c in containers:
        found += _check(
            RULE_HOST_PROCESS, c.body, c.path, (_SC, *keys), _unset_or_false, want, c.name
        )
    return found


def _host_namespaces(pod: Any) -> list[Finding]:
    found: list[Finding] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        found += _check(
            RULE_HOST_NAMESPACES, pod, "", ("spec", key), _unset_or_false, "only unset or false"
        )
    return found


def _privileged(containers: list[_Item]) -> list[Finding]:
    found: list[Finding] = []
    for c in containers:
        keys = (_SC, "privileged")
        found += _check(
            RULE_PRIVILEGED, c.body, c.path, keys, _unset_or_false, "only unset or false", c.name
        )
    return found


def _capabilities(containers: list[_Item]) -> list[Finding]:
    found: list[Finding] = []
    for c in containers:
        base = f"{c.path}.{_SC}.capabilities"
        drop = _dig(c.body, c.path, _SC, "capabilities", "drop")
        if not (_is_list(drop) and any(entry == "ALL" for entry in drop)):
            want = 'only a list that includes "ALL"'
            found.append(_finding(RULE_CAPABILITIES, f"{base}.drop", drop, want, c.name))
        add = _entries(_dig(c.body, c.path, _SC, "capabilities", "add"), f"{base}.add")
        if isinstance(add, _Unreadable):
            want = f"a list of only {_ADDABLE_CAPABILITY}"
            found.append(_finding(RULE_CAPABILITIES, f"{base}.add", add, want, c.name))
            continue
        for path, capability in add:
            if not (isinstance(capability, str) and capability == _ADDABLE_CAPABILITY):
                want = f"adding only {_ADDABLE_CAPABILITY}"
                found.append(_finding(RULE_CAPABILITIES, path, capability, want, c.name, "adds"))
    return found


def _host_path_volumes(volumes: list[_Item]) -> list[Finding]:
    found: list[Finding] = []
    for v in volumes:
        found += _check(
            RULE_HOST_PATH_VOLUMES, v.body, v.path, ("hostPath",), _is_none, "no hostPath source"
        )
    return found


def _host_ports(containers: list[_Item]) -> list[Finding]:
    found: list[Finding] = []
    for c in containers:
        ports = _entries(_dig(c.body, c.path, "ports"), f"{c.path}.ports")
        if isinstance(ports, _Unreadable):
            want = "a list of ports whose hostPort is unset or 0"
            found.append(_finding(RULE_HOST_PORTS, f"{c.path}.ports", ports, want, c.name))
            continue
        for path, port in ports:
            found += _check(
                RULE_HOST_PORTS,
                port,
                path,
                ("hostPort",),
                _zero_or_unset,
                "only unset or 0",
                c.name,
            )
    return found


def _profile(
    rule: str, node: Any, base: str, keys: tuple[str, ...], container: str | None
) -> list[Finding]:
    """A seccomp or AppArmor profile at ``keys`` below ``node``: unset, or an object whose
    type is RuntimeDefault or Localhost."""
    profile = _dig(node, base, *keys)
    if profile is None or _profile_ok(profile):
        return []
    allowed = "only type RuntimeDefault or Localhost"
    if isinstance(profile, Mapping):
        return [_finding(rule, _join(base, *keys, "type"), profile.get("type"), allowed, container)]
    return [_finding(rule, _join(base, *keys), profile, allowed, container)]


_ANNOTATION_ALLOWED = {
    RULE_APP_ARMOR: "only unset, empty, runtime/default or localhost/<profile>",
    RULE_SECCOMP: "only unset, empty, runtime/default, docker/default or localhost/<profile>",
}


def _annotations(pod: Any, rule: str, ok: Callable[[str, Any], bool | None]) -> list[Finding]:
    """A finding for each annotation that ``ok`` judges False (None: not one it judges)."""
    annotations = _dig(pod, "", "metadata", "annotations")
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping):
        return [_finding(rule, "metadata.annotations", annotations, "an object of annotations")]
    found: list[Finding] = []
    for key, value in annotations.items():
        if not isinstance(key, str) or ok(key, value) is not False:
            continue
        container = key.rpartition("/")[2] if key.startswith("container.") else ""
        path = f"metadata.annotations[{key}]"
        found.append(_finding(rule, path, value, _ANNOTATION_ALLOWED[rule], container or None))
    return found


def _apparmor_annotation(key: str, value: Any) -> bool | None:
    if not key.startswith(_APPARMOR_ANNOTATION):
        return None
    return isinstance(value, str) and (
        value in ("", "runtime/default") or value.startswith("localhost/")
    )


def _seccomp_annotation(key: str, value: Any) -> bool | None:
    if key != _SECCOMP_POD_ANNOTATION and not key.startswith(_SECCOMP_CONTAINER_ANNOTATION):
        return None
    return isinstance(value, str) and (
        value in ("", "runtime/default", "docker/default") or value.startswith("localhost/")
    )


def _app_armor(pod: Any, containers: list[_Item]) -> list[Finding]:
    found = _profile(RULE_APP_ARMOR, pod, "", (*_POD_SC, "appArmorProfile"), None)
    for c in containers:
        found += _profile(RULE_APP_ARMOR, c.body, c.path, (_SC, "appArmorProfile"), c.name)
    return found + _annotations(pod, RULE_APP_ARMOR, _apparmor_annotation)


def _se_linux_options(node: Any, base: str, container: str | None) -> list[Finding]:
    """``seLinuxOptions`` below ``node`` (a pod spec or a container at path ``base``)."""
    keys = (_SC, "seLinuxOptions")
    options = _dig(node, base, *keys)
    path = _join(base, *keys)
    if options is None:
        return []
    if not isinstance(options, Mapping):
        want = "an object with an allowed type and no user or role"
        return [_finding(RULE_SE_LINUX, path, options, want, container)]
    types = "only unset, empty, " + ", ".join(sorted(_SELINUX_TYPES - {""}))
    found = _check(RULE_SE_LINUX, options, path, ("type",), _in(_SELINUX_TYPES), types, container)
    for key in ("user", "role"):
        found += _check(
            RULE_SE_LINUX, options, path, (key,), _unset_or_empty, "only unset or empty", container
        )
    return found


def _se_linux(pod: Any, containers: list[_Item]) -> list[Finding]:
    found = _se_linux_options(_dig(pod, "", "spec"), "spec", None)
    for c in containers:
        found += _se_linux_options(c.body, c.path, c.name)
    return found


def _proc_mount(containers: list[_Item]) -> list[Finding]:
    found: list[Finding] = []
    for c in containers:
        keys = (_SC, "procMount")
        found += _check(
            RULE_PROC_MOUNT,
            c.body,
            c.path,
            keys,
            _default_or_unset,
            "only unset or Default",
            c.name,
        )
    return found


def _seccomp(pod: Any, containers: list[_Item]) -> list[Finding]:
    pod_keys = (*_POD_SC, "seccompProfile")
    found = _profile(RULE_SECCOMP, pod, "", pod_keys, None)
    pod_ok = _profile_ok(_dig(pod, "", *pod_keys))
    for c in containers:
        keys = (_SC, "seccompProfile")
        if _dig(c.body, c.path, *keys) is None and not pod_ok:
            message = f"is unset and so is {_join('', *pod_keys)}; restricted requires type RuntimeDefault or Localhost on one of them"
            found.append(Finding(RULE_SECCOMP, _join(c.path, *keys), message, c.name))
        else:
            found += _profile(RULE_SECCOMP, c.body, c.path, keys, c.name)
    return found + _annotations(pod, RULE_SECCOMP, _seccomp_annotation)


def _sysctls(pod: Any) -> list[Finding]:
    keys = (*_POD_SC, "sysctls")
    base = _join("", *keys)
    entries = _entries(_dig(pod, "", *keys), base, "name")
    if isinstance(entries, _Unreadable):
        return [_finding(RULE_SYSCTLS, base, entries, "a list of safe sysctls")]
    found: list[Finding] = []
    for path, entry in entries:
        name = _dig(entry, path, "name")
        if not (isinstance(name, str) and name in _SAFE_SYSCTLS):
            want = f"only the {len(_SAFE_SYSCTLS)} safe sysctls of Kubernetes v1.35"
            found.append(_finding(RULE_SYSCTLS, path, name, want, verb="names"))
    return found


def _probe_host(containers: list[_Item]) -> list[Finding]:
    handlers = [(probe,) for probe in _PROBES] + [("lifecycle", hook) for hook in _HOOKS]
    want = "only unset or empty (the pod's IP)"
    found: list[Finding] = []
    for c in containers:
        for handler in handlers:
            for kind in _HOST_HANDLERS:
                keys = (*handler, kind, "host")
                found += _check(
                    RULE_PROBE_HOST, c.body, c.path, keys, _unset_or_empty, want, c.name
                )
    return found


def _volume_types(volumes: list[_Item]) -> list[Finding]:
    allowed = "only the volume sources " + ", ".join(sorted(_VOLUME_TYPES))
    found: list[Finding] = []
    for v in volumes:
        if not isinstance(v.body, Mapping):
            found.append(_finding(RULE_VOLUME_TYPES, v.path, v.body, f"an object with {allowed}"))
            continue
        for key, value in v.body.items():
            if key == "name" or value is None or (isinstance(key, str) and key in _VOLUME_TYPES):
                continue
            message = f"is not an allowed volume source; restricted allows {allowed}"
            found.append(Finding(RULE_VOLUME_TYPES, f"{v.path}.{key}", message))
    return found


def _privilege_escalation(containers: list[_Item]) -> list[Finding]:
    found: list[Finding] = []
    for c in containers:
        keys = (_SC, "allowPrivilegeEscalation")
        found += _check(
            RULE_PRIVILEGE_ESCALATION,
            c.body,
            c.path,
            keys,
            _is_false,
            "only false, set explicitly",
            c.name,
        )
    return found


def _run_as_non_root(pod: Any, containers: list[_Item]) -> list[Finding]:
    pod_keys = (*_POD_SC, "runAsNonRoot")
    pod_path = _join("", *pod_keys)
    pod_value = _dig(pod, "", *pod_keys)
    found: list[Finding] = []
    if pod_value is not None and pod_value is not True:
        found.append(_finding(RULE_RUN_AS_NON_ROOT, pod_path, pod_value, "only true"))
    for c in containers:
        keys = (_SC, "runAsNonRoot")
        value = _dig(c.body, c.path, *keys)
        if value is True or (value is None and pod_value is True):
            continue
        path = _join(c.path, *keys)
        if value is None:
            message = (
                f"is unset and {pod_path} is not true; restricted requires true on one of them"
            )
            found.append(Finding(RULE_RUN_AS_NON_ROOT, path, message, c.name))
        else:
            want = "only true (or unset under a pod-level true)"
            found.append(_finding(RULE_RUN_AS_NON_ROOT, path, value, want, c.name))
    return found


def _run_as_user(pod: Any, containers: list[_Item]) -> list[Finding]:
    want = "only unset or a non-zero user ID"
    found = _check(RULE_RUN_AS_USER, pod, "", (*_POD_SC, "runAsUser"), _nonzero_or_unset, want)
    for c in containers:
        keys = (_SC, "runAsUser")
        found += _check(RULE_RUN_AS_USER, c.body, c.path, keys, _nonzero_or_unset, want, c.name)
    return found


def check_restricted(pod: Mapping[str, Any]) -> list[Finding]:
    """Every way ``pod`` falls outside Pod Security restricted (v1.35); [] when it passes.

    ``pod`` is a Pod as sent to the API server. Findings come rule by rule in the order of
    :data:`RULES`; malformed input of any shape gives findings, never an exception.
    """
    root: Any = pod if isinstance(pod, Mapping) else _Unreadable("pod", "is not an object")
    containers = _containers(root)
    volumes = _volumes(root)
    return _once(_rules(root, containers, volumes))


def _once(findings: list[Finding]) -> list[Finding]:
    """``findings`` without repeats of a rule at one field (e.g. every check below one
    unreadable securityContext), first one kept."""
    seen: set[tuple[str, str]] = set()
    kept: list[Finding] = []
    for finding in findings:
        if (finding.rule, finding.field) not in seen:
            seen.add((finding.rule, finding.field))
            kept.append(finding)
    return kept


def _rules(pod: Any, containers: list[_Item], volumes: list[_Item]) -> list[Finding]:
    return [
        *_host_process(pod, containers),
        *_host_namespaces(pod),
        *_privileged(containers),
        *_capabilities(containers),
        *_host_path_volumes(volumes),
        *_host_ports(containers),
        *_app_armor(pod, containers),
        *_se_linux(pod, containers),
        *_proc_mount(containers),
        *_seccomp(pod, containers),
        *_sysctls(pod),
        *_probe_host(containers),
        *_volume_types(volumes),
        *_privilege_escalation(containers),
        *_run_as_non_root(pod, containers),
        *_run_as_user(pod, containers),
    ]
