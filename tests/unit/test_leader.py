"""Leader election between operator replicas: the pure elector (``decor.core.leader``), its
Lease reads and writes (``decor.service.election``) against an in-memory Lease API with
compare-and-swap, the facade's fence, and the control loop of a standby. One fake clock
(seconds) for every replica; nothing sleeps."""

from __future__ import annotations

import copy
import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decor.adapter.kube import Fenced, Kube, KubeError  # noqa: E402
from decor.core import leader  # noqa: E402
from decor.service.config import OperatorConfig  # noqa: E402
from decor.service.election import LeaderElection  # noqa: E402
from decor.service.loop import ControlLoop  # noqa: E402
from decor.service.operator_metrics import OperatorMetrics  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from support.fake_trainers import FakeTrainer, linear_speed  # noqa: E402
from support.scenario import NAMESPACE, Bench, job_body  # noqa: E402

TIMINGS = leader.LeaseTimings(lease_duration_s=15.0, renew_deadline_s=10.0, retry_period_s=2.0)
STAMP = "2027-01-15T08:00:00.000000Z"


class LeaseApi:
    """The API server's part: one Lease, resourceVersions, 409 on a stale replace or a
    second create; ``reachable`` False: every call fails as a lost connection would."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.reachable = True
        self.timeout_s = 1.0
        self.writes: list[tuple[str, str]] = []  # (holder, resourceVersion) of each write

    def _check(self) -> None:
        if not self.reachable:
            raise KubeError("lease", 0, "connection refused")

    def _store(self, body: Any) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(dict(body))
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.lease = stored
        self.writes.append((str(stored["spec"].get("holderIdentity", "")), str(self.version)))
        return copy.deepcopy(stored)

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        return copy.deepcopy(self.lease)

    def create_lease(self, body: Any) -> dict[str, Any]:
        self._check()
        if self.lease is not None:
            raise KubeError("create lease", 409, "already exists")
        return self._store(body)

    def replace_lease(self, body: Any) -> dict[str, Any]:
        self._check()
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise KubeError("replace lease", 409, "the object has been modified")
        return self._store(body)

    def holder(self) -> str:
        return str((self.lease or {}).get("spec", {}).get("holderIdentity", ""))


class Replicas:
    """Operator replicas electing over one :class:`LeaseApi` with one fake clock."""

    def __init__(self, *names: str, timings: leader.LeaseTimings = TIMINGS) -> None:
        self.now = 100.0
        self.api = LeaseApi()
        self.metrics = {n: OperatorMetrics(CollectorRegistry()) for n in names}
        self.elections = {
            n: LeaderElection(
                self.api,  # type: ignore[arg-type]  # the fake has the Lease methods
                "decor-system",
                "decor-operator",
                n,
                timings,
                self.metrics[n],
                clock=lambda: self.now,
                wall_clock=lambda: 1_800_000_000.0 + self.now,
            )
            for n in names
        }

    def __getitem__(self, name: str) -> LeaderElection:
        return self.elections[name]

    def acting(self) -> list[str]:
        return [n for n, e in self.elections.items() if e.acting()]

    def sample(self, name: str, metric: str) -> float:
        value = self.metrics[name].registry.get_sample_value(metric)
        assert value is not None
        return value


# --- the pure elector -----------------------------------------------------------------------


def test_timings_must_close_the_fence_before_the_lease_expires() -> None:
    with pytest.raises(ValueError, match="renew deadline < lease duration"):
        leader.LeaseTimings(lease_duration_s=10, renew_deadline_s=10, retry_period_s=2)
    with pytest.raises(ValueError):
        leader.LeaseTimings(lease_duration_s=15, renew_deadline_s=2, retry_period_s=2)
    assert leader.LeaseTimings(6.5, 4, 1).lease_seconds == 7


def test_an_empty_lease_is_created_and_acted_on_until_the_renew_deadline() -> None:
    state = leader.observe(leader.ElectorState(), None, now_s=100.0)
    sent = leader.attempt(state, "a", TIMINGS, 100.0, STAMP)
    assert sent is not None and sent.create and sent.starts_term
    assert sent.record == leader.LeaseRecord("a", 15, 0, STAMP, STAMP)
    stored = leader.LeaseRecord("a", 15, 0, STAMP, STAMP, resource_version="1")
    state = leader.written(state, sent, stored, TIMINGS, now_s=100.3)
    assert state.term == 1
    assert leader.acting(state, 109.9) and not leader.acting(state, 110.0)  # sent + 10 s


def test_a_lease_held_by_another_is_left_alone_until_it_expires_by_our_clock() -> None:
    held = leader.LeaseRecord("b", 15, 3, "t0", "t1", resource_version="7")
    state = leader.observe(leader.ElectorState(), held, now_s=100.0)
    assert leader.attempt(state, "a", TIMINGS, 114.9, STAMP) is None
    assert leader.next_step_s(state, "a", TIMINGS, 114.0) == pytest.approx(1.0)  # not 2
    # The same resourceVersion read again: no renewal seen, the expiry does not move.
    state = leader.observe(state, held, now_s=110.0)
    sent = leader.attempt(state, "a", TIMINGS, 115.0, STAMP)
    assert sent is not None and not sent.create and sent.starts_term
    assert sent.record == leader.LeaseRecord("a", 15, 4, STAMP, STAMP, resource_version="7")
    # A renewal seen (a new resourceVersion) restarts the wait from when it was seen.
    renewed = leader.observe(state, dataclasses.replace(held, resource_version="8"), 112.0)
    assert leader.attempt(renewed, "a", TIMINGS, 126.9, STAMP) is None


def test_a_released_lease_is_taken_at_once() -> None:
    free = leader.LeaseRecord("", 1, 3, "t0", "t1", resource_version="9")
    state = leader.observe(leader.ElectorState(), free, now_s=100.0)
    sent = leader.attempt(state, "a", TIMINGS, 100.0, STAMP)
    assert sent is not None and sent.record.holder == "a" and sent.record.transitions == 4


def test_release_frees_only_our_own_lease() -> None:
    ours = leader.LeaseRecord("a", 15, 0, "t0", "t1", resource_version="3")
    state = leader.observe(leader.ElectorState(), ours, now_s=100.0)
    freeing = leader.release(state, "a", STAMP)
    assert freeing is not None
    assert freeing.record.holder == "" and freeing.record.resource_version == "3"
    assert leader.release(state, "b", STAMP) is None


def test_lease_objects_round_trip() -> None:
    record = leader.LeaseRecord("a", 6, 2, "t0", "t1", resource_version="5")
    body = leader.build_lease("decor-system", "decor-operator", record)
    assert body["metadata"]["resourceVersion"] == "5"
    assert body["spec"]["leaseDurationSeconds"] == 6
    assert leader.record_from_lease(body) == record
    freed = leader.build_lease("ns", "l", leader.LeaseRecord("", 1, 2, resource_version="6"))
    assert "holderIdentity" not in freed["spec"]


# --- replicas electing over one Lease ---------------------------------------------------------


def test_one_replica_acts_and_renews_the_other_stands_by() -> None:
    replicas = Replicas("a", "b")
    replicas["a"].step()
    replicas["b"].step()
    assert replicas.acting() == ["a"]
    for _ in range(20):  # 40 s of renewals
        replicas.now += 2.0
        replicas["a"].step()
        replicas["b"].step()
        assert replicas.acting() == ["a"]
    assert replicas["a"].term() == 1 and replicas["b"].term() is None
    assert replicas.api.lease is not None
    assert replicas.api.lease["spec"]["leaseTransitions"] == 0
    assert {holder for holder, _rv in replicas.api.writes} == {"a"}
    assert replicas.sample("a", "decor_operator_leader") == 1.0
    assert replicas.sample("b", "decor_operator_leader") == 0.0
    assert replicas.sample("a", "decor_operator_leader_takeovers_total") == 1.0
    assert replicas.sample("b", "decor_operator_leader_takeovers_total") == 0.0


def test_the_standby_takes_over_after_the_lease_expires() -> None:
    replicas = Replicas("a", "b")
    replicas["a"].step()
    replicas["b"].step()
    last_renewal_sent = replicas.now
    # a dies. b keeps looking, at the retry period or sooner when the Lease expires sooner.
    while True:
        wait_s = replicas["b"].step()
        if replicas["b"].acting():
            took_at = replicas.now
            break
        replicas.now += wait_s
    assert took_at == pytest.approx(last_renewal_sent + TIMINGS.lease_duration_s)
    assert replicas.api.holder() == "b"
    assert replicas.api.lease is not None
    assert replicas.api.lease["spec"]["leaseTransitions"] == 1
    assert replicas.sample("b", "decor_operator_leader_takeovers_total") == 1.0


def test_the_loser_of_a_race_for_the_lease_does_not_act() -> None:
    replicas = Replicas("a", "b")
    replicas.api.lease = leader.build_lease(
        "decor-system", "decor-operator", leader.LeaseRecord("gone", 15, 0, "t", "t")
    )
    replicas.api.lease["metadata"]["resourceVersion"] = "1"
    replicas.api.version = 1
    replicas["a"].step()
    replicas["b"].step()  # both saw it at 100 s
    replicas.now += 15.0
    # Both read the expired Lease, then a writes first: b's replace carries a stale version.
    body = replicas.api.get_lease("decor-system", "decor-operator")
    assert body is not None
    replicas["a"].step()
    real_get = replicas.api.get_lease
    replicas.api.get_lease = lambda namespace, name: copy.deepcopy(body)  # type: ignore[method-assign]
    replicas["b"].step()
    replicas.api.get_lease = real_get  # type: ignore[method-assign]
    assert replicas.acting() == ["a"]
    assert replicas.api.holder() == "a"
    replicas.now += 2.0
    replicas["b"].step()  # reads a's Lease now: stands by
    assert replicas.acting() == ["a"]


def test_a_leader_that_cannot_renew_stops_acting_before_anyone_may_take_over() -> None:
    replicas = Replicas("a", "b")
    replicas["a"].step()
    replicas["b"].step()
    replicas.now += 2.0
    replicas["a"].step()  # its last renewal: b sees it 1 s later
    sent_at = replicas.now
    replicas.now += 1.0
    replicas["b"].step()
    b_next_s = replicas.now + 2.0
    # a loses the API server: its reads and writes fail from now on, b's do not.
    cut_off = LeaseApi()
    cut_off.reachable = False
    replicas["a"].kube = cut_off  # type: ignore[assignment]
    stopped_at = took_at = None
    while took_at is None:
        replicas.now += 0.25
        replicas["a"].step()
        if replicas.now >= b_next_s:
            b_next_s = replicas.now + replicas["b"].step()
        if stopped_at is None and not replicas["a"].acting():
            stopped_at = replicas.now
        if replicas["b"].acting():
            took_at = replicas.now
        assert len(replicas.acting()) <= 1  # never two at once
    assert stopped_at == pytest.approx(sent_at + TIMINGS.renew_deadline_s)
    assert took_at >= sent_at + 1.0 + TIMINGS.lease_duration_s
    assert stopped_at is not None
    assert took_at - stopped_at >= TIMINGS.lease_duration_s - TIMINGS.renew_deadline_s
    assert replicas.sample("a", "decor_operator_leader") == 0.0


def test_a_clean_shutdown_releases_the_lease_and_the_standby_takes_it_at_once() -> None:
    replicas = Replicas("a", "b")
    replicas["a"].step()
    replicas["b"].step()
    replicas.now += 1.0
    replicas["a"].stop()
    assert not replicas["a"].acting()  # the fence closes before the Lease is freed
    replicas["a"].release()
    assert replicas.api.holder() == ""
    replicas.now += 1.0
    replicas["b"].step()
    assert replicas.acting() == ["b"]  # 2 s after a last renewed, not 15


@pytest.mark.parametrize("stopped_during", ["read", "write"])
def test_a_step_in_flight_when_the_replica_stops_begins_no_term(stopped_during: str) -> None:
    """The shutdown's stop comes while a step is reading the Lease (it then writes nothing)
    or while its write is on the wire (what it stored is kept, so that release frees it):
    either way the replica does not act again, nor count a takeover, nor wake the loop."""
    replicas = Replicas("a", "b")
    a = replicas["a"]
    a.step()
    woken: list[bool] = []
    a.on_acting = lambda: woken.append(True)
    replicas.now += TIMINGS.renew_deadline_s + 1.0  # a's fence lapsed: its next write begins a term
    api_call = replicas.api.get_lease if stopped_during == "read" else replicas.api.replace_lease

    def stopping(*args: Any) -> Any:
        result = api_call(*args)
        a.stop()
        return result

    setattr(replicas.api, "get_lease" if stopped_during == "read" else "replace_lease", stopping)
    writes = len(replicas.api.writes)
    a.step()
    assert len(replicas.api.writes) == writes + (stopped_during == "write")
    assert not a.acting() and a.term() is None and not woken
    assert replicas.sample("a", "decor_operator_leader_takeovers_total") == 1.0
    assert replicas.sample("a", "decor_operator_leader") == 0.0
    a.release()
    assert replicas.api.holder() == ""
    replicas["b"].step()
    assert replicas.acting() == ["b"]


def test_a_leader_whose_renewals_lapsed_resumes_in_a_new_term() -> None:
    replicas = Replicas("a")
    replicas["a"].step()
    replicas.api.reachable = False
    replicas.now += 11.0
    replicas["a"].step()
    assert not replicas["a"].acting()
    replicas.api.reachable = True
    replicas.now += 1.0
    replicas["a"].step()  # nobody took it: still ours
    assert replicas["a"].term() == 2
    assert replicas.sample("a", "decor_operator_leader_takeovers_total") == 2.0


# --- the fence in the facade and the loop -------------------------------------------------------


def test_the_facade_sends_no_write_while_fenced_but_the_lease_is_still_written() -> None:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # nothing listens: any request sent would fail
    kube = Kube(client.ApiClient(configuration), timeout_s=0.5)
    kube.may_write = lambda: False
    pod = {"metadata": {"namespace": "ns", "name": "p"}}
    for write in (
        lambda: kube.create_pod(pod),
        lambda: kube.delete_pod("ns", "p"),
        lambda: kube.resize_pod_cpu("ns", "p", "trainer", 1.0),
        lambda: kube.patch_job_status("ns", "j", {"phase": "Running"}),
        lambda: kube.ensure_service({"metadata": {"namespace": "ns", "name": "s"}}),
        lambda: kube.create_claim({"metadata": {"namespace": "ns", "name": "c"}}),
    ):
        with pytest.raises(Fenced):
            write()
    with pytest.raises(KubeError) as sent:  # the Lease is not fenced: it was sent, and failed
        kube.get_lease("ns", "l")
    assert not isinstance(sent.value, Fenced)


def _cpu_trainer() -> FakeTrainer:
    """1000 steps (job_body: 10 epochs of 100), one step per second per core."""
    return FakeTrainer(1000, 100, linear_speed(1.0), exits=True)


def test_a_standby_loop_makes_no_call_and_a_new_leader_adopts_the_running_pod() -> None:
    bench = Bench({"node-a": (8.0, 0)})
    terms: dict[str, int | None] = {"a": 1, "b": None}
    bench.loop.acting_term = lambda: terms["a"]
    standby = ControlLoop(
        bench.view,
        kube=bench.kube,  # type: ignore[arg-type]
        config=bench.config,
        operator_metrics=OperatorMetrics(CollectorRegistry()),
        clock=lambda: bench.now,
        read_progress=bench.trainers.read,
        acting_term=lambda: terms["b"],
    )

    def both_run(advance_s: float = 10.0) -> int:
        """One period of the leader (through the bench), then the standby's: its calls."""
        bench.period(advance_s)
        before = len(bench.kube.record)
        standby.run_period()
        return len(bench.kube.record) - before

    bench.apply(job_body("resnet", initial="4", duration="600s"), _cpu_trainer())
    for _ in range(8):
        assert both_run() == 0
    decisions = bench.status("resnet")["controller"]["decisions"]
    (pod,) = bench.pods("resnet")
    # The leader dies (its loop never runs again); b takes the Lease.
    terms["a"], terms["b"] = None, 1
    bench.loop = standby
    bench.run_until(lambda: bench.phase("resnet") == "Succeeded", most=80)
    calls = [entry.get("call") for entry in bench.kube.record]
    assert calls.count("create_pod") == 1  # adopted, not recreated
    assert bench.pods("resnet")[0]["metadata"]["uid"] == pod["metadata"]["uid"]
    status = bench.status("resnet")
    assert status["controller"]["decisions"] > decisions
    assert status["podsCreated"] == 1
    assert (NAMESPACE, "resnet") in standby.controllers


