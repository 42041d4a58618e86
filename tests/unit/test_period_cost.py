"""The in-process benchmark of the control loop's per-period work (bench/scale/period_cost.py)."""

from __future__ import annotations

from bench.scale import period_cost


def test_a_small_fleet_is_timed_period_by_period() -> None:
    args = period_cost.parser().parse_args(
        ["--jobs", "12", "--warmup", "4", "--periods", "4", "--advance-s", "5"]
    )
    record = period_cost.run(args)
    assert record["jobs"] == 12 and record["periods"] == 4
    for name in ("period_ms", "plan_ms", "plan_step_ms", "commit_ms", "commit_per_job_ms"):
        assert 0 < record[name]["p50"] <= record[name]["p99"]
    assert sum(record["phases"].values()) == 12
