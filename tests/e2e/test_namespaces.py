"""One operator serving a list of namespaces, with the chart's namespaced rights only.

The operator runs here as a subprocess (``decor operator --namespace A --namespace B``) under
the chart's own ServiceAccount: a token of it, bound by the Role and RoleBinding the chart
renders for ``watchNamespaces={A,B}`` and nothing cluster-scoped (no node watch, no CRD
read). It runs a short job in each of A and B to Succeeded and leaves a job in a third
namespace untouched.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.api import vocabulary
from test_operator import (
    CHART,
    CPU_MAX_CORES,
    CPU_MIN,
    NODE_EXEC,
    OperatorProcess,
    crd,  # noqa: F401 - a fixture, used by name
    create_job,
    delete_jobs,
    get_job,
    helm_or_skip,
    job_manifest,
    lane_steps,
    report,
    trainer_pods,
    wait_succeeded,
)

pytestmark = pytest.mark.e2e


def token_kubeconfig(admin: str, token: str, path: Path) -> str:
    """A kubeconfig for the cluster of ``admin``'s current context that signs in with
    ``token`` (a ServiceAccount's): the operator runs with exactly that account's rights."""
    config = yaml.safe_load(Path(admin).read_text())
    (context,) = [c for c in config["contexts"] if c["name"] == config["current-context"]]
    (cluster,) = [c for c in config["clusters"] if c["name"] == context["context"]["cluster"]]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "decor", "user": {"token": token}}],
                "contexts": [
                    {"name": "decor", "context": {"cluster": cluster["name"], "user": "decor"}}
                ],
                "current-context": "decor",
            }
        )
    )
    return str(path)


def namespaced_rights(helm: str, home: str, served: list[str], path: Path) -> list[dict[str, Any]]:
    """The chart's ServiceAccount (in ``home``) and its RBAC for ``watchNamespaces=served``,
    rendered into ``path``."""
    args = [helm, "template", "decor", str(CHART), "-n", home,
            "--set", "watchNamespaces={" + ",".join(served) + "}",
            # one operator, run by the test: no Lease, so no Role for one
            "--set", "replicaCount=1", "--set", "leaderElection.enabled=false",
            "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml"]  # fmt: skip
    if NODE_EXEC:  # off the test bed the operator reads /metrics through the API server
        args += ["--set", "trainer.scrapeVia=apiserver"]
    rendered = subprocess.run(args, check=True, capture_output=True, text=True, timeout=60).stdout
    path.write_text(rendered)
    return [d for d in yaml.safe_load_all(rendered) if d]


def test_one_operator_serves_two_namespaces_with_roles_and_ignores_a_third(
    kube: Any,
    namespace: str,
    crd: None,  # noqa: F811 - the fixture
    trainer_image: str,
    tmp_path: Path,
) -> None:
    helm = helm_or_skip()
    with (
        kube.fresh_namespace("served-second") as second,
        kube.fresh_namespace("not-served") as third,
    ):
        served = [namespace, second]
        rights = namespaced_rights(helm, namespace, served, tmp_path / "rbac.yaml")
        assert sorted((d["kind"], d["metadata"].get("namespace")) for d in rights) == sorted(
            [("ServiceAccount", namespace), ("Role", namespace), ("Role", second),
             ("RoleBinding", namespace), ("RoleBinding", second)]
        )  # fmt: skip
        kube.kubectl("apply", "-f", str(tmp_path / "rbac.yaml"))
        account = f"system:serviceaccount:{namespace}:decor"
        for args, allowed in [
            (("list", "pods", "-n", second), True),
            (("list", "pods", "-n", third), False),
            (("list", "pods", "--all-namespaces"), False),
            (("list", "deadlinetrainingjobs.decor.dev", "-n", third), False),
        ]:
            answer = kube.kubectl("auth", "can-i", "--as", account, *args, check=False).strip()
            assert (answer == "yes") is allowed, (args, answer)
        token = kube.kubectl("-n", namespace, "create", "token", "decor", "--duration=1h").strip()
        process = OperatorProcess(
            token_kubeconfig(kube.kubeconfig, token, tmp_path / "decor.kubeconfig"),
            namespace,
            tmp_path / "operator.log",
            more_namespaces=(second,),
            env={"DECOR_WATCH_NODES": "false"},  # no cluster-wide pod or node watch
        )
        # Two trainers at once in this lane: each gets half of its share, and its steps are
        # sized to it (lane_steps; unsized, 60 steps at 200m on a slow VM took 108 s).
        half = f"{round(CPU_MAX_CORES * 500)}m"
        manifest = job_manifest(
            "short", trainer_image, epochs=1, steps_per_epoch=lane_steps(60), duration="45s",
            resources={"mode": "cpu", "min": CPU_MIN, "max": half, "initial": half},
            checkpoint=False,
        )  # fmt: skip
        process.start()
        try:
            for where in (namespace, second, third):
                create_job(kube, where, manifest)
            for where in served:
                report(f"short in {where}", wait_succeeded(kube, where, "short", timeout=240))
            ignored = get_job(kube, third, "short")
            assert not ignored.get("status"), ignored
            assert not (ignored["metadata"].get("annotations") or {}), ignored["metadata"]
            assert trainer_pods(kube, third, "short") == []
            log = process.log_text()
            assert f"serving {namespace}, {second}" in log
            # no get on the CRD in this install: a warning, and the operator started anyway
            assert f"cannot read CRD {vocabulary.CRD_NAME} to check its revision" in log
        finally:
            for where in served:
                delete_jobs(kube, where, process)
            process.stop()
            print(f"\n----- operator log (tail) -----\n{process.log_text()[-20000:]}")
