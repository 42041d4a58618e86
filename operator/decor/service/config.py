"""The operator's configuration: the ``DECOR_*`` environment it reads and its defaults.

:class:`OperatorConfig` is what the loop, the job controllers and the actuator run with; the
entry point (:mod:`decor.service.handlers`) builds it from the environment.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from decor.adapter import scrape
from decor.core import jobperiod, leader, planner
from decor.core.policy import CheckpointStorage, TemplatePolicy

ENV_PROMETHEUS_URL = "DECOR_PROMETHEUS_URL"
"""Base URL of a Prometheus server to read progress from; unset: scrape pods directly."""
ENV_METRICS_PORT = "DECOR_METRICS_PORT"
"""Port of the operator's own /metrics (0 disables it)."""
ENV_LOG_LEVEL = "DECOR_LOG_LEVEL"
"""DEBUG, INFO (default), WARNING or ERROR."""
ENV_SIDECAR_IMAGE = "DECOR_SIDECAR_IMAGE"
"""Image of the metrics sidecar; unset: the trainer's own image."""
ENV_METRICS_ADDRESS = "DECOR_METRICS_ADDRESS"
"""Address the operator's own /metrics binds to (default 0.0.0.0)."""
ENV_HEALTH_ADDRESS = "DECOR_HEALTH_ADDRESS"
"""Address kopf's liveness endpoint binds to (default 0.0.0.0)."""
ENV_HEALTH_PORT = "DECOR_HEALTH_PORT"
"""Port of kopf's liveness endpoint /healthz (unset: none)."""
ENV_SCRAPE_VIA = "DECOR_SCRAPE_VIA"
"""How to reach a trainer's /metrics without Prometheus: ``direct`` (pod IP, the default) or
``apiserver`` (the API server's pod proxy: for an operator outside the pod network)."""
SCRAPE_DIRECT = "direct"
SCRAPE_APISERVER = "apiserver"
ENV_WATCH_NAMESPACES = "DECOR_WATCH_NAMESPACES"
"""Serve only these namespaces, comma-separated, when run_operator is given none (empty: all)."""
NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A namespace's name: an RFC 1123 label of at most 63 characters (no patterns or globs)."""
ENV_WATCH_NODES = "DECOR_WATCH_NODES"
"""``true`` (default): watch nodes and every pod cluster-wide so the planner knows capacity;
``false``: no arbitration (each job gets what its law asks; for a namespaced install)."""
ENV_PLANNER_POLICY = "DECOR_PLANNER_POLICY"
"""The planner's policy: decor (default), elasticflow, edf, decor-nn or none."""
ENV_LOST_DEADLINE = "DECOR_LOST_DEADLINE"
"""What the decor planner does with a job that can no longer meet its deadline: bestEffort
(default: it runs on what admitted jobs leave) or keep (it keeps its admitted share)."""
ENV_STALL_TIMEOUT_S = "DECOR_STALL_TIMEOUT_SECONDS"
"""A running trainer that completes no step for this long is reported Stalled (default 120)."""
ENV_UNSCHEDULABLE_WAIT_S = "DECOR_UNSCHEDULABLE_WAIT_SECONDS"
"""How long a trainer pod may stay unschedulable before the job falls back (default 120)."""
ENV_MAX_POD_FAILURES = "DECOR_MAX_POD_FAILURES"
"""Trainer crashes, or pods lost, a job survives before it is Failed (default 5)."""
ENV_MIN_PERIOD_S = "DECOR_MIN_PERIOD_SECONDS"
"""The shortest control period any job runs at (the admin's floor over spec.control)."""
ENV_LEADER_ELECTION = "DECOR_LEADER_ELECTION"
"""``true``: several replicas elect one that acts, through a Lease (the chart's default);
unset or ``false`` (the default of ``decor operator`` run by hand): this replica always acts."""
ENV_LEADER_LEASE_NAME = "DECOR_LEADER_LEASE_NAME"
"""Name of the coordination.k8s.io Lease the replicas elect through (default decor-operator)."""
ENV_LEADER_LEASE_NAMESPACE = "DECOR_LEADER_LEASE_NAMESPACE"
"""Namespace of that Lease: the operator's own (the chart sets it from the downward API);
unset: the namespace served, else ``default``."""
ENV_LEADER_IDENTITY = "DECOR_LEADER_IDENTITY"
"""This replica's name in the Lease (the chart: the pod's name); unset: HOSTNAME-PID."""
ENV_LEASE_DURATION_S = "DECOR_LEASE_DURATION_SECONDS"
"""How long a standby waits after the Lease last changed before taking it (default 15)."""
ENV_RENEW_DEADLINE_S = "DECOR_RENEW_DEADLINE_SECONDS"
"""How long the leader acts after its last renewal was sent (default 10; < lease duration)."""
ENV_RETRY_PERIOD_S = "DECOR_RETRY_PERIOD_SECONDS"
"""Time between two looks at the Lease, renewals included (default 2; < renew deadline)."""

