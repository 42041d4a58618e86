"""Which replica acts: leader election over a ``coordination.k8s.io/v1`` Lease, as pure steps.

Several operator replicas watch the same jobs; exactly one of them acts (creates, deletes,
resizes, patches status). The rule is client-go's ``leaderelection``, one step per retry
period, each a read of the Lease and at most one write:

* a Lease held by another replica is *valid* while ``now < seen_at + leaseDurationSeconds``,
  where ``seen_at`` is this replica's own clock when it last saw the Lease change (its
  resourceVersion): clocks of different machines are never compared, only durations;
* a free Lease (no holder: never held, or released), an expired one or our own is written
  with us as holder, by compare-and-swap on the resourceVersion read (create when there is
  none); a conflict means another replica wrote first: we lost, and stop acting at once;
* **fencing**: a replica acts only while ``now < sent_at + renew_deadline``, where
  ``sent_at`` is when it *sent* its last successful write. Any other replica waits at least
  ``lease_duration`` from when it *saw* that write, which is later, so the two acting
  windows never overlap; ``lease_duration - renew_deadline`` is the margin left for clock
  rates and for a write already on its way when the window closes. A replica that cannot
  reach the API server stops acting by itself, without hearing from anyone;
* a clean shutdown releases the Lease (holder cleared) after the replica stopped acting, so
  a standby takes it at its next step instead of waiting for the Lease to expire.

All times here are seconds on one replica's monotonic clock (``now_s``); the wall-clock
stamps written into the Lease (``acquireTime``, ``renewTime``) are for people and are
passed in as text. Nothing here does I/O: ``decor.service.election`` reads and writes the Lease.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from decor.api.vocabulary import LABEL_MANAGED_BY, MANAGED_BY

LEASE_DURATION_S = 15.0
"""How long a standby waits after it last saw the Lease change before it takes it over."""
RENEW_DEADLINE_S = 10.0
"""How long after its last successful renewal was sent the leader may act (the fence)."""
RETRY_PERIOD_S = 2.0
"""Time between two steps of every replica: the leader renews, standbys look."""
RELEASED_LEASE_DURATION_S = 1
"""leaseDurationSeconds of a released Lease (client-go writes the same; no holder)."""


@dataclass(frozen=True)
class LeaseTimings:
    """The election's durations, in seconds: ``retry_period < renew_deadline <
    lease_duration`` (the fence closes before any standby may take the Lease)."""

    lease_duration_s: float = LEASE_DURATION_S
    renew_deadline_s: float = RENEW_DEADLINE_S
    retry_period_s: float = RETRY_PERIOD_S

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, "
                f"got {self.retry_period_s} s, {self.renew_deadline_s} s, "
                f"{self.lease_duration_s} s"
            )

    @property
    def lease_seconds(self) -> int:
        """``leaseDurationSeconds`` as written (whole seconds, rounded up)."""
        return math.ceil(self.lease_duration_s)


@dataclass(frozen=True)
class LeaseRecord:
    """A Lease's spec as read or to be written. ``holder`` "": nobody holds it;
    ``resource_version`` None: the object does not exist yet (to be created)."""

    holder: str
    lease_duration_s: float
    transitions: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True)
class ElectorState:
    """What one replica knows between steps.

    ``seen``: the Lease as last read (None: none read yet, or none exists); ``seen_at_s``:
    when it last changed to our eyes; ``acting_until_s``: the fence (-inf: not acting);
    ``term``: how many times this replica began to act."""

    seen: LeaseRecord | None = None
    seen_at_s: float = -math.inf
    acting_until_s: float = -math.inf
    term: int = 0


@dataclass(frozen=True)
class Attempt:
    """One write to send: ``record`` (its ``resource_version`` is the precondition: the one
    read; None: create the Lease); ``starts_term``: we do not act now, so success begins a
    term (a take-over); ``sent_at_s``: when it is sent."""

    record: LeaseRecord
    starts_term: bool
    sent_at_s: float

    @property
    def create(self) -> bool:
        return self.record.resource_version is None


def acting(state: ElectorState, now_s: float) -> bool:
    """Whether this replica may write to the cluster at ``now_s`` (the fence)."""
    return now_s < state.acting_until_s


def observe(state: ElectorState, read: LeaseRecord | None, now_s: float) -> ElectorState:
    """Take in the Lease as read at ``now_s`` (None: it does not exist). ``seen_at_s`` moves
    only when the Lease changed (its resourceVersion), so a holder that stopped renewing
    expires ``lease_duration`` after its last renewal was seen."""
    before = state.seen
    changed = before is None or read is None or before.resource_version != read.resource_version
    if not changed:
        return replace(state, seen=read)
    return replace(state, seen=read, seen_at_s=now_s)


def held_by_another(state: ElectorState, identity: str, now_s: float) -> bool:
    """Whether another replica holds the Lease as last seen and it has not expired."""
    seen = state.seen
    return (
        seen is not None
        and seen.holder not in ("", identity)
        and now_s < state.seen_at_s + seen.lease_duration_s
    )


def attempt(
    state: ElectorState,
    identity: str,
    timings: LeaseTimings,
    now_s: float,
    stamp: str,
) -> Attempt | None:
    """The write this step makes after :func:`observe`, or None (a standby: another replica
    holds a valid Lease). Creates a missing Lease, renews our own, takes a free or expired
    one (``leaseTransitions`` + 1). ``stamp``: the wall-clock time as RFC 3339 text."""
    if held_by_another(state, identity, now_s):
        return None
    seen = state.seen
    starts_term = not acting(state, now_s)
    if seen is None:
        record = LeaseRecord(identity, timings.lease_seconds, 0, stamp, stamp)
    elif seen.holder == identity:
        record = replace(seen, lease_duration_s=timings.lease_seconds, renew_time=stamp)
        if starts_term:  # resumed after our renewals lapsed: a new term
            record = replace(record, acquire_time=stamp)
    else:
        record = replace(
            seen,
            holder=identity,
            lease_duration_s=timings.lease_seconds,
            transitions=seen.transitions + 1,
            acquire_time=stamp,
            renew_time=stamp,
        )
    return Attempt(record, starts_term, now_s)


def written(
    state: ElectorState, sent: Attempt, stored: LeaseRecord, timings: LeaseTimings, now_s: float
) -> ElectorState:
    """The write ``sent`` succeeded and the API server stored ``stored``: act until
    ``sent_at + renew_deadline``."""
    return ElectorState(
        seen=stored,
        seen_at_s=now_s,
        acting_until_s=sent.sent_at_s + timings.renew_deadline_s,
        term=state.term + (1 if sent.starts_term else 0),
    )


def release(state: ElectorState, identity: str, stamp: str) -> Attempt | None:
    """On a clean shutdown, after this replica stopped acting: the write that frees the
    Lease (no holder), or None when the Lease as last seen is not ours."""
    seen = state.seen
    if seen is None or seen.holder != identity or seen.resource_version is None:
        return None
    record = replace(seen, holder="", lease_duration_s=RELEASED_LEASE_DURATION_S, renew_time=stamp)
    return Attempt(record, starts_term=False, sent_at_s=-math.inf)


def stop_acting(state: ElectorState) -> ElectorState:
    """Close the fence now: a write met a conflict (another replica wrote the Lease first;
    the next step reads it again), or the replica shuts down."""
    return replace(state, acting_until_s=-math.inf)


def next_step_s(state: ElectorState, identity: str, timings: LeaseTimings, now_s: float) -> float:
    """Seconds to wait before the next step: the retry period, or less when another's Lease
    expires sooner (a standby takes it the moment it may)."""
    seen = state.seen
    if seen is not None and held_by_another(state, identity, now_s):
        expires_in_s = state.seen_at_s + seen.lease_duration_s - now_s
        return max(0.0, min(timings.retry_period_s, expires_in_s))
    return timings.retry_period_s


# --- the Lease object (coordination.k8s.io/v1) ------------------------------------------------


def record_from_lease(body: Mapping[str, Any]) -> LeaseRecord:
    """The :class:`LeaseRecord` of a Lease as the API returns it (JSON, camelCase)."""
    spec = body.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_duration_s=float(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        resource_version=(body.get("metadata") or {}).get("resourceVersion"),
    )


def build_lease(namespace: str, name: str, record: LeaseRecord) -> dict[str, Any]:
    """The Lease to create or replace with ``record`` (its resourceVersion: the precondition
    of a replace; the API server refuses it with 409 Conflict if the Lease changed since)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY},
    }
    if record.resource_version is not None:
        metadata["resourceVersion"] = record.resource_version
    spec: dict[str, Any] = {
        "holderIdentity": record.holder or None,
        "leaseDurationSeconds": math.ceil(record.lease_duration_s),
        "leaseTransitions": record.transitions,
        "acquireTime": record.acquire_time,
        "renewTime": record.renew_time,
    }
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {k: v for k, v in spec.items() if v is not None},
    }
