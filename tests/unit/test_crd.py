"""The CRD YAML: it parses, has the names and printer columns users rely on, and its schema
accepts exactly the fields the manifest model (operator/decor/api/model.py) accepts.

The model lists its allowed fields in the error for an unknown one; these tests read them
from there, so a field added on one side only fails here. The CEL rules themselves run on a
real API server (tests/e2e/test_operator.py::test_bad_manifests_are_rejected_naming_the_field).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.api import vocabulary
from decor.api.model import ManifestError, parse_job
from decor.core import build, control

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "crds" / "deadlinetrainingjobs.yaml"


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    documents = list(yaml.safe_load_all(CRD_PATH.read_text()))
    assert len(documents) == 1
    return documents[0]


@pytest.fixture(scope="module")
def version(crd: dict[str, Any]) -> dict[str, Any]:
    (only,) = crd["spec"]["versions"]
    return only


@pytest.fixture(scope="module")
def schema(version: dict[str, Any]) -> dict[str, Any]:
    return version["schema"]["openAPIV3Schema"]


def at(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for part in dotted.split("."):
        node = node["properties"][part]
    return node


def test_names(crd: dict[str, Any], version: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{vocabulary.PLURAL}.{vocabulary.API_GROUP}"
    spec = crd["spec"]
    assert spec["group"] == vocabulary.API_GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == vocabulary.KIND
    assert spec["names"]["plural"] == vocabulary.PLURAL
    assert spec["names"]["shortNames"] == ["dtj"]
    assert version["name"] == vocabulary.API_VERSION
    assert version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_printer_columns(version: dict[str, Any]) -> None:
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["Phase", "Progress", "Deadline", "ETA", "CPU/GPU", "Age", "Admission"]
    # the planner's answer (a queued job's earliest deadline) with kubectl get -o wide
    assert columns["Admission"]["priority"] == 1
    assert columns["Admission"]["jsonPath"] == '.status.conditions[?(@.type=="Admitted")].message'
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert columns["Progress"]["jsonPath"] == ".status.progress"
    assert columns["Deadline"]["jsonPath"] == ".status.deadline"
    assert columns["ETA"]["jsonPath"] == ".status.eta"
    assert columns["CPU/GPU"]["jsonPath"] == ".status.allocation"
    assert columns["Age"] == {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
    }
    # Future times as type=date would print "<invalid>" in kubectl: they are strings.
    assert columns["Deadline"]["type"] == columns["ETA"]["type"] == "string"


def test_printer_columns_point_at_declared_status_fields(
    version: dict[str, Any], schema: dict[str, Any]
) -> None:
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"].lstrip(".")
        if path.startswith("metadata."):
            continue
        path = path.split("[", 1)[0]  # a filter selects among the list's items
        at(schema, path)  # raises KeyError if the field is not declared


def allowed_by_model(section: str) -> set[str]:
    """The fields parse_job accepts in ``section``, read from its unknown-field error."""
    manifest: dict[str, Any] = {
        "apiVersion": f"{vocabulary.API_GROUP}/{vocabulary.API_VERSION}",
        "kind": vocabulary.KIND,
        "metadata": {"name": "x"},
        "spec": {
            "duration": 60,
            "epochs": 1,
            "resources": {"mode": "gpu", "max": 1},
            "template": {"spec": {"containers": [{"name": "t", "image": "i"}]}},
            "checkpoint": {"path": "/c"},
            "control": {"gains": {}},
            "metrics": {},
        },
    }
    node = manifest
    for part in section.split("."):
        node = node[part]
    node["zzzUnknown"] = 1
    with pytest.raises(ManifestError) as caught:
        parse_job(manifest)
    assert caught.value.field == f"{section}.zzzUnknown"
    match = re.search(r"allowed: ([^)]*)\)", caught.value.message)
    assert match, caught.value.message
    return {name.strip() for name in match.group(1).split(",")}


@pytest.mark.parametrize(
    "section",
    [
        "spec",
        "spec.resources",
        "spec.control",
        "spec.control.gains",
        "spec.checkpoint",
        "spec.metrics",
    ],
)
def test_schema_fields_match_the_model(schema: dict[str, Any], section: str) -> None:
    assert set(at(schema, section)["properties"]) == allowed_by_model(section)


def test_field_types_mirror_the_model(schema: dict[str, Any]) -> None:
    spec = at(schema, "spec")
    assert spec["required"] == ["epochs", "resources", "template"]
    assert at(schema, "spec.deadline") == {
        **at(schema, "spec.deadline"),
        "type": "string",
        "format": "date-time",
    }
    assert at(schema, "spec.duration")["x-kubernetes-int-or-string"] is True
    for name in ("epochs", "stepsPerEpoch"):
        assert at(schema, f"spec.{name}")["type"] == "integer"
        assert at(schema, f"spec.{name}")["minimum"] == 1
    assert at(schema, "spec.resources.mode")["enum"] == ["cpu", "gpu"]
    for name in ("min", "max", "initial"):
        assert at(schema, f"spec.resources.{name}")["x-kubernetes-int-or-string"] is True
    assert at(schema, "spec.resources")["required"] == ["max"]
    assert at(schema, "spec.control.policy")["enum"] == ["decor", "decor-nn"]
    assert at(schema, "spec.template")["x-kubernetes-preserve-unknown-fields"] is True
    assert at(schema, "spec.metrics.port")["maximum"] == 65535
    assert at(schema, "spec.suspend")["type"] == "boolean"


def rules(node: dict[str, Any]) -> list[dict[str, Any]]:
    return list(node.get("x-kubernetes-validations") or [])


def test_cross_field_rules_name_their_fields(schema: dict[str, Any]) -> None:
    spec_rules = rules(at(schema, "spec"))
    xor = next(r for r in spec_rules if "has(self.deadline) != has(self.duration)" in r["rule"])
    assert "spec.deadline" in xor["message"] and "spec.duration" in xor["message"]
    resource_rules = rules(at(schema, "spec.resources"))
    paths = {r["fieldPath"] for r in resource_rules}
    assert {".min", ".initial"} <= paths
    for rule in resource_rules:
        assert rule["message"].startswith("spec.resources")
        if rule["fieldPath"] in (".batchPolicy", ".gpusPerPod"):  # only in gpu mode
            assert "self.mode == 'gpu'" in rule["rule"]
        else:
            assert "quantity(" in rule["rule"]
    assert {".batchPolicy", ".gpusPerPod"} <= paths
    assert at(schema, "spec.resources.gpusPerPod")["minimum"] == 1
    assert at(schema, "spec.resources.batchPolicy")["enum"] == ["fixedGlobal", "scaleWithWorkers"]
    for name in ("min", "max", "initial"):
        (rule,) = rules(at(schema, f"spec.resources.{name}"))
        assert "isQuantity" in rule["rule"]


def test_status_schema(schema: dict[str, Any]) -> None:
    status = at(schema, "status")
    assert set(status["properties"]) >= {
        "phase", "stepsDone", "stepsTotal", "progress", "startTime", "deadline", "eta",
        "allocation", "controller", "outcome", "conditions", "observedGeneration", "podName",
    }  # fmt: skip
    assert status["properties"]["phase"]["enum"] == list(vocabulary.PHASES)
    assert at(schema, "status.controller")["x-kubernetes-preserve-unknown-fields"] is True
    assert set(at(schema, "status.outcome")["properties"]) >= {
        "finishedAt",
        "deviationPercent",
        "late",
    }
    condition = at(schema, "status.conditions")["items"]
    assert set(condition["properties"]) == {
        "type", "status", "reason", "message", "lastTransitionTime", "observedGeneration",
    }  # fmt: skip
    assert condition["required"] == ["type", "status"]


def test_everything_the_operator_writes_to_status_is_declared(schema: dict[str, Any]) -> None:
    """A strict schema prunes undeclared status fields silently; nothing may be lost."""
    state = control.State(policy="decor", allocation=1.0)
    observation = control.Observation(time_s=5.0, steps_done=1, steps_total=2, allocation=1.0)
    status = build.build_status(
        phase=vocabulary.PHASE_RUNNING, mode="cpu", start_s=0.0, deadline_s=10.0, state=state,
        applied=1.0, desired=1.0, observation=observation, eta_s=9.0, generation=1,
        conditions=build.conditions_for_decision([], vocabulary.CONDITION_ON_TRACK, "m", now_s=1.0, generation=1),
        pod="p", epochs_done=0.0,
    )  # fmt: skip
    status.update(
        outcome=build.build_outcome(9.0, 10.0, 0.0),
        podsCreated=1,
        resizes=0,
        restarts=0,
        podFailures=0,
    )
    declared = set(at(schema, "status")["properties"])
    assert set(status) <= declared
    assert set(status["outcome"]) <= set(at(schema, "status.outcome")["properties"])
    for condition in status["conditions"]:
        assert set(condition) <= set(at(schema, "status.conditions")["items"]["properties"])


def test_the_example_manifest_is_valid_for_both(schema: dict[str, Any]) -> None:
    manifest = yaml.safe_load((REPO / "examples" / "resnet-cpu.yaml").read_text())
    parse_job(copy.deepcopy(manifest))
    spec_schema = at(schema, "spec")
    assert set(manifest["spec"]) <= set(spec_schema["properties"])
    assert set(spec_schema["required"]) <= set(manifest["spec"])


# --- template policy and metrics path (docs/security.md) ----------------------------------------

TEMPLATE_SPEC = "spec.template.spec"


def template_rules(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The CEL rules on the template, by the field path their message names."""
    pod = at(schema, TEMPLATE_SPEC)
    found = {r["fieldPath"].lstrip("."): r for r in rules(pod)}
    for kind in ("containers", "initContainers"):
        context = pod["properties"][kind]["items"]["properties"]["securityContext"]
        for rule in rules(context):
            found[f"{kind}[].securityContext{rule['fieldPath']}"] = rule
    for rule in rules(pod["properties"]["volumes"]["items"]):
        found[f"volumes[]{rule['fieldPath']}"] = rule
    return found


