"""The cluster planner: tables for each duty, random-input properties, closed loops.

Speed curves are exact plants ``step_time = a / u + b``; times are seconds from 0. GPU jobs
that span several pods (``Demand.gpus_per_pod``) have their own section.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest
from decor.api import vocabulary
from decor.core import planner as pl
from decor.core.planner import Demand, Node, PlannerSettings, pod_gpu_counts


def amdahl(a: float = 1.0, b: float = 0.0) -> Callable[[float], float]:
    """Seconds per step at ``u`` cores or GPUs."""
    return lambda u: a / u + b


LINEAR = amdahl(1.0, 0.0)  # twice the cores, twice the speed
DECOR = PlannerSettings(policy=pl.POLICY_DECOR)


def job(key: str, **kw: object) -> Demand:
    """A CPU deadline job: need 2 of [0.5, 4] cores, 100 steps, deadline at 1,000 s."""
    base: dict[str, object] = dict(
        key=key, mode="cpu", need=2.0, min_allocation=0.5, max_allocation=4.0, current=0.0,
        steps_remaining=100.0, deadline_s=1000.0, arrival_s=0.0, step_time_s=LINEAR,
    )  # fmt: skip
    base.update(kw)
    return Demand(**base)  # type: ignore[arg-type]


def best_effort(key: str, **kw: object) -> Demand:
    return job(key, deadline_s=None, need=4.0, **kw)


def grants(
    demands: Sequence[Demand],
    nodes: Sequence[Node],
    policy: str = pl.POLICY_DECOR,
    now_s: float = 0.0,
) -> dict[str, pl.Grant]:
    return dict(pl.plan(demands, nodes, now_s, PlannerSettings(policy=policy)).grants)


# ---------------------------------------------------------------------------------------
# Admitted jobs get their need, no more (ours); leftover goes to best-effort jobs


def test_admitted_jobs_get_exactly_their_need_and_best_effort_the_rest() -> None:
    g = grants(
        [
            job("a", admitted=True, node="n1", need=1.5),
            job("b", admitted=True, node="n1", need=2.0),
            best_effort("be", node="n1"),
        ],
        [Node("n1", 8.0)],
    )
    assert (g["a"].allocation, g["a"].verdict) == (1.5, vocabulary.VERDICT_ADMITTED)
    assert (g["b"].allocation, g["b"].verdict) == (2.0, vocabulary.VERDICT_ADMITTED)
    assert (g["be"].allocation, g["be"].verdict) == (4.0, vocabulary.VERDICT_BEST_EFFORT)  # its max
    assert "admitted" in g["a"].reason and "best-effort" in g["be"].reason


def test_needs_round_up_to_the_quantum_and_stay_within_bounds() -> None:
    g = grants(
        [job("a", need=1.234), job("b", need=0.1), job("c", need=9.0, max_allocation=3.0)],
        [Node("n1", 16.0)],
    )
    assert g["a"].allocation == pytest.approx(1.24)
    assert g["b"].allocation == 0.5  # min
    assert g["c"].allocation == 3.0  # max


def test_elasticflow_gives_the_leftover_to_deadline_jobs_ours_does_not() -> None:
    demands = [job("a", admitted=True, node="n1", need=1.0)]
    ours = grants(demands, [Node("n1", 8.0)])
    ef = grants(demands, [Node("n1", 8.0)], pl.POLICY_ELASTICFLOW)
    assert ours["a"].allocation == 1.0
    assert ef["a"].allocation == 4.0  # its max: the leftover by marginal gain


def test_best_effort_gives_back_what_a_deadline_job_needs() -> None:
    be = best_effort("be", node="n1", current=4.0, max_allocation=4.0)
    alone = grants([be], [Node("n1", 4.0)])
    assert alone["be"].allocation == 4.0
    with_job = grants([be, job("a", need=3.0)], [Node("n1", 4.0)])
    assert with_job["a"].verdict == vocabulary.VERDICT_ADMITTED and with_job["a"].allocation == 3.0
    assert with_job["be"].allocation == 1.0
    crowded = grants([be, job("a", need=3.7)], [Node("n1", 4.0)])
    assert crowded["be"].allocation == 0.0  # 0.3 left is below its min of 0.5
    assert "nothing left over" in crowded["be"].reason


def test_leftover_goes_where_it_speeds_up_most() -> None:
    flat = amdahl(0.1, 1.0)  # barely faster with more cores
    g = grants(
        [best_effort("lin", node="n1"), best_effort("flat", node="n1", step_time_s=flat)],
        [Node("n1", 5.0)],
    )
    assert g["lin"].allocation == 4.0 and g["flat"].allocation == 1.0


def test_best_effort_without_a_curve_split_evenly() -> None:
    g = grants(
        [best_effort(k, node="n1", step_time_s=None) for k in ("x", "y", "z")], [Node("n1", 6.0)]
    )
    assert [g[k].allocation for k in "xyz"] == [2.0, 2.0, 2.0]


def test_best_effort_keeps_its_allocation_within_the_hysteresis_band() -> None:
    be = best_effort("be", node="n1", current=2.0, max_allocation=4.0)
    g = grants([be, job("a", admitted=True, node="n1", need=1.8)], [Node("n1", 4.0)])
    assert g["be"].allocation == 2.0  # the fill says 2.2; 0.2 is within the 0.25-core band
    g = grants([be, job("a", admitted=True, node="n1", need=1.5)], [Node("n1", 4.0)])
    assert g["be"].allocation == 2.5  # 0.5 more is worth a resize


# ---------------------------------------------------------------------------------------
# Admission: new jobs fit beside admitted needs or wait, told the earliest deadline


def test_new_job_that_fits_is_admitted_and_placed_best_fit() -> None:
    g = grants([job("new", need=2.0)], [Node("big", 8.0), Node("small", 2.5)])
    assert g["new"].verdict == vocabulary.VERDICT_ADMITTED and g["new"].node == "small"


def test_new_job_that_does_not_fit_is_queued_with_the_earliest_deadline() -> None:
    # "old" holds 3 of 4 cores until it finishes at 100 steps x 1/3 s = 33.3 s; "new" needs 2.
    old = job("old", admitted=True, node="n1", need=3.0)
    new = job("new", need=2.0, deadline_s=60.0, steps_remaining=100.0)
    g = grants([old, new], [Node("n1", 4.0)])
    assert g["old"].verdict == vocabulary.VERDICT_ADMITTED and g["old"].allocation == 3.0
    q = g["new"]
    assert (q.verdict, q.allocation) == (vocabulary.VERDICT_QUEUED, 0.0)
    # Now with 1 core: 100 s; after old finishes (33.3 s), 4 cores: 33.3 + 25 = 58.3 s.
    assert q.earliest_deadline_s == pytest.approx(100.0 / 3.0 + 25.0)
    assert "earliest deadline it could meet now" in q.reason
    assert "1970-01-01T00:00:58Z" in q.reason


def test_queued_without_a_curve_says_when_room_frees() -> None:
    old = job("old", admitted=True, node="n1", need=3.0, deadline_s=500.0, step_time_s=None)
    new = job("new", need=2.0, step_time_s=None)
    q = grants([old, new], [Node("n1", 4.0)])["new"]
    assert q.verdict == vocabulary.VERDICT_QUEUED and q.earliest_deadline_s is None
    assert "frees at 1970-01-01T00:08:20Z" in q.reason  # old's deadline, 500 s


def test_job_that_cannot_make_it_even_at_max_is_queued() -> None:
    g = grants([job("late", deadline_s=10.0)], [Node("n1", 16.0)])  # 100 steps / 4 cores = 25 s
    assert g["late"].verdict == vocabulary.VERDICT_QUEUED
    assert g["late"].earliest_deadline_s == pytest.approx(25.0)
    assert "even at its max" in g["late"].reason


def test_an_admitted_job_that_cannot_make_it_even_at_max_runs_as_best_effort() -> None:
    late = job("late", deadline_s=10.0, admitted=True, node="n1", current=4.0, need=4.0)
    g = grants([late], [Node("n1", 16.0)])  # 100 steps / 4 cores = 25 s
    assert g["late"].verdict == vocabulary.VERDICT_BEST_EFFORT
    assert g["late"].allocation == 4.0  # alone: the leftover is its max
    assert "even at its max of 4 cores it would finish at 1970-01-01T00:00:25Z" in g["late"].reason
    assert "runs as best effort" in g["late"].reason


def huge_and_feasible() -> tuple[Demand, Demand]:
    """A running job of 10^12 steps at its max (it cannot finish by its deadline) and a new
    job that needs 3 of the node's 4 cores to meet a later deadline."""
    huge = job(
        "huge", need=4.0, current=4.0, admitted=True, node="n1",
        steps_remaining=1e12, deadline_s=600.0,
    )  # fmt: skip
    feasible = job("feasible", need=3.0, steps_remaining=900.0, deadline_s=900.0, arrival_s=5.0)
    return huge, feasible


