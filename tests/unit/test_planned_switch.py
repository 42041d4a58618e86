"""A GPU job whose law plans fewer GPUs now and one switch up later: the planner holds the
GPUs of the switch (``Demand.planned_peak``), so no other job is admitted into them, and a
switch the planner refuses is re-planned at once within what was granted.

Planner tables first, then the law's side, then closed loops of law and planner together.
Speed curves are exact: ``step_time = a / g``; times are seconds from 0.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest
from decor.api import vocabulary
from decor.core import control, jobperiod
from decor.core import planner as pl
from decor.core.control import Decision, Observation, Settings, SpeedFit, State, decide
from decor.core.planner import Demand, Node, PlannerSettings
from decor.core.simulate import Plant


def per_gpu(a: float = 2.4) -> Callable[[float], float]:
    """Seconds per step at ``g`` GPUs: linear speed-up."""
    return lambda g: a / g


def gpu_demand(key: str, **kw: object) -> Demand:
    """A GPU deadline job on node n1: need 1 of [1, 4] GPUs, 100 steps, deadline 1,000 s."""
    base: dict[str, object] = dict(
        key=key, mode="gpu", need=1.0, min_allocation=1.0, max_allocation=4.0, current=0.0,
        steps_remaining=100.0, deadline_s=1000.0, arrival_s=0.0, step_time_s=per_gpu(),
        node=None,
    )  # fmt: skip
    base.update(kw)
    return Demand(**base)  # type: ignore[arg-type]


def plan(*demands: Demand, gpus: float = 4.0, now_s: float = 0.0) -> dict[str, pl.Grant]:
    nodes = [Node("n1", 32.0, gpus)]
    return dict(pl.plan(demands, nodes, now_s, PlannerSettings()).grants)


# A runs at 3 of the node's 4 GPUs and its law plans a switch to 4 later; B, a new job with
# an earlier deadline, needs 1 GPU.
RUNNING_3_THEN_4 = gpu_demand("a", need=3.0, current=3.0, admitted=True, node="n1",
                              planned_peak=4.0)  # fmt: skip
NEW_NEEDS_1 = gpu_demand("b", need=1.0, deadline_s=900.0, arrival_s=10.0)


def test_the_planned_switch_up_is_not_given_to_another_job() -> None:
    first = plan(RUNNING_3_THEN_4, NEW_NEEDS_1)
    # A is granted and placed at what it runs now; the GPU of its switch is held for it
    assert (first["a"].allocation, first["a"].pods) == (3.0, (("n1", 3.0),))
    assert first["a"].verdict == vocabulary.VERDICT_ADMITTED
    assert "planned switch to 4" in first["a"].reason
    assert first["b"].verdict == vocabulary.VERDICT_QUEUED, first["b"].reason
    # the next period A's law switches up: the planner grants it
    switch = plan(replace(RUNNING_3_THEN_4, need=4.0, planned_peak=0.0), NEW_NEEDS_1)
    assert switch["a"].allocation == 4.0 and switch["a"].verdict == vocabulary.VERDICT_ADMITTED


def test_without_a_planned_peak_the_new_job_takes_the_gpu_and_the_switch_is_shorted() -> None:
    # what the planner did before it knew the plan: the same demands, no planned peak
    first = plan(replace(RUNNING_3_THEN_4, planned_peak=0.0), NEW_NEEDS_1)
    assert first["b"].verdict == vocabulary.VERDICT_ADMITTED
    b_runs = replace(NEW_NEEDS_1, admitted=True, current=1.0, node="n1")
    switch = plan(replace(RUNNING_3_THEN_4, need=4.0, planned_peak=0.0), b_runs)
    assert (switch["a"].allocation, switch["a"].verdict) == (3.0, vocabulary.VERDICT_SHORTED)


@pytest.mark.parametrize(
    ("gpus", "peak", "per_pod", "room", "why"),
    [
        (4.0, 4.0, 0, "1 more held on n1", "one-pod job: the GPU of the switch on its node"),
        (3.0, 4.0, 0, "no room for its planned switch to 4", "the node has no GPU more"),
        (8.0, 6.0, 0, "", "a peak above max: capped at max 4"),
        (8.0, 2.0, 0, "", "a peak at or below the need: nothing more held"),
    ],
)
def test_the_room_held_for_a_planned_switch(
    gpus: float, peak: float, per_pod: int, room: str, why: str
) -> None:
    a = replace(RUNNING_3_THEN_4, planned_peak=peak, gpus_per_pod=per_pod)
    other = gpu_demand("c", need=4.0, max_allocation=8.0, arrival_s=20.0, deadline_s=800.0)
    g = plan(a, other, gpus=gpus)
    assert (g["a"].allocation, g["a"].pods) == (3.0, (("n1", 3.0),)), why
    assert room in g["a"].reason, why
    held_for_a = 4.0 if "1 more held" in room or peak > 4.0 else 3.0
    # the other job gets only what a's grant and its room leave
    assert g["c"].allocation <= gpus - held_for_a, why


def test_a_job_that_spans_pods_holds_its_switch_as_pods_on_any_node() -> None:
    a = replace(RUNNING_3_THEN_4, gpus_per_pod=2, nodes=("n1", "n1"), node="n1",
                max_allocation=4.0)  # fmt: skip
    nodes = [Node("n1", 32.0, 3.0), Node("n2", 32.0, 1.0)]
    g = dict(pl.plan([a, NEW_NEEDS_1], nodes, 0.0, PlannerSettings()).grants)
    assert g["a"].allocation == 3.0 and sum(x for _, x in g["a"].pods) == 3.0
    assert "1 more held on n2 for its planned switch to 4" in g["a"].reason
    assert g["b"].verdict == vocabulary.VERDICT_QUEUED


def test_a_higher_priority_job_may_still_displace_the_room() -> None:
    urgent = replace(NEW_NEEDS_1, priority=5, need=2.0)
    g = plan(RUNNING_3_THEN_4, urgent)
    # priority decides as before: a's grant and room give way together
    assert g["b"].verdict == vocabulary.VERDICT_ADMITTED
    assert g["a"].verdict == vocabulary.VERDICT_PREEMPTED


@pytest.mark.parametrize("policy", [pl.POLICY_ELASTICFLOW, pl.POLICY_EDF, pl.POLICY_NONE])
def test_the_baselines_hold_no_room_for_a_planned_switch(policy: str) -> None:
    def grants_with(peak: float) -> dict[str, pl.Grant]:
        a = replace(RUNNING_3_THEN_4, planned_peak=peak)
        return dict(pl.plan([a, NEW_NEEDS_1], [Node("n1", 32.0, 4.0)], 0.0,
                            PlannerSettings(policy=policy)).grants)  # fmt: skip

    assert grants_with(4.0) == grants_with(0.0)


def test_a_cpu_demand_is_planned_as_before_whatever_its_planned_peak() -> None:
    cpu = gpu_demand("a", mode="cpu", need=3.0, current=3.0, admitted=True, node="n1")
    other = gpu_demand("b", mode="cpu", need=1.0, arrival_s=10.0, deadline_s=900.0)
    before = dict(pl.plan([cpu, other], [Node("n1", 4.0)], 0.0, PlannerSettings()).grants)
    with_peak = dict(pl.plan([replace(cpu, planned_peak=4.0), other], [Node("n1", 4.0)], 0.0,
                             PlannerSettings()).grants)  # fmt: skip
    assert with_peak == before


def random_gpu_jobs(rng: random.Random) -> list[Demand]:
    """Up to 7 one-pod GPU jobs on nodes n1, n2: some running and admitted (a few planning a
    switch one or two GPUs up), some new."""
    jobs = []
    for i in range(rng.randint(2, 7)):
        need = float(rng.randint(1, 3))
        running = rng.random() < 0.5
        peak = need + rng.randint(1, 2) if running and rng.random() < 0.6 else 0.0
        jobs.append(
            gpu_demand(
                f"j{i}", need=need, max_allocation=6.0, planned_peak=peak,
                deadline_s=rng.uniform(500.0, 2000.0), arrival_s=float(i),
                admitted=running, current=need if running else 0.0,
                node=rng.choice(("n1", "n2")) if running else None,
            )
        )  # fmt: skip
    return jobs


def next_period(jobs: list[Demand], first: dict[str, pl.Grant]) -> list[Demand]:
    """The demands a period later: every job admitted now runs at its grant there, and each
    that was held room for its switch up asks for the switch."""
    later = []
    for d in jobs:
        g = first[d.key]
        if g.verdict != vocabulary.VERDICT_ADMITTED or g.allocation <= 0:
            later.append(d)
            continue
        held = "more held" in g.reason
        need = min(d.planned_peak, d.max_allocation) if held else g.allocation
        later.append(replace(d, need=need, planned_peak=0.0, admitted=True,
                             current=g.allocation, node=g.node))  # fmt: skip
    return later


@pytest.mark.parametrize("seed", range(60))
def test_a_held_switch_up_is_granted_the_next_period(seed: int) -> None:
    rng = random.Random(seed)
    jobs = random_gpu_jobs(rng)
    nodes = [Node("n1", 32.0, float(rng.randint(2, 8))), Node("n2", 32.0, float(rng.randint(2, 8)))]
    first = dict(pl.plan(jobs, nodes, 0.0, PlannerSettings()).grants)
    for node in nodes:  # grants alone (the rooms are not granted) fit every node
        on = sum(a for g in first.values() for n, a in g.pods if n == node.name)
        assert on <= node.gpus + 1e-9, (seed, node)
    for d in jobs:
        g = first[d.key]
        assert sum(a for _, a in g.pods) == g.allocation, (seed, g)
    later = dict(pl.plan(next_period(jobs, first), nodes, 5.0, PlannerSettings()).grants)
    for d in jobs:
        g = first[d.key]
        if g.verdict == vocabulary.VERDICT_ADMITTED and "more held" in g.reason:
            want = min(d.planned_peak, d.max_allocation)
            assert later[d.key].allocation == want, (seed, d.key, later[d.key].reason)
            assert later[d.key].verdict == vocabulary.VERDICT_ADMITTED, (seed, d.key)


# ---------------------------------------------------------------------------------------
# The law: which plan carries a switch up, and a refused one re-planned within the grant

# At 2 GPUs, t = 100 s, 600 of 1000 steps left (2.4/g s per step): 2 GPUs finish at 820 s;
# 3 GPUs, a 30 s restart included, at 610 s; 4 at 490 s.


def gpu_law(deadline_s: float, **kw: object) -> Settings:
    base = Settings(mode="gpu", min_allocation=1.0, max_allocation=4.0, start_s=0.0,
                    deadline_s=deadline_s, policy="decor", period_s=5.0)  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def fitted(gpus: float, a: float = 2.4) -> State:
    """A decor state whose fit knows step time = a / g at ``gpus``."""
    fit = SpeedFit().add(1.0 / gpus, a / gpus, 100, 10.0, 20.0)
    return State(policy="decor", allocation=gpus, fit=fit, decisions=5)


def at_100_s(gpus: float = 2.0) -> Observation:
    return Observation(time_s=100.0, steps_done=400, steps_total=1000, allocation=gpus)


@pytest.mark.parametrize(
    ("deadline_s", "allocation", "peak", "why"),
    [
        (810.0, 2.0, 3.0, "behind at 2, 3 a period later still make it: hold 2, plan 3"),
        (630.0, 2.0, 3.0, "3 a period later leave 14.4 s, over a quarter restart: plan 3"),
        (620.0, 3.0, 0.0, "3 a period later leave 4.4 s: the switch is now, nothing planned"),
        (600.0, 4.0, 0.0, "3 no longer make it: 4 now"),
        (900.0, 2.0, 0.0, "on track at 2: nothing planned"),
    ],
)
def test_the_law_carries_the_switch_up_it_plans(
    deadline_s: float, allocation: float, peak: float, why: str
) -> None:
    decision = decide(fitted(2.0), at_100_s(), gpu_law(deadline_s), 100.0)
    assert (decision.allocation, decision.planned_peak) == (allocation, peak), why


def test_the_planned_peak_reaches_the_demand_within_max() -> None:
    built = jobperiod.demand(
        key="ml/a",
        mode="gpu",
        need=2.0,
        min_allocation=1.0,
        max_allocation=4.0,
        current=2.0,
        steps_remaining=600.0,
        deadline_s=810.0,
        arrival_s=0.0,
        admitted=True,
        planned_peak=6.0,
    )
    assert built.planned_peak == 4.0
    default = jobperiod.demand(key="ml/a", mode="gpu", need=2.0, min_allocation=1.0,
                               max_allocation=4.0, current=2.0, steps_remaining=600.0,
                               deadline_s=810.0, arrival_s=0.0, admitted=True)  # fmt: skip
    assert default.planned_peak == 0.0


def test_a_refused_switch_is_re_planned_within_the_grant_and_is_at_risk() -> None:
    settings, base = gpu_law(600.0), fitted(2.0)
    asked = decide(base, at_100_s(), settings, 100.0)
    assert asked.allocation == 4.0 and asked.condition == vocabulary.CONDITION_ON_TRACK
    within = control.follow_grant(asked, 3.0, base, settings, 100.0, at_100_s())
    # the best within 3: 3 (610 s) rather than 2 (820 s); neither makes 600 s
    assert within.allocation == 3.0 and within.state.allocation == 3.0
    assert within.condition == vocabulary.CONDITION_AT_RISK
    assert within.message.startswith("granted 3 of the 4 GPU(s) asked, re-planned within 3: ")
    assert within.eta_s == pytest.approx(610.0)  # the finish at what runs, not at 4
    assert within.state.gpu_restarts == 1 and within.state.change_pending_since_s == 100.0
    # without the period's sample the grant is followed as before (the local runtime)
    followed = control.follow_grant(asked, 3.0, base, settings, 100.0)
    assert followed.condition == vocabulary.CONDITION_AT_RISK
    assert followed.message.startswith("granted 3 of the 4 needed")
    assert followed.eta_s == asked.eta_s


def test_a_refused_switch_held_where_it_runs_is_no_restart() -> None:
    # at 3 GPUs: 580 s; at 4, a restart included, 490 s, a period later 495 s: under a
    # quarter restart (7.5 s) before 500 s, too near to wait
    settings, base = gpu_law(500.0), fitted(3.0)
    asked = decide(base, at_100_s(3.0), settings, 100.0)
    assert asked.allocation == 4.0
    within = control.follow_grant(asked, 3.0, base, settings, 100.0, at_100_s(3.0))
    assert within.allocation == 3.0 and within.condition == vocabulary.CONDITION_AT_RISK
    assert within.state.gpu_restarts is None and within.state.change_pending_since_s is None


def test_a_grant_where_even_max_cannot_make_it_stays_infeasible() -> None:
    settings, base = gpu_law(400.0), fitted(2.0)
    asked = decide(base, at_100_s(), settings, 100.0)
    assert asked.condition == vocabulary.CONDITION_INFEASIBLE
    within = control.follow_grant(asked, 3.0, base, settings, 100.0, at_100_s())
    assert within.condition == vocabulary.CONDITION_INFEASIBLE


def test_cpu_and_decor_nn_follow_a_grant_as_before() -> None:
    cpu = replace(gpu_law(600.0), mode="cpu", period_s=1.0)
    cpu_base = State(policy="decor", allocation=2.0, level_fit=fitted(2.0, 0.4).fit, decisions=5)
    obs = replace(at_100_s(), allocation=2.0)
    asked = decide(cpu_base, obs, cpu, 100.0)
    assert control.follow_grant(asked, 1.0, cpu_base, cpu, 100.0, obs) == (
        control.follow_grant(asked, 1.0, cpu_base, cpu, 100.0)
    )
    nn = gpu_law(600.0, policy="decor-nn")
    nn_base = State(policy="decor-nn", allocation=2.0, integral=2.0, decisions=3)
    asked = decide(nn_base, at_100_s(), nn, 100.0)
    assert control.follow_grant(asked, 1.0, nn_base, nn, 100.0, at_100_s()) == (
        control.follow_grant(asked, 1.0, nn_base, nn, 100.0)
    )


# ---------------------------------------------------------------------------------------
# Closed loops: each period every job's law decides (``control.decide``), its demand is built
# as the runtimes build it (``jobperiod.demand``), one plan grants, and the law follows the
# grant (``control.follow_grant`` with the period's sample); the plant (``simulate.Plant``)
# runs the steps, a change of count losing ``restart_s``.

PERIOD_S = 5.0
RESTART_S = 10.0


@dataclass
class LoopJob:
    """One job of a closed loop; ``allocation`` is the GPUs it runs on (0: not started)."""

    key: str
    settings: Settings
    plant: Plant
    total_steps: float
    arrival_s: float
    allocation: float = 0.0
    state: State | None = None
    steps: float = 0.0
    restart_until_s: float = 0.0
    finished_s: float | None = None
    grants: list[tuple[float, pl.Grant]] = field(default_factory=list)
    refusals: list[tuple[float, Decision, Decision]] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)  # the law's planned peak, each period

    def curve(self, g: float) -> float:
        return self.plant.mean_step_time_s(g, 0.0)

    def observation(self, now_s: float) -> Observation:
        return Observation(time_s=now_s, steps_done=math.floor(self.steps),
                           steps_total=self.total_steps, allocation=self.allocation,
                           pending=now_s < self.restart_until_s)  # fmt: skip


def loop_job(key: str, gpus_needed: float, deadline_s: float, **kw: object) -> LoopJob:
    """A job of 1000 steps (2.4 / g s per step) whose deadline needs ``gpus_needed`` GPUs."""
    settings = gpu_law(deadline_s, restart_cost_s=RESTART_S, max_allocation=4.0)
    steps = (deadline_s - float(kw.get("arrival_s", 0.0))) * gpus_needed / 2.4  # type: ignore[arg-type]
    base: dict[str, object] = dict(arrival_s=0.0, total_steps=round(steps))
    base.update(kw)
    return LoopJob(key, settings, Plant(a=2.4, restart_s=RESTART_S), **base)  # type: ignore[arg-type]


def _decide(job: LoopJob, now_s: float, planned: bool) -> tuple[Demand, Decision | None]:
    """The job's decision this period (None before it runs) and its demand."""
    settings, remaining = job.settings, job.total_steps - job.steps
    decision = None
    if job.state is None:
        need = jobperiod.need_from_curve(
            job.curve,
            remaining,
            settings.deadline_s - now_s,
            settings.min_allocation,
            settings.max_allocation,
        )
    else:
        decision = decide(job.state, job.observation(now_s), settings, now_s)
        need = decision.allocation
        job.peaks.append(decision.planned_peak)
    peak = decision.planned_peak if decision is not None and planned else 0.0
    demand = jobperiod.demand(
        key=job.key, mode="gpu", need=need, min_allocation=settings.min_allocation,
        max_allocation=settings.max_allocation, current=job.allocation,
        steps_remaining=remaining, deadline_s=settings.deadline_s, arrival_s=job.arrival_s,
        admitted=job.state is not None, node="n1" if job.allocation else None,
        step_time_s=job.curve, restart_cost_s=RESTART_S, planned_peak=peak,
    )  # fmt: skip
    return demand, decision


