"""Where a CPU job's speed stops growing with cores, learned from what it measured (pure).

A training loop pinned to one thread, or bound by its data loader or memory bandwidth, runs
no faster at two cores than at one. The law's speed fit (step time = a / cores + b) cannot
say so: it bends through every level it measured, so a need above the last useful level
looks met by one more core, and a deadline that no allocation can meet runs at MAX. Here
each whole-core level keeps the step time measured there (its recent samples weigh most),
and the *useful maximum* is the fewest cores above which every level measured adds less than
``min_efficiency`` of the speed-up its extra cores would give if speed grew with cores (one
core more than seven: 14 % faster; at 0.1, a level less than 1.4 % faster adds nothing).
The law holds no more than that, and the planner is told it as the job's max
(``jobperiod.job_demand``).

Levels are compared only where both were measured within ``window_s`` of each other (load
from outside the job, or a slower phase of it, that began between two measurements far
apart would make the later level look useless). The maximum found holds for a while; then
the levels above it are tried again, and if it is found again it holds twice as long
(``cap``): a job whose extra cores were slowed by load from outside when they were measured
gets them back soon after the load ends, and a loop pinned to one thread tries less and
less often. A maximum is dropped only once its own level has been measured again after the
level above was tried, that new figure replacing the old: load that ended in between would
otherwise make the level above look useful (:func:`unconfirmed`).

A limit between whole cores above one core (1.5 cores) is measured once, right after an
interval at the whole cores below it (``control``'s ``_between_levels``), and
:func:`between_cores_helps` says whether the limit ran faster than that interval (not than
the level's figure: load from outside that ended since an older figure would make the limit
look faster): a trainer whose threads follow its limit (one per whole core, the reference
trainer) runs no faster, and the law alternates whole-core levels; a loop whose threads do
not (PyTorch's default threads, or pinned to more threads than that) runs as fast as its
quota allows, and the law plans the quota itself.

``Level`` = (cores, seconds per step, weight in steps, when last measured (Unix s)).
"""

from __future__ import annotations

import math

Level = tuple[float, float, float, float]


def measure_level(
    levels: tuple[Level, ...],
    cores: float,
    step_s: float,
    steps: float,
    time_s: float,
    memory_s: float,
) -> tuple[Level, ...]:
    """``levels`` with an interval of ``steps`` steps at ``step_s`` seconds each, measured at
    ``cores`` whole cores at ``time_s``, averaged into that level's figure (its earlier
    samples weigh e^-1 once ``memory_s`` old)."""
    kept = [level for level in levels if level[0] != cores]
    old = next((level for level in levels if level[0] == cores), None)
    if old is None:
        merged: Level = (cores, step_s, steps, time_s)
    else:
        weight = old[2] * math.exp(-max(0.0, time_s - old[3]) / memory_s)
        mean = (old[1] * weight + step_s * steps) / (weight + steps)
        merged = (cores, mean, weight + steps, time_s)
    return tuple(sorted([*kept, merged]))


def between_cores(limit: float) -> bool:
    """Whether a CPU limit is above one core and far enough from whole cores (a fifth of a
    core) that what it runs can be told from what they run."""
    fraction = limit - math.floor(limit)
    return limit > 1.0 and 0.2 - 1e-9 <= fraction <= 0.8 + 1e-9


def between_cores_helps(
    limit: float, step_s: float, lower_step_s: float, upper_step_s: float, min_efficiency: float
) -> bool | None:
    """Whether a limit between whole cores above one core (``limit``, measured at ``step_s``
    seconds per step) ran faster than the whole cores below it (``lower_step_s``) by at least
    half the speed-up its fraction of the next core would give if speed grew linearly from
    there to the whole cores above it (``upper_step_s``); None when the limit is not
    :func:`between_cores`, or the next core adds less than ``min_efficiency``
    (:func:`efficiency`): too little to tell apart from noise."""
    lower = math.floor(limit)
    if not between_cores(limit):
        return None
    if efficiency((lower, lower_step_s), (lower + 1, upper_step_s)) < min_efficiency:
        return None
    gained = 1.0 / step_s - 1.0 / lower_step_s
    return gained >= 0.5 * (limit - lower) * (1.0 / upper_step_s - 1.0 / lower_step_s)