def test_a_job_that_cannot_finish_never_displaces_one_that_can() -> None:
    g = grants(list(huge_and_feasible()), [Node("n1", 4.0)], now_s=10.0)
    assert (g["feasible"].verdict, g["feasible"].allocation) == (vocabulary.VERDICT_ADMITTED, 3.0)
    assert (g["huge"].verdict, g["huge"].allocation) == (vocabulary.VERDICT_BEST_EFFORT, 1.0)
    assert "runs as best effort" in g["huge"].reason


def test_with_the_keep_rule_the_hopeless_job_holds_the_node() -> None:
    keep = PlannerSettings(policy=pl.POLICY_DECOR, lost_deadline=pl.LOST_KEEP)
    g = pl.plan(list(huge_and_feasible()), [Node("n1", 4.0)], 10.0, keep).grants
    assert (g["huge"].verdict, g["huge"].allocation) == (vocabulary.VERDICT_ADMITTED, 4.0)
    assert g["feasible"].verdict == vocabulary.VERDICT_QUEUED


def test_a_job_a_little_behind_keeps_its_share() -> None:
    # 100 steps at 4 cores take 25 s: 5 s late on a 200 s span (2.5 %) is within the margin.
    behind = job("behind", need=4.0, current=4.0, admitted=True, node="n1", deadline_s=200.0)
    g = grants([behind, best_effort("be")], [Node("n1", 4.0)], now_s=180.0)
    assert (g["behind"].verdict, g["behind"].allocation) == (vocabulary.VERDICT_ADMITTED, 4.0)
    late = grants([behind], [Node("n1", 4.0)], now_s=200.0 + 0.05 * 200.0 + 1.0)["behind"]
    assert late.verdict == vocabulary.VERDICT_BEST_EFFORT


def test_a_job_whose_deadline_passed_gets_only_what_admitted_jobs_leave() -> None:
    passed = job("passed", need=4.0, current=4.0, admitted=True, node="n1", deadline_s=50.0)
    waiting = job("zwaiting", need=2.0, steps_remaining=100.0, deadline_s=900.0)
    g = grants([passed, waiting], [Node("n1", 4.0)], now_s=60.0)
    assert (g["zwaiting"].verdict, g["zwaiting"].allocation) == (vocabulary.VERDICT_ADMITTED, 2.0)
    assert (g["passed"].verdict, g["passed"].allocation) == (vocabulary.VERDICT_BEST_EFFORT, 2.0)
    assert "its deadline 1970-01-01T00:00:50Z has passed" in g["passed"].reason


def test_a_job_whose_steps_are_all_done_is_not_lost_while_its_trainer_ends() -> None:
    # Seen in the local runtime: the last step 0.04 s before the deadline, the trainer still
    # exiting one period later, past the margin: "its deadline has passed: runs as best effort".
    done = job(
        "done", need=1.0, current=1.0, admitted=True, node="n1",
        steps_remaining=0.0, deadline_s=100.0,
    )  # fmt: skip
    g = grants([done, best_effort("be", node="n1")], [Node("n1", 4.0)], now_s=120.0)
    assert (g["done"].verdict, g["done"].allocation) == (vocabulary.VERDICT_ADMITTED, 1.0)


def test_a_lost_job_that_can_still_finish_soon_runs_ahead_of_the_best_effort_jobs() -> None:
    # 400 steps at 4 cores take 100 s: at 10 s it would end 10 s after its 100 s deadline,
    # 10 % of its span (over the 5 % margin: lost), so it is served first, at its max.
    behind = job(
        "behind", need=4.0, current=4.0, admitted=True, node="n1",
        steps_remaining=400.0, deadline_s=100.0,
    )  # fmt: skip
    be = best_effort("be", node="n1", current=2.0)
    g = grants([behind, be], [Node("n1", 6.0)], now_s=10.0)
    assert (g["behind"].verdict, g["behind"].allocation) == (vocabulary.VERDICT_BEST_EFFORT, 4.0)
    assert "ahead of the jobs without one" in g["behind"].reason
    assert g["be"].allocation == 2.0
    # Two lost jobs: the less late one first (the other, later at its max, gets the rest).
    later = replace(behind, key="later", steps_remaining=600.0, deadline_s=100.0)
    g = grants([later, behind, be], [Node("n1", 6.0)], now_s=10.0)
    assert (g["behind"].allocation, g["later"].allocation, g["be"].allocation) == (4.0, 2.0, 0.0)
    # One that would end more than a span late shares by gain, as a job without a deadline
    # does, and cannot starve them.
    huge, _ = huge_and_feasible()
    g = grants([huge, be], [Node("n1", 6.0)], now_s=10.0)
    assert g["be"].allocation > 0 and g["huge"].allocation < 4.0
    assert "ahead of" not in g["huge"].reason


def test_a_lost_gpu_job_that_can_still_finish_soon_takes_its_max_first() -> None:
    behind = job(
        "behind", mode="gpu", need=4.0, current=2.0, min_allocation=1.0, max_allocation=4.0,
        admitted=True, node="n1", steps_remaining=400.0, deadline_s=100.0,
    )  # fmt: skip
    be = best_effort(
        "be", mode="gpu", node="n1", current=4.0, min_allocation=1.0, restart_cost_s=30.0
    )
    g = grants([behind, be], [Node("n1", 0.0, gpus=6)], now_s=10.0)
    # (By work done alone, keeping both as they are would win: 2 + 4 GPUs, no restart.)
    assert (g["behind"].verdict, g["behind"].allocation) == (vocabulary.VERDICT_BEST_EFFORT, 4.0)
    assert g["be"].allocation == 2.0


