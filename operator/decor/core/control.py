"""The control law: how many cores or GPUs a training job gets next.

``decide(state, observation, settings, now)`` is a pure function: no I/O, no clock, stdlib
only. The caller (local runtime or operator) samples progress, calls it once per period,
applies ``Decision.allocation`` and keeps ``Decision.state`` for the next call (the operator
stores it in the job's status, so a restarted operator resumes exactly).

Two policies share this interface (docs/control-law.md derives both):

* ``decor-nn``: the published DECOR-NN law, kept as the baseline. A PI controller on
  normalised progress against the time ramp SP = t / D, K = 50, Ti = 12 s, back-calculation
  anti-windup, the integral starting at MAX, allocation quantised (0.05 core / 1 GPU), MAX
  once the deadline has passed, GPU integral frozen while a change is pending.
* ``decor`` (default): shrinking-horizon control with an online speed model. Each period
  it fits step time = a / u + b (u = allocation) to the progress seen so far, with older
  samples forgotten, and picks the allocation whose predicted rate finishes the remaining
  steps exactly at the deadline minus a small safety margin. Re-planning from the measured
  position every period is the feedback; the fitted model is the feedforward. A dead-band
  stops dithering between quanta; GPU changes are taken only when they pay for their
  restart cost and after a minimum dwell; when even MAX cannot make the deadline the
  decision says Infeasible and runs at MAX.

Times are Unix seconds (floats); allocations are cores (CPU) or GPU counts (whole numbers).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from decor.api import vocabulary
from decor.core import useful_cores

STATE_VERSION = 2
"""Version of the stored controller state (1: before it carried a version)."""

AT_RISK_FRACTION_OF_MAX = 0.9
# The speed fit estimates a fixed per-step cost only from samples this spread out
# (variance of 1/allocation relative to its mean square); see SpeedFit.coefficients.
FIT_MIN_SPREAD = 0.05
# GPU counts are whole: two neighbouring counts up to 8, measured alike, are this spread
# out. The fixed cost must then stand out of the samples' scatter by this many standard
# errors: a sample of a few noisy steps cannot tell it.
GPU_FIT_MIN_SPREAD = 0.004
FIT_B_STANDARD_ERRORS = 2.0

# decor, CPU, above one core: whether a limit between whole cores helps a job is measured
# once, this fraction of a core above the lower level of a pair (halfway: the largest
# difference between a trainer whose threads follow the limit and one whose speed follows the
# quota, for the fewest periods paid at half a core that, for the former, adds nothing), over
# this many intervals (one interval's step noise passed for the difference in simulation).
BETWEEN_PROBE_FRACTION = 0.5
BETWEEN_PROBE_SAMPLES = 2.0


@dataclass(frozen=True)
class Settings:
    """What the controller is asked to do, and its tuning. Built from a JobSpec.

    ``start_s``/``deadline_s`` are absolute Unix seconds; a deadline change is a new Settings.
    """

    mode: str  # "cpu" | "gpu"
    min_allocation: float
    max_allocation: float
    start_s: float
    deadline_s: float
    policy: str = "decor"
    period_s: float = 1.0
    # DECOR-NN gains (published values); used by the decor-nn policy.
    k: float = 50.0
    ti_s: float = 12.0
    # decor: aim this long before the deadline (spec.control.safetyMarginSeconds). None: on
    # CPU the measured noise (aim_misses, below), on GPU gpu_safety_margin_ratio of D before
    # it. A CPU plan moves by millicores every period, and every fixed fraction of D measured
    # there left the finishes early on average (a bias). A GPU plan moves by whole devices
    # and restarts, where a closer aim turns a noisy shrink into a late finish.
    safety_margin_s: float | None = None
    gpu_safety_margin_ratio: float = 0.001
    # decor, CPU, no margin set: aim this many times one sample interval's measured noise
    # (State.interval_miss_s2) before the deadline, at most aim_max_ratio of D. The last
    # interval before the finish cannot be corrected: aimed at the deadline itself, a third
    # to a half of the runs finished a few hundredths of a second after it (DeadlineMissed).
    aim_misses: float = 2.0
    aim_max_ratio: float = 0.01
    # decor: samples this many periods old weigh e^-1 in the speed fit (tracks slow-downs).
    model_memory_periods: float = 10.0
    # decor, GPU: seconds of progress lost to one checkpoint + restart (learned as it runs).
    restart_cost_s: float = 30.0
    # decor, CPU: keep the allocation while the one needed is within this fraction of it.
    deadband_ratio: float = 0.02
    # decor, CPU: once less than this fraction of D is left before the target, a decrease
    # below one core is at most endgame_step_ratio of the allocation per period: the fit,
    # learned at higher quotas, tends to overestimate the speed below them, and little time is
    # left to correct it. (No decrease at all would keep every lead the end game starts with:
    # an early bias; so does too small a step.)
    endgame_ratio: float = 0.1
    endgame_step_ratio: float = 0.04
    # decor, CPU: plan to finish the remaining steps this fraction of the time left (until
    # the end game) early: a reserve that absorbs a slow-down without needing MAX. It shrinks
    # with the horizon and is zero when the end game starts, so a steady job still finishes
    # on target.
    reserve_ratio: float = 0.05
    # decor, CPU, above one core: a need between whole-core levels n and n + 1 alternates the
    # two. The upper level is left once this many periods at the lower one are owed, the
    # lower one once level_up_periods at the upper one are (sooner: being behind is riskier),
    # and neither is held past what the rest of the plan needs at the upper level; in the end
    # game, and where a hold would reach into it, that need alone picks the level.
    level_hold_periods: float = 3.0
    level_up_periods: float = 2.0
    # decor, CPU, a job that has run at MAX only: the lower whole-core level is measured (a
    # probe) only while the job's lead at MAX covers what this many periods there cost: the
    # period its resize settles in, the period it is measured in, and one for the trainer's
    # threads to follow the limit down and back up. Near a tight deadline a probe is a round
    # trip the lead cannot pay for (at 1.0x, VGG finished up to 3.3 % late after one).
    probe_periods: float = 3.0
    # decor, GPU: shrink only to a count that still finishes this fraction of the time left
    # early. A smaller count first makes it at the period where it only just makes it, so
    # without a reserve a noisy slow-down right after the shrink costs a restart back (and
    # often the deadline). On the noisy GPU plants of the law's tests 0.5 % gave the
    # smallest early finish (1 % and 2 % keep GPUs longer; none restarts back).
    gpu_shrink_reserve_ratio: float = 0.005
    # decor, GPU: no change sooner than this after the previous one took effect.
    min_dwell_s: float = 30.0
    # decor, GPU: a job changes its count (a restart each) at most this many times to save
    # GPUs: a shrink is taken only while it leaves one change for a step back up. A step up
    # the deadline needs is always taken. Four: from MAX to the count above the need, to the
    # one below it, one more shrink after a deadline moved later or a fast phase, and a spare.
    gpu_max_restarts: int = 4
    # decor, GPU: a switch up by one is put off while one period later still makes it with
    # this fraction of a restart to spare. A whole restart made every switch up land about a
    # restart early; none, and a noisy dip in the speed estimate in the last period before
    # it asked for two GPUs more (and a switch back down after).
    gpu_grow_spare_ratio: float = 0.25
    # decor, GPU: "fewer first" (the count below the need now, the one above it for the
    # rest) only while MAX could still do the rest after the planned switch up in this share
    # of the time then left. Fewer first puts the work late; a deadline moved earlier (or a
    # slow-down) must still find MAX fast enough.
    gpu_fewer_first_max_share: float = 0.7
    # decor, CPU: a job holds no more whole cores than its useful maximum, the fewest above
    # which every level measured adds less than this share of the speed-up its extra cores
    # would give if speed grew with cores (``decor.core.useful_cores``): a loop pinned to one
    # thread runs at one core, not MAX, at a deadline no allocation meets.
    useful_min_efficiency: float = 0.1
    # decor, CPU: that maximum holds this many periods; then the levels above it are tried
    # again (load from outside the job may have slowed them when measured), and each time it
    # is found again it holds twice as long, up to useful_hold_max_periods.
    useful_hold_periods: float = 10.0
    useful_hold_max_periods: float = 160.0
    # decor, CPU: a job that runs at MAX because no allocation meets its deadline, and has
    # measured no other whole-core level (it started at MAX), measures the level below MAX
    # once it would finish at least this share of its span late at MAX, so that cores that
    # do not speed it up are found (``_late_probe``). A job that MAX only just misses, or
    # that noise shows late by a few percent, does not: the measurement costs up to a period
    # where every core helps (at 5 %, two noisy 1.0x runs on 2 cores ended 0.2 points later).
    late_probe_ratio: float = 0.1

    @property
    def quantum(self) -> float:
        """Allocation step: 1 GPU; for CPU 0.05 core under decor-nn (its published
        granularity), 0.01 core under decor (10 millicores: fine enough to aim at the
        deadline, coarse enough for every runtime's CPU limit)."""
        if self.mode != "cpu":
            return 1.0
        return 0.05 if self.policy == "decor-nn" else 0.01

    @property
    def late_progress(self) -> float:
        """DECOR-NN jumps to MAX past the deadline while progress is below this."""
        return 0.99 if self.mode == "cpu" else 0.995

    @property
    def model_memory_s(self) -> float:
        return self.model_memory_periods * self.period_s

    @property
    def useful_hold_s(self) -> tuple[float, float]:
        """How long a useful maximum holds: the first time, and at most."""
        return (
            self.useful_hold_periods * self.period_s,
            self.useful_hold_max_periods * self.period_s,
        )

    @property
    def duration_s(self) -> float:
        return self.deadline_s - self.start_s

    @property
    def target_s(self) -> float:
        """The finish time the decor policy aims at: the deadline less the safety margin."""
        margin = self.safety_margin_s
        if margin is None:
            gpu = self.mode == "gpu"
            margin = self.gpu_safety_margin_ratio * max(self.duration_s, 0.0) if gpu else 0.0
        return self.deadline_s - margin


@dataclass(frozen=True)
class Observation:
    """One progress sample.

    ``time_s``: when the sample was taken (Unix s). ``steps_done``/``steps_total``: completed
    and planned mini-batches. ``allocation``: what is actually in effect now (read back from
    the cgroup or the pod status). ``pending``: a requested change has not taken effect yet.
    ``restart_s``: the trainer's own measure of its last restart (from the save of the
    checkpoint it resumed from to its first step after), when it reports one. ``anchors``:
    the sample can start a speed interval (False: a count of zero stamped with the read's
    time, which can be a scrape interval after the count was true; from it to the first
    step's own stamp is shorter than that step took). ``threads_follow_limit``: the trainer
    says it runs one compute thread per whole core of its CPU limit (the reference trainer),
    so a limit between whole cores runs as the whole cores below it (State.between_cores_help
    False without measuring it).
    """

    time_s: float
    steps_done: float
    steps_total: float
    allocation: float
    pending: bool = False
    restart_s: float | None = None
    anchors: bool = True
    threads_follow_limit: bool = False

    @property
    def progress(self) -> float:
        return min(1.0, self.steps_done / self.steps_total) if self.steps_total > 0 else 0.0

    @property
    def complete(self) -> bool:
        return self.steps_total > 0 and self.steps_done >= self.steps_total


@dataclass(frozen=True)
class SpeedFit:
    """Exponentially-forgotten least-squares sums for step_time = a * x + b, x = 1/allocation.

    Each sample is one interval between observations, weighted by the steps it covered;
    ``syy`` and ``samples`` (their count) give the scatter about the fit.
    """

    sw: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    syy: float = 0.0
    samples: float = 0.0
    updated_s: float | None = None

    def add(self, x: float, y: float, weight: float, now_s: float, memory_s: float) -> SpeedFit:
        decay = (
            1.0
            if self.updated_s is None
            else math.exp(-max(0.0, now_s - self.updated_s) / memory_s)
        )
        return SpeedFit(
            sw=self.sw * decay + weight,
            sx=self.sx * decay + weight * x,
            sy=self.sy * decay + weight * y,
            sxx=self.sxx * decay + weight * x * x,
            sxy=self.sxy * decay + weight * x * y,
            syy=self.syy * decay + weight * y * y,
            samples=self.samples * decay + 1.0,
            updated_s=now_s,
        )

    def spread(self, min_spread: float = FIT_MIN_SPREAD) -> bool:
        """The samples span a wide enough range of allocations to tell a from b (relative
        variance of x at least ``min_spread``)."""
        if self.sw <= 0 or self.sxx <= 0:
            return False
        mean_x = self.sx / self.sw
        return self.sxx / self.sw - mean_x * mean_x >= min_spread * self.sxx / self.sw

    def coefficients(
        self, shape: float | None = None, gpu: bool = False
    ) -> tuple[float, float] | None:
        """(a, b) in seconds per step, or None before any sample.

        b (the per-step time no core can speed up) is only estimated once the samples
        tell it (:meth:`told_apart`); before that the fit keeps ``shape`` = b / a, the
        ratio an earlier spread of samples measured (None: 0, linear speed-up), and scales
        it to the samples. A narrow range cannot tell a fixed cost from a slow rate, and
        extrapolating a spurious b to MAX would call a feasible deadline infeasible.
        """
        if self.sw <= 0 or self.sxx <= 0:
            return None
        told = self.told_apart(gpu)
        if told is not None:
            return told
        k = shape or 0.0
        a = (self.sxy + k * self.sy) / (self.sxx + 2 * k * self.sx + k * k * self.sw)
        return a, a * k

    def told_apart(self, gpu: bool = False) -> tuple[float, float] | None:
        """(a, b) fitted to the samples alone where they tell a from b, else None. CPU: the
        samples :meth:`spread` by FIT_MIN_SPREAD. GPU (whole counts): by GPU_FIT_MIN_SPREAD,
        and b stands out of the samples' scatter about the fit by FIT_B_STANDARD_ERRORS;
        else a few noisy steps at a count would make a fixed cost up."""
        if not self.spread(GPU_FIT_MIN_SPREAD if gpu else FIT_MIN_SPREAD):
            return None
        mean_x, mean_y = self.sx / self.sw, self.sy / self.sw
        var_x = self.sxx / self.sw - mean_x * mean_x
        a = (self.sxy / self.sw - mean_x * mean_y) / var_x
        b = mean_y - a * mean_x
        if a <= 0:  # no measurable speed-up: all of the step time is fixed
            return 0.0, max(mean_y, 1e-9)
        if gpu and abs(b) < FIT_B_STANDARD_ERRORS * self._b_standard_error(a, b):
            return None
        if b < 0:  # a negative floor is unphysical: refit through the origin
            return self.sxy / self.sxx, 0.0
        return a, b

    def _b_standard_error(self, a: float, b: float) -> float:
        """The standard error of b in the weighted least squares fit (a, b): the samples'
        scatter about it, each weighted by its steps (infinite below three samples)."""
        if self.samples <= 2.0:
            return math.inf
        scatter = max(0.0, self.syy - a * self.sxy - b * self.sy) / (self.samples - 2.0)
        return math.sqrt(scatter * self.sxx / (self.sw * self.sxx - self.sx * self.sx))


@dataclass(frozen=True)
class State:
    """Everything the controller remembers between periods (JSON-serialisable)."""

    policy: str
    allocation: float  # what the controller last asked for
    integral: float = 0.0  # decor-nn: the I term, in allocation units
    last_time_s: float | None = None
    last_steps: float | None = None
    fit: SpeedFit = field(default_factory=SpeedFit)
    last_change_s: float | None = None  # when the last allocation change was requested
    restart_cost_s: float | None = None  # decor GPU: learned cost of one restart
    change_pending_since_s: float | None = None
    decisions: int = 0
    level_credit_s: float = 0.0  # decor CPU: seconds owed at the upper whole-core level
    level_fit: SpeedFit = field(default_factory=SpeedFit)  # decor CPU: at whole cores
    # decor: b / a of the fit when its samples last spanned two levels (CPU: the whole-core
    # fit; GPU: the fit over counts). The fit forgets with time, levels alike: after half a
    # minute at one level the other's samples fade below the spread a and b need, and the
    # shape is kept from here.
    level_shape: float | None = None
    fewest_cores_measured: float | None = None  # decor CPU: the fewest whole cores measured
    most_cores_measured: float | None = None  # decor CPU: the most whole cores measured
    # decor CPU: the step time measured at each whole-core level (``useful_cores.Level``)
    level_steps: tuple[useful_cores.Level, ...] = ()
    # decor CPU: the useful maximum found, until when it holds, and how long it was held
    # for (``useful_cores.cap``)
    useful_cap: useful_cores.Cap | None = None
    # decor CPU: whether a limit between whole cores above one core runs faster than the
    # whole cores below it (``useful_cores.between_cores_helps``): True, the job's threads do
    # not follow its limit and the law plans the quota itself; False, it alternates whole-core
    # levels; None (not stored) until a limit there was measured, planned as False
    between_cores_help: bool | None = None
    # decor CPU: the measurement of a limit between whole cores under way (not stored
    # otherwise): the limit, its mean seconds per step so far, the intervals measured there,
    # when the last was (Unix s), and the seconds per step measured just before at the whole
    # cores below it (``_between_learned``)
    between_sample: tuple[float, float, float, float, float] | None = None
    deadline_s: float | None = None  # decor: the deadline the last decision planned for
    version: int = STATE_VERSION  # older stored states are read (migrated) by from_dict
    # GPU: the changes of count asked for so far (each a restart); None (not stored) before
    # the first one and on CPU
    gpu_restarts: int | None = None
    # GPU: the count of the switch up the last decision planned (None: none; not stored);
    # the job's demand still asks it of the planner while a change of count is carried out
    planned_peak: float | None = None
    # decor CPU: the mean square (s^2) of a sample interval's noise: half that of how far its
    # seconds fell from what the interval before it, at the same allocation, took for as
    # many steps; weighted like the fit (None: none measured). Then the last interval that
    # taught the speed: (allocation, seconds per step).
    interval_miss_s2: float | None = None
    last_interval: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        raw = asdict(self)
        for optional in (
            "gpu_restarts",
            "planned_peak",
            "useful_cap",
            "level_steps",
            "between_cores_help",
            "between_sample",
            "interval_miss_s2",
            "last_interval",
        ):
            if raw[optional] in (None, ()):
                del raw[optional]
        return raw

    @staticmethod
    def from_dict(raw: dict[str, Any]) -> State:
        """The state as stored by any version: fields a version added take their defaults,
        fields a version dropped are ignored. Raises ValueError when it cannot be read."""
        known = {f.name for f in fields(State)}
        fit_known = {f.name for f in fields(SpeedFit)}
        data = {k: v for k, v in raw.items() if k in known}
        if "policy" not in data or "allocation" not in data:
            raise ValueError("controller state without policy or allocation")
        for name in ("fit", "level_fit"):
            sums = data.get(name) or {}
            if not isinstance(sums, dict):
                raise ValueError(f"controller state: {name} is not a mapping")
            data[name] = SpeedFit(**{k: v for k, v in sums.items() if k in fit_known})
        levels = data.get("level_steps") or ()
        if not isinstance(levels, (list, tuple)) or any(len(lv) != 4 for lv in levels):
            raise ValueError("controller state: level_steps is not a list of 4 numbers each")
        data["level_steps"] = tuple(tuple(float(x) for x in lv) for lv in levels)
        for name in ("useful_cap", "between_sample", "last_interval"):
            if data.get(name) is not None:
                data[name] = tuple(float(x) for x in data[name])
        data["version"] = STATE_VERSION
        return State(**data)


@dataclass(frozen=True)
class Decision:
    allocation: float
    state: State
    condition: str
    message: str
    eta_s: float | None = None  # predicted completion time (Unix s) at this allocation
    # GPU: the count a switch up planned for a coming period goes to, where it is more than
    # ``allocation`` (behind at 3 GPUs, 4 a period later still make it: 4); 0: none planned.
    # The planner holds those GPUs for the job (``planner.Demand.planned_peak``).
    planned_peak: float = 0.0


def initial_state(settings: Settings, initial_allocation: float | None = None) -> State:
    """Controller state at job start. DECOR-NN starts with everything (integral = MAX)."""
    if settings.policy == "decor-nn":
        return State(
            policy="decor-nn", allocation=settings.max_allocation, integral=settings.max_allocation
        )
    start = settings.max_allocation if initial_allocation is None else initial_allocation
    return State(policy="decor", allocation=clamp(start, settings))


def start_allocation(
    settings: Settings,
    initial: float,
    initial_given: bool,
    steps_total: float,
    estimate: tuple[float, float] | None,
) -> float:
    """Where ``decor`` starts a job: ``initial`` (the spec's, or its default: one core for
    CPU, MAX for GPUs), except MAX when the spec names no initial allocation and the job's
    ``estimate`` (seconds per step at an allocation, ``spec.estimate``) says the deadline
    needs at least AT_RISK_FRACTION_OF_MAX of MAX for ``steps_total`` steps.

    Such a deadline has no slack for the periods the law spends measuring at a smaller
    start, and nothing can make them up later. The need assumes linear speed-up from the
    estimate's allocation, which overstates the speed above it: a job called tight is
    tight. Without an estimate (or planned steps) the start is ``initial``.
    """
    if initial_given or estimate is None or steps_total <= 0 or settings.duration_s <= 0:
        return clamp(initial, settings)
    step_s, at_allocation = estimate
    need = steps_total * step_s * at_allocation / settings.duration_s
    if need >= AT_RISK_FRACTION_OF_MAX * settings.max_allocation:
        return settings.max_allocation
    return clamp(initial, settings)


def thread_cores(limit: float) -> float:
    """The cores a trainer with one thread per whole core of its CPU limit can use: all of a
    limit below one core, its whole cores from one core up (``decor_trainer.threads``): a limit
    of 1.6 cores runs as fast as 1."""
    return limit if limit < 1.0 else float(math.floor(limit + 1e-6))


def usable_cores(allocation: float, settings: Settings, between_cores: bool = False) -> float:
    """What a trainer can use of an allocation: GPUs, or :func:`thread_cores` of a CPU limit
    (all of it where a limit ``between_cores`` helps: State.between_cores_help)."""
    return thread_cores(allocation) if settings.mode == "cpu" and not between_cores else allocation


def clamp(value: float, settings: Settings) -> float:
    return min(settings.max_allocation, max(settings.min_allocation, value))


def quantize(value: float, settings: Settings) -> float:
    """Round to the nearest allocation quantum, then clamp to [MIN, MAX]."""
    q = settings.quantum
    return clamp(round(round(value / q) * q, 6), settings)


def decide(
    state: State, observation: Observation | None, settings: Settings, now: float
) -> Decision:
    """The next allocation. ``observation`` is None when no usable progress sample exists."""
    if observation is None:
        return Decision(
            allocation=state.allocation,
            state=state,
            condition=vocabulary.CONDITION_METRICS_UNAVAILABLE,
            message=f"no progress sample; holding {state.allocation:g}",
        )
    if observation.complete:
        return Decision(
            allocation=state.allocation,
            state=replace(state, last_time_s=observation.time_s, last_steps=observation.steps_done),
            condition=vocabulary.CONDITION_COMPLETE,
            message="all planned steps done",
            eta_s=observation.time_s,
        )
    if state.policy == "decor-nn":
        return _decide_decor_nn(state, observation, settings, now)
    return _decide_decor(state, observation, settings, now)


# ---------------------------------------------------------------------------------------
# decor-nn: the published baseline


def _decide_decor_nn(state: State, obs: Observation, settings: Settings, now: float) -> Decision:
    duration = max(settings.duration_s, 1e-9)
    set_point = (now - settings.start_s) / duration
    error = set_point - obs.progress
    u_p = settings.k * error
    integral = state.integral
    # The integral follows what was actually applied (e.g. a resize the kubelet capped).
    if not obs.pending and state.decisions > 0:
        integral += obs.allocation - state.allocation
    if settings.mode == "gpu" and obs.pending:
        # A GPU change is still being carried out: hold it and do not advance the integral.
        return Decision(
            allocation=state.allocation,
            state=replace(state, integral=integral, decisions=state.decisions + 1),
            condition=vocabulary.CONDITION_ON_TRACK,
            message="GPU change pending",
        )
    integral += u_p * settings.period_s / settings.ti_s
    u = quantize(u_p + integral, settings)
    late = now > settings.deadline_s and obs.progress < settings.late_progress
    if late:
        u = settings.max_allocation
    integral = u - u_p  # back-calculation anti-windup
    condition, message = _nn_condition(settings, obs, now, error, u)
    new_state = replace(
        state,
        allocation=u,
        integral=integral,
        last_time_s=obs.time_s,
        last_steps=obs.steps_done,
        last_change_s=now if u != state.allocation else state.last_change_s,
        decisions=state.decisions + 1,
    )
    return Decision(allocation=u, state=new_state, condition=condition, message=message)


def _nn_condition(
    settings: Settings, obs: Observation, now: float, error: float, u: float
) -> tuple[str, str]:
    if now > settings.deadline_s:
        return (
            vocabulary.CONDITION_DEADLINE_MISSED,
            f"deadline passed at {obs.progress:.1%} progress",
        )
    if error > 0.05 and u >= settings.max_allocation:
        return vocabulary.CONDITION_AT_RISK, f"{error:.1%} behind the set point at MAX"
    return vocabulary.CONDITION_ON_TRACK, f"{error:+.2%} from the set point"


# ---------------------------------------------------------------------------------------
# decor: shrinking horizon with an online speed model


def _decide_decor(state: State, obs: Observation, settings: Settings, now: float) -> Decision:
    """One period of ``decor``: learn from the sample, answer a moved deadline, and plan the
    remaining steps over the shrinking horizon (CPU here, GPUs in :func:`_decide_gpu`), up
    to the job's :func:`useful_max` where it has one."""
    learned = _learn(state, obs, settings, now)
    settings = aimed(settings, learned.state.interval_miss_s2)
    useful = useful_max(learned.state, settings, now)
    if useful is None:
        return _plan_decor(state, learned, obs, settings, now)
    decision = _plan_decor(state, learned, obs, replace(settings, max_allocation=useful), now)
    if decision.allocation < useful - 1e-9:
        return decision
    note = f"MAX held at {useful:g} core(s), the useful maximum: more cores measured no faster"
    return replace(decision, message=f"{decision.message}; {note}")


def aimed(settings: Settings, miss_s2: float | None) -> Settings:
    """decor, CPU, where the spec sets no margin: ``settings`` aiming ``Settings.aim_misses``
    times the root mean square ``miss_s2`` of one sample interval (``State.interval_miss_s2``)
    early, so that noise in the last interval, which no later period can correct, rarely
    ends the job after its deadline."""
    if settings.mode != "cpu" or settings.safety_margin_s is not None or miss_s2 is None:
        return settings
    cap_s = settings.aim_max_ratio * max(settings.duration_s, 0.0)
    return replace(settings, safety_margin_s=min(settings.aim_misses * math.sqrt(miss_s2), cap_s))


def useful_max(state: State, settings: Settings, now: float) -> float | None:
    """decor, CPU: the most cores that speed the job up, as measured: the state's
    ``useful_cap`` (:func:`decor.core.useful_cores.cap`) while it holds; None when there is
    none, or it is not below ``settings.max_allocation``."""
    found = state.useful_cap
    if settings.mode != "cpu" or state.policy != "decor" or found is None:
        return None
    cores, until_s, _ = found
    return cores if now < until_s and cores < settings.max_allocation else None


def _plan_decor(
    state: State, learned: _Learned, obs: Observation, settings: Settings, now: float
) -> Decision:
    """:func:`_decide_decor` once the sample is learned, up to ``settings.max_allocation``."""
    base = learned.state
    step_time = step_time_curve(base, settings)
    unplanned = _unplanned(state, base, obs, settings, now, step_time)
    if unplanned is not None:
        return unplanned
    assert step_time is not None
    period = _Period(
        state=state,
        learned=base,
        obs=obs,
        settings=settings,
        now=now,
        step_time=step_time,
        current=obs.allocation if not obs.pending else state.allocation,
        moved_s=_deadline_moved_s(state, settings, learned.changing),
        interval_step_s=learned.interval_step_s,
    )
    if settings.mode == "gpu":
        return _decide_gpu(
            base,
            settings,
            obs,
            now,
            period.remaining,
            step_time,
            learned.restart_cost_s,
            period.replan,
        )
    plan = _cpu_plan(period)
    if _measuring_between(period):
        plan = replace(plan, target=period.current)
    target = _damped(period, plan, learned.settled_now)
    condition = (
        vocabulary.CONDITION_AT_RISK
        if plan.wanted > AT_RISK_FRACTION_OF_MAX * settings.max_allocation
        else vocabulary.CONDITION_ON_TRACK
    )
    eta = obs.time_s + period.remaining * step_time(target)
    message = (
        f"needs {plan.wanted:.2f} cores; step time {step_time(1.0):.4f} s at 1 core, "
        f"{step_time(settings.max_allocation):.4f} s at MAX"
    )
    if settings.target_s < settings.deadline_s - 0.005:
        message += f"; aims {settings.deadline_s - settings.target_s:.2f} s before the deadline"
    base = replace(base, level_credit_s=plan.credit_s)
    if plan.between_sample is not None:
        base = replace(base, between_sample=plan.between_sample)
    return _hold_or_change(base, settings, target, now, obs, condition, message, eta)


@dataclass(frozen=True)
class _Learned:
    """What one sample taught the law (:func:`_learn`)."""

    state: State  # the state with the sample learned, before this period's decision
    restart_cost_s: float  # GPU: what one change of count costs, learned or configured
    changing: bool  # a change is still being carried out
    settled_now: bool  # CPU: a resize seen pending has taken effect by this sample
    # seconds per step of the interval the sample closed, where it taught the speed (None
    # where it did not: :func:`_interval`)
    interval_step_s: float | None = None


def _learn(state: State, obs: Observation, settings: Settings, now: float) -> _Learned:
    """Learn from the interval since the last sample: the speed (:func:`_learn_speed`), a
    GPU restart's cost once progress resumes, and whether a change is still pending."""
    restart_cost = (
        state.restart_cost_s if state.restart_cost_s is not None else settings.restart_cost_s
    )
    learned_restart_s = state.restart_cost_s  # None until a restart has been measured
    pending_since = state.change_pending_since_s
    if obs.pending and pending_since is None:
        pending_since = state.last_change_s if state.last_change_s is not None else now
    interval = _interval(state, obs, stable=not obs.pending and pending_since is None)
    step_s = interval[0] / interval[1] if interval is not None else None
    speed = _learn_speed(_told(state, obs, settings), obs, settings, interval)
    if settings.mode == "cpu" and interval is not None and step_s is not None:
        speed = replace(
            speed,
            interval_miss_s2=_interval_miss_s2(state, obs, settings, interval),
            last_interval=(obs.allocation, step_s),
        )
    # CPU: a resize that was seen pending has taken effect by this sample.
    settled_now = settings.mode == "cpu" and pending_since is not None and not obs.pending
    if not obs.pending and pending_since is not None and state.last_steps is not None:
        if obs.steps_done > state.last_steps and settings.mode == "gpu":
            seen = _restart_seen_s(obs, speed.fit, pending_since, state.last_steps)
            # The first measurement replaces the configured guess; later ones are averaged in.
            if learned_restart_s is not None:
                seen = 0.5 * (learned_restart_s + seen)
            learned_restart_s = restart_cost = seen
            pending_since = None
        elif settings.mode == "cpu":
            pending_since = None
    changing = obs.pending or (settings.mode == "gpu" and pending_since is not None)
    learned = replace(
        speed,
        last_time_s=obs.time_s if obs.anchors else None,
        last_steps=obs.steps_done if obs.anchors else None,
        restart_cost_s=learned_restart_s if settings.mode == "gpu" else None,
        change_pending_since_s=pending_since,
        decisions=state.decisions + 1,
        # A move seen while a change is still being applied is answered once it has been.
        deadline_s=state.deadline_s if changing else settings.deadline_s,
    )
    return _Learned(learned, restart_cost, changing, settled_now, step_s)


def _interval_miss_s2(
    state: State, obs: Observation, settings: Settings, interval: tuple[float, float]
) -> float | None:
    """decor, CPU: ``State.interval_miss_s2`` with ``interval`` learned where the interval
    before it ran the same allocation: how far its seconds fell from its steps at that
    interval's seconds per step (two intervals' noise: half its square is one's). A change
    of speed that lasts (load from outside, another phase) shows in one interval only."""
    before, last = state.interval_miss_s2, state.last_interval
    if last is None or abs(last[0] - obs.allocation) > 1e-9:
        return before
    dt, dsteps = interval
    miss_s2 = 0.5 * (dt - dsteps * last[1]) ** 2
    if before is None:
        return miss_s2
    keep = math.exp(-dt / settings.model_memory_s)
    return keep * before + (1.0 - keep) * miss_s2


def _told(state: State, obs: Observation, settings: Settings) -> State:
    """``state`` with what the trainer says of itself: a CPU trainer whose threads follow its
    limit (``Observation.threads_follow_limit``) runs a limit between whole cores as the
    whole cores below it, so that is not measured (``State.between_cores_help`` False, unless
    it was measured before the trainer said so). Saying so wrongly costs only the job: it then
    alternates whole-core levels where a quota between them would have served (more
    core-seconds, within its own max)."""
    if (
        settings.mode != "cpu"
        or not obs.threads_follow_limit
        or state.between_cores_help is not None
        or state.between_sample is not None
    ):
        return state
    return replace(state, between_cores_help=False)


def _interval(state: State, obs: Observation, stable: bool) -> tuple[float, float] | None:
    """The interval since the last sample, (seconds, steps), where it teaches the speed: no
    change was ``stable`` (pending), one allocation ran all of it, and it made progress."""
    if state.last_time_s is None or state.last_steps is None or obs.allocation <= 0:
        return None
    dt = obs.time_s - state.last_time_s
    dsteps = obs.steps_done - state.last_steps
    if not (dt > 0 and dsteps > 0 and stable and _same_allocation_held(state, obs)):
        return None
    return dt, dsteps


def _learn_speed(
    state: State, obs: Observation, settings: Settings, interval: tuple[float, float] | None
) -> State:
    """``state`` with the ``interval`` since the last sample (:func:`_interval`) learned into
    the speed fits, the whole-core levels measured and the useful maximum (CPU)."""
    if interval is None:
        return state
    dt, dsteps = interval
    between, between_sample = state.between_cores_help, state.between_sample
    if settings.mode == "cpu" and between_sample is not None:
        measuring = abs(obs.allocation - between_sample[0]) < 1e-9
        between, between_sample = _between_learned(
            between_sample, obs, dt / dsteps, state.level_steps, settings
        )
        if measuring:
            # measured for the comparison alone: what speed model it belongs to is unknown
            return replace(state, between_cores_help=between, between_sample=between_sample)
    # CPU: one fit below one core (one thread, throttled), one at whole cores (as many
    # threads, or all of a limit between them where that helps); one core belongs to both.
    cores = usable_cores(obs.allocation, settings, between is True)
    sample = (dt / dsteps, dsteps, obs.time_s, settings.model_memory_s)
    fit, level_shape = state.fit, state.level_shape
    if settings.mode != "cpu" or cores <= 1.0:
        fit = fit.add(1.0 / cores, *sample)
    if settings.mode != "cpu":
        return replace(state, fit=fit, level_shape=_shape_of(fit, level_shape, gpu=True))
    levels, useful_cap = state.level_steps, state.useful_cap
    if cores <= 1.0 or abs(cores - round(cores)) < 1e-6:  # a level: its figure, the maximum
        levels, useful_cap = _measured_level(state, settings, obs, cores, dt / dsteps, dsteps)
    if cores < 1.0:
        return replace(
            state,
            fit=fit,
            level_steps=levels,
            useful_cap=useful_cap,
            between_cores_help=between,
            between_sample=between_sample,
        )
    level_fit = state.level_fit.add(1.0 / cores, *sample)
    fewest, most = state.fewest_cores_measured, state.most_cores_measured
    return replace(
        state,
        fit=fit,
        level_fit=level_fit,
        level_shape=_shape_of(level_fit, level_shape),
        fewest_cores_measured=min(cores, fewest if fewest is not None else math.inf),
        most_cores_measured=max(cores, most if most is not None else 0.0),
        level_steps=levels,
        useful_cap=useful_cap,
        between_cores_help=between,
        between_sample=between_sample,
    )


def _between_learned(
    sample: tuple[float, float, float, float, float],
    obs: Observation,
    step_s: float,
    levels: tuple[useful_cores.Level, ...],
    settings: Settings,
) -> tuple[bool | None, tuple[float, float, float, float, float] | None]:
    """``State.between_cores_help`` and ``State.between_sample`` after an interval at
    ``step_s`` seconds per step: at the limit measured, averaged in, and once it has
    BETWEEN_PROBE_SAMPLES intervals, compared with the cores below it measured just before
    and the level above (``useful_cores.between_cores_helps``; False where that cannot tell).
    An interval elsewhere once the speed model's memory has passed without them (samples too
    far apart) ends the measurement: False, the whole-core levels as before."""
    limit, mean_s, count, at, lower_s = sample
    if abs(obs.allocation - limit) > 1e-9:
        return (False, None) if obs.time_s - at > settings.model_memory_s else (None, sample)
    count += 1.0
    mean_s += (step_s - mean_s) / count
    if count < BETWEEN_PROBE_SAMPLES:
        return None, (limit, mean_s, count, obs.time_s, lower_s)
    upper = next((s for c, s, _, _ in levels if c == math.floor(limit) + 1), None)
    helps = upper is not None and useful_cores.between_cores_helps(
        limit, mean_s, lower_s, upper, settings.useful_min_efficiency
    )
    return helps is True, None


def _measured_level(
    state: State, settings: Settings, obs: Observation, cores: float, step_s: float, steps: float
) -> tuple[tuple[useful_cores.Level, ...], useful_cores.Cap | None]:
    """The whole-core levels' figures with ``steps`` steps at ``step_s`` measured at ``cores``,
    and the useful maximum they give (``useful_cores``). Below one core, what one core would
    run (the speed proportional to the quota) stands for the one-core level, so that a level
    above it measured next is compared with it."""
    levels = useful_cores.measure_level(
        useful_cores.stale_figure_dropped(state.level_steps, state.useful_cap, max(1.0, cores)),
        max(1.0, cores),
        step_s * min(1.0, cores),
        steps,
        obs.time_s,
        settings.model_memory_s,
    )
    useful_cap = useful_cores.cap(
        state.useful_cap,
        levels,
        settings.max_allocation,
        obs.time_s,
        settings.model_memory_s,
        settings.useful_hold_s,
        settings.useful_min_efficiency,
    )
    return levels, useful_cap


def _restart_seen_s(
    obs: Observation, fit: SpeedFit, pending_since: float, last_steps: float
) -> float:
    """What a GPU restart cost, at the first progress after it: as the trainer measured it
    (save to first step), else the gap in progress less the steps done in it."""
    if obs.restart_s is not None and obs.restart_s > 0:
        return obs.restart_s
    coeffs = fit.coefficients(gpu=True)
    step_s = coeffs[0] / obs.allocation + coeffs[1] if coeffs else 0.0
    gap_s = obs.time_s - pending_since
    return max(0.0, gap_s - (obs.steps_done - last_steps) * step_s)


def _deadline_moved_s(state: State, settings: Settings, changing: bool) -> float:
    """How far the deadline moved since the last decision (0 while a change is carried out:
    it is answered once the change is done). A move is answered at once, without the
    hysteresis that spreads changes out while the need only drifts."""
    if changing or state.deadline_s is None:
        return 0.0
    return settings.deadline_s - state.deadline_s


def _unplanned(
    state: State,
    base: State,
    obs: Observation,
    settings: Settings,
    now: float,
    step_time: Callable[[float], float] | None,
) -> Decision | None:
    """The decision when there is nothing to plan (None when there is): a deadline already
    past at the start or now, no speed measured yet, or one that even MAX cannot meet."""
    if settings.deadline_s <= settings.start_s:
        return _hold_or_change(
            base,
            settings,
            settings.max_allocation,
            now,
            obs,
            vocabulary.CONDITION_INFEASIBLE,
            "the deadline was already past when the job started; running at MAX",
            None,
        )
    if step_time is None:
        return Decision(
            allocation=state.allocation,
            state=base,
            condition=vocabulary.DECISION_STARTING,
            message="measuring speed",
        )
    remaining = obs.steps_total - obs.steps_done
    eta_at_max = obs.time_s + remaining * step_time(settings.max_allocation)
    if now >= settings.deadline_s:
        condition = vocabulary.CONDITION_DEADLINE_MISSED
        why = f"deadline passed at {obs.progress:.1%}"
    elif eta_at_max > settings.deadline_s:
        condition = vocabulary.CONDITION_INFEASIBLE
        why = f"even MAX finishes {eta_at_max - settings.deadline_s:.0f}s after the deadline"
    else:
        return None
    probe = _late_probe(base, settings, eta_at_max, obs.time_s)
    if probe is None:
        allocation, message = settings.max_allocation, f"{why}; running at MAX"
    else:
        allocation = probe
        message = (
            f"{why}; measuring {probe:g} core(s) before running at MAX: only MAX is measured, "
            "and cores that do not speed the job up are not held"
        )
    return _hold_or_change(base, settings, allocation, now, obs, condition, message, eta_at_max)


def _late_probe(base: State, settings: Settings, eta_at_max: float, time_s: float) -> float | None:
    """decor, CPU: the whole-core level just below MAX, for a job that runs at MAX because
    no allocation meets its deadline, while MAX is the only whole-core level it measured (it
    started there), so that the useful maximum (:func:`useful_max`) can find the cores that
    do not speed it up; held until an interval there is measured. Under a useful maximum,
    the level below it: a loop pinned to one thread on 4 cores measures 3, then 2, then 1.
    None when there is no level below MAX, when MAX would finish less than
    ``late_probe_ratio`` of the span late (the deadline is nearly met), or when less than the
    useful maximum's first hold is left to run at MAX (what it would save is then too little
    to pay the measurement's cost: up to one period at ``1 / MAX`` less speed, where every
    core helps). And a useful maximum that expired, once the levels above it were tried again:
    its own level, measured again before it is dropped (``useful_cores.unconfirmed``); else a
    level above measured just after load from outside ended, compared with the maximum's
    measured in that load, would drop it for good."""
    if settings.mode != "cpu":
        return None
    found = base.useful_cap
    if found is not None and useful_cores.unconfirmed(found, base.level_steps):
        return found[0]  # measured again, in the conditions the levels above ran in
    top = usable_cores(settings.max_allocation, settings)
    fewest = base.fewest_cores_measured
    if top < 2.0 or fewest is None or fewest < top:
        return None
    if eta_at_max - settings.deadline_s < settings.late_probe_ratio * settings.duration_s:
        return None
    if eta_at_max - time_s < settings.useful_hold_s[0]:
        return None
    return top - 1.0


@dataclass(frozen=True)
class _Period:
    """What a plan is made from, one period."""

    state: State  # as the last decision left it
    learned: State  # with this sample learned (:func:`_learn`)
    obs: Observation
    settings: Settings
    now: float
    step_time: Callable[[float], float]  # the speed model: seconds per step at an allocation
    current: float  # the allocation in effect (the last one decided while a resize is pending)
    moved_s: float  # how far the deadline moved since the last decision
    interval_step_s: float | None  # what the sample's interval measured (_Learned)

    @property
    def horizon_s(self) -> float:
        """The time left to the target, measured from the sample (work done since is unknown)."""
        return self.settings.target_s - self.obs.time_s

    @property
    def endgame(self) -> bool:
        return self.horizon_s < self.settings.endgame_ratio * self.settings.duration_s

    @property
    def replan(self) -> bool:
        """The deadline moved: answer it now, without the holds that spread changes out."""
        return abs(self.moved_s) > 1e-6

    @property
    def remaining(self) -> float:
        return self.obs.steps_total - self.obs.steps_done

    @property
    def planned_s(self) -> float:
        """The time the plan gives the remaining steps (:func:`planned_time_s`)."""
        return planned_time_s(self.horizon_s, self.settings)

    @property
    def needed_step_s(self) -> float:
        """The step time that finishes the remaining steps in :attr:`planned_s`."""
        return self.planned_s / self.remaining if self.remaining > 0 else math.inf


@dataclass(frozen=True)
class _CpuPlan:
    """What the remaining steps need of a CPU job (:func:`_cpu_plan`)."""

    wanted: float  # the cores the need comes to (a fraction between whole-core levels)
    target: float  # the allocation that serves it now
    credit_s: float = 0.0  # the new level credit (seconds owed at the upper level)
    current_need_s: float = 0.0  # seconds the plan needs at the current level (0 below a pair)
    # the measurement of a limit between whole cores starts (State.between_sample)
    between_sample: tuple[float, float, float, float, float] | None = None


def _cpu_plan(p: _Period) -> _CpuPlan:
    """The cores the remaining steps need over the horizon, and the allocation that serves
    that need: the two whole-core levels around it in turn above one core, the quota itself
    up to one, and above it too where a limit between whole cores helps."""
    settings, step_time, current = p.settings, p.step_time, p.current
    needed_step_s = p.needed_step_s
    between_cores = p.learned.between_cores_help is True
    if (
        not between_cores
        and step_time(1.0) > needed_step_s
        and usable_cores(settings.max_allocation, settings) >= 2.0
    ):
        return _between_levels(p)
    # Up to one core (and above it where a limit between whole cores helps), speed follows
    # the quota: the model's cores for the needed step time. Keep the allocation inside a
    # relative dead-band, else move to the nearest quantum. Re-planning every period absorbs
    # the dead-band's error, and as the horizon shrinks that error (a fraction of the time
    # left) shrinks with it.
    high = settings.max_allocation if between_cores else min(1.0, settings.max_allocation)
    wanted = _cores_for(needed_step_s, step_time, high, settings)
    target = quantize(wanted, settings)
    if (
        abs(wanted - current) <= settings.deadband_ratio * current
        and settings.min_allocation <= current <= settings.max_allocation
    ):
        target = current
    return _CpuPlan(wanted, target)


def _between_levels(p: _Period) -> _CpuPlan:
    """More than one core: alternate the two whole-core levels around the need."""
    settings, step_time, current = p.settings, p.step_time, p.current
    needed_step_s, planned_s = p.needed_step_s, p.planned_s
    top = usable_cores(settings.max_allocation, settings)
    lower = max(n for n in range(1, int(top) + 1) if step_time(n) > needed_step_s)
    if lower >= top:
        return _CpuPlan(settings.max_allocation, settings.max_allocation)
    v_lower, v_upper = 1.0 / step_time(lower), 1.0 / step_time(lower + 1)
    fraction = min(1.0, max(0.0, (1.0 / needed_step_s - v_lower) / (v_upper - v_lower)))
    upper_need_s = _upper_need_s(fraction * planned_s, lower, current, p.state, p.obs, p.now)
    eta_at_max = p.obs.time_s + p.remaining * step_time(settings.max_allocation)
    fewest, most = p.learned.fewest_cores_measured, p.learned.most_cores_measured
    wanted = lower + fraction
    target, credit_s = _whole_core_level(
        lower,
        fraction,
        current,
        0.0 if p.replan else p.state.level_credit_s,
        settings,
        deadline_move_s=p.moved_s if p.replan else 0.0,
        upper_need_s=upper_need_s,
        endgame=p.endgame,
        planned_s=planned_s,
        # Only MAX measured (the job's start), and no hurry: measure the lower level.
        probe_lower=fewest is not None
        and fewest >= top
        and wanted <= AT_RISK_FRACTION_OF_MAX * settings.max_allocation
        and settings.target_s - eta_at_max >= _probe_cost_s(lower, top, settings),
        # The upper level never measured (a job that starts at one core): measure it.
        probe_upper=most is not None and most < lower + 1,
    )
    current_need_s = upper_need_s if thread_cores(current) == lower + 1 else 0.0
    lower_s = _between_measurable(p, lower, target)
    if lower_s is not None:
        target = quantize(lower + BETWEEN_PROBE_FRACTION, settings)
        started = (target, 0.0, 0.0, p.now, lower_s)  # nothing measured there yet
        return _CpuPlan(wanted, target, credit_s, current_need_s, started)
    return _CpuPlan(wanted, target, credit_s, current_need_s)


def _between_measurable(p: _Period, lower: int, target: float) -> float | None:
    """The seconds per step this period's sample measured at ``lower`` whole cores, where the
    job, staying there, is to measure halfway to the level above instead, to learn whether a
    limit between whole cores helps it (``useful_cores.between_cores_helps``; a trainer
    whose threads follow the limit runs there as at ``lower``, at the cost of half a core
    for the periods it takes); else None. Once per job, with the level above measured, from
    a sample that ran at ``lower`` alone, not in the end game or in answer to a moved
    deadline."""
    learned = p.learned
    if (
        learned.between_cores_help is not None
        or learned.between_sample is not None
        or target != lower
        or p.current != lower
        or p.endgame
        or p.replan
        or lower + 1.0 not in {cores for cores, _, _, _ in learned.level_steps}
    ):
        return None
    return p.interval_step_s if p.obs.allocation == lower else None


def _measuring_between(p: _Period) -> bool:
    """Whether the job holds the limit between whole cores that :func:`_between_measurable`
    went to, until BETWEEN_PROBE_SAMPLES intervals there are measured (the first comes a
    period or two after the change; one interval's noise can pass for the difference), for
    at most ``probe_periods`` and a period."""
    learned = p.learned
    changed_s, sample = learned.last_change_s, learned.between_sample
    return (
        sample is not None
        and abs(sample[0] - p.current) < 1e-9
        and changed_s is not None
        and p.now - changed_s < (p.settings.probe_periods + 1.0) * p.settings.period_s
        and not p.endgame
        and not p.replan
    )


def _damped(p: _Period, plan: _CpuPlan, settled_now: bool) -> float:
    """The plan's target, held back where a change now would cost more than it serves: small
    steps down in the end game, a whole-core level just reached (:func:`_level_held`), and
    the period after a resize settled (a moved deadline is answered regardless)."""
    settings, current, target = p.settings, p.current, plan.target
    if target < current and p.endgame:
        # End game: below one core, step down by at most endgame_step_ratio (a step down
        # between whole-core levels is taken: both were measured).
        between_cores = p.learned.between_cores_help is True
        floor = (
            1.0
            if current > 1.0 and not between_cores
            else quantize(current * (1 - settings.endgame_step_ratio), settings)
        )
        target = min(current, max(target, floor))
    if (
        target < current
        and not p.replan
        and p.learned.between_cores_help is not True
        and _level_held(current, plan.current_need_s, p.horizon_s, p.state, settings, p.now)
    ):
        target = current
    if settled_now and not p.replan:
        # The interval that ends here ran partly at the old allocation, so it taught the
        # model nothing; hold one period to measure the new one. Without this, a model that
        # is off asks for a change each time the previous one settles and never learns.
        target = current
    return target


def _level_held(
    current: float, need_s: float, horizon_s: float, state: State, settings: Settings, now: float
) -> bool:
    """Whether a whole-core level above one core is held although the plan would leave it:
    for ``level_up_periods`` after it was reached, since going up for one period and straight
    back down is a resize each way for the work of one period.

    Not in the end game, and not where the hold would reach into the end game while the rest
    of the plan needs less than half a period at this level (``need_s``): a lead made there is
    not spent, as the end game steps down by small steps. VGG at 1.5x went up 0.7 s before
    its end game for the 1 s the plan needed there, was held a second period, and finished
    2.57 % early."""
    hold_s = settings.level_up_periods * settings.period_s
    endgame_s = settings.endgame_ratio * settings.duration_s
    if horizon_s < endgame_s or (
        horizon_s - hold_s < endgame_s and need_s < 0.5 * settings.period_s
    ):
        return False
    return current >= 2.0 and state.last_change_s is not None and now - state.last_change_s < hold_s


def _upper_need_s(
    planned_s: float, lower: int, current: float, state: State, obs: Observation, now: float
) -> float:
    """Seconds the rest of the plan needs at the upper level ``lower + 1``: ``planned_s`` as
    of the sample, less the time the job has run there since. A scraped sample can be several
    periods old: the job may be there since the sample or since it went up, or it may have
    come down from there after the sample (at the lower level the need does not change)."""
    changed_s = state.last_change_s
    if thread_cores(current) == lower + 1:  # there since the sample, or since the change
        since_s = now - max(obs.time_s, changed_s if changed_s is not None else obs.time_s)
    elif changed_s is not None and changed_s > obs.time_s:
        since_s = changed_s - obs.time_s  # came down from it after the sample
    else:
        since_s = 0.0
    return planned_s - max(0.0, since_s)


def _probe_cost_s(lower: int, top: float, settings: Settings) -> float:
    """Seconds a probe of the ``lower`` whole-core level puts a job at ``top`` cores behind:
    ``probe_periods`` periods at the lower speed, under linear speed-up (the whole-core fit
    has measured MAX only)."""
    return settings.probe_periods * settings.period_s * (1.0 - lower / top)


def planned_time_s(horizon_s: float, settings: Settings) -> float:
    """The time a CPU plan gives the remaining steps: the horizon less the reserve, which
    shrinks with it and is zero once the end game starts."""
    endgame_s = settings.endgame_ratio * settings.duration_s
    return horizon_s - settings.reserve_ratio * max(0.0, horizon_s - endgame_s)


def _whole_core_level(
    lower: int,
    fraction: float,
    current: float,
    credit_s: float,
    settings: Settings,
    probe_lower: bool = False,
    probe_upper: bool = False,
    deadline_move_s: float = 0.0,
    upper_need_s: float = math.inf,
    endgame: bool = False,
    planned_s: float = math.inf,
) -> tuple[float, float]:
    """The allocation (``lower`` or ``lower + 1`` cores) and the new level credit, for a
    need that takes the upper level a ``fraction`` of the time.

    The credit counts the seconds owed at the upper level (``fraction`` per second at the
    lower one, ``fraction - 1`` at the upper one); the lower level is left once
    ``level_up_periods`` are owed, the upper one once ``level_hold_periods`` at the lower
    one are: the two alternate in proportion, with few resizes, erring early.

    ``probe_lower``, ``probe_upper``: a level not yet measured is gone to now
    (:func:`_probed_level`; ``probe_upper`` first).

    ``deadline_move_s``: how far the deadline moved since the last plan (0: it did not). A
    moved deadline starts the pair afresh, owing nothing: at the level in the move's direction
    when the job runs at one of the pair (earlier: the upper level, later: the lower one), so
    that the answer is a resize now wherever one is due; else at the nearer level.

    ``upper_need_s``: the seconds the rest of the plan needs at the upper level (``fraction``
    of the planned time). No level is held past it: the upper level is left once the rest
    needs less than half a period there. In the ``endgame`` the credit's hysteresis is
    dropped: the upper level is taken while the rest needs at least half a period there, the
    lower one otherwise. The credit piles up the small share of a need just above a level
    for tens of seconds; spent as a trip of two periods or more in a job's last seconds, it
    finished the job up to 2.8 % early in simulation (VGG's speed curve at 1.5x).
    ``planned_s``: the time the rest of the plan has. Shorter than a period, it is held at
    the upper level whole or not at all, so in the end game the upper level is taken while
    the rest needs half of it there: a VGG job at 1.0x with 0.39 s left, 0.37 s of them
    needed at two cores, went to one core by the half-period rule and finished 1.6 % late.
    """
    at = usable_cores(current, settings)
    if probe_upper or probe_lower:
        return _probed_level(lower, fraction, at, credit_s, settings, upper=probe_upper)
    in_pair = at in (lower, lower + 1)
    if in_pair and deadline_move_s != 0.0:
        return clamp(float(lower + 1 if deadline_move_s < 0 else lower), settings), 0.0
    if endgame:  # the rest of the upper level's share, to the nearest period, first
        # (a plan shorter than a period holds the upper level for all of it or not at all)
        half_s = 0.5 * min(settings.period_s, planned_s)
        return clamp(float(lower + 1 if upper_need_s >= half_s else lower), settings), 0.0
    if not in_pair:  # a new pair of levels: the nearer one
        return clamp(lower + 1 if fraction >= 0.5 else lower, settings), 0.0
    return _credited_level(lower, fraction, at, credit_s, settings, upper_need_s)


def _probed_level(
    lower: int, fraction: float, at: float, credit_s: float, settings: Settings, upper: bool
) -> tuple[float, float]:
    """The level not yet measured, now, and the new level credit (as
    :func:`_whole_core_level`; ``at``: the usable cores now).

    ``upper`` (``probe_upper``): the upper level was never measured (a job that starts at
    one core), and assuming linear speed-up up to it overstates its speed, so its share of
    the time comes out too small and too late. Go there now; the time spent there counts
    against the share.

    Else (``probe_lower``): every interval measured so far ran at MAX (a job starts there),
    so the whole-core fit assumes linear speed-up down to the lower level. Speed-up is
    sub-linear, so the lower level runs at least as fast as assumed: go there now and stay
    until it is measured, counting the upper level's share as owed, instead of spending
    that share first. A job whose extra threads add little (one core as fast as two) learns
    it in a few periods, not after a run at MAX.
    """
    if upper:
        owed_s = min(0.0, credit_s) if at == lower + 1 else 0.0
        return clamp(float(lower + 1), settings), owed_s + (fraction - 1.0) * settings.period_s
    # to the lower level, and stay there until an interval is measured
    owed_s = max(0.0, credit_s) if at == lower else 0.0
    return clamp(float(lower), settings), owed_s + fraction * settings.period_s


def _credited_level(
    lower: int,
    fraction: float,
    at: float,
    credit_s: float,
    settings: Settings,
    upper_need_s: float,
) -> tuple[float, float]:
    """Within a pair of levels (``at``, the usable cores now, is one of them): the level the
    credit chooses and the new credit (as :func:`_whole_core_level`): the lower level is
    left once ``level_up_periods`` are owed and the upper level still needed, the upper one
    once ``level_hold_periods`` at the lower one are owed or it is no longer needed."""
    half_period_s = 0.5 * settings.period_s
    upper_now = at == lower + 1
    # Owed time is >= 0 at the lower level and <= 0 at the upper one; a credit of the other
    # sign was left by the previous pair of levels.
    credit_s = max(0.0, credit_s) if not upper_now else min(0.0, credit_s)
    credit_s += (fraction - (1.0 if upper_now else 0.0)) * settings.period_s
    upper_needed = upper_need_s >= half_period_s
    if upper_now:
        down_s = settings.level_hold_periods * settings.period_s
        level = lower if credit_s < -down_s or not upper_needed else lower + 1
    else:
        up_s = settings.level_up_periods * settings.period_s
        level = lower + 1 if credit_s > up_s and upper_needed else lower
    if level != at:
        credit_s = 0.0
    return clamp(float(level), settings), credit_s


def _shape_of(level_fit: SpeedFit, shape: float | None, gpu: bool = False) -> float | None:
    """b / a of the fit (CPU: the whole-core fit) while its samples tell a from b (else
    ``shape`` as it was)."""
    told = level_fit.told_apart(gpu)
    if told is None:
        return shape
    a, b = told
    return b / a if a > 0 else shape


def _step_time_model(
    fit: SpeedFit,
    level_fit: SpeedFit,
    settings: Settings,
    level_shape: float | None = None,
    between_cores: bool = False,
) -> Callable[[float], float] | None:
    """Seconds per step at an allocation, from what was measured; None before any sample.

    GPU: one fit, a/g + b, with the ``level_shape`` last measured across counts once its
    samples span one count only. CPU: below one core the sub-core fit (one thread, throttled:
    proportional to the quota when only the whole-core fit exists), at whole cores the
    whole-core fit (proportional to cores from one core when only the sub-core fit exists),
    with the ``level_shape`` last measured once its samples no longer span two levels; a
    limit between whole cores runs as the whole cores below it unless ``between_cores``.
    Without that, half a minute at one core made VGG's second core look 1.6x as useful as
    measured (78 steps/s at two cores, against 61.5), and the job stayed at one core.
    """
    if settings.mode != "cpu":
        sub = fit.coefficients(level_shape, gpu=True)
        if sub is None:
            return None
        a, b = sub
        return lambda g: a / g + b
    sub, whole = fit.coefficients(), level_fit.coefficients(level_shape)
    if sub is None and whole is None:
        return None

    def at_one_core(coeffs: tuple[float, float]) -> float:
        return coeffs[0] + coeffs[1]

    def step_time(u: float) -> float:
        cores = usable_cores(u, settings, between_cores)
        if cores < 1.0:
            if sub is not None:
                return sub[0] / cores + sub[1]
            assert whole is not None
            return at_one_core(whole) / cores
        if whole is not None:
            return whole[0] / cores + whole[1]
        assert sub is not None
        return at_one_core(sub) / cores

    return step_time


def _cores_for(
    step_s: float, step_time: Callable[[float], float], high: float, settings: Settings
) -> float:
    """The smallest allocation up to ``high`` whose step time is at most ``step_s`` (``high``
    when none is), to a thousandth of a core; step time falls as cores rise."""
    if step_time(high) > step_s:
        return high
    lo, hi = 0.0, high
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if mid > 0 and step_time(mid) <= step_s:
            hi = mid
        else:
            lo = mid
    return max(settings.min_allocation, hi)


def _same_allocation_held(state: State, obs: Observation) -> bool:
    """The interval's progress belongs to one allocation: what we asked is what ran, and no
    change was asked for after the interval began (a sample can be seconds old)."""
    changed_within = (
        state.last_change_s is not None
        and state.last_time_s is not None
        and state.last_change_s > state.last_time_s
    )
    return abs(state.allocation - obs.allocation) < 1e-6 and not changed_within


def _decide_gpu(
    base: State,
    settings: Settings,
    obs: Observation,
    now: float,
    remaining: float,
    step_time: Any,
    restart_cost: float,
    replan: bool = False,
) -> Decision:
    """The GPU count: a change costs a restart, so hold unless a change pays or is needed
    (``replan``: the deadline moved, so the minimum dwell and waiting do not apply)."""
    current = base.allocation
    if obs.pending or base.change_pending_since_s is not None:
        eta = obs.time_s + remaining * step_time(current)
        return Decision(current, base, vocabulary.CONDITION_ON_TRACK, "GPU change pending", eta)
    target_s = settings.target_s

    def finish(g: float) -> float:
        cost = 0.0 if g == current else restart_cost
        return obs.time_s + cost + remaining * step_time(g)

    dwell_ok = (
        replan or base.last_change_s is None or now - base.last_change_s >= settings.min_dwell_s
    )
    spare_restart = (base.gpu_restarts or 0) + 2 <= settings.gpu_max_restarts
    may_shrink = dwell_ok and spare_restart
    may_plan_two = may_shrink and (base.gpu_restarts or 0) + 3 <= settings.gpu_max_restarts
    weighed = _GpuChoice(
        current=current, time_s=obs.time_s, remaining=remaining, step_time=step_time,
        restart_cost=restart_cost, finish=finish, may_shrink=may_shrink,
        may_plan_two=may_plan_two, replan=replan,
    )  # fmt: skip
    choice, note, peak = _gpu_count(weighed, settings)
    condition = (
        vocabulary.CONDITION_AT_RISK
        if choice >= settings.max_allocation and finish(choice) > target_s
        else vocabulary.CONDITION_ON_TRACK
    )
    late_s = finish(choice) - settings.deadline_s
    message = f"{choice:g} GPU(s) finish at {late_s:+.0f}s vs deadline{note}"
    decision = _hold_or_change(base, settings, choice, now, obs, condition, message, finish(choice))
    planned = peak if peak > decision.allocation else None
    return replace(
        decision, planned_peak=planned or 0.0, state=replace(decision.state, planned_peak=planned)
    )


@dataclass(frozen=True)
class _GpuChoice:
    """What one GPU period weighs: where it stands and which changes it may make."""

    current: float
    time_s: float  # the observation's
    remaining: float  # steps
    step_time: Callable[[float], float]
    restart_cost: float
    finish: Callable[[float], float]  # when the job would finish at g GPUs, a restart included
    may_shrink: bool  # the minimum dwell is over and a change is left for a step back up
    may_plan_two: bool  # and two more (fewer first: down now, up later) still leave one
    replan: bool  # the deadline moved: no waiting


def _gpu_count(c: _GpuChoice, settings: Settings) -> tuple[float, str, float]:
    """The GPU count to run at, a note for the message, and the count of a switch up
    planned for later (0: none): on track, hold or shrink (:func:`_on_track_count`); behind,
    grow when needed and waiting does not pay (then the larger count is planned)."""
    target_s = settings.target_s
    candidates = [
        float(g) for g in range(int(settings.min_allocation), int(settings.max_allocation) + 1)
    ]
    meeting = [g for g in candidates if c.finish(g) <= target_s]
    if c.finish(c.current) <= target_s:
        return _on_track_count(c, settings, meeting)
    if not meeting:
        return min(candidates, key=c.finish), "", 0.0
    # Behind at this count, but a larger one still makes it. One GPU more, started one
    # period later, still leaving part of a restart to spare: wait. A noisy dip in the speed
    # estimate then costs no restart, and a grow is not followed by a shrink back.
    larger = min(meeting)
    spare_s = target_s - (c.finish(larger) + settings.period_s)
    waits = spare_s >= settings.gpu_grow_spare_ratio * c.restart_cost
    if larger - c.current <= 1 and waits and not c.replan:
        return c.current, f"; switching to {larger:g} later still makes it", larger
    return larger, "", 0.0


def _on_track_count(
    c: _GpuChoice, settings: Settings, meeting: list[float]
) -> tuple[float, str, float]:
    """On track at the current count (``meeting``: the counts that make it alone). Each
    change costs a restart, so changes need hysteresis. Shrink only when it pays: the GPUs
    given back, over the rest of the run, outweigh the new pod's GPUs idle during the
    restart (no restart for the last moments of a job), and only to a count that keeps a
    small reserve, so that a slow-down after it needs no restart back. Where the need lies
    between two counts, run the lower one first and the upper one for the rest
    (:func:`_fewer_first`), else hold for one switch later (:func:`_one_switch_later`)."""
    reserve_s = settings.gpu_shrink_reserve_ratio * max(0.0, settings.target_s - c.time_s)
    smaller = [
        g
        for g in meeting
        if g < c.current
        and shrink_pays(c.current, g, c.remaining * c.step_time(g), c.restart_cost)
        and c.finish(g) + reserve_s <= settings.target_s
    ]
    choice = min(smaller) if smaller and c.may_shrink else c.current
    first = _fewer_first(c, choice, min(meeting), settings, reserve_s) if c.may_plan_two else None
    if first is not None:
        return first, f"; {first:g} first, then {first + 1:g} for the rest", first + 1.0
    if choice < c.current and _one_switch_later(
        c.current, choice, settings, c.time_s, c.remaining, c.step_time, c.restart_cost,
        reserve_s,
    ):  # fmt: skip
        return c.current, f"; holding {c.current:g} for one switch to {choice - 1:g} later", 0.0
    return choice, "", 0.0


def _fewer_first(
    c: _GpuChoice, choice: float, upper: float, settings: Settings, reserve_s: float
) -> float | None:
    """The count one below ``upper`` (the smallest that makes it alone) to run now, when the
    need lies between the two: the lower count first, measured while it runs, then ``upper``
    for the rest (a planned switch up, taken in the last period that still leaves part of a
    restart to spare). The job then ends at a count measured or interpolated between
    measured ones, not one extrapolated from faster counts, which overstates a sub-linear
    job's step time at fewer GPUs and made it end early. None unless the lower count runs
    long enough to be measured (the minimum dwell, a restart and two periods); MAX could
    still do the rest after the switch up within ``gpu_fewer_first_max_share`` of the time
    then left; and the switches pay as a shrink does: the GPUs given back against
    ``choice`` (what the law would run otherwise) while the lower count runs outweigh the
    GPUs idle through both restarts."""
    lower = upper - 1.0
    if lower < settings.min_allocation or lower >= c.current:
        return None
    t_u, t_l = c.step_time(upper), c.step_time(lower)
    if t_l <= t_u:
        return None
    avail_s = settings.target_s - c.time_s - reserve_s
    at_lower_s = (avail_s - 2.0 * c.restart_cost - c.remaining * t_u) / (1.0 - t_u / t_l)
    if at_lower_s < settings.min_dwell_s + c.restart_cost + 2.0 * settings.period_s:
        return None
    rest_steps = c.remaining - at_lower_s / t_l
    if rest_steps <= 0.0:
        return None  # the lower count alone makes it: a plain shrink's case
    switch_s = c.time_s + c.restart_cost + at_lower_s
    at_max_s = c.restart_cost + rest_steps * c.step_time(settings.max_allocation)
    if at_max_s > settings.gpu_fewer_first_max_share * (settings.target_s - switch_s):
        return None
    pays = (choice - lower) * at_lower_s >= (lower + upper) * c.restart_cost
    return lower if pays else None


def _one_switch_later(
    current: float,
    upper: float,
    settings: Settings,
    time_s: float,
    remaining: float,
    step_time: Callable[[float], float],
    restart_cost: float,
    reserve_s: float,
) -> bool:
    """Whether to hold ``current`` GPUs now and later switch once, straight to ``upper - 1``,
    rather than shrink to ``upper`` (the smallest count that makes it) now: the need lies
    between ``upper - 1`` and ``upper``, so ``upper`` alone finishes early and reaching the
    target needs a second switch to ``upper - 1`` later. Held: one restart, at the time the
    lower count only just makes it. It is taken when ``upper`` now finishes early by more
    than holding one more period gains (else ``upper`` is the last switch), the later
    switch pays (:func:`shrink_pays`), shrinking now cannot reach the target with a second
    switch that pays (two switches, each between neighbouring counts, land finer than one
    from ``current``: holding a period too long at ``current`` is a lead of
    ``period_s x (t_l / t_c - 1)``), and it spends no more GPU-seconds, restarts included,
    than ``upper`` to the end."""
    lower = upper - 1
    if lower < settings.min_allocation:
        return False
    t_c, t_u, t_l = step_time(current), step_time(upper), step_time(lower)
    avail_s = settings.target_s - time_s - reserve_s  # seconds the remaining steps may take
    early_s = avail_s - (restart_cost + remaining * t_u)
    if early_s <= settings.period_s * t_u / t_c or t_l <= t_c:
        return False
    held_s = (avail_s - restart_cost - remaining * t_l) / (1.0 - t_l / t_c)
    after_s = (remaining - held_s / t_c) * t_l  # at the lower count, after the restart
    if held_s <= 0.0 or not shrink_pays(current, lower, after_s, restart_cost):
        return False
    at_u_s = (avail_s - 2.0 * restart_cost - remaining * t_l) / (1.0 - t_l / t_u)
    rest_s = (remaining - at_u_s / t_u) * t_l
    if at_u_s > 0 and shrink_pays(upper, lower, rest_s, restart_cost):
        return False  # two switches reach the target, each finer than one from ``current``
    hold_gpu_s = current * held_s + lower * (restart_cost + after_s)
    return hold_gpu_s <= upper * (restart_cost + remaining * t_u)


def shrink_pays(current: float, g: float, run_s_at_g: float, restart_cost: float) -> bool:
    """A GPU shrink from ``current`` to ``g`` pays when the GPUs given back over the rest of
    the run (``run_s_at_g`` seconds at ``g``) outweigh the new pod's GPUs idle through the
    restart."""
    return (current - g) * run_s_at_g >= g * restart_cost


def _restarts_after(base: State, settings: Settings, changed: bool) -> int | None:
    """The GPU restarts counted once this decision's change (if any) is made."""
    if settings.mode != "gpu" or not changed:
        return base.gpu_restarts
    return (base.gpu_restarts or 0) + 1


def _hold_or_change(
    base: State,
    settings: Settings,
    target: float,
    now: float,
    obs: Observation,
    condition: str,
    message: str,
    eta_s: float | None,
) -> Decision:
    target = clamp(target, settings)
    if obs.pending:  # never stack requests on a change that is still being applied
        target = base.allocation
    changed = abs(target - base.allocation) > 1e-9
    state = replace(
        base,
        allocation=target,
        last_change_s=now if changed else base.last_change_s,
        change_pending_since_s=now
        if changed and settings.mode == "gpu"
        else base.change_pending_since_s,
        gpu_restarts=_restarts_after(base, settings, changed),
    )
    return Decision(
        allocation=target, state=state, condition=condition, message=message, eta_s=eta_s
    )


# ---------------------------------------------------------------------------------------
# What the planner needs from a job's law, and how the law follows the planner


def step_time_curve(state: State, settings: Settings) -> Callable[[float], float] | None:
    """The job's fitted speed curve: seconds per step at an allocation (decreasing in it);
    None before anything was measured. The planner predicts finishes with it."""
    return _step_time_model(
        state.fit, state.level_fit, settings, state.level_shape, state.between_cores_help is True
    )


def replan_within_grant(
    decision: Decision,
    granted: float,
    base: State,
    settings: Settings,
    observation: Observation | None,
    now: float,
) -> Decision:
    """A GPU count the planner refused (``granted`` GPUs, fewer than ``decision`` asked:
    another job holds the rest), decided again at once from ``base`` with the grant as the
    law's max: the best plan within it, in the same period. Its condition is the law's at
    its max: AtRisk when no count within the grant finishes by the deadline, OnTrack when
    one still does. Anything else (CPU, decor-nn, no sample, a grant below the minimum)
    is ``decision`` as it was."""
    if (
        settings.mode != "gpu"
        or base.policy != "decor"
        or observation is None
        or granted >= decision.allocation - 1e-9
        or granted < settings.min_allocation - 1e-9
    ):
        return decision
    within = decide(base, observation, replace(settings, max_allocation=granted), now)
    condition = within.condition
    if condition == vocabulary.CONDITION_INFEASIBLE != decision.condition:
        condition = vocabulary.CONDITION_AT_RISK  # the grant, not the job's max, falls short
    asked = f"granted {granted:g} of the {decision.allocation:g} GPU(s) asked"
    message = f"{asked}, re-planned within {granted:g}: {within.message}"
    return replace(within, condition=condition, message=message)


def follow_grant(
    decision: Decision,
    allocation: float,
    base: State,
    settings: Settings,
    now: float,
    observation: Observation | None = None,
) -> Decision:
    """``decision`` after the planner (or the node) granted ``allocation`` instead of what
    the law asked; ``base`` is the state the law decided from. The state remembers what was
    granted, so the next period plans with what runs (decor-nn's integral follows it, as in
    back-calculation anti-windup). A grant below the need makes an on-track decision
    AtRisk, saying so; a GPU count refused so, with the period's ``observation``, is first
    re-planned within the grant (:func:`replan_within_grant`)."""
    granted = clamp(allocation, settings)
    if abs(granted - decision.allocation) < 1e-9:
        return decision
    decision = replan_within_grant(decision, granted, base, settings, observation, now)
    if abs(granted - decision.allocation) < 1e-9:
        return decision
    changed = abs(granted - base.allocation) > 1e-9
    state = replace(
        decision.state,
        allocation=granted,
        integral=min(decision.state.integral, granted)
        if decision.state.policy == "decor-nn"
        else decision.state.integral,
        last_change_s=now if changed else base.last_change_s,
        change_pending_since_s=now
        if changed and settings.mode == "gpu"
        else base.change_pending_since_s,
        gpu_restarts=_restarts_after(base, settings, changed),
    )
    condition, message = decision.condition, decision.message
    if granted < decision.allocation - 1e-9:
        message = f"granted {granted:g} of the {decision.allocation:g} needed; {message}"
        if condition == vocabulary.CONDITION_ON_TRACK:
            condition = vocabulary.CONDITION_AT_RISK
    return replace(decision, allocation=granted, state=state, condition=condition, message=message)