def _follow(job: LoopJob, grant: pl.Grant, decision: Decision | None, now_s: float) -> None:
    """The job acts on its grant: starts, or its law follows the grant (a change restarts)."""
    job.grants.append((now_s, grant))
    if decision is None or job.state is None:
        if grant.verdict == vocabulary.VERDICT_ADMITTED and grant.allocation > 0:
            job.state = replace(fitted(grant.allocation), last_time_s=None, last_steps=None)
            job.allocation, job.restart_until_s = grant.allocation, now_s + RESTART_S
        return
    followed = control.follow_grant(decision, grant.allocation, job.state, job.settings, now_s,
                                    job.observation(now_s))  # fmt: skip
    if grant.allocation < decision.allocation:
        job.refusals.append((now_s, decision, followed))
    job.state = followed.state
    if followed.state.allocation != job.allocation:
        job.allocation, job.restart_until_s = followed.state.allocation, now_s + RESTART_S


def _advance(job: LoopJob, now_s: float) -> None:
    """One period of steps at the job's count (none while it restarts)."""
    if job.allocation <= 0 or job.finished_s is not None:
        return
    start_s = max(now_s, job.restart_until_s)
    if start_s >= now_s + PERIOD_S:
        return
    step_s = job.curve(job.allocation)
    left_s = (job.total_steps - job.steps) * step_s
    if start_s + left_s <= now_s + PERIOD_S:
        job.steps, job.finished_s = job.total_steps, start_s + left_s
    else:
        job.steps += (now_s + PERIOD_S - start_s) / step_s