def unmeasured_huge_and_feasible() -> tuple[Demand, Demand]:
    """The job of 10^12 steps before its first speed sample (admitted at its initial 4
    cores, no curve yet), and a new job whose speed is known (an estimate, or a resumed
    job's fit) that needs 3 of the node's 4 cores to meet its deadline."""
    huge, feasible = huge_and_feasible()
    return replace(huge, step_time_s=None), feasible


def test_a_job_of_unknown_speed_keeps_only_its_probe_against_a_job_that_can_be_met() -> None:
    g = grants(list(unmeasured_huge_and_feasible()), [Node("n1", 4.0)], now_s=10.0)
    assert (g["feasible"].verdict, g["feasible"].allocation) == (vocabulary.VERDICT_ADMITTED, 3.0)
    huge = g["huge"]
    assert (huge.verdict, huge.allocation) == (vocabulary.VERDICT_SHORTED, 1.0)
    assert "granted 1 of the 4 cores it asks on n1; its speed is not measured yet" in huge.reason
    # ElasticFlow has no such rule: the first admitted keeps its share.
    ef = grants(
        list(unmeasured_huge_and_feasible()), [Node("n1", 4.0)], pl.POLICY_ELASTICFLOW, 10.0
    )
    assert (ef["huge"].allocation, ef["feasible"].verdict) == (4.0, vocabulary.VERDICT_QUEUED)


def test_a_job_of_unknown_speed_keeps_at_least_its_min() -> None:
    huge, feasible = unmeasured_huge_and_feasible()
    g = grants([huge, replace(feasible, need=3.5)], [Node("n1", 4.0)], now_s=10.0)
    assert (g["feasible"].allocation, g["huge"].allocation) == (3.5, 0.5)  # its min
    # A need that does not fit beside its min waits, and it gets its whole need back.
    g = grants([huge, replace(feasible, need=3.8)], [Node("n1", 4.0)], now_s=10.0)
    assert (g["feasible"].verdict, g["huge"].allocation) == (vocabulary.VERDICT_QUEUED, 4.0)


def test_alone_or_beside_best_effort_a_job_of_unknown_speed_gets_its_whole_need() -> None:
    huge, _ = unmeasured_huge_and_feasible()
    alone = grants([huge], [Node("n1", 4.0)], now_s=10.0)["huge"]
    assert (alone.verdict, alone.allocation) == (vocabulary.VERDICT_ADMITTED, 4.0)
    assert "not measured" not in alone.reason
    g = grants(
        [replace(huge, need=3.0), best_effort("be", node="n1")], [Node("n1", 4.0)], now_s=10.0
    )
    assert (g["huge"].allocation, g["be"].allocation) == (3.0, 1.0)


def test_a_job_of_unknown_speed_that_outranks_the_other_keeps_its_whole_need() -> None:
    huge, feasible = unmeasured_huge_and_feasible()
    g = grants([replace(huge, priority=1), feasible], [Node("n1", 4.0)], now_s=10.0)
    assert (g["huge"].verdict, g["huge"].allocation) == (vocabulary.VERDICT_ADMITTED, 4.0)
    assert g["feasible"].verdict == vocabulary.VERDICT_QUEUED
    # (The rule is the lost-deadline rule's: with keep, every job keeps its whole share.)
    keep = PlannerSettings(policy=pl.POLICY_DECOR, lost_deadline=pl.LOST_KEEP)
    g = pl.plan([huge, feasible], [Node("n1", 4.0)], 10.0, keep).grants
    assert (g["huge"].allocation, g["feasible"].verdict) == (4.0, vocabulary.VERDICT_QUEUED)


def test_a_job_of_unknown_speed_preempted_by_a_higher_priority_one_is_not_topped_up() -> None:
    # Found by the random inputs below: the preempted job's probe was topped up after its
    # room had gone to the new job (a KeyError, every period, in every tenant's plan).
    huge, feasible = unmeasured_huge_and_feasible()
    g = grants([huge, replace(feasible, need=3.8, priority=1)], [Node("n1", 4.0)], now_s=10.0)
    assert (g["feasible"].verdict, g["feasible"].allocation) == (vocabulary.VERDICT_ADMITTED, 3.8)
    assert (g["huge"].verdict, g["huge"].allocation) == (vocabulary.VERDICT_PREEMPTED, 0.0)


def test_a_new_job_of_unknown_speed_does_not_take_what_an_unmeasured_job_asks() -> None:
    huge, feasible = unmeasured_huge_and_feasible()
    g = grants([huge, replace(feasible, step_time_s=None)], [Node("n1", 4.0)], now_s=10.0)
    assert (g["huge"].allocation, g["feasible"].verdict) == (4.0, vocabulary.VERDICT_QUEUED)


def test_a_job_of_unknown_speed_is_topped_up_within_its_namespaces_quota() -> None:
    from decor.core import quota

    huge = replace(unmeasured_huge_and_feasible()[0], key="ns/huge")
    cpu = quota.Quota("ns", "q", ((quota.LIMITS_CPU, 2.5),))
    g = pl.plan([huge], [Node("n1", 4.0)], 10.0, DECOR, [cpu]).grants["ns/huge"]
    assert (g.verdict, g.allocation) == (vocabulary.VERDICT_SHORTED, 2.5)


def test_admission_takes_no_admitted_job_below_its_need() -> None:
    admitted = [job(f"a{i}", admitted=True, node="n1", need=1.0) for i in range(3)]
    g = grants([*admitted, job("new", need=1.5, arrival_s=5.0)], [Node("n1", 4.0)])
    assert all(g[f"a{i}"].allocation == 1.0 for i in range(3))
    assert g["new"].verdict == vocabulary.VERDICT_QUEUED


def test_new_jobs_are_admitted_in_deadline_order() -> None:
    late = job("late", need=3.0, deadline_s=900.0)
    early = job("zearly", need=3.0, deadline_s=800.0)
    g = grants([late, early], [Node("n1", 4.0)])
    assert (
        g["zearly"].verdict == vocabulary.VERDICT_ADMITTED
        and g["late"].verdict == vocabulary.VERDICT_QUEUED
    )


# ---------------------------------------------------------------------------------------
# Who gives way: priority, then deadline


def test_higher_priority_displaces_a_lower_one_which_is_told_who() -> None:
    low = job("low", admitted=True, node="n1", need=3.0)
    high = job("high", need=3.0, priority=1, arrival_s=10.0)
    g = grants([low, high], [Node("n1", 4.0)])
    assert g["high"].verdict == vocabulary.VERDICT_ADMITTED and g["high"].allocation == 3.0
    assert (g["low"].verdict, g["low"].allocation) == (vocabulary.VERDICT_PREEMPTED, 0.0)
    assert "high" in g["low"].reason and "priority 1 > 0" in g["low"].reason
    assert g["low"].earliest_deadline_s is not None  # it is told when it could run again
    assert "displaced lower-priority low" in g["high"].reason


def test_equal_priority_does_not_displace() -> None:
    g = grants(
        [job("low", admitted=True, node="n1", need=3.0), job("other", need=3.0)], [Node("n1", 4.0)]
    )
    assert (
        g["low"].verdict == vocabulary.VERDICT_ADMITTED
        and g["other"].verdict == vocabulary.VERDICT_QUEUED
    )


