"""Templates written as a hostile tenant would: every one is refused before a pod exists, and
every pod DECOR would create passes Pod Security ``restricted`` apart from what the admin
chose explicitly (hostPath checkpoint storage: DECOR's own volume and owner container).

The path is the operator's: ``parse_job`` (as the API server stored the job), the template
policy (``policy.check_template``), the pods of ``group.build_trainer_group`` and their
judgment (``build.judge_pods``, which ``job.JobController`` runs before every create).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from decor.api import model
from decor.api.model import ManifestError, parse_job
from decor.core import build, group, podsecurity, policy
from decor.core.policy import CheckpointStorage, TemplatePolicy, Violation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

RESTRICTED = TemplatePolicy()
CLAIM = CheckpointStorage(volume=policy.VOLUME_CLAIM)
HOST_PATH = CheckpointStorage(volume=policy.VOLUME_HOST_PATH, owner_image="op:1")
BOUNDED = {"limits": {"cpu": "100m", "memory": "64Mi"}}
CPU = {"mode": "cpu", "min": 0.5, "max": 2}
GPU_GROUP = {"mode": "gpu", "min": 1, "max": 4, "initial": 1, "gpusPerPod": 2}


def job_body(resources: dict[str, Any] | None = None) -> dict[str, Any]:
    trainer = {"name": "trainer", "image": "localhost/decor/trainer:0.1.0"}
    return {
        "apiVersion": "decor.dev/v1alpha1",
        "kind": "DeadlineTrainingJob",
        "metadata": {"name": "vision", "namespace": "ml", "uid": "u-1", "generation": 1},
        "spec": {
            "duration": "90s",
            "epochs": 2,
            "resources": copy.deepcopy(resources or CPU),
            "template": {"metadata": {"labels": {"team": "a"}}, "spec": {"containers": [trainer]}},
            "checkpoint": {"path": "/ckpt"},
        },
    }


def judge(
    body: dict[str, Any],
    storage: CheckpointStorage = CLAIM,
    template_policy: TemplatePolicy = RESTRICTED,
) -> tuple[list[Violation], list[dict[str, Any]]]:
    """(what is refused, the pods that would be created): the operator's path."""
    spec = parse_job(body)
    refused = policy.check_template(spec.template, template_policy, spec.resources.mode)
    refused += policy.check_claims(spec, template_policy)
    if refused:
        return refused, []
    pods = group.build_trainer_group(
        body, spec, spec.resources.max, "vision-0", rendezvous_ip="10.0.0.7",
        checkpoint_storage=storage,
    )  # fmt: skip
    refused = build.judge_pods(pods, template_policy, storage)
    return refused, [] if refused else pods


def pod_spec(body: dict[str, Any]) -> dict[str, Any]:
    return body["spec"]["template"]["spec"]


def trainer(body: dict[str, Any]) -> dict[str, Any]:
    return pod_spec(body)["containers"][0]


def context(body: dict[str, Any]) -> dict[str, Any]:
    return trainer(body).setdefault("securityContext", {})


def add(key: str, value: Any) -> Any:
    return lambda b: pod_spec(b).__setitem__(key, value)


def volume(source: dict[str, Any]) -> Any:
    return add("volumes", [{"name": "data", **source}])


def sidecar(resources: dict[str, Any] | None, **extra: Any) -> Any:
    def edit(b: dict[str, Any]) -> None:
        container = {"name": "helper", "image": "busybox", **extra}
        if resources is not None:
            container["resources"] = resources
        pod_spec(b).setdefault("initContainers", []).append(container)

    return edit


