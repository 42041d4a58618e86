"""The scale bench's replicas (bench/scale/replicas.py): attributing the audit log's requests
to the replica that sent them, which replica led the window, and the report's standby
columns (bench/scale/scale_report.py)."""

from __future__ import annotations

import json

import pytest
from decor.core.leader import LeaseRecord

from bench.scale import check_smoke, measure, replicas
from bench.scale import scale_report as report

LEADER, STANDBY = replicas.operator_user(0), replicas.operator_user(1)


def audit(user: str, verb: str, resource: str, at: str, sub: str = "") -> str:
    ref = {"resource": resource, **({"subresource": sub} if sub else {})}
    return json.dumps(
        {
            "verb": verb,
            "user": {"username": user},
            "objectRef": ref,
            "requestReceivedTimestamp": at,
        }
    )


def test_each_replica_gets_its_own_requests_from_the_audit_log() -> None:
    start = measure.parse_time_s("2026-01-01T00:00:10Z")
    lines = [
        audit(LEADER, "patch", "deadlinetrainingjobs", "2026-01-01T00:00:10.5Z", "status"),
        audit(LEADER, "update", "leases", "2026-01-01T00:00:11Z"),
        audit(STANDBY, "get", "leases", "2026-01-01T00:00:11Z"),
        audit(STANDBY, "get", "leases", "2026-01-01T00:00:13Z"),
        audit(STANDBY, "get", "leases", "2026-01-01T00:00:20Z"),  # at the end: out
        audit("decor-operator-10", "get", "leases", "2026-01-01T00:00:12Z"),  # not a replica
        audit("decor-scale-driver", "get", "leases", "2026-01-01T00:00:12Z"),
    ]
    counts = measure.audit_counts_by_user(
        lines, [LEADER, STANDBY, "decor-operator-2"], start, start + 10
    )
    assert counts[LEADER] == {
        ("patch", "deadlinetrainingjobs/status"): 1,
        ("update", "leases"): 1,
    }
    assert counts[STANDBY] == {("get", "leases"): 2}
    assert counts["decor-operator-2"] == {}  # a replica that sent nothing has an entry
    assert measure.audit_counts(lines, STANDBY, start, start + 10) == counts[STANDBY]


def test_merged_metrics_add_the_replicas_samples() -> None:
    one = measure.parse_metrics('h_bucket{le="1.0"} 3\nh_bucket{le="+Inf"} 4\ng 1\n')
    two = measure.parse_metrics('h_bucket{le="+Inf"} 2\ng 0\nonly_here{a="b"} 5\n')
    merged = measure.merge_metrics([one, two])
    assert measure.histogram_delta({}, merged, "h") == [(1.0, 3.0), (float("inf"), 6.0)]
    assert measure.metric_sum(merged, "g") == 1.0
    assert merged["only_here"] == [({"a": "b"}, 5.0)]


def metrics(leader: float, takeovers: float) -> measure.Metrics:
    return measure.parse_metrics(
        f"decor_operator_leader {leader}\ndecor_operator_leader_takeovers_total {takeovers}\n"
    )


def lease(holder: str, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, 15.0, transitions, "t0", "t1", "7")


def read(
    identity: str,
    gauges: tuple[float, float],
    takeovers: tuple[float, float] = (1.0, 1.0),
    cpu_s: tuple[float, float, float] = (10.0, 11.0, 12.0),
    rss_mib: int = 100,
    requests: dict[tuple[str, str], int] | None = None,
) -> replicas.ReplicaRead:
    proc = [
        measure.ProcSample(100.0 + 10 * i, cpu, rss_mib * measure.MIB * (1 + i))
        for i, cpu in enumerate(cpu_s)
    ]
    return replicas.ReplicaRead(
        identity,
        proc,
        requests or {},
        metrics(gauges[0], takeovers[0]),
        metrics(gauges[1], takeovers[1]),
    )


def two_replicas() -> list[replicas.ReplicaRead]:
    return [
        read(LEADER, (1, 1), cpu_s=(10.0, 13.0, 16.0), requests={("patch", "pods/resize"): 40}),
        read(STANDBY, (0, 0), takeovers=(0, 0), rss_mib=50, requests={("get", "leases"): 10}),
    ]


def test_the_lease_holder_whose_gauge_says_so_at_both_ends_led() -> None:
    reads = two_replicas()
    assert replicas.window_leader(reads, lease(LEADER), lease(LEADER)) == LEADER
    fields = replicas.replica_fields(reads, lease(LEADER), lease(LEADER), window_s=20.0)
    assert fields["leader"] == LEADER and fields["operator_replicas"] == 2
    assert fields["lease"] == {
        "holder_at_start": LEADER,
        "holder_at_end": LEADER,
        "transitions_in_window": 0,
    }
    leader, standby = fields["replicas"]
    assert (leader["role"], standby["role"]) == ("leader", "standby")
    assert leader["cores_mean"] == pytest.approx(0.3)  # 6 CPU s over 20 s
    assert standby["cores_mean"] == pytest.approx(0.1)
    assert standby["rss_mib_max"] == 150.0
    assert standby["requests_per_s_by_kind"] == {"get leases": 0.5}
    assert (leader["writes_per_s"], standby["writes_per_s"]) == (2.0, 0.0)
    assert fields["standby_cores_mean"] == pytest.approx(0.1)
    assert fields["standby_rss_mib_max"] == 150.0
    assert fields["standby_api_requests_per_s"] == pytest.approx(0.5)
    # The operator's CPU and RSS come from the leader's process alone.
    acting = replicas.acting_samples(reads, fields["leader"])
    assert measure.cores_mean(acting) == pytest.approx(0.3)
    assert measure.rss_mib_max(acting) == 300.0


