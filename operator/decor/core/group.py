"""A GPU job that spans several pods: one data-parallel world, built and read (pure).

With ``spec.resources.gpusPerPod: p`` a job granted more than p GPUs runs as the pods of
:func:`capacity.pod_gpu_counts` (at most p GPUs each, as even as possible). They form one
``torch.distributed`` world: the first pod (the *leader*, named like a one-pod trainer) holds
global rank 0, which serves the c10d rendezvous store, reports progress and writes
checkpoints; the others (*workers*, ``LEADER-w1``, ``LEADER-w2``, ...) reach the store
through the job's rendezvous Service, a ClusterIP Service that selects the current leader.
A ClusterIP, not a headless Service: its address is known before any pod starts and works
without cluster DNS (the rendezvous address is handed to the workers as an IP).

The group is created together and restarted together: a count change, a lost or failed
pod, preemption and suspension delete every pod of it, and the leader's checkpoint brings
the next group back at the exact step (docs/distributed.md).

Nothing here talks to the API server; ``job.py`` decides when, ``kube.py`` sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from decor_trainer import contract

from decor.api import vocabulary
from decor.api.model import JobSpec
from decor.core import build, capacity
from decor.core.policy import CheckpointStorage

ENV_GROUP_PODS = "DECOR_GROUP_PODS"
"""On every trainer pod's trainer container: how many pods its group has (itself included).
Read back by :func:`group_size` from the pod's spec, which DECOR writes and nobody can
change after creation; never from metadata, which anyone who may patch pods can write."""

LEADER_ADDRESS = "127.0.0.1"
"""The leader's own workers reach the store in their pod, not through the Service."""
RENDEZVOUS_SUFFIX = "-rendezvous"


def rendezvous_service_name(job_name: str) -> str:
    return f"{job_name}{RENDEZVOUS_SUFFIX}"


def worker_pod_name(leader: str, index: int) -> str:
    """The ``index``-th worker pod (1, 2, ...) of the group led by ``leader``."""
    return f"{leader}-w{index}"


def worker_index(name: str) -> int:
    """1 for ``LEADER-w1`` and so on (0 for a name that is not a worker's)."""
    head, _, tail = name.rpartition("-w")
    return int(tail) if head and tail.isdigit() else 0


def pod_counts(spec: JobSpec, allocation: float) -> list[int]:
    """GPUs per pod for ``allocation`` GPUs: one pod unless ``gpusPerPod`` splits it."""
    total = round(allocation)
    if spec.resources.mode != "gpu" or spec.resources.gpus_per_pod <= 0:
        return [total]
    return capacity.pod_gpu_counts(total, spec.resources.gpus_per_pod)


def planned_nodes(spec: JobSpec, allocation: float, placed: capacity.Pods) -> tuple[str, ...]:
    """The node of each GPU trainer pod for ``allocation``, in the group's order, from where
    the planner placed them (``placed``: its ``Grant.pods``); () when the placement is not the
    group's pods one by one (no plan, or a count the planner did not grant), and for a CPU
    job. *Why not CPU*: a CPU job grows in place on its node, and the planner books a new one
    at its probe by best fit, the tightest node; pods sent there filled one node with over a
    hundred jobs on the scale bed, none of which could then grow, and 81 of 900 missed their
    deadlines by up to 118 %. The scheduler's spread over the emptiest nodes leaves them the
    room to grow."""
    if spec.resources.mode != "gpu":
        return ()
    if [round(amount) for _node, amount in placed] != pod_counts(spec, allocation):
        return ()
    return tuple(node for node, _amount in placed)


def build_trainer_group(
    job: Mapping[str, Any],
    spec: JobSpec,
    allocation: float,
    leader: str,
    *,
    rendezvous_ip: str | None,
    sidecar_image: str | None = None,
    checkpoint_storage: CheckpointStorage | None = None,
) -> list[dict[str, Any]]:
    """The trainer pods for ``allocation``: ``[leader]`` alone when one pod holds it (the
    pod of :func:`build.build_trainer_pod`), else the leader and its workers, each with its
    share of GPUs and the world's environment (``DECOR_WORKERS`` its own GPUs,
    ``DECOR_WORLD_SIZE``, ``DECOR_RANK_OFFSET``, ``MASTER_ADDR``/``MASTER_PORT``).
    ``rendezvous_ip``: the rendezvous Service's cluster IP (needed for several pods)."""
    counts = pod_counts(spec, allocation)
    options: dict[str, Any] = {
        "sidecar_image": sidecar_image,
        "checkpoint_storage": checkpoint_storage,
    }
    if len(counts) <= 1:
        pod = build.build_trainer_pod(job, spec, allocation, leader, **options)
        trainer = pod["spec"]["containers"][0]
        trainer["env"] = build.upsert_env(trainer["env"], ENV_GROUP_PODS, "1")
        return [pod]
    if not rendezvous_ip:
        raise ValueError("a job of several pods needs its rendezvous Service's address")
    world = sum(counts)
    pods, offset = [], 0
    for index, count in enumerate(counts):
        name = leader if index == 0 else worker_pod_name(leader, index)
        pod = build.build_trainer_pod(job, spec, float(count), name, **options)
        _join_world(pod, leader, index, offset, world, len(counts), rendezvous_ip)
        pods.append(pod)
        offset += count
    return pods


