"""The operator's replicas on the scale bed, pure: each replica's client identity, which
one led through the measurement window, and the results record's fields for the leader and
the standby. No I/O here; :mod:`bench_scale` reads the Lease, /proc, /metrics and the audit
log and hands them in.

The scale bed runs the operator as the chart does: ``--replicas`` processes (default 2) that
elect the one that acts through a coordination.k8s.io Lease. Replica N has a client
certificate of its own (user ``decor-operator-N``, cluster/scale/lib.sh), so the API server's
audit log attributes each request to the replica that sent it; N's name in the Lease is the
same string.

A replica led the window when the Lease named it as holder at both ends with no transition
between, its ``decor_operator_leader`` gauge was 1 at both ends, every other replica's was 0
and no other replica began a term in the window (``decor_operator_leader_takeovers_total``):
it was the only one that acted. (The holder itself may have begun a term: a leader that
missed its renewal, on a machine too busy to run it, stops acting and takes its own Lease
again, with no transition; its ``takeovers_in_window`` says so.) The others stood by. When
the lead moved, or the reads disagree, no replica is the leader: the record's operator
figures are then those of the replicas together and no standby figure is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from decor.api import vocabulary
from decor.core.leader import LeaseRecord

from bench.scale.measure import (
    Metrics,
    ProcSample,
    cores_mean,
    histogram_summary,
    metric_sum,
    per_second_by_kind,
    rounded,
    rss_mib_max,
)

USER_PREFIX = "decor-operator-"
TAKEOVERS = f"{vocabulary.METRIC_LEADER_TAKEOVERS}_total"
ROLE_LEADER, ROLE_STANDBY, ROLE_UNCLEAR = "leader", "standby", "lead moved"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
"""The audit log's verbs of requests that change something (a standby sends none)."""


def operator_user(index: int) -> str:
    """Replica ``index``'s client identity (its certificate's CN), also its Lease identity."""
    return f"{USER_PREFIX}{index}"


@dataclass(frozen=True)
class ReplicaRead:
    """What was read of one replica over the window: its /proc samples (Unix s, CPU s,
    bytes), its API requests by (verb, resource) from the audit log, its /metrics at the
    window's start and end."""

    identity: str
    proc: Sequence[ProcSample]
    requests: Mapping[tuple[str, str], int]
    metrics_before: Metrics
    metrics_after: Metrics

    def leader_gauge(self, after: bool) -> float:
        """``decor_operator_leader`` (1: acting) at the window's end (``after``) or start."""
        return metric_sum(
            self.metrics_after if after else self.metrics_before, vocabulary.METRIC_LEADER
        )

    def takeovers(self) -> float:
        """Terms this replica began in the window."""
        return metric_sum(self.metrics_after, TAKEOVERS) - metric_sum(
            self.metrics_before, TAKEOVERS
        )


def window_leader(
    reads: Sequence[ReplicaRead], lease_start: LeaseRecord | None, lease_end: LeaseRecord | None
) -> str | None:
    """The replica that led the whole window (see the module's rule), else None. One
    replica without a Lease runs without an election: it acts throughout."""
    if len(reads) == 1 and lease_start is None and lease_end is None:
        return reads[0].identity
    if lease_start is None or lease_end is None or not lease_start.holder:
        return None
    holder = lease_start.holder
    if lease_end.holder != holder or lease_end.transitions != lease_start.transitions:
        return None
    for read in reads:
        want = 1.0 if read.identity == holder else 0.0
        if read.leader_gauge(after=False) != want or read.leader_gauge(after=True) != want:
            return None
        if read.takeovers() and read.identity != holder:
            return None
    return holder if any(r.identity == holder for r in reads) else None


def role(read: ReplicaRead, leader: str | None) -> str:
    """``read``'s role over the window: the leader, a standby, or unclear (the lead moved)."""
    if leader is None:
        return ROLE_UNCLEAR
    return ROLE_LEADER if read.identity == leader else ROLE_STANDBY


def combined(samples: Sequence[Sequence[ProcSample]]) -> list[ProcSample]:
    """The replicas' /proc samples added up, tick by tick (the sampler reads every replica
    in each tick; the first's time stands for the tick): CPU seconds and bytes summed."""
    ticks = min((len(s) for s in samples), default=0)
    return [
        ProcSample(
            samples[0][i].time_s,
            sum(s[i].cpu_s for s in samples),
            sum(s[i].rss_bytes for s in samples),
        )
        for i in range(ticks)
    ]


def acting_samples(reads: Sequence[ReplicaRead], leader: str | None) -> list[ProcSample]:
    """The /proc samples the record's operator CPU and RSS come from: the leader's; with no
    leader for the whole window (or one replica) all replicas' together."""
    chosen = [r for r in reads if r.identity == leader] or list(reads)
    return combined([r.proc for r in chosen])


def replica_summary(read: ReplicaRead, leader: str | None, window_s: float) -> dict[str, Any]:
    """One replica's figures over the window: cores (mean), RSS MiB (max), API requests/s in
    all, by verb and resource and of writes (:data:`WRITE_VERBS`, the Lease's included),
    what it said of its leadership, and its garbage collector's pauses by generation."""
    total = sum(read.requests.values())
    return {
        "identity": read.identity,
        "role": role(read, leader),
        "cores_mean": rounded(cores_mean(read.proc)),
        "rss_mib_max": rss_mib_max(read.proc),
        "api_requests_per_s": rounded(total / window_s),
        "requests_per_s_by_kind": per_second_by_kind(read.requests, window_s),
        "writes_per_s": rounded(
            sum(n for (verb, _), n in read.requests.items() if verb in WRITE_VERBS) / window_s
        ),
        "leader_gauge_start": read.leader_gauge(after=False),
        "leader_gauge_end": read.leader_gauge(after=True),
        "takeovers_in_window": read.takeovers(),
        "gc_pauses": {
            generation: histogram_summary(
                read.metrics_before,
                read.metrics_after,
                vocabulary.METRIC_GC_PAUSE,
                generation=generation,
            )
            for generation in ("0", "1", "2")
        },
    }


def replica_fields(
    reads: Sequence[ReplicaRead],
    lease_start: LeaseRecord | None,
    lease_end: LeaseRecord | None,
    window_s: float,
) -> dict[str, Any]:
    """The record's replica fields: how many ran, which led, the Lease at both ends, each
    replica's figures, and (with two or more) the standby's: ``standby_cores_mean``,
    ``standby_rss_mib_max``, ``standby_api_requests_per_s`` (the costliest standby's each;
    None when no replica led the whole window)."""
    leader = window_leader(reads, lease_start, lease_end)
    summaries = [replica_summary(r, leader, window_s) for r in reads]
    fields: dict[str, Any] = {
        "operator_replicas": len(reads),
        "leader": leader,
        "lease": {
            "holder_at_start": lease_start.holder if lease_start else None,
            "holder_at_end": lease_end.holder if lease_end else None,
            "transitions_in_window": (
                lease_end.transitions - lease_start.transitions
                if lease_start and lease_end
                else None
            ),
        },
        "replicas": summaries,
    }
    if len(reads) > 1:
        standbys = [s for s in summaries if s["role"] == ROLE_STANDBY]
        for key in ("cores_mean", "rss_mib_max", "api_requests_per_s"):
            values = [s[key] for s in standbys if s[key] is not None]
            fields[f"standby_{key}"] = max(values) if values else None
    return fields
