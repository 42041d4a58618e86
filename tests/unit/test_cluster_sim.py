"""The cluster SIMULATION benchmark (bench/cluster_sim.py): its plants, exact needs, and a
``--quick`` run end to end into a temporary folder."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from decor.core import planner as pl

from bench import cluster_sim as cs


def test_fit_recovers_a_known_curve() -> None:
    truth = cs.Amdahl(a=0.03, b=0.01)
    fitted = cs.fit_amdahl([(c, 1.0 / truth(c)) for c in (0.5, 1.0, 1.5, 2.0)])
    assert fitted.a == pytest.approx(0.03) and fitted.b == pytest.approx(0.01)


@pytest.mark.parametrize(
    "curve", [cs.Amdahl(a=2.0, b=0.1), cs.Saturating(rate_max=1.0, k_units=3.0)]
)
def test_allocation_for_inverts_the_curve(curve: cs.Curve) -> None:
    for u in (0.5, 1.0, 3.0, 7.5):
        assert curve.allocation_for(curve(u)) == pytest.approx(u)


def sim_job(**kw: object) -> cs.SimJob:
    base: dict[str, object] = dict(
        key="t/x", mode="cpu", min_allocation=0.5, max_allocation=8.0, steps_total=1000.0,
        arrival_s=0.0, deadline_s=600.0, curve=cs.Amdahl(a=2.0, b=0.1),
    )  # fmt: skip
    base.update(kw)
    return cs.SimJob(**base)  # type: ignore[arg-type]


def test_exact_need_aims_where_the_law_aims() -> None:
    j = sim_job()
    need = cs.exact_need(j, 0.0)
    law = cs.control.Settings(mode="cpu", min_allocation=0.5, max_allocation=8.0, start_s=0.0,
                              deadline_s=600.0)  # fmt: skip
    horizon_s = law.target_s  # from 0 s
    budget_s = horizon_s - law.reserve_ratio * (horizon_s - law.endgame_ratio * 600.0)
    assert 1000 * j.curve(need) <= budget_s < 600.0  # on time, keeping the law's reserve
    assert 1000 * j.curve(need - cs.CPU_QUANTUM_CORES) > budget_s  # one quantum less misses
    assert cs.exact_need(sim_job(deadline_s=50.0), 0.0) == 8.0  # infeasible: max
    assert cs.exact_need(sim_job(deadline_s=None), 0.0) == 8.0  # best-effort: max


def test_a_noisy_cpu_plant_aims_as_early_as_the_law_would_on_it() -> None:
    """The law measures one period's noise on a plant whose speed each period is off by a
    factor of log-normal sigma: sigma x the period, and aims twice that early."""
    noisy = sim_job(interval_miss_s=0.05 * 10.0)
    assert cs.exact_need(noisy, 0.0) > cs.exact_need(sim_job(), 0.0)
    assert cs._law(noisy).target_s == pytest.approx(600.0 - 1.0)
    gpu = sim_job(mode="gpu", min_allocation=1.0, interval_miss_s=0.5)
    assert cs._law(gpu).target_s == pytest.approx(600.0 - 0.001 * 600.0)  # its own margin
    spec = dataclasses.replace(cs.traces(quick=True)[0], noise_sigma=0.03)
    jobs, _ = cs.make_trace(spec, cs.reference_curves())
    assert [j.interval_miss_s for j in jobs] == pytest.approx([0.03 * spec.period_s] * len(jobs))


def test_exact_gpu_need_counts_the_restart_of_a_change() -> None:
    curve = cs.Amdahl(a=1.0, b=0.0)  # 1000 steps at g GPUs: 1000 / g s
    fresh = sim_job(mode="gpu", min_allocation=1.0, curve=curve, deadline_s=300.0)
    assert (
        cs.exact_need(fresh, 0.0) == 4.0
    )  # by 300 s - the law's 0.3 s margin  # 250 s <= 300 s; 3 GPUs take 333 s
    running = sim_job(mode="gpu", min_allocation=1.0, curve=curve, deadline_s=300.0,
                      allocation=5.0, steps_done=1.0, steps_total=1001.0, restart_cost_s=100.0)  # fmt: skip
    # 4 GPUs would need 250 s + a 100 s restart > 300 s: keeping 5 (200 s) is the need.
    assert cs.exact_need(running, 0.0) == 5.0


def test_gpu_precision_measures_deviation_gpu_seconds_and_restarts() -> None:
    curve = cs.Amdahl(a=1.0, b=0.0)  # 1000 steps at g GPUs: 1000 / g s
    gpu: dict[str, object] = dict(mode="gpu", min_allocation=1.0, curve=curve, deadline_s=400.0,
                                  ever_admitted=True, run_start_s=0.0)  # fmt: skip
    # need 2.5 GPUs over 400 s (1000 GPU-s): one at 3 GPUs the whole way (finishes at 333 s,
    # 16.7 % early, 1000 GPU-s), one mixed 3 then 2 with a restart (at 398 s, 1060 GPU-s)
    whole = sim_job(**gpu, finish_s=1000.0 / 3, held_s=1000.0)
    mixed = sim_job(**gpu, finish_s=398.0, held_s=1060.0, restarts=1)
    below_min = sim_job(**{**gpu, "deadline_s": 2000.0}, finish_s=1000.0)  # needs 0.5 GPU
    never_admitted = sim_job(**{**gpu, "ever_admitted": False}, finish_s=398.0)
    cpu = sim_job(finish_s=300.0, ever_admitted=True, run_start_s=0.0)
    got = cs.gpu_precision([whole, mixed, below_min, never_admitted, cpu])
    assert got["gpu_jobs_measured"] == 2
    assert got["gpu_deviation_mean_pct"] == pytest.approx((100 / 6 + 0.5) / 2, abs=1e-3)
    assert got["gpu_deviation_max_pct"] == pytest.approx(100 / 6, abs=1e-3)
    assert got["gpu_deviation_switched_mean_pct"] == pytest.approx(0.5)
    assert got["gpu_seconds_vs_fractional_pct"] == pytest.approx(3.0)  # 2060 / 2000 GPU-s
    assert (got["gpu_restarts_median"], got["gpu_restarts_max"]) == (1, 1)
    # The one at 3 GPUs held 1000 GPU-s; 3 then 2 ending at 400 s with no restart cost would
    # hold 1000 too (not fewer): no switch would have paid for it.
    assert (got["gpu_unswitched_jobs"], got["gpu_unswitched_a_switch_paid"]) == (1, 0)
    assert cs.gpu_precision([cpu]) == {"gpu_jobs_measured": 0}


def test_a_two_count_plan_ends_at_the_deadline_and_pays_for_its_restart() -> None:
    # 1000 steps at g GPUs take 1000 / g s; 400 s from the first period: 2.5 GPUs exactly.
    job = sim_job(mode="gpu", min_allocation=1.0, max_allocation=4.0, curve=cs.Amdahl(a=1.0, b=0.0),
                  deadline_s=400.0, run_start_s=0.0, restart_cost_s=0.0)  # fmt: skip
    # No restart cost: 3 GPUs for 200 s then 2 for 200 s (or any pair around 2.5): 1000 GPU-s.
    assert cs.two_count_gpu_s(job) == pytest.approx(1000.0)
    # A 20 s restart idles the second count's GPUs: the cheapest ends on 1 GPU. 3 GPUs for
    # t_a, then 1: t_a + 20 + t_b = 400, 3 t_a + t_b = 1000 -> t_a = 310, t_b = 70: 930 + 90.
    costly = dataclasses.replace(job, restart_cost_s=20.0)
    assert cs.two_count_gpu_s(costly) == pytest.approx(930.0 + 90.0)
    # With a 60 s restart no switch pays against 3 GPUs the whole way (1000 GPU-s, 67 s early).
    assert cs.two_count_gpu_s(dataclasses.replace(job, restart_cost_s=60.0)) > 1000.0
    # Nothing ends at the deadline when even the max is too slow, or with no deadline.
    assert cs.two_count_gpu_s(dataclasses.replace(job, deadline_s=200.0)) is None
    assert cs.two_count_gpu_s(dataclasses.replace(job, deadline_s=None)) is None


def test_quick_run_writes_results_plots_and_report(tmp_path: Path) -> None:
    note = "2 cores shared with other work"
    assert cs.main(["--quick", "--out", str(tmp_path), "--note", note]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    records = data["records"]
    sims = [r for r in records if r["kind"] == "simulation"]
    assert {(r["trace"], r["policy"]) for r in sims} == {
        (t.name, p) for t in cs.traces(quick=True) for p in cs.POLICIES
    }
    fields = {"trace", "policy", "jobs", "nodes", "met_ratio", "admitted_met_ratio",
              "late_admitted", "resource_seconds", "best_effort_work", "planner_ms_p50",
              "planner_ms_p99"}  # fmt: skip
    assert all(fields <= set(r) for r in records)
    assert data["note"] == note
    for r in sims:  # an admitted job is met, late by at most 1 %, or later
        if r["admitted"]:
            met_admitted = round(r["admitted_met_ratio"] * r["admitted"])
            assert met_admitted + r["late_within_tolerance"] + r["late_admitted"] == r["admitted"]
    for r in sims:
        assert 0.0 <= r["met_ratio"] <= 1.0 and r["planner_ms_p99"] >= r["planner_ms_p50"] > 0
    by = {(r["trace"], r["policy"]): r for r in sims}
    for t in cs.traces(quick=True):  # admission: what is admitted on exact plants is met
        ours = by[(t.name, pl.POLICY_DECOR)]
        assert ours["late_admitted"] == 0 and ours["admitted_met_ratio"] == 1.0
        assert by[(t.name, pl.POLICY_NONE)]["late_admitted"] > 0  # the trace is contended
    scale = [r for r in records if r["kind"] == "scale"]
    assert {r["trace"] for r in scale} == {"scale-200x20-cpu", "scale-200x20-gpu"}
    bounds = {r["trace"]: r for r in records if r["kind"] == "bound"}
    assert set(bounds) == {t.name for t in cs.traces(quick=True)}  # exact plants: bounded
    for t, b in bounds.items():  # the clairvoyant optimum meets at least what any policy met
        assert b["met_proven"] and set(b["vs_bound"]) == set(cs.POLICIES)
        assert all(by[(t, p)]["met"] <= b["met"] for p in cs.POLICIES)
    readme = (tmp_path / "README.md").read_text()
    assert "SIMULATION" in readme and "## quick-cpu" in readme and "## Targets" in readme
    timing = [line for line in readme.splitlines() if line.startswith("Planner time only")]
    assert len(timing) == 2 and all(line.endswith(f"; {note}.") for line in timing)
    assert "## Clairvoyant bound" in readme
    assert all(
        (tmp_path / f"{m}.png").stat().st_size > 0 for m in ("met_ratio", "best_effort_work")
    )


def test_a_selection_runs_only_its_traces_and_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cs.main(["--quick", "--traces", "quick-gpu", "--policies", "decor,elasticflow"]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = [line.split()[:2] for line in lines if " met " in line]
    assert runs == [["quick-gpu", "decor"], ["quick-gpu", "elasticflow"],
                    ["quick-gpu", cs.BOUND_POLICY]]  # fmt: skip
    assert not any(line.startswith("scale") for line in lines)  # no timing at scale
    out = tmp_path / "sel"
    assert (
        cs.main(["--quick", "--traces", "quick-cpu", "--policies", "decor", "--out", str(out)]) == 0
    )
    records = json.loads((out / "results.json").read_text())["records"]
    assert [(r["trace"], r["policy"]) for r in records] == [
        ("quick-cpu", "decor"), ("quick-cpu", cs.BOUND_POLICY)
    ]  # fmt: skip


@pytest.mark.parametrize(
    "args", [["--traces", "nope"], ["--policies", "decor,nope"], ["--traces", ","]]
)
def test_an_unknown_selection_is_refused(args: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cs.main(["--quick", *args])
    assert e.value.code == 2
