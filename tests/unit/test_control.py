"""The control law: single decisions as tables, then closed loop against plant models.

Part (a) pins ``decide`` call by call: the DECOR-NN arithmetic exactly as DESIGN.md states
it, the conditions every policy reports, the state's JSON round trip and the speed fit.
Part (b) runs whole jobs through ``run_closed_loop`` (the same ``decide`` the runtimes call)
and checks what a user sees: the job finishes at its deadline, the allocation stays within
[MIN, MAX] and on the quantum grid, it does not oscillate or wind up, an impossible deadline
is reported, and a moved deadline is followed.

Units: seconds, cores (CPU) or GPU counts. The CPU plants take 100 s at MAX = 4 cores.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from functools import cache
from typing import Any

import pytest
from decor.api.vocabulary import (
    CONDITION_AT_RISK,
    CONDITION_COMPLETE,
    CONDITION_DEADLINE_MISSED,
    CONDITION_INFEASIBLE,
    CONDITION_METRICS_UNAVAILABLE,
    CONDITION_ON_TRACK,
    DECISION_STARTING,
)
from decor.core.control import (
    GPU_FIT_MIN_SPREAD,
    Observation,
    Settings,
    SpeedFit,
    State,
    _level_held,
    _upper_need_s,
    _whole_core_level,
    decide,
    initial_state,
    start_allocation,
    step_time_curve,
    thread_cores,
    usable_cores,
)
from decor.core.simulate import Plant, SimResult, run_closed_loop

MIN_CORES, MAX_CORES = 1.0, 4.0
MIN_GPUS, MAX_GPUS = 1.0, 4.0
TOTAL_STEPS = 1000
SEEDS = (0, 1, 2, 3)
DEADLINE_FACTORS = (1.5, 1.8, 2.5)  # deadline / run time at MAX


def cpu_settings(deadline_s: float, policy: str = "decor-nn", **overrides: Any) -> Settings:
    base = Settings(
        mode="cpu",
        min_allocation=MIN_CORES,
        max_allocation=MAX_CORES,
        start_s=0.0,
        deadline_s=deadline_s,
        policy=policy,
        period_s=1.0,
    )
    return replace(base, **overrides)


def gpu_settings(deadline_s: float, policy: str = "decor-nn", **overrides: Any) -> Settings:
    base = Settings(
        mode="gpu",
        min_allocation=MIN_GPUS,
        max_allocation=MAX_GPUS,
        start_s=0.0,
        deadline_s=deadline_s,
        policy=policy,
        period_s=5.0,
    )
    return replace(base, **overrides)


def observation(
    time_s: float, steps: float, allocation: float, total: float = 100, pending: bool = False
) -> Observation:
    return Observation(
        time_s=time_s, steps_done=steps, steps_total=total, allocation=allocation, pending=pending
    )


def nn_state(integral: float, allocation: float, decisions: int = 3) -> State:
    return State(policy="decor-nn", allocation=allocation, integral=integral, decisions=decisions)


# =======================================================================================
# (a) single decisions
# ---------------------------------------------------------------------------------------
# decor-nn: e = t/D - y;  uP = K e;  uI = uI_prev + uP Ts/Ti;  u = clamp(quantize(uP + uI));
# back-calculation uI = u - uP.  K = 50, Ti = 12 s; CPU Ts = 1 s, GPU Ts = 5 s.

NN_CPU_CASES = [
    # id, state (integral, requested), observation (t, steps, total, applied), now,
    #     expected allocation, expected integral after back-calculation
    pytest.param(
        (4.0, 4.0, 0),
        (10, 10, 100, 4.0),
        10,
        4.0,
        4.0,
        id="on-set-point-from-start: e=0 keeps u = uI = MAX",
    ),
    pytest.param(
        (2.0, 2.5, 3),
        (50, 49, 100, 2.5),
        50,
        2.55,
        2.05,
        # e = .01, uP = .5, uI = 2 + .5/12 = 2.0417, u = 2.5417 -> 2.55, uI = 2.55 - .5
        id="behind-unclamped: rounded to the 0.05 quantum",
    ),
    pytest.param(
        (2.0, 2.0, 3),
        (50, 498, 1000, 2.0),
        50,
        2.10,
        2.0,
        # e = .002, uP = .1, uI = 2.0083, u = 2.1083 -> 2.10 (nearest), uI = 2.10 - .1
        id="quantum-nearest-rounds-down",
    ),
    pytest.param(
        (2.0, 2.0, 3),
        (50, 40, 100, 2.0),
        50,
        4.0,
        -1.0,
        # e = .1, uP = 5, u = 7.42 -> MAX, uI = 4 - 5
        id="far-behind: clamp at MAX, integral back-calculated",
    ),
    pytest.param(
        (2.0, 2.0, 3),
        (50, 60, 100, 2.0),
        50,
        1.0,
        6.0,
        # e = -.1, uP = -5, u = -3.42 -> MIN, uI = 1 - (-5)
        id="far-ahead: clamp at MIN, integral back-calculated",
    ),
    pytest.param(
        (2.0, 3.0, 3),
        (50, 50, 100, 2.5),
        50,
        1.5,
        1.5,
        # asked 3, got 2.5: uI = 2 + (2.5 - 3) = 1.5; e = 0 so u = 1.5
        id="integral-follows-applied: a capped resize is not wound up",
    ),
]


@pytest.mark.parametrize(("state_args", "obs_args", "now", "want_u", "want_integral"), NN_CPU_CASES)
def test_decor_nn_cpu_arithmetic(state_args, obs_args, now, want_u, want_integral) -> None:
    integral, requested, decisions = state_args
    t, steps, total, applied = obs_args
    decision = decide(
        nn_state(integral, requested, decisions),
        observation(t, steps, applied, total),
        cpu_settings(100.0),
        now,
    )
    assert decision.allocation == pytest.approx(want_u, abs=1e-9)
    assert decision.state.integral == pytest.approx(want_integral, abs=1e-9)
    assert decision.state.allocation == decision.allocation
    assert decision.state.decisions == decisions + 1


def test_decor_nn_integral_starts_at_max() -> None:
    for settings in (cpu_settings(100.0), gpu_settings(100.0)):
        state = initial_state(settings)
        assert state.integral == settings.max_allocation
        assert state.allocation == settings.max_allocation
    # A job exactly on its set point keeps everything: uP = 0, u = uI = MAX.
    decision = decide(
        initial_state(cpu_settings(100.0)), observation(1, 1, 4.0), cpu_settings(100.0), 1
    )
    assert decision.allocation == MAX_CORES


@pytest.mark.parametrize(
    ("mode", "steps", "want_u", "want_integral"),
    [
        # D = 100, now = 101: SP = 1.01.  State: uI = -2, u = MIN (the PI alone says MIN).
        # CPU, y = .985 < .99: e = .025, uP = 1.25 -> late: MAX, uI = 4 - 1.25
        pytest.param("cpu", 985, 4.0, 2.75, id="cpu-below-99%: jump to MAX"),
        # CPU, y = .992 >= .99: e = .018, uP = .9, u = .9 - 2 + .075 -> MIN, uI = 1 - .9
        pytest.param("cpu", 992, 1.0, 0.1, id="cpu-at-99.2%: PI result kept"),
        # GPU, y = .992 < .995: late: MAX, uI = 4 - .9
        pytest.param("gpu", 992, 4.0, 3.1, id="gpu-below-99.5%: jump to MAX"),
        # GPU, y = .997: e = .013, uP = .65, u = .65 - 2 + .65*5/12 -> MIN, uI = 1 - .65
        pytest.param("gpu", 997, 1.0, 0.35, id="gpu-at-99.7%: PI result kept"),
    ],
)
def test_decor_nn_late_phase(mode: str, steps: int, want_u: float, want_integral: float) -> None:
    settings = cpu_settings(100.0) if mode == "cpu" else gpu_settings(100.0)
    decision = decide(
        nn_state(-2.0, 1.0), observation(100.5, steps, 1.0, total=1000), settings, 101.0
    )
    assert decision.allocation == want_u
    assert decision.state.integral == pytest.approx(want_integral, abs=1e-9)
    assert decision.condition == CONDITION_DEADLINE_MISSED


def test_decor_nn_gpu_quantum_and_period() -> None:
    # e = .008, uP = .4, uI = 2 + .4 * 5/12 = 2.1667, u = 2.5667 -> 3 GPUs, uI = 3 - .4
    decision = decide(
        nn_state(2.0, 2.0), observation(50, 492, 2.0, total=1000), gpu_settings(100.0), 50
    )
    assert decision.allocation == 3.0
    assert decision.state.integral == pytest.approx(2.6)


def test_decor_nn_gpu_pending_holds_and_freezes_integral() -> None:
    state = nn_state(2.6, 3.0, decisions=4)
    # The pod still runs 2 GPUs while the change to 3 is carried out; the job is far behind.
    decision = decide(
        state, observation(60, 400, 2.0, total=1000, pending=True), gpu_settings(100.0), 60
    )
    assert decision.allocation == 3.0
    assert decision.state.integral == 2.6  # neither advanced nor corrected to the old count
    assert decision.state.decisions == 5
    assert decision.state.last_time_s == state.last_time_s  # the sample is not consumed
    assert "pending" in decision.message


def test_decor_nn_deadline_change_only_moves_the_set_point() -> None:
    state = nn_state(1.0, 2.5)
    obs = observation(50, 45, 2.5)
    before = decide(state, obs, cpu_settings(100.0), 50)
    after = decide(state, obs, cpu_settings(110.0), 50)
    # D = 100: SP = .5, e = .05, uP = 2.5, u = 2.5 + 1 + 2.5/12 = 3.708 -> 3.70, uI = 1.2
    assert before.allocation == 3.7
    assert before.state.integral == pytest.approx(1.2)
    # D = 110: SP = .4545, e = .004545, uP = .22727, u = 1.2462 -> 1.25, uI = 1.25 - .22727
    assert after.allocation == 1.25
    assert after.state.integral == pytest.approx(1.25 - 50 * (50 / 110 - 0.45))

    # Nothing else in the state depends on the deadline.
    def strip(state: State) -> State:
        return replace(state, allocation=0.0, integral=0.0, last_change_s=None)

    assert strip(before.state) == strip(after.state)


def test_decor_nn_reports_at_risk_when_behind_at_max() -> None:
    decision = decide(nn_state(2.0, 4.0), observation(50, 40, 4.0), cpu_settings(100.0), 50)
    assert (decision.allocation, decision.condition) == (4.0, CONDITION_AT_RISK)


# ---------------------------------------------------------------------------------------
# Both policies: missing metrics, completion, state persistence


def fitted_decor_state(
    allocation: float, a: float = 0.4, b: float = 0.0, mode: str = "cpu"
) -> State:
    """A decor state whose speed fit already knows step time = a/u + b at ``allocation``
    (CPU: the sub-core fit below one core, the whole-core fit from one core up)."""
    fit = SpeedFit().add(1.0 / allocation, a / allocation + b, 100, 10.0, 20.0)
    if mode == "cpu" and allocation >= 1.0:
        return State(policy="decor", allocation=allocation, level_fit=fit, decisions=5)
    return State(policy="decor", allocation=allocation, fit=fit, decisions=5)


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
def test_no_observation_holds_allocation(policy: str) -> None:
    settings = cpu_settings(100.0, policy)
    state = replace(initial_state(settings, 2.0), allocation=2.35)
    decision = decide(state, None, settings, 50)
    assert decision.condition == CONDITION_METRICS_UNAVAILABLE
    assert decision.allocation == 2.35
    assert decision.state == state


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
def test_complete_job_reports_complete(policy: str) -> None:
    settings = cpu_settings(100.0, policy)
    state = replace(initial_state(settings, 2.0), allocation=1.5)
    decision = decide(state, observation(97.5, 100, 1.5), settings, 98)
    assert decision.condition == CONDITION_COMPLETE
    assert decision.allocation == 1.5
    assert decision.eta_s == 97.5


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
@pytest.mark.parametrize("mode", ["cpu", "gpu"])
def test_state_round_trips_through_json(policy: str, mode: str) -> None:
    settings = (cpu_settings if mode == "cpu" else gpu_settings)(150.0, policy)
    result_state = initial_state(settings)
    plant = Plant(a=0.4 if mode == "cpu" else 2.4, b=0.01)
    # Drive a few real decisions so the fit, the integral and the GPU fields are populated.
    steps, t = 0.0, 0.0
    for _ in range(30):
        t += settings.period_s
        steps += settings.period_s / plant.mean_step_time_s(result_state.allocation, t)
        obs = observation(t, math.floor(steps), result_state.allocation, total=TOTAL_STEPS)
        result_state = decide(result_state, obs, settings, t).state
    raw = json.loads(json.dumps(result_state.to_dict()))
    assert State.from_dict(raw) == result_state
    if policy == "decor":
        assert raw["fit" if mode == "gpu" else "level_fit"]["sw"] > 0


def test_speed_fit_recovers_a_and_b_from_two_allocations() -> None:
    a, b = 0.4, 0.03
    fit = SpeedFit()
    for i in range(10):
        for cores in (2.0, 4.0):
            fit = fit.add(1.0 / cores, a / cores + b, 10, float(i), 20.0)
    coefficients = fit.coefficients()
    assert coefficients is not None
    got_a, got_b = coefficients
    assert got_a == pytest.approx(a, rel=1e-3)
    assert got_b == pytest.approx(b, abs=1e-4)


def test_speed_fit_assumes_linear_speed_up_with_one_allocation() -> None:
    fit = SpeedFit()
    for i in range(5):
        fit = fit.add(1.0 / 2.0, 0.23, 10, float(i), 20.0)  # 0.23 s per step at 2 cores
    coefficients = fit.coefficients()
    assert coefficients is not None
    got_a, got_b = coefficients
    assert got_b == pytest.approx(0.0, abs=1e-9)
    assert got_a == pytest.approx(0.46, rel=1e-6)  # 4 cores would take 0.115 s per step


def test_gpu_speed_fit_tells_a_fixed_cost_from_neighbouring_counts_above_its_noise() -> None:
    """GPU counts are whole: one period at 4 GPUs and six at 3 (the scale bed's start) are
    too close for the CPU's spread, and the linear speed-up assumed then overstates 2 GPUs'
    step time by 4 % on a g^0.9 job. The GPU fit tells b from them, as the samples' scatter
    allows; from samples of a few noisy steps it keeps the shape it had."""
    step_s = {g: 0.125 / g**0.9 for g in (2, 3, 4)}

    def samples(noise: float, steps: int) -> SpeedFit:
        rng, fit = random.Random(3), SpeedFit()
        for i, g in enumerate((4, 3, 3, 3, 3, 3, 3)):
            y = step_s[g] * (1.0 + noise * rng.gauss(0.0, 1.0) / math.sqrt(steps))
            fit = fit.add(1.0 / g, y, steps, 10.0 * i, 60.0)
        return fit

    quiet = samples(0.05, 250)  # 10 s at 0.04 s a step
    assert not quiet.spread() and quiet.spread(GPU_FIT_MIN_SPREAD)
    assert quiet.told_apart() is None  # CPU rule: not spread
    told = quiet.told_apart(gpu=True)
    assert told is not None
    a, b = told
    assert a / 2 + b == pytest.approx(step_s[2], rel=0.015)  # linear: 1.5 x 3's, +4 %
    assert quiet.coefficients(gpu=True) == told
    noisy = samples(0.3, 8)  # 8 steps a sample, 30 % each: about 10 % a sample
    assert noisy.spread(GPU_FIT_MIN_SPREAD) and noisy.told_apart(gpu=True) is None
    assert noisy.coefficients(shape=0.1, gpu=True) == noisy.coefficients(shape=0.1)


def test_a_fit_restored_from_before_its_scatter_was_kept_tells_no_fixed_cost_yet() -> None:
    """State stored before ``syy`` and ``samples`` existed: the scatter is unknown, so the
    GPU fit keeps its shape until three samples are counted."""
    fit = SpeedFit().add(1.0 / 4, 0.04, 100, 0.0, 60.0).add(1.0 / 3, 0.05, 100, 10.0, 60.0)
    old = replace(fit, syy=0.0, samples=0.0)
    assert old.spread(GPU_FIT_MIN_SPREAD) and old.told_apart(gpu=True) is None


def test_speed_fit_keeps_a_measured_shape_and_follows_the_scale() -> None:
    """One allocation and a shape b/a measured before: the fit scales that shape to the
    samples (a uniform slow-down), instead of assuming linear speed-up."""
    fit = SpeedFit()
    for i in range(5):
        fit = fit.add(1.0, 0.030, 10, float(i), 20.0)  # 0.030 s per step at 1 core
    coefficients = fit.coefficients(shape=0.5)  # b = a / 2: 2 cores take 2/3 of 1 core's time
    assert coefficients is not None
    got_a, got_b = coefficients
    assert got_a + got_b == pytest.approx(0.030, rel=1e-9)  # through the samples
    assert got_b == pytest.approx(0.5 * got_a, rel=1e-9)
    assert got_a / 2 + got_b == pytest.approx(0.020, rel=1e-9)
    assert fit.coefficients() == fit.coefficients(shape=None)


def test_the_upper_whole_core_level_keeps_its_measured_speed_after_a_long_stay_below() -> None:
    """Two cores measured for 3 periods, then 40 at one core: the model's two-core step time
    stays what was measured (1.6x one core's speed), not twice one core's speed."""
    settings = cpu_settings(400.0, "decor", min_allocation=0.25, max_allocation=2.0)
    one_s, two_s = 1 / 37.85, 1 / 59.74  # VGG's speeds on the benchmark VM (steps/s)
    state, t, steps = initial_state(settings, 2.0), 0.0, 0.0
    for cores, periods in ((2.0, 4), (1.0, 41)):
        for _ in range(periods):
            state = decide(state, observation(t, steps, cores, total=20000), settings, t).state
            t, steps = t + 1.0, steps + 1.0 / (two_s if cores == 2.0 else one_s)
    assert not state.level_fit.spread()  # the two-core samples have faded
    model = step_time_curve(state, settings)
    assert model is not None
    assert model(1.0) == pytest.approx(one_s, rel=0.02)
    assert model(2.0) == pytest.approx(two_s, rel=0.02)


def test_speed_fit_is_empty_before_any_sample() -> None:
    assert SpeedFit().coefficients() is None


def test_a_read_of_zero_steps_starts_no_speed_interval() -> None:
    """A trainer at 0.2 core takes 1 s a step (a = 0.2 s at one core). The read that saw no
    step done carries the read's time, 0.8 s into the first step: the interval from it to
    the first step's stamp (0.2 s) would make the step five times too fast. The speed is
    measured from the first step on."""
    settings = cpu_settings(1000.0, "decor")
    state = State(policy="decor", allocation=0.2)
    zero = replace(observation(10.8, 0, 0.2, total=1000), anchors=False)
    for obs in (zero, observation(11.0, 1, 0.2, 1000), observation(12.0, 2, 0.2, 1000)):
        state = decide(state, obs, settings, obs.time_s).state
    a, b = state.fit.coefficients()
    assert (a, b) == (pytest.approx(0.2), 0.0)
    # Without the rule (the zero read anchoring), the first interval alone says a = 0.04.
    anchored = State(policy="decor", allocation=0.2)
    for obs in (observation(10.8, 0, 0.2, 1000), observation(11.0, 1, 0.2, 1000)):
        anchored = decide(anchored, obs, settings, obs.time_s).state
    assert anchored.fit.coefficients()[0] == pytest.approx(0.04)


# ---------------------------------------------------------------------------------------
# decor: single decisions (step time 0.4/u s; 1000 steps; sample at t = 50 s, 500 done)

D_DECOR = 180.0
MARGIN_S = 0.18  # spec.control.safetyMarginSeconds: target 179.82 s
# reserve = .05 x (129.82 s left - 18 s of end game) = 5.591 s
# needed step time = (179.82 - 50 - 5.591) / 500 = .248458 s -> u = .4 / .248458 = 1.6099 cores
# (a step time of .15154/u instead needs .6099 core)
A_SUB_CORE = 0.4 * 0.6099 / 1.6099


def decor_settings(**overrides: Any) -> Settings:
    """The single decisions' settings: deadline D_DECOR, aimed MARGIN_S early."""
    return cpu_settings(D_DECOR, "decor", safety_margin_s=MARGIN_S, **overrides)


@pytest.mark.parametrize(
    ("current", "want", "why"),
    [
        (4.0, 0.61, "to the nearest 0.01-core quantum"),
        (0.61, 0.61, "already there"),
        (0.601, 0.601, "inside the 2% dead-band (.6099 - .601 < .01202)"),
        (0.63, 0.61, "outside the 2% dead-band (.63 - .6099 > .0126)"),
    ],
)
def test_decor_cpu_plans_the_needed_allocation_below_one_core(
    current: float, want: float, why: str
) -> None:
    decision = decide(
        fitted_decor_state(current, a=A_SUB_CORE),
        observation(50, 500, current, total=1000),
        decor_settings(min_allocation=0.1),
        50,
    )
    assert decision.allocation == want, why
    assert decision.condition == CONDITION_ON_TRACK
    assert decision.eta_s == pytest.approx(50 + 500 * A_SUB_CORE / want)


# End game: at t = 170 s, 950 of 1000 done, 9.82 s left (< 18 s): no reserve, step time
# 9.82 / 50 = .1964 s needed -> .15154 / .1964 = .7716 core.
@pytest.mark.parametrize(
    ("current", "want", "why"),
    [
        (0.9, 0.86, "a decrease is at most 4% per period (.864)"),
        (0.8, 0.77, "a decrease within 4% is taken in full"),
        (0.6, 0.77, "an increase is taken in full"),
        (0.78, 0.78, "inside the dead-band"),
    ],
)
def test_decor_cpu_end_game_steps_down_gently(current: float, want: float, why: str) -> None:
    decision = decide(
        fitted_decor_state(current, a=A_SUB_CORE),
        observation(170, 950, current, total=1000),
        decor_settings(min_allocation=0.1),
        170,
    )
    assert decision.allocation == want, why


@pytest.mark.parametrize(
    ("current", "credit_s", "want", "credit_after_s", "why"),
    [
        (4.0, 0.0, 2.0, 0.0, "a new pair of levels (1, 2): the nearer one"),
        (3.0, -2.0, 2.0, 0.0, "from the pair (2, 3): the nearer level of (1, 2)"),
        (2.0, -2.0, 2.0, -2.3901, "at the upper level: owes .3901 s more of the lower one"),
        (2.0, -2.8, 1.0, 0.0, "more than 3 periods of the lower level owed: down"),
        (1.0, 1.0, 1.0, 1.6099, "at the lower level: owes .6099 s of the upper one"),
        (1.0, 1.5, 2.0, 0.0, "more than 2 periods of the upper level owed: up"),
        (1.0, -1.0, 1.0, 0.6099, "a credit of the wrong sign was left by another pair"),
    ],
)
def test_decor_cpu_alternates_whole_core_levels_above_one_core(
    current: float, credit_s: float, want: float, credit_after_s: float, why: str
) -> None:
    # 1.6099 cores needed: between the levels 1 and 2, the upper one 60.99% of the time (the
    # speed is proportional to cores here, measured at both levels). The trainer runs one
    # thread per whole core of its limit, so 1.61 cores would run as fast as 1.
    state = replace(
        fitted_decor_state(current),
        level_fit=both_levels_fit(),
        fewest_cores_measured=1.0,
        level_credit_s=credit_s,
    )
    decision = decide(state, observation(50, 500, current, total=1000), decor_settings(), 50)
    assert decision.allocation == want, why
    assert decision.state.level_credit_s == pytest.approx(credit_after_s, abs=1e-3), why
    assert decision.condition == CONDITION_ON_TRACK
    assert decision.eta_s == pytest.approx(50 + 500 * 0.4 / want)


def both_levels_fit(a: float = 0.4) -> SpeedFit:
    """A whole-core fit that has measured step time = a/u at 1 and 2 cores."""
    return SpeedFit().add(1.0, a, 100, 10.0, 20.0).add(0.5, a / 2, 100, 10.0, 20.0)


@pytest.mark.parametrize(
    ("current", "measured_at", "want", "why"),
    [
        (4.0, 4.0, 1.0, "only MAX measured (the start): probe the lower level of (1, 2)"),
        (2.0, 2.0, 2.0, "a level below MAX measured: the usual alternation, from the upper"),
        (0.8, None, 2.0, "from below one core: a new pair starts at the nearer level"),
        (1.0, 1.0, 2.0, "only the lower level measured (a start at one core): probe the upper"),
    ],
)
def test_decor_cpu_probes_an_unmeasured_level(
    current: float, measured_at: float | None, want: float, why: str
) -> None:
    # 1.6099 cores needed as above; a whole-core fit from MAX alone assumes linear speed-up,
    # which the lower level runs at least at.
    def measured(cores: float) -> SpeedFit:
        return SpeedFit().add(1.0 / cores, 0.4 / cores, 100, 10.0, 20.0)

    state = State(
        policy="decor",
        allocation=current,
        fit=measured(current) if current < 1.0 else SpeedFit(),
        level_fit=measured(measured_at) if measured_at is not None else SpeedFit(),
        fewest_cores_measured=measured_at,
        most_cores_measured=measured_at,
        decisions=5,
    )
    decision = decide(state, observation(50, 500, current, total=1000), decor_settings(), 50)
    assert decision.allocation == want, why


@pytest.mark.parametrize(
    ("horizon_s", "want", "why"),
    [
        (2.6, 2.0, "a 0.6 s lead at MAX pays for no probe (3 periods at half speed: 1.5 s)"),
        (4.0, 1.0, "a 2.0 s lead does: probe the lower level"),
    ],
)
def test_decor_cpu_probes_the_lower_level_only_while_the_lead_pays_for_it(
    horizon_s: float, want: float, why: str
) -> None:
    # A job that started at MAX (2 cores, the only level measured: 0.2 s per step), 10 steps
    # left: 2 s at MAX. Either way it needs well under 90 % of MAX under linear speed-up.
    settings = cpu_settings(
        95.0 + horizon_s + 0.1, "decor", max_allocation=2.0, safety_margin_s=0.1
    )
    assert settings.target_s == pytest.approx(95.0 + horizon_s)
    state = State(
        policy="decor",
        allocation=2.0,
        level_fit=SpeedFit().add(0.5, 0.2, 100, 90.0, 20.0),
        fewest_cores_measured=2.0,
        most_cores_measured=2.0,
        decisions=90,
    )
    decision = decide(state, observation(95, 990, 2.0, total=1000), settings, 95)
    assert decision.allocation == want, why
    assert decision.condition == CONDITION_ON_TRACK


def test_decor_cpu_learns_fast_that_a_second_thread_adds_nothing() -> None:
    # One core runs as fast as two (the LSTM reference workload): starting at MAX, a need
    # that looks like 1.5 cores under linear speed-up goes to one core at once and, once one
    # core is measured, stays at or below it.
    plant = Plant(a=0.4, saturation=1.0, whole_threads=True)
    deadline = 1.5 * TOTAL_STEPS * plant.mean_step_time_s(2.0, 0.0)
    settings = cpu_settings(deadline, "decor", min_allocation=0.1, max_allocation=2.0)
    result = run_closed_loop(settings, plant, TOTAL_STEPS)
    at_two = [t for t, _, a, _ in result.trace if a >= 2.0]
    assert max(at_two) <= 2.0, at_two  # the first decision with a measured interval
    assert all(a <= 1.0 for t, _, a, _ in result.trace if t >= 10), result.trace[:20]
    assert abs(result.deviation_pct) <= 1.0


# Loops that cannot use every core: pinned to one thread, or two, on a node of 2 or 4 cores;
# with or without a 1.3x slow-down from outside between 40 s and 120 s.
THREAD_LIMITED = [
    (threads, max_cores, slow)
    for threads, max_cores in ((1.0, 2.0), (1.0, 4.0), (2.0, 4.0))
    for slow in (False, True)
]


def thread_limited(threads: float, slow: bool) -> Plant:
    slowdowns = ((40.0, 120.0, 1.3),) if slow else ()
    return Plant(a=0.4, saturation=threads, whole_threads=True, noise=0.03, slowdowns=slowdowns)


@pytest.mark.parametrize(("threads", "max_cores", "slow"), THREAD_LIMITED)
def test_decor_cpu_holds_no_core_a_thread_limited_loop_cannot_use(
    threads: float, max_cores: float, slow: bool
) -> None:
    """A deadline moved so early (1.3x its time at its threads' cores, at 30 % of it, to
    0.8x that) that no allocation meets it: decor holds the cores the loop's threads use,
    not MAX (its core-seconds within 5 % of that allocation held to the same finish), and
    uses fewer core-seconds than decor-nn, finishing no later."""
    plant = thread_limited(threads, slow)
    at_threads_s = TOTAL_STEPS * plant.mean_step_time_s(threads, 0.0)
    runs = {}
    for policy in ("decor", "decor-nn"):
        settings = cpu_settings(
            1.3 * at_threads_s, policy, min_allocation=0.1, max_allocation=max_cores
        )
        moved = [(0.3 * 1.3 * at_threads_s, 0.8 * 1.3 * at_threads_s)]
        runs[policy] = run_closed_loop(settings, plant, TOTAL_STEPS, deadline_changes=moved)
    decor, nn = runs["decor"], runs["decor-nn"]
    assert decor.finished_s is not None and nn.finished_s is not None
    assert decor.core_seconds <= 1.05 * threads * decor.finished_s
    assert decor.core_seconds < nn.core_seconds
    assert decor.deviation_pct <= nn.deviation_pct + 0.1
    # above them only to measure them again, a period or two a minute (the useful maximum's
    # memory)
    after_move = [a for t, _, a, _ in decor.trace if t >= 0.3 * 1.3 * at_threads_s + 5.0]
    assert sum(a > threads for a in after_move) <= 0.05 * len(after_move)


@pytest.mark.parametrize(("threads", "max_cores", "slow"), THREAD_LIMITED)
def test_decor_cpu_finds_the_cores_a_job_late_from_its_start_can_use(
    threads: float, max_cores: float, slow: bool
) -> None:
    """A deadline no allocation meets from the start (0.7x the loop's time at its threads'
    cores): the job starts at MAX, the only level it measures there, so the law measures
    the levels below it one at a time and holds the cores the threads use, not MAX (within
    10 % of that allocation held to the same finish), finishing no later than decor-nn.
    With the slow-down from outside too: the level above the useful maximum, tried again
    just after the slow-down ended, is faster than the maximum's level measured in it, so
    that level is measured again before the maximum is dropped (it was dropped, and MAX held
    to the end: 548 and 659 core-seconds on average in the two rows of 2 cores' use)."""
    plant = thread_limited(threads, slow=slow)
    at_threads_s = TOTAL_STEPS * plant.mean_step_time_s(threads, 0.0)
    runs = {}
    for policy in ("decor", "decor-nn"):
        settings = cpu_settings(
            0.7 * at_threads_s, policy, min_allocation=0.1, max_allocation=max_cores
        )
        runs[policy] = run_closed_loop(settings, plant, TOTAL_STEPS)
    decor, nn = runs["decor"], runs["decor-nn"]
    assert decor.finished_s is not None and nn.finished_s is not None
    assert allocations(decor)[0] == max_cores  # it started at MAX
    assert decor.core_seconds <= 1.1 * threads * decor.finished_s
    assert decor.core_seconds < nn.core_seconds
    assert decor.finished_s <= nn.finished_s + 0.01 * decor.deadline_s


@pytest.mark.parametrize("max_cores", [2.0, 4.0])
def test_decor_cpu_late_from_its_start_loses_little_to_measuring_lower_levels(
    max_cores: float,
) -> None:
    """The same deadline on a loop that speeds up with every core: the one measurement of
    the level below MAX costs the run under 0.5 % of the deadline's time, and it runs at
    MAX otherwise."""
    plant = Plant(a=0.4, whole_threads=True, noise=0.03)
    at_max_s = TOTAL_STEPS * plant.mean_step_time_s(max_cores, 0.0)
    finished = {}
    for policy in ("decor", "static-max"):
        settings = cpu_settings(
            0.7 * at_max_s, policy, min_allocation=0.1, max_allocation=max_cores
        )
        result = run_closed_loop(settings, plant, TOTAL_STEPS)
        assert result.finished_s is not None
        finished[policy] = result.finished_s
        if policy == "decor":
            below = [a for a in allocations(result) if a < max_cores]
            assert len(below) <= 3, allocations(result)
    assert finished["decor"] - finished["static-max"] <= 0.005 * 0.7 * at_max_s


# A loop whose threads do not follow its CPU limit (PyTorch's default threads, or two
# threads pinned): its speed follows the quota between whole cores too. On 2 cores its
# second core adds three quarters of the first one's speed (like the benchmark's two-thread
# loop, which ran 1.5 cores almost as efficiently as one core, and 2 cores at 87 % of that).
QUOTA_PLANT = Plant(a=0.4, saturation=1.75, noise=0.03)


@pytest.mark.parametrize("max_cores", [2.0, 4.0])
@pytest.mark.parametrize("need", [1.2, 1.4])
def test_decor_cpu_plans_the_quota_of_a_loop_whose_threads_do_not_follow_the_limit(
    need: float, max_cores: float
) -> None:
    """A deadline that needs ``need`` cores: the law measures halfway between the two
    levels once, finds that it runs faster than the lower one, and plans the quota itself
    from then on, within 3 % of the core-seconds of that quota held from the start (the
    least any allocation uses: speed is proportional to the quota up to 1.75 cores), and
    within the bound. Alternating 1 and 2 cores, the second one paying for a quarter of a
    core that adds nothing, used 6-11 % more."""
    deadline_s = TOTAL_STEPS * QUOTA_PLANT.mean_step_time_s(need, 0.0)
    for seed in SEEDS:
        settings = cpu_settings(deadline_s, "decor", min_allocation=0.1, max_allocation=max_cores)
        result = run_closed_loop(settings, QUOTA_PLANT, TOTAL_STEPS, seed=seed)
        assert_finished_within(result, DECOR_CPU_DEV, f"{need} cores, seed {seed}")
        assert result.core_seconds <= 1.03 * need * deadline_s, (seed, allocations(result))
        later = [a for t, _, a, _ in result.trace if t >= 0.3 * deadline_s]
        assert sum(a != int(a) for a in later) >= 0.8 * len(later), later


@pytest.mark.parametrize(("threads", "max_cores", "slow"), THREAD_LIMITED)
def test_decor_cpu_meets_a_deadline_a_thread_limited_loop_can_meet(
    threads: float, max_cores: float, slow: bool
) -> None:
    """1.3x, and 1.5x moved to 1.3x: within the bound, with fewer core-seconds than
    decor-nn."""
    plant = thread_limited(threads, slow)
    at_threads_s = TOTAL_STEPS * plant.mean_step_time_s(threads, 0.0)
    for factor, moved_to in ((1.3, None), (1.5, 1.3)):
        results = {}
        for policy in ("decor", "decor-nn"):
            deadline_s = factor * at_threads_s
            settings = cpu_settings(
                deadline_s, policy, min_allocation=0.1, max_allocation=max_cores
            )
            moves = [(0.3 * deadline_s, moved_to * at_threads_s)] if moved_to else []
            results[policy] = run_closed_loop(settings, plant, TOTAL_STEPS, deadline_changes=moves)
        lo, hi = DECOR_CPU_DEV
        assert lo <= results["decor"].deviation_pct <= hi
        assert results["decor"].core_seconds < results["decor-nn"].core_seconds


def test_usable_cores_are_whole_from_one_core_up() -> None:
    cpu = cpu_settings(100.0, "decor")
    got = [usable_cores(u, cpu) for u in (0.3, 0.99, 1.0, 1.61, 1.999999, 2.0, 3.5)]
    assert got == [0.3, 0.99, 1.0, 1.0, 2.0, 2.0, 3.0]
    assert usable_cores(2.0, gpu_settings(100.0, "decor")) == 2.0


def test_decor_starts_by_measuring() -> None:
    settings = decor_settings()
    decision = decide(initial_state(settings, 3.0), observation(1, 8, 3.0, total=1000), settings, 1)
    assert (decision.allocation, decision.condition) == (3.0, DECISION_STARTING)


# A 1000-step job, 100 s at MAX (4 cores) when it speeds up linearly: 0.4 s per step at
# one core, 0.1 s at four. The spec's default start is one core.
@pytest.mark.parametrize(
    ("deadline_s", "given", "estimate", "expected"),
    [
        (100.0, False, (0.4, 1.0), 4.0),  # needs all of MAX: start there
        (111.0, False, (0.4, 1.0), 4.0),  # needs 3.6 cores = 90 % of MAX: still tight
        (112.0, False, (0.4, 1.0), 1.0),  # needs 3.57 cores: measure from one core first
        (150.0, False, (0.1, 4.0), 1.0),  # an estimate taken at MAX says the same
        (100.0, False, (0.1, 4.0), 4.0),
        (100.0, True, (0.4, 1.0), 1.0),  # an initial the user wrote is kept
        (100.0, False, None, 1.0),  # no estimate: nothing to call the deadline tight by
        (50.0, False, (0.4, 1.0), 4.0),  # infeasible by the estimate: MAX
    ],
)
def test_decor_starts_at_max_when_the_estimate_calls_the_deadline_tight(
    deadline_s: float, given: bool, estimate: tuple[float, float] | None, expected: float
) -> None:
    settings = cpu_settings(deadline_s, "decor")
    assert start_allocation(settings, 1.0, given, TOTAL_STEPS, estimate) == expected


def test_start_allocation_without_planned_steps_keeps_the_initial() -> None:
    settings = cpu_settings(100.0, "decor")
    assert start_allocation(settings, 1.0, False, 0.0, (0.4, 1.0)) == 1.0
    assert start_allocation(settings, 9.0, True, TOTAL_STEPS, None) == MAX_CORES  # clamped


def test_a_tight_deadline_started_at_max_is_on_time_where_one_core_is_late() -> None:
    """Closed loop, 1.0x: the period measured at one core is never made up; the start the
    estimate picks is on time where one core is late."""
    plant = CPU_PLANTS["linear"]
    deadline_s = 100.2  # 1.002x the run time at MAX
    settings = cpu_settings(deadline_s, "decor")
    start = start_allocation(settings, 1.0, False, TOTAL_STEPS, (0.4, 1.0))
    assert start == MAX_CORES
    tight = run_closed_loop(settings, plant, TOTAL_STEPS, initial_allocation=start)
    slow = run_closed_loop(settings, plant, TOTAL_STEPS, initial_allocation=1.0)
    assert tight.finished_s is not None and slow.finished_s is not None
    # Aimed at the deadline itself, the tight start may round its last period's share of
    # MAX to the lower level (3 of 4 cores): late by at most half a period's quarter,
    # 0.125 s (here 0.05 s, where MAX to the end is 0.2 s early). The start at one core
    # loses three quarters of its first period, 0.75 s, for good.
    assert tight.finished_s <= deadline_s + 0.125
    assert slow.finished_s > deadline_s + 0.5


def test_decor_at_risk_near_max() -> None:
    # target 103.792 s; reserve .05 x (53.792 - 10.4) = 2.17 s; 500 steps in 51.62 s:
    # .10325 s per step -> 3.87 cores > 90% of MAX; the nearer whole-core level is MAX
    settings = cpu_settings(104.0, "decor")
    decision = decide(fitted_decor_state(4.0), observation(50, 500, 4.0, total=1000), settings, 50)
    assert decision.condition == CONDITION_AT_RISK
    assert decision.allocation == 4.0


def test_decor_infeasible_runs_at_max() -> None:
    # 500 steps at MAX take 50 s, but only 30 s are left.
    settings = cpu_settings(80.0, "decor")
    decision = decide(fitted_decor_state(2.0), observation(50, 500, 2.0, total=1000), settings, 50)
    assert (decision.allocation, decision.condition) == (MAX_CORES, CONDITION_INFEASIBLE)
    assert decision.eta_s == pytest.approx(100.0)


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
def test_deadline_in_the_past_runs_at_max(policy: str) -> None:
    settings = cpu_settings(40.0, policy)
    state = fitted_decor_state(1.5) if policy == "decor" else nn_state(-3.0, 1.0)
    decision = decide(
        state, observation(50, 500, 1.5 if policy == "decor" else 1.0, total=1000), settings, 50
    )
    assert decision.allocation == MAX_CORES
    assert decision.condition == CONDITION_DEADLINE_MISSED


def test_decor_never_stacks_a_request_on_a_pending_one() -> None:
    settings = decor_settings()
    state = fitted_decor_state(2.0)
    # Asked for 2.0; the kubelet still shows 3.0 and a resize in progress.
    decision = decide(state, observation(50, 500, 3.0, total=1000, pending=True), settings, 50)
    assert decision.allocation == 2.0


def test_decor_cpu_measures_one_period_after_a_resize_settles() -> None:
    # The model believes 0.8/u; the job really runs 0.1/u. A resize 3.0 -> 2.0 was seen
    # pending; at t = 50 it has settled (500 steps done). The interval that ends here ran
    # partly at 3.0, so nothing is learned and the allocation is held (even though the
    # plan, from the wrong model, wants far more).
    settings = decor_settings()
    state = replace(
        fitted_decor_state(2.0, a=0.8),
        last_time_s=49.0,
        last_steps=496.0,
        last_change_s=47.0,
        change_pending_since_s=47.0,
    )
    settled = decide(state, observation(50, 500, 2.0, total=1000), settings, 50)
    assert settled.allocation == 2.0
    assert settled.state.level_fit == state.level_fit
    assert settled.state.change_pending_since_s is None
    # Next period: a clean interval at 2.0 (20 steps in 1 s: 0.05 s = 0.1/2) is learned, and
    # the plan follows the better model down.
    nxt = decide(settled.state, observation(51, 520, 2.0, total=1000), settings, 51)
    assert nxt.state.level_fit != state.level_fit
    assert nxt.allocation < 2.0


# decor GPU: step time 2.4/g s; at t = 100 s, 600 of 1000 steps remain at 3 GPUs.
# finish at 3 GPUs: 100 + 600 * .8 = 580 s; at 2 GPUs: 100 + 30 (restart) + 600 * 1.2 = 850 s.


def gpu_decor_state(gpus: float, last_change_s: float | None = None) -> State:
    return replace(fitted_decor_state(gpus, a=2.4, mode="gpu"), last_change_s=last_change_s)


@pytest.mark.parametrize(
    ("current", "fraction", "move_s", "want", "why"),
    [
        (1.0, 0.3, -60.0, 2.0, "earlier, at the lower level: up now, however small the share"),
        (2.0, 0.3, -60.0, 2.0, "earlier, at the upper level: stays (the nearer level shrank)"),
        (2.0, 0.7, 60.0, 1.0, "later, at the upper level: down now, however large the share"),
        (1.0, 0.7, 60.0, 1.0, "later, at the lower level: stays (the nearer level grew)"),
        (3.0, 0.7, -60.0, 2.0, "a new pair: the nearer level"),
        (3.0, 0.3, -60.0, 1.0, "a new pair: the nearer level"),
        (1.0, 0.7, 0.0, 1.0, "no move: the lower level until 2 periods are owed"),
    ],
)
def test_a_moved_deadline_starts_the_level_pair_in_its_direction(
    current: float, fraction: float, move_s: float, want: float, why: str
) -> None:
    settings = replace(decor_settings(), max_allocation=4.0)
    level, credit_s = _whole_core_level(1, fraction, current, 0.0, settings, deadline_move_s=move_s)
    assert level == want, why
    if move_s != 0.0:
        assert credit_s == 0.0, "a moved deadline owes nothing"


INF = math.inf


@pytest.mark.parametrize(
    ("current", "credit_s", "upper_need_s", "endgame", "planned_s", "want", "why"),
    [
        (1.0, 2.5, 0.3, False, INF, 1.0, "2 periods owed, the rest needs 0.3 s up there: stays"),
        (1.0, 2.5, 0.7, False, INF, 2.0, "2 periods owed and the rest needs 0.7 s up there: up"),
        (2.0, -0.5, 0.3, False, INF, 1.0, "the rest needs under half a period up there: down"),
        (2.0, -0.5, 3.0, False, INF, 2.0, "the rest needs 3 s up there, 3 periods not owed: stays"),
        (1.0, 1.0, 0.7, True, INF, 2.0, "end game: the rest needs 0.7 s up there: up now"),
        (1.0, 1.9, 0.3, True, INF, 1.0, "end game: the rest needs 0.3 s up there: stays"),
        (2.0, -0.5, 0.3, True, INF, 1.0, "end game: the upper share is spent: down"),
        (2.0, -3.5, 1.5, True, INF, 2.0, "end game: 1.5 s still needed up there: stays"),
        # a plan shorter than a period: all of it up there, or none
        (2.0, 0.0, 0.37, True, 0.39, 2.0, "0.37 s of the last 0.39 s needed up there: stays"),
        (2.0, 0.0, 0.15, True, 0.39, 1.0, "0.15 s of the last 0.39 s needed up there: down"),
        (1.0, 0.0, 0.25, True, 0.4, 2.0, "0.25 s of the last 0.4 s needed up there: up"),
    ],
)
def test_no_whole_core_level_is_held_past_the_rest_of_the_plans_need(
    current: float,
    credit_s: float,
    upper_need_s: float,
    endgame: bool,
    planned_s: float,
    want: float,
    why: str,
) -> None:
    settings = replace(decor_settings(), max_allocation=4.0)
    level, _ = _whole_core_level(
        1, 0.1, current, credit_s, settings, upper_need_s=upper_need_s, endgame=endgame,
        planned_s=planned_s,
    )  # fmt: skip
    assert level == want, why


# D = 180 s, end game the last 18 s; two cores reached at t = 99 s, held 2 periods (to 101 s).
@pytest.mark.parametrize(
    ("horizon_s", "need_s", "now", "held", "why"),
    [
        (60.0, 0.2, 100.0, True, "far from the end game: held although little is needed"),
        (19.5, 0.2, 100.0, False, "the hold would reach the end game, 0.2 s needed: not held"),
        (19.5, 0.6, 100.0, True, "the hold would reach the end game, 0.6 s needed: held"),
        (17.0, 5.0, 100.0, False, "in the end game the rest of the plan alone picks the level"),
        (60.0, 5.0, 101.5, False, "reached two periods ago: not held"),
    ],
)
def test_a_new_whole_core_level_is_held_unless_the_hold_would_make_a_lead_the_end_game_keeps(
    horizon_s: float, need_s: float, now: float, held: bool, why: str
) -> None:
    state = replace(initial_state(decor_settings(), 2.0), last_change_s=99.0)
    assert _level_held(2.0, need_s, horizon_s, state, decor_settings(), now) is held, why


def test_a_trip_up_just_before_the_end_game_lasts_what_the_plan_needs() -> None:
    """A VGG-like job 9 % slower than its curve needs one core and a fifth of the time at two.
    Seed 4 went up 1.5 s before its end game for about one period's need, was held a second
    period, and finished 1.8 % early: the end game's small steps below one core could not
    spend the lead."""
    plant = replace(VGG_LIKE, slowdowns=((0.0, 1e9, 1.09),))
    steps = 1374
    deadline_s = 1.5 * steps * VGG_LIKE.mean_step_time_s(2.0, 0.0)
    settings = replace(cpu_settings(deadline_s, "decor"), min_allocation=0.25, max_allocation=2.0)
    devs = [
        run_closed_loop(settings, plant, steps, seed=seed, initial_allocation=1.0).deviation_pct
        for seed in range(12)
    ]
    assert min(devs) > -1.0, devs  # -0.44 % at worst; -1.8 % with the hold
    assert max(devs) < 1.0, devs


@pytest.mark.parametrize(
    ("current", "sample_s", "last_change_s", "want_s", "why"),
    [
        (2.0, 99.9, 90.0, 3.9, "at the upper level: less the time since a fresh sample"),
        (2.0, 95.0, 97.0, 1.0, "went up after a stale sample: less the time since going up"),
        (1.0, 95.0, 98.0, 1.0, "came down after a stale sample: less the 3 s it ran up there"),
        (1.0, 99.9, 90.0, 4.0, "at the lower level since before the sample: unchanged"),
    ],
)
def test_the_upper_levels_need_counts_the_time_there_since_the_sample(
    current: float, sample_s: float, last_change_s: float, want_s: float, why: str
) -> None:
    state = replace(initial_state(decor_settings(), current), last_change_s=last_change_s)
    obs = observation(sample_s, 10, current)
    assert _upper_need_s(4.0, 1, current, state, obs, 100.0) == pytest.approx(want_s), why


# VGG's speed curve on the benchmark VM: one core 63 % as fast as two, one thread per core.
VGG_LIKE = Plant(a=0.01936, b=0.00706, noise=0.08, whole_threads=True)


def test_a_need_just_above_one_core_is_not_paid_for_in_the_last_seconds() -> None:
    """At 1.5x the VGG-like job needs one core and a tenth of the time at two. The credit
    used to pile up that tenth over the run and spend it as a trip of two periods or more in
    the job's last seconds, finishing up to 2.8 % early (mean -0.68 %, 20 seeds). It also
    relies on the upper level's own measured speed: the whole-core fit, having forgotten the
    two-core intervals, took two cores for twice one core's speed."""
    steps = 1374  # about 23 s at two cores
    deadline_s = 1.5 * steps * VGG_LIKE.mean_step_time_s(2.0, 0.0)
    devs = []
    for seed in range(12):
        settings = replace(
            cpu_settings(deadline_s, "decor"), min_allocation=0.25, max_allocation=2.0
        )
        result = run_closed_loop(settings, VGG_LIKE, steps, seed=seed, initial_allocation=1.0)
        assert result.finished_s is not None
        devs.append(result.deviation_pct)
    assert min(devs) > -1.0, devs
    assert max(devs) < 1.0, devs
    assert abs(sum(devs) / len(devs)) < 0.3, devs


@pytest.mark.parametrize(
    ("deadline_s", "last_change_s", "want", "why"),
    [
        (860.0, None, 2.0, "2 GPUs still make it, restart included (850 <= 856.6)"),
        (840.0, None, 3.0, "2 GPUs would make it without the restart (820) but not with it (850)"),
        (853.0, None, 3.0, "2 GPUs make it (850 <= 851.3), not with the shrink reserve (3.3 s)"),
        (860.0, 90.0, 3.0, "a change 10 s ago: minimum dwell (30 s) not over"),
        (860.0, 60.0, 2.0, "a change 40 s ago: dwell over"),
    ],
)
def test_decor_gpu_shrinks_only_when_it_pays(deadline_s, last_change_s, want, why) -> None:
    settings = gpu_settings(deadline_s, "decor")
    decision = decide(
        gpu_decor_state(3.0, last_change_s), observation(100, 400, 3.0, total=1000), settings, 100
    )
    assert decision.allocation == want, why


@pytest.mark.parametrize(
    ("deadline_s", "want", "why"),
    [
        # at 2 GPUs: 100 + 600 * 1.2 = 820 s; at 3 GPUs: 100 + 30 + 480 = 610 s, a period
        # (5 s) later 615 s; a quarter of the 30 s restart to spare is 7.5 s
        (810.0, 2.0, "behind, but 3 GPUs a period later still leave a spare restart: wait"),
        (630.0, 2.0, "3 GPUs a period later leave 14.4 s to spare (target 629.4 s): wait"),
        (620.0, 3.0, "3 GPUs a period later leave 4.4 s, under a quarter restart: switch now"),
        (600.0, 4.0, "3 GPUs no longer make it: 4"),
    ],
)
def test_decor_gpu_grows_at_the_last_safe_period(deadline_s: float, want: float, why: str) -> None:
    settings = gpu_settings(deadline_s, "decor")
    decision = decide(gpu_decor_state(2.0), observation(100, 400, 2.0, total=1000), settings, 100)
    assert decision.allocation == want, why


@pytest.mark.parametrize(
    ("restarts", "deadline_s", "want", "why"),
    [
        (None, 860.0, 2.0, "no restart yet: the shrink that pays is taken"),
        (2, 860.0, 2.0, "2 of 4 restarts: the shrink leaves one for a step back up"),
        (3, 860.0, 3.0, "3 of 4: a shrink would leave none, so 3 is held"),
    ],
)
def test_decor_gpu_restarts_are_counted_and_bound_the_shrinks(
    restarts: int | None, deadline_s: float, want: float, why: str
) -> None:
    settings = gpu_settings(deadline_s, "decor")
    assert settings.gpu_max_restarts == 4
    state = replace(gpu_decor_state(3.0), gpu_restarts=restarts)
    decision = decide(state, observation(100, 400, 3.0, total=1000), settings, 100)
    assert decision.allocation == want, why
    counted = restarts if want == 3.0 else (restarts or 0) + 1  # a change counts one
    assert decision.state.gpu_restarts == counted
    assert decision.state.to_dict()["gpu_restarts"] == counted
    held = decide(
        state, observation(100, 400, 3.0, total=1000), replace(settings, deadline_s=700.0), 100
    )
    assert held.allocation == 3.0 and held.state.gpu_restarts == restarts  # no change: no count
    assert ("gpu_restarts" in held.state.to_dict()) == (restarts is not None)
    assert State.from_dict(decision.state.to_dict()) == decision.state


def test_decor_gpu_steps_up_past_the_restart_bound() -> None:
    # at 2 GPUs: 820 s; 3 GPUs, a restart included, 610 s > 599.4 s (the target): 4
    state = replace(gpu_decor_state(2.0), gpu_restarts=9)
    decision = decide(
        state, observation(100, 400, 2.0, total=1000), gpu_settings(600.0, "decor"), 100
    )
    assert decision.allocation == 4.0 and decision.state.gpu_restarts == 10


def test_cpu_state_stores_no_restart_count() -> None:
    state = decide(initial_state(cpu_settings(100.0, "decor")), observation(10, 100, 1.0),
                   cpu_settings(100.0, "decor"), 10).state  # fmt: skip
    assert state.gpu_restarts is None and "gpu_restarts" not in state.to_dict()


# At 8 GPUs, t = 100 s, 600 of 1000 steps left (2.4/g s per step): 8 GPUs take 180 s, 4
# take 360 s, 3 take 480 s. Deadline 560 s (target 559.4 s, shrink reserve 2.3 s): 4 GPUs
# make it with a restart, 3 do not; the need lies between them.
@pytest.mark.parametrize(
    ("restart_cost_s", "want", "note", "why"),
    [
        (30.0, 4.0, "", "4 now, 3 later: two switches reach the target, each pays"),
        (60.0, 8.0, "holding 8 for one switch to 3 later", "4 now cannot reach 3 later (two "
         "restarts); 8 for 50 s, then 3, spends 1,620 GPU-s against 1,680 at 4 to the end"),
        (90.0, 4.0, "", "4 finishes within a period's lead at 8 (7 s < 10 s): 4 is the last "
         "switch"),
    ],
)  # fmt: skip
def test_decor_gpu_holds_for_one_switch_when_two_cannot_reach(
    restart_cost_s: float, want: float, note: str, why: str
) -> None:
    settings = gpu_settings(560.0, "decor", max_allocation=8.0, restart_cost_s=restart_cost_s)
    decision = decide(gpu_decor_state(8.0), observation(100, 400, 8.0, total=1000), settings, 100)
    assert decision.allocation == want, why
    assert note in decision.message


# At MAX (4 GPUs), t = 100 s, 600 of 1000 steps left (2.4/g s per step): 2 GPUs take 720 s,
# 1 GPU 1,440 s. Deadline 1,100 s (target 1,098.9 s, shrink reserve 5 s): 2 make it alone, 1
# does not. Fewer first: 1 GPU for 428 s, then 2 for the rest (MAX would do that rest in 283 s
# of the 541 s then left), 428 GPU-s given back against 90 idle through the two restarts.
@pytest.mark.parametrize(
    ("restarts", "max_share", "want", "note", "why"),
    [
        (None, 0.7, 1.0, "1 first, then 2 for the rest", "the need lies between 1 and 2"),
        (1, 0.7, 1.0, "1 first, then 2 for the rest", "1 + 2 planned changes leave a spare"),
        (2, 0.7, 2.0, "", "2 + 2 planned changes leave no spare: the plain shrink to 2"),
        (None, 0.5, 2.0, "", "MAX would need 52 % of the time left after the switch up"),
    ],
)
def test_decor_gpu_runs_fewer_first_where_the_need_lies_between_two_counts(
    restarts: int | None, max_share: float, want: float, note: str, why: str
) -> None:
    settings = gpu_settings(1100.0, "decor", gpu_fewer_first_max_share=max_share)
    state = replace(gpu_decor_state(4.0), gpu_restarts=restarts)
    decision = decide(state, observation(100, 400, 4.0, total=1000), settings, 100)
    assert decision.allocation == want, why
    assert note in decision.message
    assert decision.planned_peak == (2.0 if want == 1.0 else 0.0)  # the planner holds it


def test_decor_gpu_keeps_the_speed_up_it_measured_between_counts() -> None:
    """After minutes at one count the fit has forgotten the other counts' samples; the shape
    (b / a) they measured is kept, so a switch up is not planned on a linear speed-up the
    job never had (a sub-linear job then ran late)."""
    settings = gpu_settings(2000.0, "decor")
    plant = Plant(a=0.24, scaling=0.8)
    state = initial_state(settings, 4.0)
    t, steps = 0.0, 0
    for allocation, until_s in ((4.0, 60.0), (2.0, 900.0)):  # the law's choice overridden
        state = replace(state, allocation=allocation, last_time_s=None, last_steps=None)
        while t < until_s:
            obs = observation(t, steps, allocation, total=20_000)
            decided = decide(state, obs, settings, t).state
            state = replace(decided, allocation=allocation, change_pending_since_s=None)
            t += 10.0
            steps += round(10.0 / plant.mean_step_time_s(allocation, t))
    curve = step_time_curve(state, settings)
    assert curve is not None and state.level_shape is not None
    # 3 GPUs, never measured: within 2 % of the plant (linear from 2 GPUs: 4.4 % too fast)
    assert curve(3.0) == pytest.approx(plant.mean_step_time_s(3.0, 0.0), rel=0.02)


def test_decor_gpu_finishes_sub_linear_jobs_at_their_deadline() -> None:
    """Jobs like the scale bed's (start at MAX = 4, need 1, 2 or 3 GPUs all the way, 800 s)
    on sub-linear plants (twice the GPUs 1.74-2x as fast), restarts of 10-40 s, 5 % noise.
    Before fewer first, the kept shape and the switch up a quarter restart before the last
    safe period: 3.54 % early on average, -10.4 % at worst (linear extrapolation from MAX
    overstates a lower count's step time, and the job ended on that count, early); before
    the GPU fit told a fixed cost from neighbouring counts (one period at 4, then 3), 1.74 %."""
    devs, restarts = [], []
    for need in (1, 2, 3):
        for scaling in (0.8, 0.9, 1.0):
            for restart_s in (10.0, 20.0, 40.0):
                steps = round(need**scaling / 2.4 * 800.0)
                settings = gpu_settings(800.0, "decor", max_allocation=4.0, period_s=10.0)
                plant = Plant(a=2.4, noise=0.05, restart_s=restart_s, scaling=scaling)
                result = run_closed_loop(settings, plant, steps, seed=need)
                case = (need, scaling, restart_s, allocations(result))
                assert result.finished_s is not None, case
                assert result.deviation_pct <= 1.0, case
                devs.append(abs(result.deviation_pct))
                restarts.append(result.actuations)
    assert sum(devs) / len(devs) < 1.5, devs  # 1.36 %
    assert max(restarts) <= 3, restarts


# A need between two whole counts, restart costs up to 10 % of the deadline, noise on the speed
GPU_MIX_NEEDS = (1.1, 1.5, 2.3, 3.2, 3.5, 4.7, 5.5, 6.4, 7.2, 7.9)
GPU_MIX_RESTART_RATIOS = (0.0, 0.02, 0.05, 0.1)


def gpu_mix_run(need: float, restart_ratio: float, noise: float) -> SimResult:
    """A job on 1-8 GPUs whose deadline needs ``need`` GPUs all the way (2.4 s per step at 1
    GPU, 1000 steps), losing ``restart_ratio`` of its deadline at every change of count."""
    deadline_s = TOTAL_STEPS * 2.4 / need
    restart_s = restart_ratio * deadline_s
    settings = gpu_settings(
        deadline_s, "decor", min_allocation=1.0, max_allocation=8.0,
        restart_cost_s=max(restart_s, 1e-3),
    )  # fmt: skip
    plant = Plant(a=2.4, noise=noise, restart_s=restart_s)
    return run_closed_loop(settings, plant, TOTAL_STEPS, seed=1 if noise else 0)


def test_decor_gpu_mixes_two_counts_to_finish_at_the_deadline() -> None:
    devs = []
    for need in GPU_MIX_NEEDS:
        for ratio in GPU_MIX_RESTART_RATIOS:
            for noise in (0.0, 0.05):
                result = gpu_mix_run(need, ratio, noise)
                case = (need, ratio, noise, allocations(result))
                assert result.finished_s is not None, case
                # never late; early by at most about one restart and a period (the law's
                # hysteresis), plus what the noise takes
                lead_pct = 100.0 * (ratio * result.deadline_s + 5.0) / result.deadline_s
                assert -(1.1 * lead_pct + 1.2) <= result.deviation_pct <= 1.0, case
                assert result.actuations <= 4, case
                assert all(g in range(1, 9) for g in allocations(result)), case
                devs.append(abs(result.deviation_pct))
    # one switch straight from MAX where a second one from the upper count would not pay:
    # 2.35 % on average before, with the count just above the need to the end
    assert sum(devs) / len(devs) < 1.2, devs


@pytest.mark.parametrize("ratio", [0.02, 0.05, 0.1])
def test_decor_gpu_never_switches_when_the_restart_does_not_pay(ratio: float) -> None:
    # 7.9 GPUs: 7 would run a tenth of the run, 0.1 D x 1 GPU given back < 7 GPUs x the restart
    for noise in (0.0, 0.05):
        result = gpu_mix_run(7.9, ratio, noise)
        assert result.actuations == 0, allocations(result)
        assert -1.5 < result.deviation_pct < 0.0


def test_decor_gpu_learns_the_restart_cost() -> None:
    settings = gpu_settings(2000.0, "decor")  # configured guess: 30 s
    # A change to 2 GPUs was requested at t = 100 s; at 2 GPUs a step takes 1.2 s.
    state = replace(
        gpu_decor_state(2.0, last_change_s=100.0),
        last_time_s=99.0,
        last_steps=400,
        change_pending_since_s=100.0,
    )
    # First progress after it: 3 steps done by 123.6 s, so 123.6 - 100 - 3 * 1.2 = 20 s lost.
    first = decide(state, observation(123.6, 403, 2.0, total=1000), settings, 125)
    assert first.state.restart_cost_s == pytest.approx(20.0)
    assert first.state.change_pending_since_s is None
    # A later restart that lost 30 s is averaged in.
    again = replace(
        first.state,
        last_time_s=199.0,
        last_steps=460,
        last_change_s=200.0,
        change_pending_since_s=200.0,
    )
    second = decide(again, observation(232.4, 462, 2.0, total=1000), settings, 235)
    assert second.state.restart_cost_s == pytest.approx(25.0)


def test_decor_gpu_takes_the_restart_cost_the_trainer_measured() -> None:
    settings = gpu_settings(2000.0, "decor")
    state = replace(
        gpu_decor_state(2.0, last_change_s=100.0),
        last_time_s=99.0,
        last_steps=400,
        change_pending_since_s=100.0,
    )
    # The gap says 20 s (as above); the trainer measured 14 s from its save to its first step.
    measured = replace(observation(123.6, 403, 2.0, total=1000), restart_s=14.0)
    assert decide(state, measured, settings, 125).state.restart_cost_s == pytest.approx(14.0)
    # A trainer that reports none (0: it did not resume) leaves the gap's estimate.
    none = replace(observation(123.6, 403, 2.0, total=1000), restart_s=None)
    assert decide(state, none, settings, 125).state.restart_cost_s == pytest.approx(20.0)


def test_decor_gpu_pending_holds() -> None:
    settings = gpu_settings(600.0, "decor")
    state = replace(gpu_decor_state(3.0, last_change_s=95.0), change_pending_since_s=95.0)
    decision = decide(state, observation(100, 400, 2.0, total=1000, pending=True), settings, 100)
    assert decision.allocation == 3.0
    assert "pending" in decision.message


# =======================================================================================
# (b) closed loop

CPU_PLANTS = {
    "linear": Plant(a=0.4, whole_threads=True),
    "saturating": Plant(a=0.4, b=0.02, saturation=3.0, whole_threads=True),
    "noise5": Plant(a=0.4, noise=0.05, whole_threads=True),
    "noise10": Plant(a=0.4, b=0.01, noise=0.10, whole_threads=True),
    # 30% slower from 40 s to 80 s
    "slowdown": Plant(a=0.4, slowdowns=((40.0, 80.0, 1.3),), whole_threads=True),
}
NOISY = {"noise5", "noise10"}
GPU_PLANTS = {
    "gpu": Plant(a=2.4, restart_s=20.0),
    "gpu-noise": Plant(a=2.4, noise=0.05, restart_s=20.0),
}

# Tolerances on the finish time, in % of the deadline duration (+ = late). decor's are the
# brief's; decor-nn's are what the published law meets in these same simulations.
DECOR_CPU_DEV = (-1.5, 1.0)
# Whole GPUs: the finish is only as fine as the last switch, and a switch up is taken while
# one spare restart (20-30 s here) plus a period is still left: up to (r + P) / D early.
DECOR_GPU_DEV = (-3.5, 1.0)
NN_CPU_DEV = (-1.0, 1.0)
NN_GPU_DEV = (-1.5, 3.0)  # restarts it does not plan for make it late on tight deadlines


def time_at_max_s(plant: Plant, mode: str) -> float:
    return TOTAL_STEPS * plant.mean_step_time_s(MAX_CORES if mode == "cpu" else MAX_GPUS, 0.0)


@cache
def simulate(
    policy: str,
    plant_name: str,
    factor: float,
    seed: int = 0,
    move: float | None = None,
    mode: str = "cpu",
) -> SimResult:
    """One job; ``move``: at 30% of D the deadline becomes ``move`` x D."""
    plant = (CPU_PLANTS if mode == "cpu" else GPU_PLANTS)[plant_name]
    deadline_s = factor * time_at_max_s(plant, mode)
    settings = (cpu_settings if mode == "cpu" else gpu_settings)(deadline_s, policy)
    changes = [(0.3 * deadline_s, move * deadline_s)] if move is not None else []
    return run_closed_loop(settings, plant, TOTAL_STEPS, deadline_changes=changes, seed=seed)


def allocations(result: SimResult) -> list[float]:
    return [allocation for _, _, allocation, _ in result.trace]


def reversals(result: SimResult) -> int:
    """How often the allocation changed direction (up then down, or down then up)."""
    count, last_direction = 0, 0
    values = allocations(result)
    for before, after in zip(values, values[1:], strict=False):
        direction = (after > before) - (after < before)
        if direction and last_direction and direction != last_direction:
            count += 1
        if direction:
            last_direction = direction
    return count


def assert_in_bounds_and_on_grid(result: SimResult, mode: str, policy: str) -> None:
    low, high = (MIN_CORES, MAX_CORES) if mode == "cpu" else (MIN_GPUS, MAX_GPUS)
    quantum = 1.0 if mode == "gpu" else 0.05 if policy == "decor-nn" else 0.01
    for t, _, allocation, _ in result.trace:
        assert low <= allocation <= high, f"allocation {allocation} out of bounds at t={t}"
        assert abs(allocation / quantum - round(allocation / quantum)) < 1e-6, (t, allocation)


def assert_finished_within(result: SimResult, tolerance: tuple[float, float], what: str) -> None:
    assert result.finished_s is not None, f"{what}: did not finish"
    low, high = tolerance
    assert low <= result.deviation_pct <= high, f"{what}: deviation {result.deviation_pct:+.2f}%"


def cpu_cases() -> list[tuple[str, float, int]]:
    return [
        (plant, factor, seed)
        for plant in CPU_PLANTS
        for factor in DEADLINE_FACTORS
        for seed in (SEEDS if plant in NOISY else (0,))
    ]


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
@pytest.mark.parametrize("plant", list(CPU_PLANTS))
def test_cpu_job_finishes_at_its_deadline(policy: str, plant: str) -> None:
    tolerance = DECOR_CPU_DEV if policy == "decor" else NN_CPU_DEV
    for _, factor, seed in (c for c in cpu_cases() if c[0] == plant):
        result = simulate(policy, plant, factor, seed)
        assert_finished_within(result, tolerance, f"{policy} {plant} {factor}x seed {seed}")
        assert_in_bounds_and_on_grid(result, "cpu", policy)


MOVE_CASES = [
    (plant, factor, move)
    for plant in ("linear", "saturating", "noise5")
    for factor in DEADLINE_FACTORS
    for move in (0.8, 1.3)
    # 3.25x the MAX run time is slower than the saturating plant runs even at MIN: see below.
    if not (plant == "saturating" and factor * move > 3.0)
]


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
@pytest.mark.parametrize(("plant", "factor", "move"), MOVE_CASES)
def test_cpu_job_follows_a_moved_deadline(
    policy: str, plant: str, factor: float, move: float
) -> None:
    tolerance = DECOR_CPU_DEV if policy == "decor" else NN_CPU_DEV
    for seed in SEEDS if plant in NOISY else (0,):
        result = simulate(policy, plant, factor, seed, move)
        assert result.deadline_s == pytest.approx(
            move * factor * time_at_max_s(CPU_PLANTS[plant], "cpu")
        )
        assert_finished_within(
            result, tolerance, f"{policy} {plant} {factor}x -> {move} seed {seed}"
        )
        assert_in_bounds_and_on_grid(result, "cpu", policy)


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
def test_deadline_beyond_reach_at_min_runs_at_min(policy: str) -> None:
    # Saturating plant: 420 s at MIN; the deadline moves to 3.25 x 153 s = 498 s.
    result = simulate(policy, "saturating", 2.5, 0, 1.3)
    assert result.finished_s is not None and result.finished_s < result.deadline_s
    tail = [a for t, _, a, _ in result.trace if t > 0.5 * result.finished_s]
    assert all(a == MIN_CORES for a in tail)


def test_earlier_deadline_raises_allocation_within_two_periods_decor_nn() -> None:
    result = simulate("decor-nn", "linear", 2.5, 0, 0.8)  # D 250 s -> 200 s at t = 75 s
    before = max(a for t, _, a, _ in result.trace if 65 <= t < 75)
    after = [a for t, _, a, _ in result.trace if 75 < t <= 77]  # the trace shows what ran
    assert max(after) > before


def test_earlier_deadline_raises_allocation_decor() -> None:
    # decor alternates whole-core levels above one core: what rises at once is the need
    # (the level pair, or the share of the upper level), so compare 10 s before and after.
    result = simulate("decor", "linear", 2.5, 0, 0.8)  # D 250 s -> 200 s at t = 75 s
    before = [a for t, _, a, _ in result.trace if 65 <= t < 75]
    after = [a for t, _, a, _ in result.trace if 75 < t <= 85]
    assert sum(after) / len(after) > sum(before) / len(before) + 0.2


def stays(result: SimResult) -> list[tuple[float, int]]:
    """(allocation, periods) of each run of equal allocations in the trace."""
    runs: list[tuple[float, int]] = []
    for allocation in allocations(result):
        if runs and runs[-1][0] == allocation:
            runs[-1] = (allocation, runs[-1][1] + 1)
        else:
            runs.append((allocation, 1))
    return runs


def assert_levels_alternate_slowly(result: SimResult, what: str) -> None:
    """Above one core: only whole cores (or MAX) but for one stay of at most
    ``probe_periods`` + 1 periods halfway between two (the one measurement of whether a limit
    between whole cores helps: these plants' threads follow the limit, so it does not), and
    no stay at a level shorter than 2 periods between the first moves (5 periods of speed
    measurement) and the end game (where the level follows the rest of the upper level's
    share period by period); the measurement counts as the whole cores below it, which it
    runs as."""
    settled = [(a, n) for a, n in stays(result) if a > 1.0]
    between = [(a, n) for a, n in settled if a != int(a) and a != MAX_CORES]
    assert len(between) <= 1, (what, settled)
    assert all(a % 1 == 0.5 and n <= Settings.probe_periods + 1 for a, n in between), (
        what,
        between,
    )
    endgame_s = (1 - Settings.endgame_ratio) * result.deadline_s
    middle = [(t, p, thread_cores(a), c) for t, p, a, c in result.trace if 5 <= t < endgame_s]
    inner = stays(replace(result, trace=middle))[1:-1]
    assert all(n >= 2 for _, n in inner), (what, inner)


SUB_CORE_PLANT = Plant(a=0.1, noise=0.03)  # 100 s at 1 core: a job that needs under one core


def sub_core_settings(deadline_s: float, **overrides: Any) -> Settings:
    return cpu_settings(deadline_s, "decor", min_allocation=0.1, max_allocation=1.0, **overrides)


@pytest.mark.parametrize("factor", DEADLINE_FACTORS)
def test_decor_cpu_does_not_dither_below_one_core(factor: float) -> None:
    for seed in SEEDS:
        result = run_closed_loop(
            sub_core_settings(factor * 100.0), SUB_CORE_PLANT, TOTAL_STEPS, seed=seed
        )
        assert_finished_within(result, DECOR_CPU_DEV, f"{factor}x seed {seed}")
        # Reversals are one-quantum dither between the two quanta around the needed
        # allocation: under 10% of the control periods. After the first speed measurements
        # (5 periods) no move is wider than three quanta.
        periods = len(result.trace)
        assert reversals(result) <= 0.1 * periods, (factor, seed, reversals(result), periods)
        values = [a for t, _, a, _ in result.trace if t >= 5]
        moves = [abs(b - a) for a, b in zip(values, values[1:], strict=False)]
        assert max(moves) <= 0.03 + 1e-9, (factor, seed, max(moves))


@pytest.mark.parametrize("plant", list(CPU_PLANTS))
def test_decor_cpu_alternates_levels_slowly_above_one_core(plant: str) -> None:
    for _, factor, seed in (c for c in cpu_cases() if c[0] == plant):
        result = simulate("decor", plant, factor, seed)
        assert_levels_alternate_slowly(result, f"{plant} {factor}x seed {seed}")


def held_between_whole_cores(result: SimResult) -> list[float]:
    return [a for a in allocations(result) if 1.0 < a < MAX_CORES and a != int(a)]


@pytest.mark.parametrize("plant", list(CPU_PLANTS))
def test_decor_cpu_takes_the_trainers_word_that_its_threads_follow_the_limit(plant: str) -> None:
    """A trainer that says its threads follow its limit (the reference trainer's
    ``decor_threads_follow_limit``) is not measured halfway between two whole-core levels:
    it never holds a limit between them, finishes within the bound, and uses no more
    core-seconds than the same run without the word, which held one (on these plants, 3
    periods at 1.5 cores: 1.5 core-seconds of about 400)."""
    for _, factor, seed in (c for c in cpu_cases() if c[0] == plant):
        silent = CPU_PLANTS[plant]
        settings = cpu_settings(factor * time_at_max_s(silent, "cpu"), "decor")
        runs = [
            run_closed_loop(settings, p, TOTAL_STEPS, seed=seed)
            for p in (silent, replace(silent, says_threads_follow=True))
        ]
        what = f"{plant} {factor}x seed {seed}"
        assert held_between_whole_cores(runs[0]), what  # measured, without the word
        assert held_between_whole_cores(runs[1]) == [], what
        assert_finished_within(runs[1], DECOR_CPU_DEV, what)
        assert runs[1].core_seconds <= runs[0].core_seconds, what


@pytest.mark.parametrize(
    ("help_before", "after"),
    [(None, False), (True, True)],  # measured before the word: the measurement stands
)
def test_decor_cpu_word_on_threads_is_taken_only_where_nothing_was_measured(
    help_before: bool | None, after: bool
) -> None:
    state = replace(fitted_decor_state(1.5), between_cores_help=help_before)
    obs = replace(observation(103, 500, 1.5, total=1000), threads_follow_limit=True)
    decision = decide(state, obs, decor_settings(), 103)
    assert decision.state.between_cores_help is after
    told_gpu = decide(fitted_decor_state(2.0, mode="gpu"), obs, gpu_settings(D_DECOR, "decor"), 103)
    assert told_gpu.state.between_cores_help is None  # GPU counts: nothing between to learn


@pytest.mark.parametrize("plant", list(CPU_PLANTS))
def test_decor_actuates_less_than_decor_nn_on_cpu(plant: str) -> None:
    for _, factor, seed in (c for c in cpu_cases() if c[0] == plant):
        ours, baseline = (
            simulate("decor", plant, factor, seed),
            simulate("decor-nn", plant, factor, seed),
        )
        assert ours.actuations < baseline.actuations, (factor, seed)
        assert reversals(ours) <= reversals(baseline), (factor, seed)


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
def test_no_windup_after_long_saturation(policy: str) -> None:
    # For the first 60 s everything is 3x slower: the job falls far behind and sits at MAX.
    # Then it catches up at MAX and would cross the set point t/D at t = 90 s. decor-nn must
    # come down by then (without back-calculation the wound-up integral holds MAX until
    # t = 133 s and the job finishes 12% early); decor as soon as its speed model has
    # forgotten the slow-down (one model memory, 20 s).
    plant = Plant(a=0.4, slowdowns=((0.0, 60.0, 3.0),))
    result = run_closed_loop(cpu_settings(180.0, policy), plant, TOTAL_STEPS)
    forced = [a for t, _, a, _ in result.trace if 5 <= t < 60]
    assert forced and all(a == MAX_CORES for a in forced)
    first_below_max = next(t for t, _, a, _ in result.trace if t > 60 and a < MAX_CORES)
    assert first_below_max <= (90.0 if policy == "decor-nn" else 80.0)
    assert_finished_within(result, DECOR_CPU_DEV if policy == "decor" else NN_CPU_DEV, policy)


def test_decor_infeasible_deadline_reports_and_runs_at_max() -> None:
    """At MAX, but for one measurement of the level below it (a job that starts at MAX has
    measured nothing else): a loop whose every core helps goes back to MAX at once; one
    whose fourth core adds nothing (saturating at 3) holds 3, trying 4 again a period now
    and then (``_late_probe``, the useful maximum)."""
    for plant in ("linear", "saturating", "noise10"):
        result = simulate("decor", plant, 0.5, 1)
        assert CONDITION_INFEASIBLE in result.conditions
        later = [a for t, _, a, _ in result.trace if t >= 2]
        if plant == "saturating":
            assert sum(a == MAX_CORES for a in later) <= 0.1 * len(later), later
            assert all(a >= 2.0 for a in later)
        else:
            assert sum(a != MAX_CORES for a in later) <= 2, later
        # The best that can be done: finished in (about) the all-MAX time.
        assert result.finished_s is not None
        assert result.finished_s <= 1.03 * time_at_max_s(CPU_PLANTS[plant], "cpu")


def test_decor_nn_infeasible_deadline_runs_at_max() -> None:
    result = simulate("decor-nn", "linear", 0.5, 0)
    assert all(a == MAX_CORES for a in allocations(result))
    assert {CONDITION_AT_RISK, CONDITION_DEADLINE_MISSED} <= result.conditions


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
def test_deadline_moved_into_the_past_runs_at_max(policy: str) -> None:
    result = simulate(policy, "linear", 2.5, 0, 0.2)  # at t = 75 s the deadline becomes 50 s
    assert CONDITION_DEADLINE_MISSED in result.conditions
    # The trace records what ran during each period; one period after the move it is MAX.
    assert all(a == MAX_CORES for t, _, a, _ in result.trace if t >= 77)


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
def test_missing_metrics_hold_the_allocation(policy: str) -> None:
    plant = CPU_PLANTS["linear"]
    settings = cpu_settings(1.8 * time_at_max_s(plant, "cpu"), policy)

    def drop_between_60_and_80_s(obs: Observation) -> Observation | None:
        return None if 60 <= obs.time_s < 80 else obs

    result = run_closed_loop(settings, plant, TOTAL_STEPS, observe=drop_between_60_and_80_s)
    assert CONDITION_METRICS_UNAVAILABLE in result.conditions
    held = {a for t, _, a, c in result.trace if c == CONDITION_METRICS_UNAVAILABLE}
    assert len(held) == 1
    assert_finished_within(result, DECOR_CPU_DEV if policy == "decor" else NN_CPU_DEV, policy)


def scraped_every(every_s: float, period_s: float = 1.0) -> Any:
    """An ``observe`` hook: the controller sees the progress of the last scrape, every_s
    apart, and the allocation in effect now (both runtimes read it from the limiter or the
    pod at decision time)."""
    seen: dict[str, Any] = {"obs": None, "calls": 0}

    def hook(obs: Observation) -> Observation | None:
        if seen["calls"] % round(every_s / period_s) == 0:
            seen["obs"] = obs
        seen["calls"] += 1
        return replace(seen["obs"], allocation=obs.allocation, pending=obs.pending)

    return hook


@pytest.mark.parametrize("seed", SEEDS)
def test_decor_reserve_absorbs_a_slow_down_near_max(seed: int) -> None:
    # Below one core (the allocation is continuous there): 1.5x deadline; from 30% of it to
    # the end every step takes 1.45x as long, so the job needs almost all of MAX for the
    # rest. Planned with no reserve it finishes late; with it, on time.
    deadline_s = 1.5 * 100.0
    plant = replace(SUB_CORE_PLANT, slowdowns=((0.3 * deadline_s, 10 * deadline_s, 1.45),))
    with_reserve = run_closed_loop(sub_core_settings(deadline_s), plant, TOTAL_STEPS, seed=seed)
    without = run_closed_loop(
        sub_core_settings(deadline_s, reserve_ratio=0.0), plant, TOTAL_STEPS, seed=seed
    )
    assert_finished_within(with_reserve, DECOR_CPU_DEV, "with the 5% reserve")
    assert without.deviation_pct > 0, "the case needs a reserve at all"
    assert without.deviation_pct > with_reserve.deviation_pct + 0.5


@pytest.mark.parametrize("seed", SEEDS)
def test_decor_catches_up_a_slow_down_with_whole_core_levels(seed: int) -> None:
    # The same on 4 cores, 1.5x slower: the job then needs all of MAX for the rest.
    deadline_s = 1.5 * 100.0
    plant = replace(
        CPU_PLANTS["linear"], noise=0.03, slowdowns=((0.3 * deadline_s, 10 * deadline_s, 1.5),)
    )
    result = run_closed_loop(cpu_settings(deadline_s, "decor"), plant, TOTAL_STEPS, seed=seed)
    assert_finished_within(result, DECOR_CPU_DEV, "whole-core levels")


@pytest.mark.parametrize("scrape_s", [2.0, 5.0])
def test_decor_holds_the_deadline_when_progress_is_scraped(scrape_s: float) -> None:
    # A 1 s loop fed by a Prometheus scrape every few seconds sees the same sample several
    # times. decor plans from the sample's own time stamp, so a stale sample is still a true
    # position. (decor-nn, whose set point moves with the clock, finishes 3-10% early here:
    # docs/control-law.md.)
    for plant_name in ("linear", "saturating", "noise5"):
        plant = CPU_PLANTS[plant_name]
        for factor in DEADLINE_FACTORS:
            for seed in SEEDS if plant_name in NOISY else (0,):
                settings = cpu_settings(factor * time_at_max_s(plant, "cpu"), "decor")
                result = run_closed_loop(
                    settings, plant, TOTAL_STEPS, seed=seed, observe=scraped_every(scrape_s)
                )
                what = f"{plant_name} {factor}x seed {seed}"
                assert_finished_within(result, DECOR_CPU_DEV, what)
                # A stale sample must not make the levels dither.
                assert_levels_alternate_slowly(result, what)


# ---------------------------------------------------------------------------------------
# GPU: whole GPUs, 5 s period, 20 s of lost progress per change (checkpoint + restart)


@pytest.mark.parametrize("policy", ["decor", "decor-nn"])
@pytest.mark.parametrize("plant", list(GPU_PLANTS))
def test_gpu_job_finishes_at_its_deadline(policy: str, plant: str) -> None:
    tolerance = DECOR_GPU_DEV if policy == "decor" else NN_GPU_DEV
    for factor in DEADLINE_FACTORS:
        for seed in SEEDS if plant == "gpu-noise" else (0,):
            result = simulate(policy, plant, factor, seed, mode="gpu")
            assert_finished_within(result, tolerance, f"{policy} {plant} {factor}x seed {seed}")
            assert_in_bounds_and_on_grid(result, "gpu", policy)


@pytest.mark.parametrize("plant", list(GPU_PLANTS))
def test_decor_gpu_restarts_rarely_and_less_than_decor_nn(plant: str) -> None:
    for factor in DEADLINE_FACTORS:
        for seed in SEEDS if plant == "gpu-noise" else (0,):
            ours = simulate("decor", plant, factor, seed, mode="gpu")
            baseline = simulate("decor-nn", plant, factor, seed, mode="gpu")
            assert ours.actuations <= 3, (factor, seed, allocations(ours))
            assert reversals(ours) <= 1, (factor, seed, allocations(ours))
            assert ours.actuations < baseline.actuations, (factor, seed)


@pytest.mark.parametrize("move", [0.8, 1.3])
def test_decor_gpu_follows_a_moved_deadline(move: float) -> None:
    for factor in DEADLINE_FACTORS:
        for seed in SEEDS:
            result = simulate("decor", "gpu-noise", factor, seed, move, mode="gpu")
            assert_finished_within(result, DECOR_GPU_DEV, f"{factor}x -> {move} seed {seed}")
            assert result.actuations <= 4, allocations(result)


# ---------------------------------------------------------------------------------------
# (c) following the planner: a grant other than the need


def test_follow_grant_remembers_what_was_granted_and_says_when_short() -> None:
    from decor.core.control import follow_grant, step_time_curve

    settings = cpu_settings(200.0, policy="decor")
    base = replace(initial_state(settings, 2.0), last_change_s=10.0)
    decision = decide(base, None, settings, 50.0)  # holds 2 cores (no sample)
    asked = replace(decision, allocation=3.0, state=replace(decision.state, allocation=3.0))
    same = follow_grant(asked, 3.0, base, settings, 60.0)
    assert same is asked  # granted what it asked: nothing changes
    asked_on_track = replace(asked, condition=CONDITION_ON_TRACK, message="3 cores finish on time")
    short = follow_grant(asked_on_track, 2.0, base, settings, 60.0)
    assert short.allocation == 2.0 and short.state.allocation == 2.0
    assert short.state.last_change_s == 10.0  # 2 cores is what ran before: no change
    assert short.condition == CONDITION_AT_RISK and "granted 2 of the 3 needed" in short.message
    lower = follow_grant(asked_on_track, 1.5, base, settings, 60.0)
    assert lower.state.last_change_s == 60.0  # a change: intervals before it are not learned
    clamped = follow_grant(asked_on_track, 0.1, base, settings, 60.0)
    assert clamped.allocation == MIN_CORES
    assert step_time_curve(base, settings) is None  # nothing measured yet


def test_follow_grant_keeps_the_decor_nn_integral_within_the_grant() -> None:
    from decor.core.control import follow_grant

    settings = cpu_settings(200.0)
    base = initial_state(settings)  # decor-nn: integral starts at MAX
    decision = decide(base, Observation(1.0, 1.0, 1000.0, MAX_CORES), settings, 1.0)
    followed = follow_grant(decision, 2.0, base, settings, 1.0)
    assert followed.state.integral <= 2.0  # no windup above what can be applied


def test_follow_grant_marks_a_gpu_change_pending() -> None:
    from decor.core.control import follow_grant

    settings = gpu_settings(400.0, policy="decor")
    base = initial_state(settings, 2.0)
    decision = decide(base, None, settings, 5.0)
    asked = replace(decision, allocation=4.0, state=replace(decision.state, allocation=4.0))
    followed = follow_grant(asked, 3.0, base, settings, 5.0)
    assert followed.state.change_pending_since_s == 5.0
    held = follow_grant(asked, 2.0, base, settings, 5.0)
    assert held.state.change_pending_since_s is None and held.allocation == 2.0


def test_an_older_stored_state_is_migrated_not_reset() -> None:
    settings = cpu_settings(150.0, "decor")
    stored = {  # as written before the state carried a version (and with a dropped field)
        "policy": "decor",
        "allocation": 0.42,
        "fit": {"sw": 3.0, "sx": 3.0, "sy": 0.3, "sxx": 3.0, "sxy": 0.3, "updated_s": 10.0},
        "decisions": 7,
        "retired_field": 1,
    }
    state = State.from_dict(stored)
    assert state.allocation == 0.42 and state.decisions == 7 and state.fit.sw == 3.0
    assert state.level_fit == SpeedFit() and state.version >= 2
    assert decide(state, None, settings, 20.0).allocation == 0.42
    with pytest.raises(ValueError):
        State.from_dict({"fit": {}})


# ---------------------------------------------------------------------------------------
# (d) a moved deadline is answered the period it is seen


def test_decor_cpu_answers_an_earlier_deadline_at_the_upper_level() -> None:
    # At the lower level of (1, 2) with 1 s owed at the upper one: the drifting need waits
    # for 2 periods owed; an earlier deadline starts the pair afresh at the upper level,
    # owing nothing.
    state = replace(
        fitted_decor_state(1.0),
        level_fit=both_levels_fit(),
        fewest_cores_measured=1.0,
        level_credit_s=1.0,
        deadline_s=D_DECOR,
    )
    settings = decor_settings()
    held = decide(state, observation(50, 500, 1.0, total=1000), settings, 50)
    assert held.allocation == 1.0
    moved = replace(state, deadline_s=D_DECOR + 60.0)  # the law last planned for a later one
    decision = decide(moved, observation(50, 500, 1.0, total=1000), settings, 50)
    assert decision.allocation == 2.0
    assert decision.state.level_credit_s == 0.0
    assert decision.state.deadline_s == D_DECOR


@pytest.mark.parametrize(
    ("deadline_s", "last_change_s", "want", "why"),
    [
        (810.0, None, 3.0, "behind: grows now instead of a period later"),
        (860.0, 90.0, 2.0, "shrinks now although the last change was 10 s ago"),
    ],
)
def test_decor_gpu_answers_a_moved_deadline_without_waiting(
    deadline_s: float, last_change_s: float | None, want: float, why: str
) -> None:
    current = 2.0 if want > 2.0 else 3.0
    state = replace(gpu_decor_state(current, last_change_s), deadline_s=deadline_s + 500.0)
    decision = decide(
        state, observation(100, 400, current, total=1000), gpu_settings(deadline_s, "decor"), 100
    )
    assert decision.allocation == want, why
    unmoved = replace(state, deadline_s=deadline_s)
    assert (
        decide(
            unmoved,
            observation(100, 400, current, total=1000),
            gpu_settings(deadline_s, "decor"),
            100,
        ).allocation
        == current
    ), "without a move the same need waits"


def test_a_deadline_moved_during_a_change_is_answered_once_it_is_applied() -> None:
    state = replace(gpu_decor_state(2.0), deadline_s=1310.0)
    settings = gpu_settings(810.0, "decor")
    pending = decide(state, observation(100, 400, 2.0, total=1000, pending=True), settings, 100)
    assert pending.allocation == 2.0 and pending.state.deadline_s == 1310.0
    applied = decide(
        replace(pending.state, change_pending_since_s=None),
        observation(101, 401, 2.0, total=1000),
        settings,
        101,
    )
    assert applied.allocation == 3.0 and applied.state.deadline_s == 810.0


@pytest.mark.parametrize("mode", ["cpu", "gpu"])
@pytest.mark.parametrize("move", [0.6, 1.6])
def test_decor_changes_the_allocation_the_period_a_deadline_moves(mode: str, move: float) -> None:
    # Closed loop: a deadline moved at 30% of D to move x the time left that needs another
    # allocation; the decision of the first period that sees it changes the allocation.
    plant = (CPU_PLANTS if mode == "cpu" else GPU_PLANTS)["linear" if mode == "cpu" else "gpu"]
    deadline_s = 2.5 * time_at_max_s(plant, mode)
    at_s = 0.3 * deadline_s
    new_deadline_s = at_s + move * (deadline_s - at_s)
    settings = (cpu_settings if mode == "cpu" else gpu_settings)(deadline_s, "decor")
    result = run_closed_loop(
        settings, plant, TOTAL_STEPS, deadline_changes=[(at_s, new_deadline_s)], seed=0
    )
    trace = [(t, a) for t, _, a, _ in result.trace]
    seen = next(i for i, (t, _) in enumerate(trace) if t >= at_s)  # the first period after it
    assert trace[seen + 1][1] != trace[seen][1], trace[seen - 3 : seen + 4]


def test_the_levels_measured_and_the_useful_maximum_are_stored_and_read_back() -> None:
    state = State(
        policy="decor",
        allocation=1.0,
        level_steps=((1.0, 0.4, 10.0, 100.0), (2.0, 0.4, 10.0, 101.0)),
        useful_cap=(1.0, 161.0, 60.0),
    )
    stored = json.loads(json.dumps(state.to_dict()))
    assert State.from_dict(stored) == state
    for measuring in (
        replace(state, between_sample=(1.5, 0.3, 1.0, 102.0, 0.4)),
        replace(state, between_cores_help=True),
        replace(state, between_cores_help=False),
    ):
        assert State.from_dict(json.loads(json.dumps(measuring.to_dict()))) == measuring
    unmeasured = State(policy="decor", allocation=1.0).to_dict()
    assert not {"level_steps", "between_cores_help", "between_sample"} & set(unmeasured)
    with pytest.raises(ValueError, match="level_steps"):
        State.from_dict({**stored, "level_steps": [[1.0, 0.4]]})