def test_forbidden_template_fields_are_refused_naming_the_field(schema: dict[str, Any]) -> None:
    found = template_rules(schema)
    assert set(found) == {
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "nodeName",
        "containers[].securityContext.privileged",
        "initContainers[].securityContext.privileged",
        "volumes[].hostPath",
    }
    for field, rule in found.items():
        assert rule["message"].startswith(f"{TEMPLATE_SPEC}.{field} is refused"), rule
        assert rule["reason"] == "FieldValueForbidden"
        name = field.rsplit(".", 1)[-1].removeprefix("volumes[]")
        assert f"self.{name}" in rule["rule"]
    # CEL sees only declared fields: each one checked is declared with its type.
    pod = at(schema, TEMPLATE_SPEC)
    for name in ("hostNetwork", "hostPID", "hostIPC"):
        assert pod["properties"][name]["type"] == "boolean"
    assert pod["properties"]["nodeName"]["type"] == "string"


def test_lists_with_cel_rules_are_bounded(schema: dict[str, Any]) -> None:
    """Unbounded lists make the API server estimate a CEL cost over budget and refuse the CRD."""
    pod = at(schema, TEMPLATE_SPEC)
    for kind in ("containers", "initContainers", "volumes"):
        assert isinstance(pod["properties"][kind]["maxItems"], int), kind


