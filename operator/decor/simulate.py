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

from decor.control import (
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
    """Step time (s) = (a / min(cores(u), saturation) + b) * slowdown, times noise.

    ``cores(u)`` is what the trainer can use of a limit of ``u`` cores: ``u`` below one core,
    and from one core up the whole cores only when ``whole_threads`` (the reference trainer
    runs one thread per whole core of its limit: ``decor_trainer.threads``), else ``u``.

    ``slowdowns``: (from_s, until_s, factor) windows relative to the start, factor > 1 slower.
    ``noise``: relative standard deviation of each step's time.
    ``restart_s``: progress-free seconds for a GPU change (checkpoint + restart).
    """

    a: float
    b: float = 0.0
    saturation: float = math.inf
    noise: float = 0.0
    slowdowns: tuple[tuple[float, float, float], ...] = ()
    restart_s: float = 0.0
    whole_threads: bool = False

    def usable_cores(self, allocation: float) -> float:
        return thread_cores(allocation) if self.whole_threads else allocation

    def mean_step_time_s(self, allocation: float, elapsed_s: float) -> float:
        base = self.a / min(self.usable_cores(allocation), self.saturation) + self.b
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
    allocation = state.allocation
    t = 0.0
    steps = 0
    last_step_end = 0.0
    next_step_end = plant.step_time_s(allocation, 0.0, rng)
    next_control = 0.0
    restart_until = -1.0
    core_seconds = 0.0
    actuations = 0
    result = SimResult(
        finished_s=None, deadline_s=settings.deadline_s, core_seconds=0, actuations=0
    )
    changes = sorted(deadline_changes)
    horizon = horizon_factor * max(settings.duration_s, 1.0)
    while t < horizon:
        while changes and changes[0][0] <= t:
            settings = replace(settings, deadline_s=changes.pop(0)[1])
        if t >= next_control:
            obs: Observation | None = Observation(
                time_s=last_step_end,
                steps_done=steps,
                steps_total=total_steps,
                allocation=allocation,
                pending=t < restart_until,
            )
            if observe is not None and obs is not None:
                obs = observe(obs)
            decision: Decision = decide(state, obs, settings, t)
            state = decision.state
            result.conditions.add(decision.condition)
            result.trace.append((t, steps / total_steps, allocation, decision.condition))
            if decision.allocation != allocation:
                actuations += 1
                if settings.mode == "gpu":
                    restart_until = t + plant.restart_s
                    next_step_end = restart_until + plant.step_time_s(decision.allocation, t, rng)
                else:
                    # The current step continues at the new speed from here on.
                    speedup = plant.mean_step_time_s(
                        decision.allocation, t
                    ) / plant.mean_step_time_s(allocation, t)
                    next_step_end = t + (next_step_end - t) * speedup
                allocation = decision.allocation
            next_control += settings.period_s
        # advance to the next event: a step ending or the next control period
        t_next = min(next_step_end, next_control)
        core_seconds += allocation * (t_next - t)
        t = t_next
        if t >= next_step_end:
            steps += 1
            last_step_end = t
            if steps >= total_steps:
                result.finished_s = t
                break
            next_step_end = t + plant.step_time_s(allocation, t, rng)
    result.core_seconds = core_seconds
    result.actuations = actuations
    result.deadline_s = settings.deadline_s
    return result