def _join_world(
    pod: dict[str, Any],
    leader: str,
    index: int,
    offset: int,
    world: int,
    group_pods: int,
    rendezvous_ip: str,
) -> None:
    """Make ``pod`` (built by :func:`build.build_trainer_pod`) pod ``index`` of a group of
    ``group_pods``: the world's environment (``world`` GPUs in all, its ranks from
    ``offset``, the leader's rendezvous address), its role label, and on the leader the
    rendezvous port; a worker names its leader and is not scraped (rank 0 alone reports)."""
    is_leader = index == 0
    trainer = pod["spec"]["containers"][0]
    env = trainer["env"]
    for key, value in (
        (contract.ENV_WORLD_SIZE, str(world)),
        (contract.ENV_RANK_OFFSET, str(offset)),
        (contract.ENV_MASTER_ADDR, LEADER_ADDRESS if is_leader else rendezvous_ip),
        (contract.ENV_MASTER_PORT, str(contract.DEFAULT_MASTER_PORT)),
        (ENV_GROUP_PODS, str(group_pods)),
    ):
        env = build.upsert_env(env, key, value)
    trainer["env"] = env
    meta = pod["metadata"]
    meta["labels"][vocabulary.LABEL_ROLE] = (
        vocabulary.ROLE_LEADER if is_leader else vocabulary.ROLE_WORKER
    )
    if is_leader:
        trainer.setdefault("ports", []).append(
            {
                "name": "rendezvous",
                "containerPort": contract.DEFAULT_MASTER_PORT,
                "protocol": "TCP",
            }
        )
    else:
        meta["labels"][vocabulary.LABEL_LEADER] = leader
        meta["annotations"]["prometheus.io/scrape"] = "false"  # rank 0 alone reports


def build_rendezvous_service(job: Mapping[str, Any]) -> dict[str, Any]:
    """The job's rendezvous Service: its leader's c10d store port (owned by the job)."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": rendezvous_service_name(meta["name"]),
            "namespace": meta.get("namespace") or "default",
            "labels": {
                vocabulary.LABEL_JOB: meta["name"],
                vocabulary.LABEL_MANAGED_BY: vocabulary.MANAGED_BY,
            },
            "ownerReferences": [build.owner_reference(job)],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {
                vocabulary.LABEL_JOB: meta["name"],
                vocabulary.LABEL_ROLE: vocabulary.ROLE_LEADER,
            },
            "ports": [
                {
                    "name": "rendezvous",
                    "port": contract.DEFAULT_MASTER_PORT,
                    "targetPort": contract.DEFAULT_MASTER_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


# --- reading pods ------------------------------------------------------------------------


def is_worker(pod: Mapping[str, Any]) -> bool:
    """A pod of a group other than its leader (it has no progress of its own): told by its
    name, which DECOR chose and nobody can change (``LEADER-wK``), not by a label."""
    return worker_index(str((pod.get("metadata") or {}).get("name") or "")) > 0


def leader_of(pod: Mapping[str, Any]) -> str | None:
    """The leader's name for a worker pod (its name without ``-wK``); None for a leader or
    a one-pod trainer."""
    if not is_worker(pod):
        return None
    return str(pod["metadata"]["name"]).rpartition("-w")[0] or None


def group_size(leader: Mapping[str, Any]) -> int:
    """How many pods the group led by ``leader`` was created with (1: a one-pod trainer),
    from the :data:`ENV_GROUP_PODS` DECOR wrote into its first container (a pod's spec is
    immutable); 1 when there is none or it is not a count."""
    containers = (leader.get("spec") or {}).get("containers") or [{}]
    for item in containers[0].get("env") or []:
        if item.get("name") == ENV_GROUP_PODS:
            value = str(item.get("value") or "")
            return max(1, int(value)) if value.isdigit() else 1
    return 1
