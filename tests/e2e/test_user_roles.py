"""Kubernetes' built-in user roles gain rights on DeadlineTrainingJobs from the chart.

A cluster-wide install (no ``watchNamespaces``) renders ``<release>-edit`` and
``<release>-view``, aggregated into ``edit``/``admin`` and ``view``
(``rbac.aggregateToUserRoles``; docs/operations.md, "Rights for users"). Here the chart is
installed cluster-wide with no operator replica (``replicaCount=0``: nothing acts on jobs, so
the test shares the node with the other lanes) under a release name of its own, and three
impersonated users are bound in the test's namespace (RoleBindings to the built-in
ClusterRoles): one to ``edit``, one to ``admin`` and one to ``view``. The editor creates,
patches and deletes a job for real, and ``kubectl auth can-i`` gives the admin the same
rights; the viewer reads the job and is refused every write; none may write a job's status
(the operator's) or has any right outside the namespace; and once the release is
uninstalled, the aggregated rights are gone.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.api import vocabulary
from test_operator import (
    CHART,
    crd,  # noqa: F401 - a fixture, used by name
    helm_or_skip,
    job_manifest,
)

pytestmark = pytest.mark.e2e

EDITOR = "decor-editor"
ADMIN = "decor-admin"  # bound to admin, which aggregates what edit does
VIEWER = "decor-viewer"
# impersonated users get only the groups named; a real signed-in user has this one too
GROUPS = ("system:authenticated",)
RESOURCE = f"{vocabulary.PLURAL}.{vocabulary.API_GROUP}"
WRITES = ("create", "patch", "update", "delete")
READS = ("get", "list", "watch")


def as_user(user: str) -> list[str]:
    """kubectl's impersonation flags for ``user`` and GROUPS."""
    flags = ["--as", user]
    for group in GROUPS:
        flags += ["--as-group", group]
    return flags


def can_i(kube: Any, user: str, verb: str, *args: str) -> bool:
    """``kubectl auth can-i VERB ARGS`` answered for ``user`` (an exit status 1 is "no")."""
    answer = kube.kubectl("auth", "can-i", *as_user(user), verb, *args, check=False)
    return answer.strip() == "yes"


def kubectl_as(kube: Any, user: str, *args: str) -> str:
    """kubectl ARGS as ``user``; its stdout (the test fails when kubectl does)."""
    return str(kube.kubectl(*as_user(user), *args))


def assert_refused(kube: Any, user: str, *args: str) -> None:
    """The API server refuses kubectl ARGS as ``user`` for lack of rights."""
    with pytest.raises(AssertionError, match=r"(?i)forbidden"):
        kube.kubectl(*as_user(user), *args)


def suspended_job(name: str) -> dict[str, Any]:
    """A job no operator will start (the chart runs none here, and it is suspended)."""
    manifest = job_manifest(name, "localhost/decor/trainer:0.1.0", duration="300s")
    manifest["spec"]["suspend"] = True
    return manifest