def test_template_stays_open_to_every_pod_field(schema: dict[str, Any]) -> None:
    pod = at(schema, TEMPLATE_SPEC)
    assert pod["x-kubernetes-preserve-unknown-fields"] is True
    for kind in ("containers", "initContainers", "volumes"):
        assert pod["properties"][kind]["items"]["x-kubernetes-preserve-unknown-fields"] is True


def crd_accepts_metrics_path(schema: dict[str, Any], path: str) -> bool:
    """The CRD's pattern, maxLength and CEL rule (its two contains() tests) on ``path``."""
    node = at(schema, "spec.metrics.path")
    (rule,) = rules(node)
    assert rule["rule"] == "!self.contains('..') && !self.contains('//')"
    return (
        len(path) <= node["maxLength"]
        and re.fullmatch(node["pattern"], path) is not None
        and ".." not in path
        and "//" not in path
    )


@pytest.mark.parametrize(
    "path",
    ["/metrics", "/", "/a/b-c_d.e~f", "metrics", "/m?x=1", "/m#f", "/../x", "//evil/x",
     "/a b", "/%2e%2e", "/a@b", "/" + "a" * 300, "/ünï"],
)  # fmt: skip
def test_metrics_path_rules_agree_with_the_model(schema: dict[str, Any], path: str) -> None:
    manifest = {
        "apiVersion": f"{vocabulary.API_GROUP}/{vocabulary.API_VERSION}",
        "kind": vocabulary.KIND,
        "metadata": {"name": "x"},
        "spec": {
            "duration": 60,
            "epochs": 1,
            "resources": {"max": 1},
            "template": {"spec": {"containers": [{"name": "t", "image": "i"}]}},
            "metrics": {"path": path},
        },
    }
    try:
        parse_job(manifest)
        model_accepts = True
    except ManifestError as exc:
        assert exc.field == "spec.metrics.path"
        model_accepts = False
    assert model_accepts == crd_accepts_metrics_path(schema, path)
    assert model_accepts == (path in ("/metrics", "/", "/a/b-c_d.e~f"))