@pytest.mark.parametrize(
    ("start", "end", "gauges", "takeovers", "why"),
    [
        (lease(LEADER), lease(STANDBY, 1), ((1, 0), (0, 1)), ((1, 1), (0, 1)), "lead moved"),
        (lease(LEADER), lease(LEADER, 2), ((1, 1), (0, 0)), ((1, 2), (0, 1)), "moved and back"),
        (lease(LEADER), lease(LEADER), ((1, 1), (1, 0)), ((1, 1), (0, 0)), "two said they act"),
        (lease(LEADER), lease(LEADER), ((1, 0), (0, 0)), ((1, 1), (0, 0)), "leader stopped"),
        (None, lease(LEADER), ((0, 1), (0, 0)), ((0, 1), (0, 0)), "no Lease at the start"),
        (lease(""), lease(""), ((0, 0), (0, 0)), ((0, 0), (0, 0)), "nobody held it"),
        (lease("elsewhere"), lease("elsewhere"), ((0, 0), (0, 0)), ((0, 0), (0, 0)), "not ours"),
    ],
)
def test_no_replica_led_when_the_reads_do_not_agree_on_one(
    start: LeaseRecord | None,
    end: LeaseRecord | None,
    gauges: tuple[tuple[float, float], tuple[float, float]],
    takeovers: tuple[tuple[float, float], tuple[float, float]],
    why: str,
) -> None:
    reads = [
        read(LEADER, gauges[0], takeovers[0], cpu_s=(10.0, 12.0, 14.0)),
        read(STANDBY, gauges[1], takeovers[1], cpu_s=(5.0, 6.0, 7.0)),
    ]
    assert replicas.window_leader(reads, start, end) is None, why
    fields = replicas.replica_fields(reads, start, end, window_s=20.0)
    assert [r["role"] for r in fields["replicas"]] == ["lead moved", "lead moved"]
    assert fields["standby_cores_mean"] is None and fields["standby_rss_mib_max"] is None
    # Then the operator's figures are the two processes' together.
    together = replicas.acting_samples(reads, fields["leader"])
    assert measure.cores_mean(together) == pytest.approx(0.3)
    assert measure.rss_mib_max(together) == 600.0


def test_a_leader_that_took_its_own_lease_again_still_led_the_window() -> None:
    # Seen on a starved scale bed: the leader missed its renewal, stopped acting and took
    # its own Lease again (no transition); the standby never acted.
    reads = [
        read(LEADER, (1, 1), takeovers=(1, 2), cpu_s=(10.0, 12.0, 14.0)),
        read(STANDBY, (0, 0), takeovers=(0, 0), cpu_s=(5.0, 6.0, 7.0)),
    ]
    assert replicas.window_leader(reads, lease(LEADER), lease(LEADER)) == LEADER
    fields = replicas.replica_fields(reads, lease(LEADER), lease(LEADER), window_s=20.0)
    leader, standby = fields["replicas"]
    assert (leader["role"], standby["role"]) == ("leader", "standby")
    assert leader["takeovers_in_window"] == 1.0
    assert fields["standby_cores_mean"] == pytest.approx(0.1)
    (said, *_each) = report.replica_lines({"jobs": 50, **fields})
    assert f"{LEADER} led the whole window" in said
    assert "took its own Lease again 1 time(s)" in said


def test_one_replica_without_an_election_acts_and_has_no_standby() -> None:
    only = [read(LEADER, (1, 1), takeovers=(0, 0))]
    fields = replicas.replica_fields(only, None, None, window_s=20.0)
    assert fields["leader"] == LEADER and fields["replicas"][0]["role"] == "leader"
    assert "standby_cores_mean" not in fields