def test_displacement_preempts_the_fewest_lowest_priority_jobs() -> None:
    nodes = [Node("n1", 4.0), Node("n2", 4.0)]
    demands = [
        job("p0-a", admitted=True, node="n1", need=1.5, priority=0),
        job("p0-b", admitted=True, node="n1", need=1.5, priority=0),
        job("p0-c", admitted=True, node="n2", need=3.0, priority=0),
        job("vip", need=3.0, priority=2),
    ]
    g = grants(demands, nodes)
    assert g["vip"].node == "n2" and g["p0-c"].verdict == vocabulary.VERDICT_PREEMPTED
    assert g["p0-a"].verdict == g["p0-b"].verdict == vocabulary.VERDICT_ADMITTED


def test_an_overfull_node_shorts_the_later_deadline() -> None:
    # Both admitted; their needs grew to 3 + 3 on a 4-core node.
    early = job("early", admitted=True, node="n1", need=3.0, deadline_s=500.0)
    late = job("late", admitted=True, node="n1", need=3.0, deadline_s=900.0)
    g = grants([early, late], [Node("n1", 4.0)])
    assert (g["early"].verdict, g["early"].allocation) == (vocabulary.VERDICT_ADMITTED, 3.0)
    assert (g["late"].verdict, g["late"].allocation) == (vocabulary.VERDICT_SHORTED, 1.0)
    assert "earlier-deadline early" in g["late"].reason and "late" in g["late"].reason


def test_an_overfull_node_preempts_the_lower_priority() -> None:
    vip = job("vip", admitted=True, node="n1", need=3.0, deadline_s=900.0, priority=1)
    low = job("low", admitted=True, node="n1", need=3.0, deadline_s=500.0)
    g = grants([vip, low], [Node("n1", 4.0)])
    assert g["vip"].allocation == 3.0
    assert (g["low"].verdict, g["low"].allocation) == (vocabulary.VERDICT_PREEMPTED, 0.0)
    assert "vip" in g["low"].reason


# ---------------------------------------------------------------------------------------
# GPUs: whole counts, restart costs over the look-ahead window, the exact knapsack


def gpu_job(key: str, **kw: object) -> Demand:
    base: dict[str, object] = dict(mode="gpu", min_allocation=1.0, max_allocation=8.0, need=2.0)
    base.update(kw)
    return job(key, **base)


def test_gpu_grants_are_whole_counts() -> None:
    g = grants(
        [
            gpu_job("a", need=1.2),
            best_effort("be", mode="gpu", min_allocation=1.0, max_allocation=8.0),
        ],
        [Node("g1", 0.0, 8.0)],
    )
    assert g["a"].allocation == 2.0 and g["be"].allocation == 6.0


@pytest.mark.parametrize("policy", [pl.POLICY_DECOR, pl.POLICY_ELASTICFLOW])
def test_a_pod_still_to_be_created_does_not_take_a_running_trainers_node(policy: str) -> None:
    # g1 holds two running GPU trainers (4 + 4 of its 8 GPUs); "restarting" (its pod deleted
    # for a change of count, the earliest deadline) fits nowhere now. Booked before the
    # later-deadline running one, it would short it to nothing on g1: a restart for a pod
    # the kube-scheduler could not place there anyway.
    demands = [
        gpu_job("early", admitted=True, node="g1", need=4.0, current=4.0, deadline_s=500.0),
        gpu_job("late", admitted=True, node="g1", need=4.0, current=4.0, deadline_s=2000.0),
        gpu_job("restarting", admitted=True, node=None, need=4.0, current=0.0, deadline_s=400.0),
    ]
    g = grants(demands, [Node("g1", 0.0, 8.0), Node("g2", 0.0, 2.0)], policy)
    assert g["early"].allocation == 4.0 and g["late"].allocation == 4.0, g
    assert g["restarting"].allocation <= 2.0 and g["restarting"].node != "g1", g


@pytest.mark.parametrize("policy", [pl.POLICY_DECOR, pl.POLICY_ELASTICFLOW])
def test_a_restart_goes_back_to_its_last_node_when_its_room_is_there(policy: str) -> None:
    # "restarting" left 4 GPUs on g1 (its new count 3); g2 has exactly 3 free, the best fit.
    # It goes back to g1, where its pod was; with room for fewer than 3 there, best fit.
    demands = [
        gpu_job("other", admitted=True, node="g2", need=5.0, current=5.0, deadline_s=500.0),
        gpu_job("restarting", admitted=True, need=3.0, last_node="g1", deadline_s=800.0),
    ]
    nodes = [Node("g1", 0.0, 4.0), Node("g2", 0.0, 8.0)]

    def where(ds: Sequence[Demand]) -> tuple[str | None, float]:
        grant = grants(ds, nodes, policy)["restarting"]
        return grant.node, grant.allocation

    assert where(demands) == ("g1", 3.0 if policy == pl.POLICY_DECOR else 4.0)
    assert where([replace(d, last_node=None) for d in demands]) == ("g2", 3.0)
    assert where([*demands, gpu_job("g1's", admitted=True, node="g1", current=2.0)]) == ("g2", 3.0)
    assert where([replace(d, last_node="g9") for d in demands]) == ("g2", 3.0)  # a node gone


@pytest.mark.parametrize("wanted", [False, True])
def test_a_gpu_job_above_its_need_gets_its_need_whether_or_not_others_want_the_gpus(
    wanted: bool,
) -> None:
    # The law asks for 2 of the 4 GPUs "ahead" holds: it has already weighed the restart
    # against the GPUs given back. The planner grants the need, not the 4 (which would
    # finish the job early on GPUs nobody asked for), and the freed GPUs go to best effort.
    # A dear restart (280 s of a 300 s window): the law asked for the shrink all the same.
    ahead = gpu_job("ahead", admitted=True, node="g1", need=2.0, current=4.0, restart_cost_s=280.0)
    be = best_effort("be", mode="gpu", node="g1", min_allocation=1.0, max_allocation=8.0,
                     step_time_s=amdahl(1.0, 2.0))  # fmt: skip
    g = grants([ahead, be] if wanted else [ahead], [Node("g1", 0.0, 6.0)])
    assert g["ahead"].allocation == 2.0 and g["ahead"].verdict == vocabulary.VERDICT_ADMITTED, g
    if wanted:
        assert g["be"].allocation == 4.0, g


def test_best_effort_gpu_job_grows_only_when_the_gain_beats_the_restart() -> None:
    be = best_effort("be", mode="gpu", node="g1", min_allocation=1.0, max_allocation=8.0,
                     current=2.0, step_time_s=amdahl(1.0, 1.0))  # fmt: skip
    cheap = grants([replace(be, restart_cost_s=1.0)], [Node("g1", 0.0, 3.0)])
    dear = grants([replace(be, restart_cost_s=150.0)], [Node("g1", 0.0, 3.0)])
    assert cheap["be"].allocation == 3.0  # 1.5 -> 1.33 s per step: +12.5 % for 0.3 % lost
    assert dear["be"].allocation == 2.0  # +12.5 % speed for 50 % of the window lost