def efficiency(low: tuple[float, float], high: tuple[float, float]) -> float:
    """The speed-up from ``low`` to ``high`` ((cores, seconds per step) each) as a fraction
    of the speed-up their cores would give if speed grew with cores: 1 linear, 0 none."""
    return (low[1] / high[1] - 1.0) / (high[0] / low[0] - 1.0)


def useful_max(
    levels: tuple[Level, ...],
    max_allocation: float,
    now_s: float,
    window_s: float,
    min_efficiency: float,
) -> float | None:
    """The fewest cores, among the levels measured within ``window_s`` before ``now_s`` and
    below ``max_allocation``, above which every such level has an :func:`efficiency` under
    ``min_efficiency``; None when there is none (every level measured helps, or only one
    was measured lately)."""
    fresh = [(cores, step_s) for cores, step_s, _, at in levels if now_s - at <= window_s]
    for low in fresh:
        above = [high for high in fresh if high[0] > low[0]]
        if (
            above
            and low[0] < max_allocation
            and all(efficiency(low, high) < min_efficiency for high in above)
        ):
            return low[0]
    return None


Cap = tuple[float, float, float]  # (cores, until (Unix s), seconds it was held for)


def cap(
    old: Cap | None,
    levels: tuple[Level, ...],
    max_allocation: float,
    now_s: float,
    window_s: float,
    hold_s: tuple[float, float],
    min_efficiency: float,
) -> Cap | None:
    """The useful maximum after a measurement at ``now_s``: the one :func:`useful_max` finds
    now, held for ``hold_s[0]``, and twice as long as the last time (up to ``hold_s[1]``)
    when it is found again once the levels above were tried again after it expired; else
    ``old`` (past its end too: how long it was held is kept), unless a level above it was
    measured within ``window_s`` (it helped: the maximum found would say so) and the
    maximum's own level was measured again after that level. Until then the level above
    is compared with one measured before it was tried: load from outside that ended between
    the two made the level above look faster than the one below (:func:`unconfirmed`)."""
    found = useful_max(levels, max_allocation, now_s, window_s, min_efficiency)
    if found is not None:
        if old is not None and old[0] == found:
            if now_s < old[1]:
                return old
            held_s = min(2.0 * old[2], hold_s[1])
        else:
            held_s = hold_s[0]
        return (found, now_s + held_s, held_s)
    if old is None:
        return None
    above = any(c > old[0] and now_s - at <= window_s for c, _, _, at in levels)
    return None if above and not unconfirmed(old, levels) else old


def stale_figure_dropped(
    levels: tuple[Level, ...], old: Cap | None, cores: float
) -> tuple[Level, ...]:
    """``levels`` before a measurement at ``cores``: without the figure of the expired
    maximum ``old``'s level when that is what is measured while it is :func:`unconfirmed`,
    so that the new measurement replaces the figure taken in other conditions instead of
    being averaged into it."""
    if old is None or cores != old[0] or not unconfirmed(old, levels):
        return levels
    return tuple(level for level in levels if level[0] != cores)


def unconfirmed(old: Cap, levels: tuple[Level, ...]) -> bool:
    """Whether a level above the expired maximum ``old`` has been tried since it expired,
    and the maximum's own level was last measured before that: the two were not measured in
    the same conditions, and the maximum's level is to be measured again before the maximum
    is dropped."""
    cores, until_s, _ = old
    own = next((at for c, _, _, at in levels if c == cores), None)
    tried = [at for c, _, _, at in levels if c > cores and at >= until_s]
    return own is not None and bool(tried) and own < min(tried)
