"""A GPU job that spans several pods: the pure builders and readers of decor.core.group."""

from __future__ import annotations

from typing import Any

import pytest
from decor.api import vocabulary
from decor.api.model import ManifestError, parse_job
from decor.core import build, group
from decor_trainer import contract
from test_build_workers import job_body

SPREAD = {"mode": "gpu", "min": 1, "max": 6, "initial": 1, "gpusPerPod": 2}
GPU_ONE = {"mode": "gpu", "min": 1, "max": 4, "initial": 1}


def pods_for(resources: dict[str, Any], allocation: float) -> list[dict[str, Any]]:
    body = job_body(resources)
    return group.build_trainer_group(
        body, parse_job(body), allocation, "lm-3", rendezvous_ip="10.0.0.7"
    )


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def gpus(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["containers"][0]["resources"]["limits"][build.GPU_RESOURCE])


@pytest.mark.parametrize(
    ("allocation", "names", "shares"),
    [
        (1.0, ["lm-3"], ["1"]),
        (2.0, ["lm-3"], ["2"]),
        (3.0, ["lm-3", "lm-3-w1"], ["2", "1"]),
        (5.0, ["lm-3", "lm-3-w1", "lm-3-w2"], ["2", "2", "1"]),
    ],
)
def test_a_count_above_gpus_per_pod_runs_as_several_pods(
    allocation: float, names: list[str], shares: list[str]
) -> None:
    pods = pods_for(SPREAD, allocation)
    assert [p["metadata"]["name"] for p in pods] == names
    assert [gpus(p) for p in pods] == shares


def test_each_pod_gets_its_share_of_one_world() -> None:
    leader, worker1, worker2 = pods_for(SPREAD, 5.0)
    assert [env(p)[contract.ENV_WORKERS] for p in (leader, worker1, worker2)] == ["2", "2", "1"]
    assert {env(p)[contract.ENV_WORLD_SIZE] for p in (leader, worker1, worker2)} == {"5"}
    assert [env(p)[contract.ENV_RANK_OFFSET] for p in (leader, worker1, worker2)] == ["0", "2", "4"]
    # The leader serves the c10d store; the workers reach it through the Service's address.
    assert env(leader)[contract.ENV_MASTER_ADDR] == group.LEADER_ADDRESS
    assert (
        env(worker1)[contract.ENV_MASTER_ADDR]
        == env(worker2)[contract.ENV_MASTER_ADDR]
        == "10.0.0.7"
    )
    assert {env(p)[contract.ENV_MASTER_PORT] for p in (leader, worker1)} == {
        str(contract.DEFAULT_MASTER_PORT)
    }