def test_gpu_knapsack_is_exact_against_brute_force() -> None:
    rng = random.Random(7)
    for _ in range(300):
        items = rng.randint(1, 5)
        capacity = rng.randint(0, 8)
        options = [
            [(0, 0.0)]
            + [(rng.randint(1, 4), rng.uniform(-1.0, 3.0)) for _ in range(rng.randint(0, 3))]
            for _ in range(items)
        ]
        chosen, value = pl.best_gpu_choices(options, capacity)
        units = sum(options[i][j][0] for i, j in enumerate(chosen))
        assert units <= capacity
        assert value == pytest.approx(sum(options[i][j][1] for i, j in enumerate(chosen)))
        brute = max(
            sum(o[1] for o in combo)
            for combo in itertools.product(*options)
            if sum(o[0] for o in combo) <= capacity
        )
        assert value == pytest.approx(brute)


# ---------------------------------------------------------------------------------------
# Baselines


def test_none_serves_in_arrival_order_without_admission() -> None:
    first = job("z-first", need=3.0, arrival_s=0.0)
    second = job("a-second", need=3.0, arrival_s=1.0)
    g = grants([first, second], [Node("n1", 4.0)], pl.POLICY_NONE)
    assert (g["z-first"].allocation, g["z-first"].verdict) == (3.0, vocabulary.VERDICT_ADMITTED)
    assert (g["a-second"].allocation, g["a-second"].verdict) == (1.0, vocabulary.VERDICT_SHORTED)


def test_decor_nn_scales_every_ask_down_proportionally() -> None:
    demands = [
        job("a", need=3.0, node="n1"),
        job("b", need=1.0, node="n1"),
        best_effort("be", node="n1"),
    ]
    g = grants(demands, [Node("n1", 4.0)], pl.POLICY_PROPORTIONAL)
    assert [g[k].allocation for k in ("a", "b", "be")] == [1.5, 0.5, 2.0]  # x 4 / 8


def test_edf_gives_the_earliest_deadline_its_max() -> None:
    g = grants(
        [job("later", deadline_s=900.0), job("sooner", deadline_s=500.0)],
        [Node("n1", 5.0)],
        pl.POLICY_EDF,
    )
    assert g["sooner"].allocation == 4.0 and g["later"].allocation == 1.0


def test_unknown_policy_and_duplicate_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown planner policy"):
        pl.plan([], [], 0.0, PlannerSettings(policy="fifo"))
    with pytest.raises(ValueError, match="share a key"):
        pl.plan([job("a"), job("a")], [Node("n1", 4.0)], 0.0)


# ---------------------------------------------------------------------------------------
# GPU jobs that span several pods: a grant of n runs as the pods of pod_gpu_counts(n, p),
# booked only where those pods can each be put on a node


def gpu_nodes(*free: int) -> list[Node]:
    """GPU nodes "a", "b", ... with ``free`` GPUs each (and cores to spare)."""
    return [Node(chr(ord("a") + i), 32.0, float(g)) for i, g in enumerate(free)]


@pytest.mark.parametrize(
    ("total", "per_pod", "pods"),
    [
        (4, 2, [2, 2]),
        (3, 2, [2, 1]),
        (5, 2, [2, 2, 1]),
        (4, 3, [2, 2]),
        (1, 2, [1]),
        (0, 2, []),
        (12, 8, [6, 6]),
        (7, 1, [1] * 7),
        (6, 0, [6]),
        (6, -1, [6]),
        (0, 0, []),
    ],
)
def test_pod_gpu_counts_table(total: int, per_pod: int, pods: list[int]) -> None:
    assert pod_gpu_counts(total, per_pod) == pods


def test_pod_gpu_counts_are_as_even_as_possible_and_refuse_a_negative_total() -> None:
    for total, per_pod in itertools.product(range(0, 40), range(1, 10)):
        pods = pod_gpu_counts(total, per_pod)
        assert sum(pods) == total and len(pods) == math.ceil(total / per_pod)
        assert all(1 <= p <= per_pod for p in pods)
        assert pods == sorted(pods, reverse=True) and (not pods or pods[0] - pods[-1] <= 1)
    with pytest.raises(ValueError, match="negative"):
        pod_gpu_counts(-1, 2)


def test_four_gpus_in_pods_of_two_are_admitted_across_two_nodes() -> None:
    g = grants([gpu_job("j", need=4.0, gpus_per_pod=2)], gpu_nodes(2, 2))["j"]
    assert (g.verdict, g.allocation) == (vocabulary.VERDICT_ADMITTED, 4.0)
    assert sorted(g.pods) == [("a", 2.0), ("b", 2.0)] and g.node == g.pods[0][0]
    assert "on a (2) and b (2)" in g.reason


@pytest.mark.parametrize("policy", [pl.POLICY_DECOR, pl.POLICY_ELASTICFLOW])
def test_the_same_job_in_one_pod_is_queued_with_its_earliest_deadline(policy: str) -> None:
    g = grants([gpu_job("j", need=4.0)], gpu_nodes(2, 2), policy)["j"]
    assert (g.verdict, g.allocation, g.pods) == (vocabulary.VERDICT_QUEUED, 0.0, ())
    assert g.earliest_deadline_s == pytest.approx(100 / 2)  # at 2 GPUs, all one node holds


@pytest.mark.parametrize("policy", [pl.POLICY_EDF, pl.POLICY_NONE, pl.POLICY_PROPORTIONAL])
def test_without_admission_one_pod_gets_at_most_a_node_and_spread_pods_get_all(
    policy: str,
) -> None:
    one_pod = grants([gpu_job("j", need=4.0, max_allocation=4.0)], gpu_nodes(2, 2), policy)
    assert one_pod["j"].allocation == 2.0 and len(one_pod["j"].pods) == 1
    spread = gpu_job("j", need=4.0, max_allocation=4.0, gpus_per_pod=2)
    g = grants([spread], gpu_nodes(2, 2), policy)["j"]
    assert g.allocation == 4.0 and sorted(g.pods) == [("a", 2.0), ("b", 2.0)]


def test_three_gpus_in_pods_of_two_fit_on_nodes_with_one_and_two_free() -> None:
    g = grants([gpu_job("j", need=3.0, gpus_per_pod=2)], gpu_nodes(1, 2))["j"]
    assert (g.verdict, g.allocation, g.pods) == (
        vocabulary.VERDICT_ADMITTED,
        3.0,
        (("b", 2.0), ("a", 1.0)),
    )


def test_more_gpus_may_fit_where_fewer_do_not() -> None:
    # 4 in pods of at most 3 are 2 + 2; 3 are one pod of 3, which no node holds.
    spread = gpu_job("j", need=3.0, max_allocation=4.0, gpus_per_pod=3)
    assert grants([spread], gpu_nodes(2, 2))["j"].verdict == vocabulary.VERDICT_QUEUED
    edf = grants([spread], gpu_nodes(2, 2), pl.POLICY_EDF)["j"]
    assert edf.allocation == 4.0 and sorted(edf.pods) == [("a", 2.0), ("b", 2.0)]


def test_packing_is_exact_where_largest_first_best_fit_is_not() -> None:
    # Pods 3, 3, 2, 2: best fit puts the first 3 on the 4-GPU node and strands 1 GPU.
    spread = gpu_job("j", need=10.0, max_allocation=10.0, gpus_per_pod=3)
    g = grants([spread], gpu_nodes(6, 4))["j"]
    assert g.verdict == vocabulary.VERDICT_ADMITTED
    assert g.pods == (("a", 3.0), ("a", 3.0), ("b", 2.0), ("b", 2.0))
    assert "on a (3 + 3) and b (2 + 2)" in g.reason