def test_checkpoint_fields_mirror_the_model(schema: dict[str, Any]) -> None:
    from decor.api.model import CLAIM_NAME_MAX_CHARS, CLAIM_NAME_PATTERN

    claim = at(schema, "spec.checkpoint.claimName")
    assert (claim["pattern"], claim["maxLength"]) == (CLAIM_NAME_PATTERN, CLAIM_NAME_MAX_CHARS)
    assert at(schema, "spec.checkpoint.keep")["type"] == "boolean"
    (rule,) = rules(at(schema, "spec.checkpoint"))
    assert rule["fieldPath"] == ".path" and "spec.checkpoint.claimName" in rule["message"]


@pytest.mark.parametrize(
    ("checkpoint", "field"),
    [
        ({"path": "/c", "claimName": "Bad_Name"}, "spec.checkpoint.claimName"),
        ({"path": "/c", "claimName": 3}, "spec.checkpoint.claimName"),
        ({"claimName": "data"}, "spec.checkpoint.path"),
        ({"path": "/c", "keep": "yes"}, "spec.checkpoint.keep"),
    ],
)
def test_bad_checkpoint_fields_are_refused_by_the_model(
    checkpoint: dict[str, Any], field: str
) -> None:
    manifest = {
        "apiVersion": f"{vocabulary.API_GROUP}/{vocabulary.API_VERSION}",
        "kind": vocabulary.KIND,
        "metadata": {"name": "x"},
        "spec": {
            "duration": 60,
            "epochs": 1,
            "resources": {"max": 1},
            "template": {"spec": {"containers": [{"name": "t", "image": "i"}]}},
            "checkpoint": checkpoint,
        },
    }
    with pytest.raises(ManifestError) as caught:
        parse_job(manifest)
    assert caught.value.field == field
    manifest["spec"]["checkpoint"] = {"path": "/c", "claimName": "team.data-1", "keep": True}
    parsed = parse_job(manifest).checkpoint
    assert (parsed.claim_name, parsed.keep) == ("team.data-1", True)


DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def test_every_name_derived_from_a_job_name_at_the_limit_builds(schema: dict[str, Any]) -> None:
    """A 63-character name was valid but its Service and labels were not (422 every period)."""
    from decor.api.model import JOB_NAME_PATTERN, MAX_JOB_NAME_LENGTH
    from decor.core import group

    name_schema = at(schema, "metadata.name")
    assert name_schema["maxLength"] == MAX_JOB_NAME_LENGTH
    assert name_schema["pattern"] == f"^{JOB_NAME_PATTERN}$"
    name = "j" + "x" * (MAX_JOB_NAME_LENGTH - 1)
    leader = build.pod_name(name, 9_999_999_999)  # ten digits of restarts
    service = group.rendezvous_service_name(name)
    assert DNS_1035.fullmatch(service) and len(service) <= 63
    for label_value in (name, leader):  # decor.dev/job, decor.dev/leader
        assert DNS_1123_LABEL.fullmatch(label_value) and len(label_value) <= 63
    for pod in (leader, group.worker_pod_name(leader, 999), build.checkpoint_claim_name(name)):
        assert len(pod) <= 253 and all(DNS_1123_LABEL.fullmatch(p) for p in pod.split("."))


@pytest.mark.parametrize("name", ["x" * 53, "1job", "job.a", "Job"])
def test_names_that_cannot_build_are_refused(schema: dict[str, Any], name: str) -> None:
    name_schema = at(schema, "metadata.name")
    assert len(name) > name_schema["maxLength"] or not re.fullmatch(name_schema["pattern"], name)
    manifest = copy.deepcopy(yaml.safe_load((REPO / "examples" / "resnet-cpu.yaml").read_text()))
    manifest["metadata"]["name"] = name
    with pytest.raises(ManifestError, match="metadata.name"):
        parse_job(manifest)