def run_loop(jobs: list[LoopJob], gpus: float, planned: bool, horizon_s: float = 1500.0) -> None:
    """Run ``jobs`` on one node of ``gpus`` GPUs until all finish (``planned``: demands carry
    the law's planned peak; False: as before it)."""
    now_s = 0.0
    while now_s < horizon_s and any(j.finished_s is None for j in jobs):
        live = [j for j in jobs if j.arrival_s <= now_s and j.finished_s is None]
        decided = {j.key: _decide(j, now_s, planned) for j in live}
        granted = pl.plan([d for d, _ in decided.values()], [Node("n1", 64.0, gpus)], now_s)
        for j in live:
            _follow(j, granted.grants[j.key], decided[j.key][1], now_s)
            _advance(j, now_s)
        now_s += PERIOD_S


def contended() -> tuple[LoopJob, LoopJob]:
    """A needs 3.4 GPUs of a 4-GPU node and starts at 3, planning 4 later; B arrives at 20 s
    needing 1 GPU by an earlier deadline."""
    a = loop_job("a", 3.4, 700.0)
    a.state, a.allocation = fitted(3.0), 3.0
    return a, loop_job("b", 0.8, 650.0, arrival_s=20.0)


def test_closed_loop_the_planned_switch_up_is_never_refused() -> None:
    a, b = contended()
    run_loop([a, b], gpus=4.0, planned=True)
    assert a.refusals == []
    counts = [g.allocation for _, g in a.grants]
    assert counts[0] == 3.0 and counts[-1] == 4.0 and sorted(counts) == counts  # 3, then 4
    # on time, early by at most a restart and two periods (the law's hysteresis)
    assert a.finished_s is not None
    assert 0.0 <= a.settings.deadline_s - a.finished_s <= RESTART_S + 2 * PERIOD_S
    # B was not admitted into the GPU of A's switch: it waits (told so) while A runs, its
    # deadline passing meanwhile (A finishes within seconds of its own, after B's)
    while_a_runs = [g for t, g in b.grants if t < a.finished_s]
    assert while_a_runs and all(g.allocation == 0.0 for g in while_a_runs)
    before_its_deadline = [g for t, g in b.grants if t < min(a.finished_s, b.settings.deadline_s)]
    assert before_its_deadline
    assert all(g.verdict == vocabulary.VERDICT_QUEUED for g in before_its_deadline)