def test_chart_user_roles_let_editors_run_jobs_and_viewers_read_them(
    kube: Any,
    namespace: str,
    crd: None,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    helm = helm_or_skip()
    release = f"roles-{namespace.rsplit('-', 1)[-1]}"
    base = [helm, "--kubeconfig", kube.kubeconfig, "-n", namespace]
    subprocess.run(
        [*base, "install", release, str(CHART), "--set", "replicaCount=0"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    installed = True
    try:
        rendered = kube.kubectl("get", "clusterroles", "-l", f"app.kubernetes.io/instance={release}",
                                "-o", "name")  # fmt: skip
        assert {
            f"clusterrole.rbac.authorization.k8s.io/{release}-decor-{r}" for r in ("edit", "view")
        } <= set(rendered.split()), rendered
        bindings = (
            ("editors", "edit", EDITOR),
            ("admins", "admin", ADMIN),
            ("viewers", "view", VIEWER),
        )
        for binding, role, user in bindings:
            kube.kubectl("-n", namespace, "create", "rolebinding", binding,
                         f"--clusterrole={role}", f"--user={user}")  # fmt: skip
        ns = ["-n", namespace]
        kube.wait_for(
            lambda: can_i(kube, EDITOR, "create", RESOURCE, *ns) and can_i(kube, VIEWER, "list", RESOURCE, *ns),
            60, "the aggregated rules in edit and view",
        )  # fmt: skip
        check_answers(kube, namespace)
        check_real_requests(kube, namespace, tmp_path / "job.yaml")
        subprocess.run([*base, "uninstall", release], check=True, capture_output=True, timeout=120)
        installed = False
        kube.wait_for(
            lambda: not any(can_i(kube, user, "get", RESOURCE, *ns) for user in (EDITOR, ADMIN, VIEWER)),
            60, "the rights to go with the release",
        )  # fmt: skip
        assert can_i(kube, EDITOR, "create", "configmaps", *ns), "edit itself should stay"
    finally:
        if installed:
            subprocess.run(
                [*base, "uninstall", release], capture_output=True, timeout=120, check=False
            )


def check_answers(kube: Any, namespace: str) -> None:
    """``kubectl auth can-i`` for each verb, user, subresource and namespace."""
    ns = ["-n", namespace]
    for verb in (*READS, *WRITES):
        for user in (EDITOR, ADMIN):
            assert can_i(kube, user, verb, RESOURCE, *ns), f"{user} should {verb}"
    for verb in READS:
        assert can_i(kube, VIEWER, verb, RESOURCE, *ns), f"viewer should {verb}"
    for verb in WRITES:
        assert not can_i(kube, VIEWER, verb, RESOURCE, *ns), f"viewer should not {verb}"
    for user in (EDITOR, ADMIN, VIEWER):
        for verb in ("patch", "update"):  # the job's status is the operator's
            assert not can_i(kube, user, verb, RESOURCE, "--subresource=status", *ns), (user, verb)
        # a RoleBinding grants nothing elsewhere
        assert not can_i(kube, user, "get", RESOURCE, "-n", "default"), user
        assert not can_i(kube, user, "list", RESOURCE, "--all-namespaces"), user


def check_real_requests(kube: Any, namespace: str, path: Path) -> None:
    """The editor creates, patches and deletes a job; the viewer reads it, and the API server
    refuses its writes."""
    name = "by-the-editor"
    path.write_text(yaml.safe_dump(suspended_job(name)))
    ns = ["-n", namespace]
    kubectl_as(kube, EDITOR, *ns, "create", "-f", str(path))
    listed = json.loads(kubectl_as(kube, VIEWER, *ns, "get", "dtj", "-o", "json"))
    assert [j["metadata"]["name"] for j in listed["items"]] == [name]
    move = json.dumps({"spec": {"duration": "400s"}})
    assert_refused(kube, VIEWER, *ns, "patch", "dtj", name, "--type=merge", "-p", move)
    assert_refused(kube, VIEWER, *ns, "delete", "dtj", name)
    assert_refused(kube, VIEWER, *ns, "create", "-f", str(path))
    forged = json.dumps({"status": {"phase": "Succeeded"}})
    for user in (EDITOR, VIEWER):
        assert_refused(kube, user, *ns, "patch", "dtj", name, "--subresource=status",
                       "--type=merge", "-p", forged)  # fmt: skip
    kubectl_as(kube, EDITOR, *ns, "patch", "dtj", name, "--type=merge", "-p", move)
    job = json.loads(kube.kubectl(*ns, "get", "dtj", name, "-o", "json"))
    assert job["spec"]["duration"] == "400s" and not job.get("status", {}).get("phase"), job
    kubectl_as(kube, EDITOR, *ns, "delete", "dtj", name, "--wait=true", "--timeout=60s")
    assert not kube.kubectl(*ns, "get", "dtj", "-o", "name").strip()