DEFAULT_OPERATOR_METRICS_PORT = 8080
DEFAULT_LEASE_NAME = "decor-operator"
DEFAULT_MIN_PERIOD_S = 1.0
READ_TIMEOUT_S = 2.0
"""Total time one progress read may take (a Prometheus query or one trainer's /metrics)."""
COMMIT_WORKERS = 8
"""Jobs whose actuation and status write run at once in a period (API calls wait on the
network, so a thousand jobs' commits one after another would outlast a 10 s period)."""
SCRAPE_WORKERS = 16
"""Trainer endpoints scraped at once when there is no Prometheus."""
STARTUP_GRACE_S = 180.0
"""How long a new trainer pod may run without a progress sample before MetricsUnavailable.

Importing PyTorch and building the model takes tens of seconds on a small VM; until the
first sample the allocation stays where the pod started, which is what the law wants.
"""
UNSCHEDULABLE_WAIT_S = 120.0
"""How long a trainer pod may stay unschedulable before the job falls back to what last ran."""
UNSCHEDULABLE_HOLD_S = 600.0
"""After such a fallback, how long the job asks for no more than what it fell back to."""
STALL_TIMEOUT_S = jobperiod.STALL_TIMEOUT_S
MAX_POD_FAILURES = 5
"""Trainer pods lost or failed that are recreated before the job is marked Failed."""


def parse_watch_namespaces(*lists: str | None) -> tuple[str, ...]:
    """The namespaces to serve from comma-separated lists (``" ml, ml-dev "``), in order,
    each once; empty: every namespace. Raises ValueError naming a name that is not a
    namespace's (an RFC 1123 label; kopf's patterns such as ``ml-*`` or ``!kube-system`` are
    refused: serving them would need a cluster-wide namespace watch)."""
    names: list[str] = []
    for text in lists:
        for item in (text or "").split(","):
            name = item.strip()
            if not name:
                continue
            if not NAMESPACE_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a namespace name (lowercase letters, digits and '-', "
                    "at most 63 characters, starting and ending with a letter or digit)"
                )
            if name not in names:
                names.append(name)
    return tuple(names)