def test_the_report_shows_the_standby_and_leaves_older_records_blank() -> None:
    reads = two_replicas()
    two = {
        "jobs": 50,
        "period_s": 10.0,
        "operator_cores_mean": 0.3,
        **replicas.replica_fields(reads, lease(LEADER), lease(LEADER), window_s=20.0),
    }
    older = {"jobs": 100, "period_s": 10.0, "operator_cores_mean": 0.02}
    text = report.render([two, older])
    header = next(line for line in text.splitlines() if line.startswith("| jobs"))
    titles = [t.strip() for t in header.strip("|").split("|")]
    assert "standby cores (mean)" in titles and "standby RSS MiB (max)" in titles
    rows = [line for line in text.splitlines() if line.startswith(("| 50 |", "| 100 |"))]
    cells = {
        row.split("|")[1].strip(): [c.strip() for c in row.strip("|").split("|")] for row in rows
    }
    at = {title: i for i, title in enumerate(titles)}
    assert cells["50"][at["replicas"]] == "2"
    assert cells["50"][at["standby cores (mean)"]] == "0.1"
    assert cells["50"][at["standby RSS MiB (max)"]] == "150"
    assert cells["100"][at["standby cores (mean)"]] == ""  # measured before there were two
    assert cells["100"][at["replicas"]] == ""
    assert f"- standby {STANDBY}: 0.1 cores (mean), 150 MiB RSS (max), 0.5 API req/s" in text
    assert f"{LEADER} led the whole window" in text


def test_the_report_says_when_the_lead_moved() -> None:
    reads = [read(LEADER, (1, 0)), read(STANDBY, (0, 1), takeovers=(0, 1))]
    record = {
        "jobs": 50,
        "period_s": 10.0,
        **replicas.replica_fields(reads, lease(LEADER), lease(STANDBY, 1), window_s=20.0),
    }
    lines = report.replica_lines(record)
    assert len(lines) == 1 and "the lead moved" in lines[0] and "1 transitions" in lines[0]
    row = next(line for line in report.render([record]).splitlines() if line.startswith("| 50"))
    assert " - | - |" in row  # the standby's cells: not measured (no standby throughout)
    assert report.replica_lines({"jobs": 100}) == []


def test_the_smoke_check_wants_a_leader_and_the_standby_measured() -> None:
    complete = {
        **{key: 1.0 for key in measure.RESULT_FIELDS},
        "running_at_window_start": 49,
        "api_requests_per_s": 3.0,
        "periods_in_window": 300,
        "jobs_finished": 50,
    }
    fields = replicas.replica_fields(two_replicas(), lease(LEADER), lease(LEADER), 20.0)
    assert check_smoke.problems({**complete, **fields}) == []
    assert check_smoke.problems(complete) == []  # one replica, as before
    moved = replicas.replica_fields(two_replicas(), lease(LEADER), lease(STANDBY, 1), 20.0)
    writing = replicas.replica_fields(
        [two_replicas()[0], read(STANDBY, (0, 0), (0, 0), requests={("create", "events"): 1})],
        lease(LEADER),
        lease(LEADER),
        20.0,
    )
    assert check_smoke.problems({**complete, **writing}) == [f"the standby {STANDBY} sent writes"]
    assert check_smoke.problems({**complete, **moved}) == [
        "no replica led the whole window (the Lease and the gauges disagree)",
        "standby_cores_mean not measured",
        "standby_rss_mib_max not measured",
    ]


def test_the_report_gives_each_replicas_garbage_collections_and_the_periods_steps() -> None:
    gc_metrics = (
        'decor_operator_gc_pause_seconds_count{generation="2"} 3\n'
        'decor_operator_gc_pause_seconds_sum{generation="2"} 0.6\n'
        'decor_operator_gc_pause_seconds_bucket{generation="2",le="0.25"} 3\n'
        'decor_operator_gc_pause_seconds_bucket{generation="2",le="+Inf"} 3\n'
    )
    leader = read(LEADER, (1, 1))
    leader = replicas.ReplicaRead(
        leader.identity,
        leader.proc,
        leader.requests,
        leader.metrics_before,
        {**leader.metrics_after, **measure.parse_metrics(gc_metrics)},
    )
    fields = replicas.replica_fields(
        [leader, two_replicas()[1]], lease(LEADER), lease(LEADER), window_s=20.0
    )
    gen2 = fields["replicas"][0]["gc_pauses"]["2"]
    assert (gen2["count"], gen2["s_mean"]) == (3, 0.2)
    assert fields["replicas"][1]["gc_pauses"]["2"]["count"] == 0
    lines = report.replica_lines({"jobs": 50, **fields})
    assert lines[1].endswith(
        "; garbage collection: gen 2 3 x 200.0 ms mean (p99 0.247 s, 0.6 s in all)"
    )
    assert "garbage collection" not in lines[2]  # the standby collected nothing in the window
    steps = {"plan": {"count": 4, "s_total": 2.0, "s_mean": 0.5, "s_p99": 0.1}}
    assert report.step_lines(steps) == ["- the periods' steps: plan 500.0 ms mean, p99 0.1 s"]
    assert report.step_lines({}) == []


def test_the_report_gives_the_machines_steal_time_apart_from_its_busy_cores() -> None:
    assert report.machine_text({}) == "."
    older = report.machine_text({"machine_busy_cores_mean": 1.7})
    assert older.startswith(", 1.7 of them busy") and older.endswith("steal time included).")
    newer = report.machine_text({"machine_busy_cores_mean": 1.5, "machine_steal_cores_mean": 0.2})
    assert newer.endswith("), 0.2 taken by the hypervisor for other guests (steal time).")
