"""Closed-loop simulation of a training job under a control policy (pure, no I/O).

Plants model how fast training runs for an allocation; ``run_closed_loop`` drives the same
``control.decide`` the runtimes use, period by period, and reports where the job finished.
Used by the unit tests and for quick what-ifs (``decor simulate``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from decor.core.control import (
    Decision,
    Observation,
    Settings,
    State,
    decide,
    initial_state,
    thread_cores,
)


@dataclass(frozen=True)
class Plant:
    """Step time (s) = (a / min(cores(u), saturation) ** scaling + b) * slowdown, times noise.

    ``cores(u)`` is what the trainer can use of a limit of ``u`` cores: ``u`` below one core,
    and from one core up the whole cores only when ``whole_threads`` (the reference trainer
    runs one thread per whole core of its limit: ``decor_trainer.threads``), else ``u``.

    ``slowdowns``: (from_s, until_s, factor) windows relative to the start, factor > 1 slower.
    ``noise``: relative standard deviation of each step's time.
    ``restart_s``: progress-free seconds for a GPU change (checkpoint + restart).
    ``scaling``: below 1, a sub-linear speed-up (data-parallel GPUs: twice the GPUs, less
    than twice the speed), which no a / u + b fit follows exactly.
    ``says_threads_follow``: the trainer says its threads follow its limit
    (``Observation.threads_follow_limit``, as the reference trainer's reporter does).
    """

    a: float
    b: float = 0.0
    saturation: float = math.inf
    noise: float = 0.0
    slowdowns: tuple[tuple[float, float, float], ...] = ()
    restart_s: float = 0.0
    whole_threads: bool = False
    scaling: float = 1.0
    says_threads_follow: bool = False

    def usable_cores(self, allocation: float) -> float:
        return thread_cores(allocation) if self.whole_threads else allocation

    def mean_step_time_s(self, allocation: float, elapsed_s: float) -> float:
        usable = min(self.usable_cores(allocation), self.saturation)
        base = self.a / usable**self.scaling + self.b
        for start, until, factor in self.slowdowns:
            if start <= elapsed_s < until:
                base *= factor
        return base

    def step_time_s(self, allocation: float, elapsed_s: float, rng: random.Random) -> float:
        base = self.mean_step_time_s(allocation, elapsed_s)
        if self.noise:
            base *= max(0.2, rng.gauss(1.0, self.noise))
        return base


@dataclass
class SimResult:
    finished_s: float | None  # relative to start; None if not finished within the horizon
    deadline_s: float  # the final deadline, relative to start
    core_seconds: float
    actuations: int
    trace: list[tuple[float, float, float, str]] = field(
        default_factory=list
    )  # t, progress, alloc, cond
    conditions: set[str] = field(default_factory=set)

    @property
    def deviation_pct(self) -> float:
        """Signed: positive = late, as % of the deadline duration."""
        assert self.finished_s is not None
        return 100.0 * (self.finished_s - self.deadline_s) / self.deadline_s


def run_closed_loop(
    settings: Settings,
    plant: Plant,
    total_steps: int,
    *,
    initial_allocation: float | None = None,
    deadline_changes: Sequence[tuple[float, float]] = (),
    seed: int = 0,
    horizon_factor: float = 3.0,
    observe: Callable[[Observation], Observation | None] | None = None,
) -> SimResult:
    """Run one job to completion. Times in ``settings`` must have start_s = 0.

    ``deadline_changes``: (at_s, new_deadline_s) pairs, both relative to the start.
    ``observe``: optional hook to drop or distort samples (missing metrics tests).
    """
    rng = random.Random(seed)
    state: State = initial_state(settings, initial_allocation)
    run = _Run(
        settings=settings,
        state=state,
        allocation=state.allocation,
        next_step_end=plant.step_time_s(state.allocation, 0.0, rng),
    )
    result = SimResult(
        finished_s=None, deadline_s=settings.deadline_s, core_seconds=0, actuations=0
    )
    changes = sorted(deadline_changes)
    horizon = horizon_factor * max(settings.duration_s, 1.0)
    while run.t < horizon:
        while changes and changes[0][0] <= run.t:
            run.settings = replace(run.settings, deadline_s=changes.pop(0)[1])
        if run.t >= run.next_control:
            _control_period(run, plant, total_steps, observe, result, rng)
        if _advance(run, plant, total_steps, rng):
            result.finished_s = run.t
            break
    result.core_seconds = run.core_seconds
    result.actuations = run.actuations
    result.deadline_s = run.settings.deadline_s
    return result


@dataclass
class _Run:
    """Where one simulated run stands (times in seconds from its start)."""

    settings: Settings  # as the deadline changes so far left them
    state: State  # the law's
    allocation: float  # cores or GPUs the trainer has now
    next_step_end: float  # when the step under way ends
    t: float = 0.0
    steps: int = 0
    last_step_end: float = 0.0
    next_control: float = 0.0  # when the next control period runs
    restart_until: float = -1.0  # a GPU change's restart: no progress until then
    core_seconds: float = 0.0  # allocation integrated over time
    actuations: int = 0  # allocation changes


def _control_period(
    run: _Run,
    plant: Plant,
    total_steps: int,
    observe: Callable[[Observation], Observation | None] | None,
    result: SimResult,
    rng: random.Random,
) -> None:
    """One control period at ``run.t``: observe (through ``observe``, which may drop or
    distort the sample), decide, record it in ``result``, apply a change of allocation."""
    obs: Observation | None = Observation(
        time_s=run.last_step_end,
        steps_done=run.steps,
        steps_total=total_steps,
        allocation=run.allocation,
        pending=run.t < run.restart_until,
        threads_follow_limit=plant.says_threads_follow,
    )
    if observe is not None and obs is not None:
        obs = observe(obs)
    decision: Decision = decide(run.state, obs, run.settings, run.t)
    run.state = decision.state
    result.conditions.add(decision.condition)
    result.trace.append((run.t, run.steps / total_steps, run.allocation, decision.condition))
    if decision.allocation != run.allocation:
        _actuate(run, plant, decision.allocation, rng)
    run.next_control += run.settings.period_s


def _actuate(run: _Run, plant: Plant, allocation: float, rng: random.Random) -> None:
    """Change the allocation at ``run.t``: a GPU change restarts the trainer (no progress
    for ``plant.restart_s``, then a new step); a CPU change goes on with the current step at
    the new speed from here on."""
    run.actuations += 1
    t = run.t
    if run.settings.mode == "gpu":
        run.restart_until = t + plant.restart_s
        run.next_step_end = run.restart_until + plant.step_time_s(allocation, t, rng)
    else:
        speedup = plant.mean_step_time_s(allocation, t) / plant.mean_step_time_s(run.allocation, t)
        run.next_step_end = t + (run.next_step_end - t) * speedup
    run.allocation = allocation


def _advance(run: _Run, plant: Plant, total_steps: int, rng: random.Random) -> bool:
    """Advance to the next event, a step ending or the next control period, counting the
    core-seconds meanwhile; True when the last step has just ended."""
    t_next = min(run.next_step_end, run.next_control)
    run.core_seconds += run.allocation * (t_next - run.t)
    run.t = t_next
    if run.t >= run.next_step_end:
        run.steps += 1
        run.last_step_end = run.t
        if run.steps >= total_steps:
            return True
        run.next_step_end = run.t + plant.step_time_s(run.allocation, run.t, rng)
    return False