def brute_force_fits(pods: Sequence[int], free: Sequence[int]) -> bool:
    for where in itertools.product(range(len(free)), repeat=len(pods)):
        load = [0] * len(free)
        for pod, node in zip(pods, where, strict=True):
            load[node] += pod
        if all(x <= f for x, f in zip(load, free, strict=True)):
            return True
    return False


def test_a_need_is_admitted_exactly_when_its_pods_can_be_placed() -> None:
    rng = random.Random(3)
    for _ in range(400):
        free = [rng.randint(0, 8) for _ in range(rng.randint(1, 4))]
        per_pod = rng.randint(1, 5)
        need = rng.randint(1, min(12, per_pod * 5))
        spread = gpu_job("j", need=float(need), max_allocation=float(need), gpus_per_pod=per_pod)
        g = grants([spread], gpu_nodes(*free))["j"]
        fits = brute_force_fits(pod_gpu_counts(need, per_pod), free)
        assert (g.verdict == vocabulary.VERDICT_ADMITTED) == fits, (free, per_pod, need, g)


def test_pods_at_an_unchanged_count_stay_where_they_run() -> None:
    spread = gpu_job("j", need=4.0, gpus_per_pod=2, admitted=True, current=4.0, nodes=("c", "b"))
    assert grants([spread], gpu_nodes(2, 2, 2))["j"].pods == (("c", 2.0), ("b", 2.0))


def test_a_new_count_prefers_the_nodes_the_pods_run_on() -> None:
    spread = gpu_job("j", need=6.0, gpus_per_pod=2, admitted=True, current=4.0, nodes=("c", "b"))
    g = grants([spread], gpu_nodes(2, 2, 2, 2))["j"]
    assert g.allocation == 6.0 and {"b", "c"} <= {n for n, _ in g.pods}


def test_pods_at_an_unchanged_count_do_not_move_when_their_node_is_taken() -> None:
    # "first" (earlier deadline, running) grew to all of a: "spread" cannot keep 2 + 2 on a
    # and b, and its pods do not move without a restart; it gets a smaller count (3 = 2 + 1,
    # packed anew) and is shorted.
    first = gpu_job("first", admitted=True, node="a", current=2.0, need=4.0, deadline_s=500.0)
    spread = gpu_job(
        "spread", admitted=True, need=4.0, gpus_per_pod=2, current=4.0, nodes=("a", "b")
    )
    g = grants([first, spread], gpu_nodes(4, 2, 1))
    assert g["first"].allocation == 4.0
    assert (g["spread"].verdict, g["spread"].allocation) == (vocabulary.VERDICT_SHORTED, 3.0)
    assert sorted(g["spread"].pods) == [("b", 2.0), ("c", 1.0)]
    assert "earlier-deadline first" in g["spread"].reason


def test_a_higher_priority_spread_job_displaces_jobs_on_several_nodes() -> None:
    low_a = gpu_job("low-a", admitted=True, node="a", current=2.0, need=2.0)
    low_b = gpu_job("low-b", admitted=True, node="b", current=2.0, need=2.0)
    vip = gpu_job("vip", need=4.0, gpus_per_pod=2, priority=1, arrival_s=5.0)
    g = grants([low_a, low_b, vip], gpu_nodes(2, 2))
    assert (g["vip"].verdict, g["vip"].allocation) == (vocabulary.VERDICT_ADMITTED, 4.0)
    for low in ("low-a", "low-b"):
        assert g[low].verdict == vocabulary.VERDICT_PREEMPTED and "vip" in g[low].reason
    one_pod_vip = grants([low_a, low_b, replace(vip, gpus_per_pod=0)], gpu_nodes(2, 2))
    assert one_pod_vip["vip"].verdict == vocabulary.VERDICT_QUEUED  # no one node could hold 4


def test_a_queued_spread_job_is_told_a_deadline_its_pods_can_meet() -> None:
    # Pods of 3 + 3: free 2, 2 and 2 hold 6 GPUs but no pod of 3; when "x" ends (50 s) a
    # holds 4, one pod only; when "y" ends (100 s) b holds 4 too. 600 steps at 6 GPUs: 100 s.
    x = gpu_job("x", admitted=True, node="a", current=2.0, need=2.0, steps_remaining=100.0)
    y = gpu_job("y", admitted=True, node="b", current=2.0, need=2.0, steps_remaining=200.0)
    z = gpu_job(
        "z", need=6.0, min_allocation=6.0, max_allocation=6.0, gpus_per_pod=3,
        steps_remaining=600.0, deadline_s=150.0,
    )  # fmt: skip
    nodes = gpu_nodes(4, 4, 2)
    g = grants([x, y, z], nodes)["z"]
    assert g.verdict == vocabulary.VERDICT_QUEUED and g.earliest_deadline_s == pytest.approx(200.0)
    # Asked for that deadline once x and y are done, it is admitted and finishes by it.
    later = grants([replace(z, deadline_s=200.0)], nodes, now_s=100.0)["z"]
    assert (later.verdict, later.allocation) == (vocabulary.VERDICT_ADMITTED, 6.0)


def test_best_effort_spread_jobs_share_the_gpus_one_pod_jobs_leave() -> None:
    spread = best_effort("spread", mode="gpu", min_allocation=1.0, gpus_per_pod=2)
    single = best_effort("single", mode="gpu", min_allocation=1.0, arrival_s=1.0)
    g = grants([spread, single, gpu_job("d", need=1.0)], gpu_nodes(2, 2, 3))
    assert g["d"].allocation == 1.0
    assert g["single"].allocation == 3.0 and g["single"].pods == (("c", 3.0),)
    assert (g["spread"].verdict, g["spread"].allocation) == (vocabulary.VERDICT_BEST_EFFORT, 3.0)
    assert sorted(g["spread"].pods) == [("a", 1.0), ("b", 2.0)]


def test_a_best_effort_spread_job_keeps_its_count_when_a_restart_does_not_pay() -> None:
    be = best_effort("be", mode="gpu", min_allocation=1.0, gpus_per_pod=2, current=4.0,
                     nodes=("a", "b"), max_allocation=8.0, step_time_s=amdahl(1.0, 1.0))  # fmt: skip
    cheap = grants([replace(be, restart_cost_s=1.0)], gpu_nodes(2, 2, 2))
    dear = grants([replace(be, restart_cost_s=150.0)], gpu_nodes(2, 2, 2))
    assert cheap["be"].allocation == 6.0  # 1.25 -> 1.17 s per step for 0.3 % lost
    assert dear["be"].allocation == 4.0 and dear["be"].pods == (("a", 2.0), ("b", 2.0))


# ---------------------------------------------------------------------------------------
# Properties over random inputs