# (class, edit of an honest job, a fragment of a refused field)
HOSTILE: list[tuple[str, Any, str]] = [
    ("seccomp Unconfined", lambda b: context(b).update(seccompProfile={"type": "Unconfined"}),
     "seccompProfile"),
    ("AppArmor Unconfined", lambda b: context(b).update(appArmorProfile={"type": "Unconfined"}),
     "appArmorProfile"),
    ("AppArmor annotation", lambda b: b["spec"]["template"]["metadata"].update(
        annotations={"container.apparmor.security.beta.kubernetes.io/trainer": "unconfined"}),
     "apparmor"),
    ("SELinux type", lambda b: context(b).update(seLinuxOptions={"type": "spc_t"}), "seLinux"),
    ("procMount", lambda b: context(b).update(procMount="Unmasked"), "procMount"),
    ("sysctls", add("securityContext", {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
     "sysctls"),
    ("nfs", volume({"nfs": {"server": "10.0.0.1", "path": "/"}}), "nfs"),
    ("iscsi", volume({"iscsi": {"targetPortal": "10.0.0.1", "iqn": "x", "lun": 0}}), "iscsi"),
    ("rbd", volume({"rbd": {"monitors": ["10.0.0.1"], "image": "x"}}), "rbd"),
    ("flexVolume", volume({"flexVolume": {"driver": "x"}}), "flexVolume"),
    ("gitRepo", volume({"gitRepo": {"repository": "x"}}), "gitRepo"),
    ("probe host", lambda b: trainer(b).update(
        livenessProbe={"httpGet": {"host": "10.0.0.1", "port": 80}}), "host"),
    ("lifecycle host", lambda b: trainer(b).update(
        lifecycle={"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 22}}}), "host"),
    ("runtimeClassName", add("runtimeClassName", "unsandboxed"), "runtimeClassName"),
    ("schedulerName", add("schedulerName", "mine"), "schedulerName"),
    ("shareProcessNamespace", add("shareProcessNamespace", True), "shareProcessNamespace"),
    ("hostAliases", add("hostAliases", [{"ip": "10.0.0.1", "hostnames": ["api"]}]),
     "hostAliases"),
    ("unknown pod field", add("futureField", {"x": 1}), "futureField"),
    ("selector label", lambda b: b["spec"]["template"]["metadata"]["labels"].update(
        {"app.kubernetes.io/managed-by": "decor-operator"}), "managed-by"),
    ("group size annotation", lambda b: b["spec"]["template"]["metadata"].update(
        annotations={"decor.dev/group-pods": "3000000"}), "decor.dev/group-pods"),
    ("explicit null runAsNonRoot false", lambda b: context(b).update(runAsNonRoot=False),
     "runAsNonRoot"),
    ("root", lambda b: context(b).update(runAsUser=0), "runAsUser"),
    ("privilege escalation", lambda b: context(b).update(allowPrivilegeEscalation=True),
     "allowPrivilegeEscalation"),
    ("capability", lambda b: context(b).update(capabilities={"add": ["SYS_ADMIN"]}),
     "capabilities"),
    ("second container, no limit", lambda b: pod_spec(b)["containers"].append(
        {"name": "helper", "image": "busybox"}), "limits"),
    ("native sidecar, no limit", sidecar(None, restartPolicy="Always"), "limits"),
    ("sidecar, requests above limits", sidecar(
        {"limits": {"cpu": "100m", "memory": "64Mi"}, "requests": {"cpu": "2"}}), "requests"),
    ("pod-level resources", add("resources", {"limits": {"cpu": "4"}}), "spec.resources"),
    ("DRA resource claims", add("resourceClaims", [{"name": "gpu"}]), "resourceClaims"),
    ("GPU outside the trainer", sidecar(
        {"limits": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "4"}}), "nvidia.com/gpu"),
    ("GPU on a CPU trainer", lambda b: trainer(b).update(
        resources={"limits": {"nvidia.com/gpu": "1"}}), "nvidia.com/gpu"),
    ("grace period of a year", add("terminationGracePeriodSeconds", 31536000),
     "terminationGracePeriodSeconds"),
    ("a volume named like DECOR's", add("volumes", [{"name": "decor-checkpoint",
                                                      "emptyDir": {}}]), "volumes[0].name"),
    ("a container named like DECOR's", sidecar(BOUNDED, name="decor-metrics"), "name"),
    ("another job's claim", lambda b: b["spec"]["checkpoint"].update(claimName="other-checkpoint"),
     "spec.checkpoint.claimName"),
    ("another job's claim as a volume", volume({"persistentVolumeClaim": {"claimName": "x"}}),
     "persistentVolumeClaim"),
    ("ephemeral container", add("ephemeralContainers", [{"name": "x", "image": "busybox"}]),
     "ephemeralContainers"),
]  # fmt: skip


@pytest.mark.parametrize("storage", [CLAIM, HOST_PATH], ids=["claim", "hostPath"])
@pytest.mark.parametrize(("case", "edit", "fragment"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_each_hostile_template_is_refused_naming_its_field(
    case: str, edit: Any, fragment: str, storage: CheckpointStorage
) -> None:
    body = job_body()
    edit(body)
    refused, pods = judge(body, storage)
    assert refused and not pods, case
    assert any(fragment in v.field for v in refused), [str(v) for v in refused]


@pytest.mark.parametrize("resources", [CPU, GPU_GROUP], ids=["cpu", "gpu-group"])
@pytest.mark.parametrize("storage", [CLAIM, HOST_PATH], ids=["claim", "hostPath"])
def test_an_honest_job_with_a_bounded_sidecar_is_accepted(
    resources: dict[str, Any], storage: CheckpointStorage
) -> None:
    body = job_body(resources)
    sidecar(BOUNDED, restartPolicy="Always")(body)
    refused, pods = judge(body, storage)
    assert refused == []
    assert len(pods) == (2 if resources is GPU_GROUP else 1)


def test_an_allowance_admits_exactly_its_rule() -> None:
    body = job_body()
    context(body).update(capabilities={"add": ["IPC_LOCK"]})
    refused, _ = judge(body)
    assert [v.field for v in refused] == [
        "spec.template.spec.containers[0].securityContext.capabilities.add"
    ]
    allowing = TemplatePolicy(allowed_capabilities=frozenset({"IPC_LOCK"}))
    assert judge(body, template_policy=allowing)[0] == []
    sysctl = job_body()
    add("securityContext", {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]})(sysctl)
    everything = TemplatePolicy(allow_host_access=True, allow_run_as_root=True)
    assert any("sysctls" in v.field for v in judge(sysctl, template_policy=everything)[0])


def test_a_claim_is_mounted_only_where_the_admin_allows_it_by_namespace() -> None:
    body = job_body()
    body["spec"]["checkpoint"]["claimName"] = "shared-data"
    volume({"persistentVolumeClaim": {"claimName": "reference"}})(body)
    assert len(judge(body)[0]) == 2
    for allowed in ("ml/shared-data,ml/reference", "ml/*", "*"):
        admin = TemplatePolicy.from_env({policy.ENV_ALLOWED_CLAIMS: allowed})
        assert judge(body, template_policy=admin)[0] == [], allowed
    elsewhere = TemplatePolicy.from_env({policy.ENV_ALLOWED_CLAIMS: "team-b/*"})
    refused = judge(body, template_policy=elsewhere)[0]
    assert [v.field for v in refused] == [
        "spec.checkpoint.claimName",
        "spec.template.spec.volumes[0].persistentVolumeClaim",
    ]
    assert "ml/shared-data" in refused[0].message


# --- the property: for any template, refused or restricted (DECOR's own hostPath aside) ------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 70000) | st.sampled_from(
        ["", "ALL", "Always", "RuntimeDefault", "Unconfined", "Localhost", "0", "100m", "64Mi",
         "nvidia.com/gpu", "decor.dev/x", "spc_t", "Unmasked", "/", "10.0.0.1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "add", "drop", "name", "path", "host", "limits", "requests",
                         "cpu", "memory", "value", "hostPath", "emptyDir", "x"]),
        inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
POD_KEYS = sorted(policy.POD_SPEC_FIELDS - {"containers"}) + [
    "runtimeClassName", "schedulerName", "shareProcessNamespace", "hostAliases", "hostUsers",
    "ephemeralContainers", "unknownKey",
]  # fmt: skip
CONTAINER_KEYS = sorted(policy.CONTAINER_FIELDS - {"name", "image"}) + ["restartPolicy", "zzz"]
CONTEXT_KEYS = [
    "runAsUser", "runAsNonRoot", "runAsGroup", "allowPrivilegeEscalation", "privileged",
    "capabilities", "seccompProfile", "appArmorProfile", "seLinuxOptions", "procMount",
    "readOnlyRootFilesystem", "windowsOptions", "sysctls", "fsGroup",
]  # fmt: skip


@st.composite
def templates(draw: st.DrawFn) -> dict[str, Any]:
    def container(name: str) -> dict[str, Any]:
        found: dict[str, Any] = {"name": name, "image": "img"}
        found.update(draw(st.dictionaries(st.sampled_from(CONTAINER_KEYS), JSON, max_size=3)))
        if draw(st.booleans()):
            found["securityContext"] = draw(
                st.dictionaries(st.sampled_from(CONTEXT_KEYS), JSON, max_size=4)
            )
        return found

    spec: dict[str, Any] = draw(st.dictionaries(st.sampled_from(POD_KEYS), JSON, max_size=3))
    if draw(st.booleans()):
        spec["securityContext"] = draw(
            st.dictionaries(st.sampled_from(CONTEXT_KEYS), JSON, max_size=4)
        )
    spec["containers"] = [container("trainer")] + [
        container(f"c{i}") for i in range(draw(st.integers(0, 1)))
    ]
    if draw(st.booleans()):
        spec["initContainers"] = [container("init")]
    metadata = {"labels": draw(st.dictionaries(st.sampled_from(["a", "decor.dev/x"]), JSON,
                                               max_size=2))}  # fmt: skip
    return {"metadata": metadata, "spec": spec}


def assert_only_decors_own_host_path(pod: dict[str, Any], storage: CheckpointStorage) -> None:
    """What restricted refuses in an accepted pod is DECOR's own hostPath and nothing else."""
    findings = podsecurity.check_restricted(pod)
    if storage.volume != policy.VOLUME_HOST_PATH:
        assert findings == []
        return
    assert all(build.host_path_checkpoint_finding(f) for f in findings), findings
    owners = [c for c in pod["spec"]["initContainers"] if c["name"] == build.CHECKPOINT_OWNER_NAME]
    for owner in owners:
        assert owner["image"] == storage.owner_image
        assert owner["command"][0] == "chown" and len(owner["command"]) == 3
        assert owner["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    for item in pod["spec"]["volumes"]:
        if item["name"] == build.CHECKPOINT_VOLUME and "hostPath" in item:
            assert item["hostPath"]["path"].startswith(storage.host_root + "/")


def assert_accounted(pod: dict[str, Any]) -> None:
    """Every container but the trainer bounded (requests = limits); accelerators only there."""
    trainer_name = pod["spec"]["containers"][0]["name"]
    for c in [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])]:
        resources = c.get("resources") or {}
        names = set(resources.get("limits") or {}) | set(resources.get("requests") or {})
        if c["name"] == trainer_name:
            continue
        assert build.GPU_RESOURCE not in names
        for name in ("cpu", "memory"):
            limit = resources["limits"][name]
            assert resources.get("requests", {}).get(name, limit) == limit or (
                policy.quantity_value(resources["requests"][name]) == policy.quantity_value(limit)
            )


@pytest.mark.parametrize("storage", [CLAIM, HOST_PATH], ids=["claim", "hostPath"])
@pytest.mark.parametrize("resources", [CPU, GPU_GROUP], ids=["cpu", "gpu-group"])
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(template=templates())
def test_every_built_pod_passes_restricted_or_its_job_is_refused(
    template: dict[str, Any], resources: dict[str, Any], storage: CheckpointStorage
) -> None:  # fmt: skip
    body = job_body(resources)
    body["spec"]["template"] = template
    try:
        refused, pods = judge(body, storage)
    except ManifestError:
        return  # refused at the API server (CRD) or by the model: no pod
    if refused:
        assert pods == []
        return
    for pod in pods:
        assert_only_decors_own_host_path(pod, storage)
        assert_accounted(pod)
        assert set(pod["spec"]) <= policy.POD_SPEC_FIELDS
        labels = pod["metadata"]["labels"]
        assert "decor.dev/x" not in labels and "decor.dev/x" not in pod["metadata"]["annotations"]


# --- bounded work per job ------------------------------------------------------------------


def with_env_bytes(nbytes: int) -> dict[str, Any]:
    body = job_body()
    env: list[dict[str, str]] = []
    trainer(body)["env"] = env
    while model.template_bytes(body["spec"]["template"]) < nbytes:
        env.append({"name": f"V{len(env)}", "value": "x" * 1000})
    return body


def test_a_template_over_the_limit_is_refused_and_costs_the_view_nothing() -> None:
    from decor.core import views

    fits = with_env_bytes(model.MAX_TEMPLATE_BYTES - 2000)
    assert judge(fits)[0] == []  # a big but acceptable template still builds
    huge = with_env_bytes(1_400_000)  # near the API server's object size limit
    with pytest.raises(ManifestError, match=f"at most {model.MAX_TEMPLATE_BYTES}"):
        parse_job(huge)
    kept = views.bounded_job(huge)
    assert model.template_bytes(kept) < 2000  # the view keeps its size, not the template
    assert kept["metadata"] == huge["metadata"] and kept["spec"]["epochs"] == 2
    with pytest.raises(ManifestError, match="1[34][0-9]{5} bytes"):
        parse_job(kept)  # refused from the view's copy alike
    assert views.bounded_job(fits) == fits


def test_a_refusal_message_stays_bounded() -> None:
    body = job_body()
    pod_spec(body).update({f"field{i}": 1 for i in range(500)})
    refused, _ = judge(body)
    assert len(refused) == 500
    message = policy.describe(refused)
    assert message.endswith(f"; and {500 - policy.MAX_VIOLATIONS_SHOWN} more")
    assert len(message) < 4000
