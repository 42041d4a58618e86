"""The clairvoyant bound of the cluster SIMULATION (bench/clairvoyant.py): its speed pieces
bound the simulator's curves, on hand-made traces it finds the optimum that reasoning gives,
and on small random traces no policy meets more deadlines than it."""

from __future__ import annotations

import pytest

from bench import clairvoyant as cv
from bench import cluster_sim as cs

LINEAR = cs.Amdahl(a=1.0, b=0.0)  # u cores or GPUs: u steps per second


def job(key: str, steps: float, arrival_s: float, deadline_s: float, **kw: object) -> cv.BoundJob:
    base: dict[str, object] = dict(
        key=key, mode="cpu", min_allocation=0.5, max_allocation=4.0, steps=steps,
        arrival_s=arrival_s, deadline_s=deadline_s, curve=LINEAR,
    )  # fmt: skip
    base.update(kw)
    return cv.BoundJob(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "mode, lo, hi, curve",
    [
        ("cpu", 0.5, 16.0, cs.Amdahl(a=2.0, b=0.01)),
        ("cpu", 0.5, 2.0, cs.Amdahl(a=0.03, b=0.01)),
        ("cpu", 0.5, 8.0, cs.Saturating(rate_max=1.0, k_units=8.0 / 3.0)),
        ("cpu", 0.5, 4.0, LINEAR),
        ("gpu", 1.0, 8.0, cs.Amdahl(a=0.85, b=0.15)),
        ("gpu", 1.0, 1.0, cs.Amdahl(a=0.9, b=0.1)),
    ],
)
def test_pieces_bound_the_curve_from_above_and_closely(
    mode: str, lo: float, hi: float, curve: cs.Curve
) -> None:
    j = job("j", 1.0, 0.0, 1.0, mode=mode, min_allocation=lo, max_allocation=hi, curve=curve)
    pieces = cv.speed_pieces(j)
    assert sum(w for w, _ in pieces) == pytest.approx(hi)
    slopes = [s for _, s in pieces]
    assert slopes == sorted(slopes, reverse=True)  # concave: filled in order
    grid = [lo + (hi - lo) * n / 200 for n in range(201)]
    if mode == "gpu":
        grid = [float(g) for g in range(int(lo), int(hi) + 1)]
    for u in grid:
        rate = 1.0 / curve(u)
        got = cv.piecewise_rate(pieces, u)
        assert got >= rate * (1 - 1e-12)  # never slower than the simulator: a relaxation
        assert got <= rate * (1 + 1e-12 if mode == "gpu" else 1.01)  # exact at whole GPUs
    assert cv.piecewise_rate(pieces, 0.0) == 0.0


def test_two_jobs_that_cannot_both_fit() -> None:
    # Each needs 3 of the 4 cores for the whole 100 s: one at most, at 300 core-seconds.
    b = cv.solve([job("a", 300.0, 0.0, 100.0), job("b", 300.0, 0.0, 100.0)], {"cpu": 4.0})
    assert (b.met, b.met_proven) == (1, True) and len(b.met_keys) == 1
    assert b.resource_seconds == pytest.approx(300.0)


def test_two_small_jobs_beat_one_big_one() -> None:
    jobs = [
        job("big", 400.0, 0.0, 100.0),
        job("s1", 200.0, 0.0, 100.0),
        job("s2", 200.0, 0.0, 100.0),
    ]
    b = cv.solve(jobs, {"cpu": 4.0})
    assert b.met == 2 and b.met_keys == ("s1", "s2")
    assert b.resource_seconds == pytest.approx(400.0)


@pytest.mark.parametrize("early_steps, met", [(400.0, 2), (440.0, 1)])
def test_release_times_count(early_steps: float, met: int) -> None:
    # "late" arrives at 100 s and needs all 4 cores until 200 s; "early" may run from 0 s
    # and meets its deadline beside it only if it is done by 100 s (400 steps at 4 cores).
    jobs = [job("early", early_steps, 0.0, 200.0), job("late", 400.0, 100.0, 200.0)]
    assert cv.solve(jobs, {"cpu": 4.0}).met == met


def test_a_job_that_fits_only_at_max() -> None:
    curve = cs.Amdahl(a=1.0, b=0.1)  # 4 GPUs: 0.35 s a step
    d = 1000.0 * curve(4.0)
    at_max = job("g", 1000.0, 0.0, d, mode="gpu", min_allocation=1.0, curve=curve)
    b = cv.solve([at_max], {"gpu": 8.0})
    assert b.met == 1 and b.resource_seconds == pytest.approx(4.0 * d, rel=1e-6)
    short = job("g", 1000.0, 0.0, d * 0.999, mode="gpu", min_allocation=1.0, curve=curve)
    assert cv.solve([short], {"gpu": 8.0}).met == 0
    assert cv.solve([at_max], {"gpu": 3.0}).met == 0  # the cluster holds fewer than max


def test_a_fractional_gpu_need_mixes_two_whole_counts() -> None:
    curve = cs.Amdahl(a=1.0, b=0.1)
    r3, r4 = 1.0 / curve(3.0), 1.0 / curve(4.0)
    d = 1000.0 / (0.5 * r3 + 0.5 * r4)  # half the time at 3 GPUs, half at 4
    b = cv.solve([job("g", 1000.0, 0.0, d, mode="gpu", min_allocation=1.0, curve=curve)],
                 {"gpu": 8.0})  # fmt: skip
    assert b.met == 1 and b.resource_seconds == pytest.approx(3.5 * d, rel=1e-6)


def test_a_loose_deadline_costs_the_resource_seconds_at_min() -> None:
    curve = cs.Amdahl(a=2.0, b=0.1)
    b = cv.solve([job("c", 1000.0, 0.0, 1e5, curve=curve)], {"cpu": 32.0})
    assert b.resource_seconds == pytest.approx(1000.0 * curve(0.5) * 0.5, rel=1e-6)


def test_no_job_no_capacity() -> None:
    assert cv.solve([], {"cpu": 4.0}).met == 0
    assert cv.solve([job("a", 10.0, 0.0, 100.0)], {"gpu": 8.0}).met == 0  # no cores at all


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("gpu_share", [0.0, 1.0, 0.4])
def test_no_policy_meets_more_than_the_bound(seed: int, gpu_share: float) -> None:
    spec = cs.TraceSpec(f"p{seed}", jobs=14, cpu_nodes=1 if gpu_share < 1 else 0,
                        gpu_nodes=1 if gpu_share > 0 else 0, load=2.5, gpu_share=gpu_share,
                        period_s=30.0, seed=seed)  # fmt: skip
    refs = cs.reference_curves()
    policy_records = []
    for policy in cs.POLICIES:
        jobs, nodes = cs.make_trace(spec, refs)
        result = cs.simulate(jobs, nodes, spec, policy)
        policy_records.append(cs.summarize(spec, policy, result, len(nodes)))
    rec = cs.bound_record(spec, refs, policy_records)
    assert rec["met_proven"]
    for r in policy_records:
        assert r["met"] <= rec["met"], r["policy"]
        ratios = rec["vs_bound"][r["policy"]]
        if r["met"] == rec["met"]:  # meeting as many costs at least the optimum's
            assert ratios["resource_ratio"] >= 1.0 - 1e-4, r["policy"]
    assert any(r["met"] > 0 for r in policy_records)  # the trace is not trivially empty