def random_case(rng: random.Random) -> tuple[list[Demand], list[Node]]:
    """CPU jobs, one-pod GPU jobs and GPU jobs that span pods, on up to four nodes."""
    nodes = [
        Node(f"n{i}", rng.choice((2.0, 4.0, 8.0)), rng.choice((0.0, 2.0, 4.0, 8.0)))
        for i in range(rng.randint(1, 4))
    ]
    names = [n.name for n in nodes] + ["gone"]  # a node the planner does not know
    demands = []
    for i in range(rng.randint(1, 14)):
        gpu = rng.random() < 0.4
        per_pod = rng.choice((0, 0, 1, 2, 3)) if gpu else 0
        max_a = float(rng.choice((1, 2, 4, 8, 12))) if gpu else rng.choice((1.0, 2.0, 4.0))
        min_a = min(float(rng.choice((1, 1, 2))), max_a) if gpu else 0.5
        current = rng.choice((0.0, min_a, max_a))
        demands.append(
            Demand(
                key=f"ns/j{i:02d}",
                mode="gpu" if gpu else "cpu",
                need=rng.uniform(0.1, max_a * 1.2),
                min_allocation=min_a,
                max_allocation=max_a,
                current=current,
                steps_remaining=rng.choice([0.0, rng.uniform(10.0, 500.0)]),
                deadline_s=None if rng.random() < 0.25 else rng.uniform(50.0, 2000.0),
                arrival_s=float(rng.randint(0, 5)),  # ties: broken by key
                priority=rng.choice((0, 0, 1)),
                admitted=rng.random() < 0.5,
                node=rng.choice(names) if rng.random() < 0.6 else None,
                step_time_s=None
                if rng.random() < 0.2
                else amdahl(rng.uniform(0.2, 2), rng.uniform(0, 0.5)),
                restart_cost_s=rng.uniform(0.0, 120.0) if gpu else 0.0,
                gpus_per_pod=per_pod,
                nodes=tuple(rng.choice(names) for _ in pod_gpu_counts(int(current), per_pod))
                if per_pod and rng.random() < 0.7
                else (),
            )
        )
    return demands, nodes


@pytest.mark.parametrize("policy", pl.POLICIES)
def test_random_inputs_respect_capacity_bounds_and_are_deterministic(policy: str) -> None:
    rng = random.Random(sum(map(ord, policy)))
    settings = PlannerSettings(policy=policy)
    spread_grants = 0
    for _ in range(300):
        demands, nodes = random_case(rng)
        known = {n.name for n in nodes}
        result = pl.plan(demands, nodes, 10.0, settings)
        assert set(result.grants) == {d.key for d in demands}
        used: dict[tuple[str, str], float] = {}
        for d in demands:
            g = result.grants[d.key]
            assert g.reason
            at_max_s = pl.run_s(d, d.max_allocation)
            slack = None if d.deadline_s is None else 0.05 * (d.deadline_s - d.arrival_s)
            lost = (
                policy == pl.POLICY_DECOR
                and d.deadline_s is not None and slack is not None and d.steps_remaining > 0
                and (10.0 > d.deadline_s + slack
                     or (d.admitted and at_max_s is not None
                         and 10.0 + at_max_s > d.deadline_s + slack))
            )  # fmt: skip
            best_effort = d.deadline_s is None or lost
            assert best_effort == (g.verdict == vocabulary.VERDICT_BEST_EFFORT), (d, g)
            if g.allocation == 0:
                assert g.pods == ()
                continue
            assert d.min_allocation - 1e-9 <= g.allocation <= d.max_allocation + 1e-9
            assert d.mode == "cpu" or g.allocation == math.floor(g.allocation)
            assert g.node == g.pods[0][0]
            assert sum(a for _, a in g.pods) == pytest.approx(g.allocation)
            if d.mode == "gpu" and d.gpus_per_pod > 0:
                spread_grants += len(g.pods) > 1
                sizes = [int(a) for _, a in g.pods]
                assert sizes == pod_gpu_counts(int(g.allocation), d.gpus_per_pod)
                unchanged = g.allocation == d.current and len(d.nodes) == len(sizes)
                if unchanged and set(d.nodes) <= known:
                    assert tuple(n for n, _ in g.pods) == d.nodes  # its pods stay put
            else:
                assert len(g.pods) == 1
                if d.node in known:
                    assert g.node == d.node  # a pod lives where it is
            for node, amount in g.pods:
                used[(node, d.mode)] = used.get((node, d.mode), 0.0) + amount
            if policy == pl.POLICY_DECOR and g.verdict == vocabulary.VERDICT_ADMITTED:
                assert g.allocation >= pl.need_of(d, settings) - 1e-9
        for n in nodes:
            assert used.get((n.name, "cpu"), 0.0) <= n.cpu_cores + 1e-6
            assert used.get((n.name, "gpu"), 0.0) <= n.gpus + 1e-6
        shuffled = list(demands)
        rng.shuffle(shuffled)
        again = pl.plan(shuffled, list(reversed(nodes)), 10.0, settings)
        assert again == result
    assert spread_grants > 20  # the cases do grant jobs several pods


# ---------------------------------------------------------------------------------------
# Closed loop: exact plants, jobs arriving, the exact need each period


PERIOD_S = 1.0


def exact_need_cores(a: float, b: float, steps: float, left_s: float, max_cores: float) -> float:
    """The cores that finish ``steps`` in ``left_s`` on ``a / u + b`` (max if none)."""
    per_step_s = left_s / steps if steps > 0 else math.inf
    if per_step_s <= b:
        return max_cores
    return min(max_cores, math.ceil(a / (per_step_s - b) / 0.01 - 1e-6) * 0.01)


def advance(
    plants: dict[str, tuple[float, float, float]],
    alloc: dict[str, float],
    done: dict[str, float],
    finish: dict[str, float],
    now: float,
) -> None:
    """One period of the exact plants (key: a, b, steps): each job's steps at its grant; a
    job that ends within the period is given its finish time."""
    for key, (a, b, steps) in plants.items():
        if alloc[key] > 0 and key not in finish:
            step_s = a / alloc[key] + b
            left = steps - done[key]
            if left * step_s <= PERIOD_S:
                finish[key] = now + left * step_s
                done[key] = steps
            else:
                done[key] += PERIOD_S / step_s


def assert_admitted_finish_in_time(
    ever_admitted: set[str], finish: dict[str, float], deadlines: dict[str, float | None]
) -> None:
    assert ever_admitted, "the trace must admit some deadline jobs"
    waited = [k for k, d in deadlines.items() if d is not None and k not in ever_admitted]
    assert waited, "some must wait or be refused"
    for key in ever_admitted:
        assert key in finish and finish[key] <= deadlines[key] + 1e-6, key  # type: ignore[operator]