def test_closed_loop_a_refused_switch_re_plans_in_the_same_period() -> None:
    # the planner not told of A's plan: B takes the GPU, A's switch up is refused
    a, b = contended()
    run_loop([a, b], gpus=4.0, planned=False)
    assert a.refusals, [g.allocation for _, g in a.grants]
    for now_s, asked, followed in a.refusals:
        assert asked.allocation == 4.0 and followed.allocation == 3.0, now_s
        # AtRisk: the grant, not the job's max, falls short (Infeasible once even 4 would)
        infeasible = asked.condition == vocabulary.CONDITION_INFEASIBLE
        assert followed.condition == (
            vocabulary.CONDITION_INFEASIBLE if infeasible else vocabulary.CONDITION_AT_RISK
        ), now_s
        assert "re-planned within 3" in followed.message, now_s
        assert followed.eta_s is not None and followed.eta_s > a.settings.deadline_s, now_s
    # A stays at 3 (no restart for nothing) until B is done; it finishes late
    assert b.finished_s is not None
    assert all(g.allocation == 3.0 for t, g in a.grants if t < b.finished_s)
    assert a.finished_s is not None and a.finished_s > a.settings.deadline_s


@pytest.mark.parametrize(
    ("needed", "start"),
    [(1.9, 2.0), (2.9, 4.0), (2.2, 4.0), (3.9, 4.0)],
    ids=["down", "down-twice", "down-later", "whole"],
)
def test_closed_loop_without_a_planned_switch_nothing_changes(needed: float, start: float) -> None:
    def run(planned: bool) -> list[tuple[float, pl.Grant]]:
        a = loop_job("a", needed, 700.0)
        a.state, a.allocation = fitted(start), start
        b = loop_job("b", 0.8, 650.0, arrival_s=20.0)
        run_loop([a, b], gpus=4.0, planned=planned)
        assert set(a.peaks + b.peaks) == {0.0}  # no switch up planned in these runs
        return a.grants + b.grants

    assert run(True) == run(False)