def test_a_loop_forgets_its_jobs_when_its_term_changes() -> None:
    bench = Bench({"node-a": (8.0, 0)})
    term: list[int | None] = [1]
    bench.loop.acting_term = lambda: term[0]
    bench.apply(job_body("resnet", initial="4", duration="600s"), _cpu_trainer())
    bench.period()
    first = bench.loop.controllers[(NAMESPACE, "resnet")]
    term[0] = None
    before = len(bench.kube.record)
    bench.period()
    assert not bench.loop.controllers
    assert [e for e in bench.kube.record[before:] if "call" in e] == []
    term[0] = 2
    bench.period()
    assert bench.loop.controllers[(NAMESPACE, "resnet")] is not first


def test_leader_election_settings_from_the_environment() -> None:
    config = OperatorConfig.from_env(
        {
            "DECOR_LEADER_ELECTION": "true",
            "DECOR_LEADER_LEASE_NAME": "decor",
            "DECOR_LEADER_LEASE_NAMESPACE": "decor-system",
            "DECOR_LEADER_IDENTITY": "decor-7f9c-x2",
            "DECOR_LEASE_DURATION_SECONDS": "6",
            "DECOR_RENEW_DEADLINE_SECONDS": "4",
            "DECOR_RETRY_PERIOD_SECONDS": "1",
        }
    )
    assert config.leader_election and config.lease_name == "decor"
    assert config.lease_namespace == "decor-system"
    assert config.leader_identity == "decor-7f9c-x2"
    assert config.lease_timings == leader.LeaseTimings(6.0, 4.0, 1.0)
    default = OperatorConfig.from_env({})
    assert not default.leader_election  # `decor operator` by hand: one replica, always acts
    assert default.lease_timings == leader.LeaseTimings(15.0, 10.0, 2.0)
    with pytest.raises(ValueError):
        OperatorConfig.from_env({"DECOR_RENEW_DEADLINE_SECONDS": "20"})