def test_closed_loop_meets_admitted_deadlines_without_oscillation() -> None:
    rng = random.Random(11)
    nodes = [Node("n1", 4.0), Node("n2", 4.0)]
    specs = []  # (key, arrival_s, a, b, steps, deadline_s or None)
    for i in range(12):
        arrival = float(rng.randint(0, 60))
        a, b = rng.uniform(0.5, 1.5), rng.uniform(0.0, 0.1)
        steps = float(rng.randint(50, 200))
        at_max_s = steps * (a / 4.0 + b)
        deadline = None if i % 4 == 3 else arrival + rng.uniform(1.2, 3.0) * at_max_s
        specs.append((f"j{i:02d}", arrival, a, b, steps, deadline))
    done = {k: 0.0 for k, *_ in specs}
    alloc = {k: 0.0 for k, *_ in specs}
    node: dict[str, str | None] = {k: None for k, *_ in specs}
    admitted = {k: False for k, *_ in specs}
    finish: dict[str, float] = {}
    history: dict[str, list[tuple[float, float]]] = {k: [] for k, *_ in specs}
    ever_admitted: set[str] = set()
    now = 0.0
    while len(finish) < len(specs) and now < 2000.0:
        demands = []
        for key, arrival, a, b, steps, deadline in specs:
            if arrival > now or key in finish:
                continue
            left = steps - done[key]
            need = 4.0 if deadline is None else exact_need_cores(a, b, left, deadline - now, 4.0)
            demands.append(
                Demand(
                    key=key,
                    mode="cpu",
                    need=need,
                    min_allocation=0.5,
                    max_allocation=4.0,
                    current=alloc[key],
                    steps_remaining=left,
                    deadline_s=deadline,
                    arrival_s=arrival,
                    admitted=admitted[key],
                    node=node[key],
                    step_time_s=amdahl(a, b),
                )  # fmt: skip
            )
        result = pl.plan(demands, nodes, now, DECOR)
        used = {n.name: 0.0 for n in nodes}
        for d in demands:
            g = result.grants[d.key]
            alloc[d.key], admitted[d.key] = g.allocation, g.verdict == vocabulary.VERDICT_ADMITTED
            node[d.key] = g.node if g.allocation > 0 else None
            if admitted[d.key]:
                ever_admitted.add(d.key)
            if g.node is not None:
                used[g.node] += g.allocation
            history[d.key].append((now, g.allocation))
        assert all(used[n.name] <= n.cpu_cores + 1e-9 for n in nodes)
        advance({k: (a, b, steps) for k, _, a, b, steps, _ in specs}, alloc, done, finish, now)
        now += PERIOD_S
    deadlines = {key: deadline for key, _, _, _, _, deadline in specs}
    assert_admitted_finish_in_time(ever_admitted, finish, deadlines)
    # No oscillation: between two arrivals or finishes nobody's grant goes up then down or
    # down then up (an A-B-A flip).
    events = sorted(
        {arrival for _, arrival, *_ in specs} | {math.floor(t) + 1 for t in finish.values()}
    )
    for key, series in history.items():
        for lo, hi in itertools.pairwise([0.0, *events, now]):
            steady = [x for t, x in series if lo < t < hi]
            moves = [y - x for x, y in itertools.pairwise(steady) if abs(y - x) > 1e-9]
            flips = [1 for u, v in itertools.pairwise(moves) if u * v < 0]
            assert not flips, (key, lo, hi, steady)


def exact_need_gpus(a: float, b: float, steps: float, left_s: float, max_gpus: int) -> float:
    """The fewest whole GPUs that finish ``steps`` in ``left_s`` on ``a / u + b`` (max if none)."""
    fits = (u for u in range(1, max_gpus + 1) if steps * (a / u + b) <= left_s)
    return float(next(fits, max_gpus))


def test_closed_loop_spread_jobs_use_several_nodes_and_meet_admitted_deadlines() -> None:
    rng = random.Random(5)
    nodes = [Node(name, 32.0, 4.0) for name in ("a", "b", "c")]
    specs = []  # (key, arrival_s, a, b, steps, deadline_s or None, gpus_per_pod)
    for i in range(10):
        arrival = float(rng.randint(0, 40))
        a, b = rng.uniform(2.0, 6.0), rng.uniform(0.0, 0.05)
        steps = float(rng.randint(50, 150))
        per_pod = 2 if i % 2 else 0
        most = 8 if per_pod else 4  # one pod: what one node holds
        deadline = None if i % 5 == 4 else arrival + rng.uniform(1.1, 2.5) * steps * (a / most + b)
        specs.append((f"j{i:02d}", arrival, a, b, steps, deadline, per_pod))
    done = {k: 0.0 for k, *_ in specs}
    alloc = {k: 0.0 for k, *_ in specs}
    pods: dict[str, tuple[tuple[str, float], ...]] = {k: () for k, *_ in specs}
    admitted = {k: False for k, *_ in specs}
    finish: dict[str, float] = {}
    ever_admitted: set[str] = set()
    widest = 0.0  # the most GPUs a spread job held at once
    now = 0.0
    while len(finish) < len(specs) and now < 3000.0:
        demands = []
        for key, arrival, a, b, steps, deadline, per_pod in specs:
            if arrival > now or key in finish:
                continue
            left, most = steps - done[key], 8 if per_pod else 4
            need = most if deadline is None else exact_need_gpus(a, b, left, deadline - now, most)
            demands.append(
                Demand(
                    key=key,
                    mode="gpu",
                    need=need,
                    min_allocation=1.0,
                    max_allocation=most,
                    current=alloc[key],
                    steps_remaining=left,
                    deadline_s=deadline,
                    arrival_s=arrival,
                    admitted=admitted[key],
                    node=pods[key][0][0] if pods[key] and not per_pod else None,
                    nodes=tuple(n for n, _ in pods[key]) if per_pod else (),
                    step_time_s=amdahl(a, b),
                    gpus_per_pod=per_pod,
                )  # fmt: skip
            )
        result = pl.plan(demands, nodes, now, DECOR)
        used = {n.name: 0.0 for n in nodes}
        for d in demands:
            g = result.grants[d.key]
            alloc[d.key], pods[d.key] = g.allocation, g.pods
            admitted[d.key] = g.verdict == vocabulary.VERDICT_ADMITTED
            if admitted[d.key]:
                ever_admitted.add(d.key)
            for node, amount in g.pods:
                used[node] += amount
            if d.gpus_per_pod:
                widest = max(widest, g.allocation)
        assert all(used[n.name] <= n.gpus for n in nodes), used
        advance({k: (a, b, steps) for k, _, a, b, steps, *_ in specs}, alloc, done, finish, now)
        now += PERIOD_S
    assert widest > 4  # a spread job held more than any one node has
    deadlines = {key: deadline for key, _, _, _, _, deadline, _ in specs}
    assert_admitted_finish_in_time(ever_admitted, finish, deadlines)


def test_a_max_off_the_quantum_grid_is_filled_at_once_and_never_exceeded() -> None:
    # A max like 1.9765274... used to be approached in ever smaller steps (seconds per plan).
    import time as _time

    from decor.core import planner as P

    d = P.Demand(
        key="ns/a", mode="cpu", need=1.0, min_allocation=1.0, max_allocation=1.97652749993118,
        current=1.0, steps_remaining=100, deadline_s=None, arrival_s=0.0, admitted=True,
        node="n", step_time_s=lambda u: 1.0 / u,
    )  # fmt: skip
    for policy in P.POLICIES:
        started = _time.process_time()
        grant = P.plan([d], [P.Node("n", cpu_cores=4.0)], 1000.0, P.PlannerSettings(policy=policy))
        assert _time.process_time() - started < 0.5, policy
        assert grant.grants["ns/a"].allocation <= d.max_allocation, policy


def test_the_operator_reads_the_lost_deadline_rule_and_refuses_an_unknown_one() -> None:
    from decor.service.config import ENV_LOST_DEADLINE, OperatorConfig

    assert OperatorConfig.from_env({}).lost_deadline == pl.LOST_BEST_EFFORT
    assert OperatorConfig.from_env({ENV_LOST_DEADLINE: "keep"}).lost_deadline == pl.LOST_KEEP
    with pytest.raises(ValueError, match="DECOR_LOST_DEADLINE='hold': one of bestEffort, keep"):
        OperatorConfig.from_env({ENV_LOST_DEADLINE: "hold"})