def test_roles_are_labelled_and_only_the_leader_is_scraped() -> None:
    leader, worker = pods_for(SPREAD, 4.0)
    assert leader["metadata"]["labels"][vocabulary.LABEL_ROLE] == vocabulary.ROLE_LEADER
    assert worker["metadata"]["labels"][vocabulary.LABEL_ROLE] == vocabulary.ROLE_WORKER
    assert group.leader_of(worker) == "lm-3" and group.is_worker(worker)
    assert group.leader_of(leader) is None and not group.is_worker(leader)
    assert group.group_size(leader) == 2
    assert leader["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert worker["metadata"]["annotations"]["prometheus.io/scrape"] == "false"
    # Both belong to the job (garbage-collected with it) and mount the same checkpoint.
    assert leader["metadata"]["ownerReferences"] == worker["metadata"]["ownerReferences"]
    volumes = [
        [v for v in p["spec"]["volumes"] if v["name"] == build.CHECKPOINT_VOLUME]
        for p in (leader, worker)
    ]
    assert volumes[0] == volumes[1]


def test_one_pod_is_todays_trainer_pod() -> None:
    body = job_body({"mode": "gpu", "min": 1, "max": 4, "initial": 1})
    (pod,) = group.build_trainer_group(body, parse_job(body), 4.0, "lm-0", rendezvous_ip=None)
    alone = build.build_trainer_pod(body, parse_job(body), 4.0, "lm-0")
    alone["spec"]["containers"][0]["env"].append({"name": group.ENV_GROUP_PODS, "value": "1"})
    assert pod == alone
    assert group.group_size(pod) == 1 and not group.is_worker(pod)
    assert contract.ENV_WORLD_SIZE not in env(pod)


@pytest.mark.parametrize("allocation", [4.0, 1.0])
def test_the_group_size_is_what_decor_wrote_not_what_the_template_or_a_patch_says(
    allocation: float,
) -> None:
    """A template (or anyone who may patch pods) cannot make the operator think a trainer
    leads millions of pods: the size comes from the pod's spec as DECOR built it."""
    body = job_body(SPREAD)
    template = body["spec"]["template"]
    template.setdefault("metadata", {})["annotations"] = {"decor.dev/group-pods": "3000000"}
    template["spec"]["containers"][0]["env"] = [{"name": group.ENV_GROUP_PODS, "value": "3000000"}]
    pods = group.build_trainer_group(
        body, parse_job(body), allocation, "lm-0", rendezvous_ip="10.0.0.7"
    )
    pods[0]["metadata"]["annotations"]["decor.dev/group-pods"] = "3000000"  # a later patch
    assert group.group_size(pods[0]) == len(pods) == (2 if allocation == 4.0 else 1)
    assert [env(p)[group.ENV_GROUP_PODS] for p in pods] == [str(len(pods))] * len(pods)


def test_several_pods_need_the_rendezvous_address() -> None:
    body = job_body(SPREAD)
    with pytest.raises(ValueError, match="rendezvous"):
        group.build_trainer_group(body, parse_job(body), 4.0, "lm-0", rendezvous_ip=None)


def test_the_rendezvous_service_selects_the_leader_and_belongs_to_the_job() -> None:
    service = group.build_rendezvous_service(job_body(SPREAD))
    assert service["metadata"]["name"] == "lm-rendezvous"
    assert service["metadata"]["namespace"] == "ml"
    assert service["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert service["spec"]["selector"] == {
        vocabulary.LABEL_JOB: "lm",
        vocabulary.LABEL_ROLE: "leader",
    }
    assert service["spec"]["ports"][0]["port"] == contract.DEFAULT_MASTER_PORT
    leader = pods_for(SPREAD, 4.0)[0]
    labels = leader["metadata"]["labels"]
    assert all(labels[k] == v for k, v in service["spec"]["selector"].items())


@pytest.mark.parametrize(
    ("resources", "error"),
    [
        ({"mode": "cpu", "min": "1", "max": "2", "gpusPerPod": 1}, "applies to mode gpu"),
        ({**SPREAD, "gpusPerPod": 0}, "at least 1"),
        ({**SPREAD, "gpusPerPod": "two"}, "whole number"),
    ],
)
def test_gpus_per_pod_is_validated(resources: dict[str, Any], error: str) -> None:
    with pytest.raises(ManifestError, match=error) as caught:
        parse_job(job_body(resources))
    assert "spec.resources.gpusPerPod" in str(caught.value)


def test_room_takes_a_groups_pods_on_any_nodes_all_or_nothing() -> None:
    from decor.core.capacity import Room

    room = Room({"a": (4.0, 1.0), "b": (4.0, 2.0)})
    assert room.take_pods([2, 1])  # the 2 on b, the 1 on a (best fit)
    assert room.free == {"a": [4.0, 0.0], "b": [4.0, 0.0]}
    room = Room({"a": (4.0, 1.0), "b": (4.0, 1.0)})
    assert not room.take_pods([2, 1])  # no node holds the pod of 2
    assert room.free == {"a": [4.0, 1.0], "b": [4.0, 1.0]}  # nothing was taken
    assert Room(None).take_pods([8, 8])  # nodes not watched: nothing is limited


def test_the_planner_sees_a_groups_nodes_leader_first_then_workers_by_index() -> None:
    from decor.service.job import _pod_nodes

    def pod(name: str, node: str | None) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {}}

    workers = [pod("lm-3-w10", "c"), pod("lm-3-w2", "b"), pod("lm-3-w1", "b")]
    assert _pod_nodes(pod("lm-3", "a"), workers) == ("a", "b", "b", "c")
    assert _pod_nodes(pod("lm-3", "a"), [pod("lm-3-w1", None)]) == ()  # one not placed yet
    assert _pod_nodes(None, []) == ()
    assert group.worker_index("lm-3-w10") == 10 and group.worker_index("lm-3") == 0


