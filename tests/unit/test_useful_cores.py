"""Where a CPU job's speed stops growing with cores (``decor.core.useful_cores``): the
measured levels, their comparison and the useful maximum's lifetime."""

from __future__ import annotations

import math

import pytest
from decor.core.useful_cores import (
    between_cores,
    between_cores_helps,
    cap,
    efficiency,
    measure_level,
    stale_figure_dropped,
    unconfirmed,
    useful_max,
)


def test_a_level_averages_its_samples_the_older_weighing_less() -> None:
    levels = measure_level((), 2.0, 0.2, 10, 100.0, 10.0)
    assert levels == ((2.0, 0.2, 10, 100.0),)
    levels = measure_level(levels, 1.0, 0.4, 5, 101.0, 10.0)
    assert [lv[0] for lv in levels] == [1.0, 2.0]  # in order of cores
    again = measure_level(levels, 2.0, 0.3, 10, 110.0, 10.0)  # 10 s on: the old weighs e^-1
    old_weight = 10 * math.exp(-1.0)
    assert again[1][1] == pytest.approx((0.2 * old_weight + 0.3 * 10) / (old_weight + 10))
    assert again[1][2:] == (pytest.approx(old_weight + 10), 110.0)
    assert again[0] == levels[0]


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        ((1.0, 0.4), (2.0, 0.2), 1.0),  # twice the cores, twice the speed
        ((1.0, 0.4), (2.0, 0.4), 0.0),  # one thread
        ((7.0, 1.0 / 7), (8.0, 1.0 / 7.1), pytest.approx(0.1)),  # 1.4 % of 14 %
        ((1.0, 0.4), (4.0, 0.2), pytest.approx(1.0 / 3)),  # two threads, measured at 4
    ],
)
def test_efficiency_is_the_speed_up_as_a_share_of_linear(
    low: tuple[float, float], high: tuple[float, float], expected: float
) -> None:
    assert efficiency(low, high) == expected


def levels_at(now: float, **step_s: float) -> tuple[tuple[float, float, float, float], ...]:
    """Levels measured at ``now`` (``c2=0.2``: 0.2 s a step at two cores)."""
    return tuple(sorted((float(k[1:]), v, 10.0, now) for k, v in step_s.items()))


@pytest.mark.parametrize(
    ("levels", "max_allocation", "expected", "why"),
    [
        (levels_at(100, c1=0.4, c2=0.4), 2.0, 1.0, "one thread: two cores add nothing"),
        (levels_at(100, c1=0.4, c2=0.2), 2.0, None, "linear: every core helps"),
        (levels_at(100, c2=0.2), 2.0, None, "one level: nothing to compare"),
        (levels_at(100, c1=0.4, c2=0.2, c3=0.2, c4=0.2), 4.0, 2.0, "two threads"),
        (levels_at(100, c1=0.4, c4=0.2), 4.0, None, "4 helps over 1 (a third of linear)"),
        (levels_at(100, c3=0.2, c4=0.2), 4.0, 3.0, "not yet known below 3"),
        (levels_at(100, c1=0.4, c2=0.39), 2.0, 1.0, "2.5 % faster: a fortieth of linear"),
        (levels_at(100, c1=0.4, c2=0.35), 2.0, None, "14 % faster for twice the cores helps"),
        (levels_at(100, c1=0.4, c2=0.4), 1.0, None, "at or above MAX: no cap"),
    ],
)
def test_the_useful_maximum_is_the_fewest_cores_no_level_above_beats(
    levels: tuple[tuple[float, float, float, float], ...],
    max_allocation: float,
    expected: float | None,
    why: str,
) -> None:
    assert useful_max(levels, max_allocation, 100.0, 10.0, 0.1) == expected, why


def test_levels_measured_far_apart_are_not_compared() -> None:
    """A level measured long before another (a slow-down from outside may have begun
    between them) does not make the later one look useless."""
    levels = ((1.0, 0.4, 10.0, 50.0), (2.0, 0.4, 10.0, 100.0))
    assert useful_max(levels, 2.0, 100.0, 10.0, 0.1) is None
    assert useful_max(levels, 2.0, 59.0, 60.0, 0.1) == 1.0