def watch_namespaces(
    given: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The namespaces the operator serves: ``given`` (``decor operator --namespace``) when
    not empty, else ``$DECOR_WATCH_NAMESPACES``; empty: all namespaces. Raises ValueError on a
    bad name."""
    if given:
        return parse_watch_namespaces(*given)
    env = os.environ if environ is None else environ
    return parse_watch_namespaces(env.get(ENV_WATCH_NAMESPACES))


@dataclass(frozen=True)
class OperatorConfig:
    """How the operator reads progress and builds pods (from the environment by default)."""

    prometheus_url: str | None = None
    sidecar_image: str | None = None
    checkpoint_storage: CheckpointStorage = field(default_factory=CheckpointStorage)
    template_policy: TemplatePolicy = field(default_factory=TemplatePolicy)
    startup_grace_s: float = STARTUP_GRACE_S
    max_pod_failures: int = MAX_POD_FAILURES
    unschedulable_wait_s: float = UNSCHEDULABLE_WAIT_S
    unschedulable_hold_s: float = UNSCHEDULABLE_HOLD_S
    stall_timeout_s: float = STALL_TIMEOUT_S
    scrape_via: str = SCRAPE_DIRECT
    instance: str = field(default_factory=socket.gethostname)
    watch_nodes: bool = True
    planner_policy: str = planner.POLICY_DECOR
    lost_deadline: str = planner.LOST_BEST_EFFORT
    min_period_s: float = DEFAULT_MIN_PERIOD_S
    read_timeout_s: float = READ_TIMEOUT_S
    read_wait_s: float = scrape.READ_WAIT_S
    scrape_workers: int = SCRAPE_WORKERS
    commit_workers: int = COMMIT_WORKERS
    leader_election: bool = False
    lease_name: str = DEFAULT_LEASE_NAME
    lease_namespace: str | None = None
    leader_identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    lease_timings: leader.LeaseTimings = field(default_factory=leader.LeaseTimings)

    def __post_init__(self) -> None:
        if self.planner_policy not in planner.POLICIES:
            raise ValueError(
                f"{ENV_PLANNER_POLICY}={self.planner_policy!r}: one of {', '.join(planner.POLICIES)}"
            )
        if self.lost_deadline not in planner.LOST_DEADLINE_RULES:
            rules = ", ".join(planner.LOST_DEADLINE_RULES)
            raise ValueError(f"{ENV_LOST_DEADLINE}={self.lost_deadline!r}: one of {rules}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> OperatorConfig:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            "prometheus_url": env.get(ENV_PROMETHEUS_URL) or None,
            "sidecar_image": env.get(ENV_SIDECAR_IMAGE) or None,
            "checkpoint_storage": CheckpointStorage.from_env(env),
            "template_policy": TemplatePolicy.from_env(env),
            "scrape_via": env.get(ENV_SCRAPE_VIA) or SCRAPE_DIRECT,
            "watch_nodes": _flag(env.get(ENV_WATCH_NODES), default=True),
            "planner_policy": env.get(ENV_PLANNER_POLICY) or planner.POLICY_DECOR,
            "lost_deadline": env.get(ENV_LOST_DEADLINE) or planner.LOST_BEST_EFFORT,
            "min_period_s": float(env.get(ENV_MIN_PERIOD_S) or DEFAULT_MIN_PERIOD_S),
            "stall_timeout_s": float(env.get(ENV_STALL_TIMEOUT_S) or STALL_TIMEOUT_S),
            "unschedulable_wait_s": float(
                env.get(ENV_UNSCHEDULABLE_WAIT_S) or UNSCHEDULABLE_WAIT_S
            ),
            "max_pod_failures": int(env.get(ENV_MAX_POD_FAILURES) or MAX_POD_FAILURES),
            "leader_election": _flag(env.get(ENV_LEADER_ELECTION), default=False),
            "lease_name": env.get(ENV_LEADER_LEASE_NAME) or DEFAULT_LEASE_NAME,
            "lease_namespace": env.get(ENV_LEADER_LEASE_NAMESPACE) or None,
            "lease_timings": leader.LeaseTimings(
                lease_duration_s=float(env.get(ENV_LEASE_DURATION_S) or leader.LEASE_DURATION_S),
                renew_deadline_s=float(env.get(ENV_RENEW_DEADLINE_S) or leader.RENEW_DEADLINE_S),
                retry_period_s=float(env.get(ENV_RETRY_PERIOD_S) or leader.RETRY_PERIOD_S),
            ),
        }
        if env.get(ENV_LEADER_IDENTITY):
            values["leader_identity"] = env[ENV_LEADER_IDENTITY]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _flag(text: str | None, *, default: bool) -> bool:
    """An on/off setting: 0, false, no, off are off; 1, true, yes, on are on; unset: default."""
    if not text:
        return default
    return text.strip().lower() not in ("0", "false", "no", "off")