def test_role_and_leader_come_from_the_pods_name_not_its_labels() -> None:
    """Labels can be patched by anyone who may patch pods; a pod's name cannot change."""
    leader, worker = pods_for(SPREAD, 4.0)
    for pod in (leader, worker):  # a later patch swaps the labels
        pod["metadata"]["labels"][vocabulary.LABEL_ROLE] = vocabulary.ROLE_WORKER
        pod["metadata"]["labels"][vocabulary.LABEL_LEADER] = "someone-else-0"
    assert not group.is_worker(leader) and group.leader_of(leader) is None
    assert group.is_worker(worker) and group.leader_of(worker) == "lm-3"
    one = {
        "metadata": {"name": "a-w1-0", "labels": {vocabulary.LABEL_ROLE: vocabulary.ROLE_WORKER}}
    }
    assert not group.is_worker(one)  # a job named a-w1: its pod a-w1-0 is no worker


CPU = {"mode": "cpu", "min": "100m", "max": "2", "initial": "1"}


@pytest.mark.parametrize(
    ("resources", "allocation", "placed", "nodes"),
    [
        (SPREAD, 5.0, (("n1", 2.0), ("n2", 2.0), ("n1", 1.0)), ("n1", "n2", "n1")),
        (SPREAD, 2.0, (("n3", 2.0),), ("n3",)),
        (CPU, 0.75, (("n1", 0.75),), ()),  # a CPU job grows in place: the scheduler spreads
        # not the group's pods one by one: the scheduler's choice
        (SPREAD, 5.0, (("n1", 2.0), ("n2", 3.0)), ()),
        (SPREAD, 3.0, (("n1", 2.0), ("n2", 2.0)), ()),
        (SPREAD, 2.0, (), ()),
        (CPU, 0.75, (), ()),
    ],
)
def test_each_new_pod_is_given_the_node_the_planner_placed_it_on(
    resources: dict[str, Any],
    allocation: float,
    placed: tuple[tuple[str, float], ...],
    nodes: tuple[str, ...],
) -> None:
    assert group.planned_nodes(parse_job(job_body(resources)), allocation, placed) == nodes


def _preferred(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"]["affinity"]["nodeAffinity"]
    return list(affinity["preferredDuringSchedulingIgnoredDuringExecution"])


def test_a_planned_node_is_preferred_beside_the_templates_affinity_not_required() -> None:
    body = job_body(CPU)
    own = {
        "weight": 5,
        "preference": {
            "matchExpressions": [{"key": "pool", "operator": "In", "values": ["train"]}]
        },
    }
    required = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}
    body["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": required,
            "preferredDuringSchedulingIgnoredDuringExecution": [own],
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    pod = build.build_trainer_pod(body, parse_job(body), 0.75, "lm-0")
    placed = build.with_planned_node(pod, "n7")
    assert _preferred(placed) == [
        own,
        {
            "weight": build.PLANNED_NODE_WEIGHT,
            "preference": {
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]
            },
        },
    ]
    affinity = placed["spec"]["affinity"]
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == required
    assert affinity["podAntiAffinity"] == {"preferredDuringSchedulingIgnoredDuringExecution": []}
    assert _preferred(pod) == [own]  # the pod built is not changed
    # Everything else is the pod as built.
    del placed["spec"]["affinity"], pod["spec"]["affinity"]
    assert placed == pod


def test_a_planned_node_on_a_pod_without_affinity() -> None:
    body = job_body(GPU_ONE)
    pod = build.build_trainer_pod(body, parse_job(body), 1.0, "lm-0")
    assert "affinity" not in pod["spec"]
    (term,) = _preferred(build.with_planned_node(pod, "gpu-node"))
    assert term["preference"]["matchFields"][0]["values"] == ["gpu-node"]