def test_the_maximum_holds_then_the_levels_above_are_tried_again_less_and_less_often() -> None:
    hold = (10.0, 40.0)
    found = cap(None, levels_at(100, c1=0.4, c2=0.4), 2.0, 100.0, 10.0, hold, 0.1)
    assert found == (1.0, 110.0, 10.0)
    # at one core since: its level is measured again, the two-core level grows old
    later = ((1.0, 0.4, 10.0, 109.0), (2.0, 0.4, 10.0, 100.0))
    assert cap(found, later, 2.0, 109.0, 10.0, hold, 0.1) == found
    expired = cap(found, later, 2.0, 111.0, 10.0, hold, 0.1)
    assert expired == found  # kept past its end: how long it held is remembered
    # two cores tried again and no faster: held twice as long, then at most hold[1]
    again = cap(expired, levels_at(113, c1=0.4, c2=0.4), 2.0, 113.0, 10.0, hold, 0.1)
    assert again == (1.0, 133.0, 20.0)
    third = cap(again, levels_at(140, c1=0.4, c2=0.4), 2.0, 140.0, 10.0, hold, 0.1)
    assert third == (1.0, 180.0, 40.0)
    assert cap(third, levels_at(200, c1=0.4, c2=0.4), 2.0, 200.0, 10.0, hold, 0.1)[2] == 40.0
    # tried again and faster: kept until its own level is measured again after that (the
    # one core's figure was taken before two cores were tried, perhaps in load since gone)
    helped = ((1.0, 0.4, 10.0, 150.0), (2.0, 0.2, 10.0, 151.0))
    assert unconfirmed(expired, helped)
    assert cap(expired, helped, 2.0, 151.0, 10.0, hold, 0.1) == expired
    # measured again at one core, no faster than before: two cores help, no maximum
    confirmed = ((1.0, 0.4, 10.0, 153.0), (2.0, 0.2, 10.0, 151.0))
    assert not unconfirmed(expired, confirmed)
    assert cap(expired, confirmed, 2.0, 153.0, 10.0, hold, 0.1) is None
    # a different maximum found starts over
    assert cap(third, levels_at(200, c2=0.2, c3=0.2), 4.0, 200.0, 10.0, hold, 0.1) == (
        2.0,
        210.0,
        10.0,
    )


def test_a_maximum_dropped_only_on_levels_measured_in_the_same_conditions() -> None:
    """A one-thread loop held at one core; load from outside slows it until 120 s, while the
    maximum expires at 110 s. Two cores, tried at 125 s after the load, look faster than the
    one core's figure taken in the load: the maximum stays (unconfirmed) until one core is
    measured again, and that measurement replaces the figure of the load instead of being
    averaged into it. Then the two levels agree, and the maximum is found again."""
    hold = (10.0, 40.0)
    held = (1.0, 110.0, 10.0)
    in_load = ((1.0, 0.52, 10.0, 118.0), (2.0, 0.54, 10.0, 100.0))
    tried = measure_level(in_load, 2.0, 0.40, 5.0, 125.0, 10.0)
    assert unconfirmed(held, tried)
    assert cap(held, tried, 2.0, 125.0, 10.0, hold, 0.1) == held
    # one core again: its figure in the load is dropped before the new sample goes in
    assert stale_figure_dropped(tried, held, 1.0) == tuple(lv for lv in tried if lv[0] == 2.0)
    assert stale_figure_dropped(tried, held, 2.0) == tried  # not the maximum's level
    assert stale_figure_dropped(tried, None, 1.0) == tried
    again = measure_level(stale_figure_dropped(tried, held, 1.0), 1.0, 0.40, 3.0, 127.0, 10.0)
    assert again[0] == (1.0, 0.40, 3.0, 127.0)
    assert not unconfirmed(held, again)
    assert cap(held, again, 2.0, 127.0, 10.0, hold, 0.1) == (1.0, 147.0, 20.0)
    # averaged into the load's figure instead, one core would still look slower: dropped
    averaged = measure_level(tried, 1.0, 0.40, 3.0, 127.0, 10.0)
    assert cap(held, averaged, 2.0, 127.0, 10.0, hold, 0.1) is None


@pytest.mark.parametrize(
    ("limit", "expected"),
    [(0.5, False), (1.0, False), (1.1, False), (1.2, True), (1.5, True), (2.8, True), (2.9, False)],
)
def test_a_limit_between_whole_cores_is_a_fifth_of_a_core_away_from_them(
    limit: float, expected: bool
) -> None:
    assert between_cores(limit) is expected


# seconds per step at 1 core and 2 cores (linear speed-up), and at 1.5 cores for a trainer
# whose threads follow the limit (one thread: as at 1 core), whose threads do not (as its
# quota), and one faster than linear between the two (2 threads, the second core's speed-up
# lost partly to other work at 2 cores)
@pytest.mark.parametrize(
    ("limit_step_s", "expected"),
    [
        (0.4, False),  # as the cores below it: threads that follow the limit
        (0.4 / 1.1, False),  # a tenth of the way: noise, not the quota
        (0.4 / 1.3, True),  # more than half the quota's share
        (0.4 / 1.5, True),  # the quota's share exactly
        (0.4 / 1.7, True),  # faster than the line between the levels
    ],
)
def test_a_limit_between_whole_cores_helps_when_it_gains_half_its_share(
    limit_step_s: float, expected: bool
) -> None:
    assert between_cores_helps(1.5, limit_step_s, 0.4, 0.2, 0.1) is expected


def test_whether_a_limit_between_whole_cores_helps_is_not_told_where_it_cannot_be() -> None:
    # too near a whole core to tell its share from noise
    assert between_cores_helps(1.1, 0.4 / 1.1, 0.4, 0.2, 0.1) is None
    # the next core adds nothing (a loop of one thread): nothing to tell apart
    assert between_cores_helps(1.5, 0.4, 0.4, 0.395, 0.1) is None
    # the same comparison between 3 and 4 cores: a sixth faster at 3.5 if it helps
    assert between_cores_helps(3.5, 0.4 / 3.5, 0.4 / 3, 0.1, 0.1) is True
    assert between_cores_helps(3.5, 0.4 / 3, 0.4 / 3, 0.1, 0.1) is False
