"""Carries out what a period decided about one job (``lifecycle`` actions) through the
:class:`~decor.adapter.kube.Kube` facade, in the order decided: pods deleted or resized, Events
posted (by the loop's ``StatusWriter``, in order with the job's status writes),
actuations counted; and creates the trainer's pods (its checkpoint claim, the
rendezvous Service of a several-pod trainer, the pods judged once more against the admin's
policy, a free name found). Status is written by the job controller, not here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from decor.adapter.kube import Kube, KubeError
from decor.api.model import JobSpec
from decor.core import build, group, policy
from decor.core.lifecycle import (
    Action,
    CountActuation,
    DeletePod,
    LogWarning,
    PostEvent,
    ResizeCpu,
    TrainerCreated,
    WriteStatus,
)
from decor.service.config import OperatorConfig
from decor.service.operator_metrics import OperatorMetrics
from decor.service.status_writer import StatusWriter

log = logging.getLogger("decor.operator")

REFUSALS = frozenset({400, 403, 422})
"""API answers to a pod create or resize that retrying at once cannot change (an invalid
object, an admission webhook or Pod Security, a ResourceQuota or LimitRange): handed back to
the lifecycle (``lifecycle.create_refused``, ``lifecycle.resize_refused``), which says so on
the job and tries again after a backoff."""
NAME_ATTEMPTS = 5
"""Pod names tried (``NAME-i``, ``NAME-i+1``...) when a leftover pod holds one (an operator
that stopped between creating a pod and recording it)."""


class ResizeRefused(KubeError):
    """The API server refused the resize ``action`` (one of :data:`REFUSALS`)."""

    def __init__(self, action: ResizeCpu, error: KubeError) -> None:
        super().__init__(f"resize pod {action.pod}", error.status, error.message)
        self.action = action


class Actuator:
    """One job's hands on the cluster (see the module docstring)."""

    def __init__(
        self,
        namespace: str,
        name: str,
        *,
        kube: Kube,
        config: OperatorConfig,
        operator_metrics: OperatorMetrics,
        writer: StatusWriter,
    ) -> None:
        """``writer``: posts the job's Events (the job controller's, which sends them in order
        with the job's status writes)."""
        self.namespace = namespace
        self.name = name
        self.kube = kube
        self.config = config
        self.metrics = operator_metrics
        self.writer = writer

    def perform(self, action: Action, body: Mapping[str, Any], now_s: float) -> None:
        """Carry out one action (not a status write: the controller's) about the job
        ``body`` at ``now_s``."""
        if isinstance(action, PostEvent):
            log.info("%s/%s: %s %s", self.namespace, self.name, action.reason, action.message)
            self.writer.post_event(
                (self.namespace, self.name),
                build.build_event(
                    body,
                    action.type,
                    action.reason,
                    action.message,
                    now_s=now_s,
                    instance=self.config.instance,
                ),
            )
        elif isinstance(action, DeletePod):
            self.kube.delete_pod(self.namespace, action.name, grace_period_s=action.grace_period_s)
        elif isinstance(action, ResizeCpu):
            try:
                self.kube.resize_pod_cpu(self.namespace, action.pod, action.container, action.cores)
            except KubeError as exc:
                if exc.status not in REFUSALS:
                    raise
                raise ResizeRefused(action, exc) from exc
        elif isinstance(action, CountActuation):
            self.metrics.actuations.labels(kind=action.kind).inc()
        elif isinstance(action, LogWarning):
            log.warning("%s/%s: %s", self.namespace, self.name, action.message)
        elif isinstance(action, WriteStatus):
            raise TypeError("status is written by the job controller")

    def build_pods(
        self,
        body: Mapping[str, Any],
        spec: JobSpec,
        allocation: float,
        rendezvous_ip: str | None,
        name: str | None = None,
    ) -> list[dict[str, Any]]:
        """The trainer pods for ``allocation`` as this operator builds them."""
        return group.build_trainer_group(
            body,
            spec,
            allocation,
            name or build.pod_name(self.name, 0),
            rendezvous_ip=rendezvous_ip,
            sidecar_image=self.config.sidecar_image,
            checkpoint_storage=self.config.checkpoint_storage,
        )

    def create_trainer(
        self,
        body: Mapping[str, Any],
        spec: JobSpec,
        allocation: float,
        index: int,
        nodes: Sequence[str] = (),
    ) -> TrainerCreated | list[policy.Violation]:
        """Create the trainer's pods with ``allocation``, the first name tried from
        ``index``, each preferring its node in ``nodes`` (where the planner booked its room,
        one per pod: :func:`group.planned_nodes`; none: the scheduler's choice); or what
        the policy refuses in them (nothing created). Raises :class:`KubeError` when the
        API server refuses a pod."""
        taken = self._claim_taken(body, spec, index)
        if taken:
            return taken
        counts = group.pod_counts(spec, allocation)
        rendezvous_ip = None
        if len(counts) > 1:  # several pods: they meet through the job's rendezvous Service
            rendezvous_ip = self.kube.ensure_service(group.build_rendezvous_service(body))
        pods: list[dict[str, Any]] = []
        for attempt in range(NAME_ATTEMPTS):
            pods = self.build_pods(
                body, spec, allocation, rendezvous_ip, build.pod_name(self.name, index)
            )
            if nodes:
                pods = [build.with_planned_node(p, n) for p, n in zip(pods, nodes, strict=True)]
            if attempt == 0 and (refused := self._judge(pods)):
                return refused
            try:
                self.kube.create_pod(pods[0])
                break
            except KubeError as exc:
                if exc.status != 409:  # a leftover pod with that name (e.g. a crash mid-period)
                    raise
                index += 1
                pods = []
        if not pods:
            raise KubeError(f"create pod for {self.namespace}/{self.name}", 409, "no free pod name")
        for worker in pods[1:]:
            self.kube.create_pod(worker)
        names = tuple(p["metadata"]["name"] for p in pods)
        return TrainerCreated(names[0], index, allocation, names, tuple(counts))

    def _judge(self, pods: Sequence[Mapping[str, Any]]) -> list[policy.Violation]:
        return build.judge_pods(pods, self.config.template_policy, self.config.checkpoint_storage)

    def _claim_taken(
        self, body: Mapping[str, Any], spec: JobSpec, index: int
    ) -> list[policy.Violation]:
        """Create the job's checkpoint claim with its first pod; a claim of that name that
        was not made for this job is refused, not silently used."""
        claim = build.build_checkpoint_claim(body, spec, self.config.checkpoint_storage)
        if claim is None or index != 0 or self.kube.create_claim(claim):
            return []
        name = claim["metadata"]["name"]
        existing = self.kube.get_claim(self.namespace, name)
        if existing is None or build.claim_is_jobs(existing, body):
            return []
        # a kept claim of an earlier job of this name, or anyone's: not silently ours
        return [
            policy.Violation(
                "spec.checkpoint",
                f"the claim {name} exists and was not made for this job (a kept claim of "
                f"an earlier job, or another's); delete it, or name it in "
                f"spec.checkpoint.claimName where the admin allows it "
                f"({policy.ENV_ALLOWED_CLAIMS})",
            )
        ]
