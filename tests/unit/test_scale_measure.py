"""The scale benchmark's pure parts (bench/scale/measure.py and report.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from decor.api.model import parse_job

from bench.scale import measure
from bench.scale import scale_report as report

REPO = Path(__file__).resolve().parents[2]


def plans(count: int = 20) -> list[measure.JobPlan]:
    return measure.plan_jobs(
        count,
        gpu_share=0.1,
        duration_s=(100.0, 200.0),
        target_allocation=(1.2, 3.0),
        rates={w: (lambda u: 10.0 * u) for w in ("resnet", "vgg", "lstm", "gpu")},
        startup_s=5.0,
        seed=3,
    )


def test_plan_jobs_is_deterministic_with_the_asked_gpu_share() -> None:
    first, again = plans(), plans()
    assert first == again
    assert sum(p.mode == "gpu" for p in first) == 2
    for p in first:
        assert 100 <= p.duration_s <= 200
        steps = p.epochs * p.steps_per_epoch
        # sized so that the deadline needs between 1.2 and 3 (GPU: a whole count)
        need = steps / (p.duration_s - 5.0) / 10.0
        assert 0.9 <= need <= 3.7


def test_a_job_never_needs_more_than_its_share_of_the_workloads_best_speed() -> None:
    """A workload that runs no faster above one core (LSTM's profile) is sized below its
    speed at one core, whatever allocation was drawn: a deadline that only its best speed
    makes (or that the simulated curve's shape alone made possible) measures the workload."""
    flat = {w: (lambda u: 10.0 * min(u, 1.0)) for w in ("resnet", "vgg", "lstm", "gpu")}
    sized = measure.plan_jobs(
        20, gpu_share=0.0, duration_s=(100.0, 200.0), target_allocation=(1.2, 3.0),
        rates=flat, startup_s=5.0, seed=3,
    )  # fmt: skip
    for p in sized:
        speed = p.epochs * p.steps_per_epoch / (p.duration_s - 5.0)
        assert speed <= measure.NEED_MAX_SPEED_SHARE * 10.0 * 1.02  # rounding of the steps


def test_job_manifests_are_valid_jobs_for_kwok_nodes() -> None:
    for p in plans():
        body = measure.job_manifest(p, "scale", 10.0)
        job = parse_job(body)
        assert job.resources.mode == p.mode
        pod_spec = body["spec"]["template"]["spec"]
        assert pod_spec["nodeSelector"] == {"type": "kwok"}
        assert pod_spec["tolerations"][0]["key"] == "kwok.x-k8s.io/node"
        assert body["spec"]["control"]["periodSeconds"] == 10.0
        if p.mode == "gpu":
            assert job.checkpoint.path == measure.CHECKPOINT_PATH


def test_nodes_for_holds_three_quarters_of_every_max() -> None:
    cpu, gpu = measure.nodes_for(plans(100), node_cores=64, node_gpus=8)
    assert cpu == 5  # 90 CPU jobs x 4 cores x 0.75 = 270 cores
    assert gpu == 4  # 10 GPU jobs x 4 x 0.75 = 30 GPUs


def audit(user: str, verb: str, resource: str, at: str, sub: str = "") -> str:
    ref = {"resource": resource, **({"subresource": sub} if sub else {})}
    return json.dumps(
        {
            "stage": "ResponseComplete",
            "verb": verb,
            "user": {"username": user},
            "objectRef": ref,
            "requestReceivedTimestamp": at,
        }
    )


def test_audit_counts_only_the_user_in_the_window() -> None:
    start = measure.parse_time_s("2026-01-01T00:00:10Z")
    lines = [
        audit(
            "decor-operator", "patch", "deadlinetrainingjobs", "2026-01-01T00:00:10.5Z", "status"
        ),
        audit("decor-operator", "patch", "pods", "2026-01-01T00:00:11.000001Z", "resize"),
        audit("decor-operator", "patch", "pods", "2026-01-01T00:00:12Z", "resize"),
        audit("decor-operator", "create", "events", "2026-01-01T00:00:09Z"),  # before
        audit("decor-operator", "create", "events", "2026-01-01T00:00:20Z"),  # at the end
        audit("decor-scale-simulator", "patch", "pods", "2026-01-01T00:00:11Z", "status"),
        "not json decor-operator",
    ]
    counts = measure.audit_counts(lines, "decor-operator", start, start + 10.0)
    assert counts == {("patch", "deadlinetrainingjobs/status"): 1, ("patch", "pods/resize"): 2}


METRICS_BEFORE = """
# HELP x
decor_operator_period_lateness_seconds_bucket{le="0.1"} 10
decor_operator_period_lateness_seconds_bucket{le="1.0"} 10
decor_operator_period_lateness_seconds_bucket{le="+Inf"} 10
apiserver_request_total{code="200",resource="pods",verb="LIST"} 5
prometheus_http_requests_total{code="200",handler="/api/v1/query"} 3
"""
METRICS_AFTER = """
decor_operator_period_lateness_seconds_bucket{le="0.1"} 100
decor_operator_period_lateness_seconds_bucket{le="1.0"} 109
decor_operator_period_lateness_seconds_bucket{le="+Inf"} 110
apiserver_request_total{code="200",resource="pods",verb="LIST"} 25
prometheus_http_requests_total{code="200",handler="/api/v1/query"} 33
prometheus_http_requests_total{code="200",handler="/metrics"} 7
"""


def test_metrics_deltas_and_quantiles() -> None:
    before, after = measure.parse_metrics(METRICS_BEFORE), measure.parse_metrics(METRICS_AFTER)
    buckets = measure.histogram_delta(before, after, "decor_operator_period_lateness_seconds")
    assert buckets == [(0.1, 90.0), (1.0, 99.0), (float("inf"), 100.0)]
    assert measure.histogram_quantile(0.5, buckets) == pytest.approx(0.1 * 50 / 90)
    assert measure.histogram_quantile(0.95, buckets) == pytest.approx(0.1 + 0.9 * 5 / 9)
    assert measure.histogram_quantile(0.999, buckets) == 1.0  # in +Inf: the last finite bound
    assert measure.histogram_quantile(0.5, []) is None
    count, total = measure.histogram_mean_delta(
        measure.parse_metrics("h_count 2\nh_sum 1.5\n"),
        measure.parse_metrics("h_count 6\nh_sum 3.5\n"),
        "h",
    )
    assert (count, total) == (4.0, 2.0)
    handler = {"handler": "/api/v1/query"}
    delta = measure.metric_sum(after, "prometheus_http_requests_total", **handler)
    assert delta - measure.metric_sum(before, "prometheus_http_requests_total", **handler) == 30


def test_percentile_proc_and_record() -> None:
    assert measure.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)
    assert measure.percentile([], 0.5) is None
    stat = "123 (python3 -m x) S " + " ".join(["0"] * 10) + " 250 150 0 0"
    assert measure.parse_proc_stat(stat, 100) == pytest.approx(4.0)
    assert measure.parse_proc_rss("Name: x\nVmRSS:\t  2048 kB\n") == 2 * 1024 * 1024
    proc = [measure.ProcSample(0.0, 10.0, 100 * measure.MIB), measure.ProcSample(10.0, 12.0, 0)]
    record = measure.build_record(
        jobs=10,
        period_s=10.0,
        window_s=100.0,
        proc=proc,
        operator_requests={("patch", "pods/resize"): 50, ("create", "events"): 50},
        all_requests={("PATCH", "pods"): 500.0},
        prometheus_queries=10.0,
        lateness_buckets=[(0.1, 90.0), (1.0, 99.0), (float("inf"), 100.0)],
        patches=[
            {"to_answer_s": 0.4, "to_resize_s": 0.5},  # answered with this resize
            {"to_answer_s": 1.2, "to_resize_s": 1.5},  # answered with this resize
            {"to_answer_s": 0.3, "to_resize_s": 9.0},  # kept; a later resize of its own
            {"to_answer_s": 0.3, "to_resize_s": 90.0},  # kept; a resize past the timeout
        ],
        resize_timeout_s=60.0,
        deviations_pct=[1.0, -3.0],
        outcomes={"Succeeded": 2},
    )
    assert set(measure.RESULT_FIELDS) <= set(record)
    assert record["operator_cores_mean"] == pytest.approx(0.2)
    assert record["operator_rss_mib_max"] == 100.0
    assert record["api_requests_per_s_per_job"] == pytest.approx(0.1)
    assert record["prometheus_queries_per_s"] == pytest.approx(0.1)
    assert record["patch_to_resize_p50_s"] == pytest.approx(1.0)
    assert record["patch_to_resize_p99_s"] == pytest.approx(1.49)
    assert record["first_resize_any_cause_p50_s"] == pytest.approx(1.5)
    assert record["first_resize_any_cause_p99_s"] == pytest.approx(8.85)
    assert record["mean_abs_deviation_pct"] == pytest.approx(2.0)
    assert (record["deadline_patches"], record["deadline_patches_answered_with_resize"]) == (4, 2)
    assert record["deadline_patches_without_resize"] == 1


def test_report_renders_every_record_and_judges_the_targets(tmp_path: Path) -> None:
    records = [
        {"jobs": n, "period_s": 10.0, "operator_cores_mean": 0.0002 * n, "drift_p99_s": 2.0}
        for n in (100, 1000)
    ]
    text = report.render(records)
    assert "| 100 | 10 |" in text and "| 1000 | 10 |" in text
    assert "drift_p99_s: 2 s — MISSES" in text
    assert "operator_cores_mean: 0.2 cores — meets" in text
    assert report.per_job_growth(records, "operator_cores_mean") == pytest.approx(1.0)
    # Per-job keys are compared as they are; runs at another period are left out.
    records[0]["api_requests_per_s_per_job"], records[1]["api_requests_per_s_per_job"] = 0.2, 0.1
    other_period = {"jobs": 50, "period_s": 2.0, "operator_cores_mean": 1.0}
    smoke_size = {"jobs": 50, "period_s": 10.0, "operator_cores_mean": 1.0}
    assert report.per_job_growth(records, "api_requests_per_s_per_job") == pytest.approx(0.5)
    for other in (other_period, smoke_size):  # neither is compared
        assert report.per_job_growth([*records, other], "operator_cores_mean") == pytest.approx(1.0)
    text = report.render(records)
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"records": records}))
    report.write_report(results, tmp_path)
    assert (tmp_path / "README.md").read_text() == text
    assert (tmp_path / "costs.png").stat().st_size > 0


def test_report_shows_where_the_loop_spent_its_time() -> None:
    profile = {
        "samples": 100,
        "seconds": 1.0,
        "innermost_operator_frame": [
            {"thread": "asyncio_0", "frame": "(no operator frame)", "share": 0.8},
            {"thread": "asyncio_0", "frame": "kube.py:_call", "share": 0.15},
            {"thread": "decor-watch-pods", "frame": "watch.py:_run", "share": 1.0},
        ],
    }
    lines = report.profile_lines({"profile": profile})
    assert "- idle (between periods): 80.0 %" in lines
    assert "- kube.py:_call: 15.0 %" in lines
    assert not any("watch.py" in line for line in lines)  # other threads are not the loop
    assert report.profile_lines({}) == []


def test_deviation_by_group_splits_cpu_gpu_and_patched_jobs() -> None:
    plans = [
        measure.JobPlan("a", "cpu", "resnet", 1, 10, 100.0, 0.5, 2.0),
        measure.JobPlan("b", "cpu", "resnet", 1, 10, 100.0, 0.5, 2.0),
        measure.JobPlan("g", "gpu", "gpu", 1, 10, 100.0, 1.0, 4.0),
    ]
    groups = measure.deviation_by_group({"a": -1.0, "b": 3.0, "g": -10.0}, plans, ["b"])
    assert groups["cpu"] == {"jobs": 2, "mean_abs_pct": 2.0, "max_abs_pct": 3.0}
    assert groups["gpu"] == {"jobs": 1, "mean_abs_pct": 10.0, "max_abs_pct": 10.0}
    assert groups["patched"] == {"jobs": 1, "mean_abs_pct": 3.0, "max_abs_pct": 3.0}
    assert groups["unpatched"]["jobs"] == 2 and groups["unpatched"]["mean_abs_pct"] == 5.5
    assert measure.deviation_by_group({}, plans, [])["gpu"]["mean_abs_pct"] is None


def test_worst_jobs_are_the_farthest_from_their_deadlines() -> None:
    def job(name: str, deviation: float | None, restarts: int = 0) -> dict:
        outcome = {} if deviation is None else {"deviationPercent": deviation}
        return {"metadata": {"name": name}, "status": {"outcome": outcome, "restarts": restarts}}

    jobs = [job("a", -1.0), job("g", 12.5, restarts=3), job("b", -4.0), job("c", None)]
    worst = measure.worst_jobs(jobs, {"g": "gpu"}, count=2)
    assert [(w["job"], w["mode"], w["deviation_pct"]) for w in worst] == [
        ("g", "gpu", 12.5),
        ("b", "cpu", -4.0),
    ]
    assert worst[0]["restarts"] == 3


def test_the_report_breaks_deviation_and_patch_latency_down_by_group() -> None:
    record = {
        "deviation_by_group": {
            "cpu": {"jobs": 9, "mean_abs_pct": 1.25, "max_abs_pct": 3.0},
            "gpu": {"jobs": 1, "mean_abs_pct": 12.0, "max_abs_pct": 12.0},
            "patched": {"jobs": 0, "mean_abs_pct": None, "max_abs_pct": None},
        },
        "patches": [
            {"job": "a", "mode": "cpu", "to_resize_s": 0.5},
            {"job": "b", "mode": "cpu", "to_resize_s": None},
            {"job": "c", "mode": "cpu", "to_resize_s": 0.125},
            {"job": "g", "mode": "gpu", "to_resize_s": 20.0},
        ],
    }
    lines = report.breakdown_lines(record)
    assert lines[0].startswith("- mean |deviation| by group: cpu 9 jobs 1.25 % (max 3 %)")
    assert "gpu 1 jobs 12 %" in lines[0] and "patched" not in lines[0]
    assert lines[1] == (
        "- patch to resize, CPU jobs: 3 patches, p50 0.312 s, p90 0.463 s, max 0.5 s, "
        "1 never followed by a resize"
    )
    assert lines[2] == "- patch to resize, GPU jobs: 1 patches, p50 20 s, p90 20 s, max 20 s"
    assert report.breakdown_lines({}) == []


def test_a_patch_is_answered_with_a_resize_only_when_the_resize_comes_with_the_answer() -> None:
    patches = [
        {"mode": "cpu", "to_answer_s": 0.4, "to_resize_s": 0.3},  # resized, then status
        {"mode": "cpu", "to_answer_s": 0.5, "to_resize_s": 1.4},  # within the window
        {"mode": "cpu", "to_answer_s": 0.5, "to_resize_s": 40.0},  # kept; a later resize
        {"mode": "cpu", "to_answer_s": 0.6, "to_resize_s": None},  # kept; no resize at all
        {"mode": "cpu", "to_answer_s": None, "to_resize_s": None},  # never answered
        {"mode": "gpu", "to_answer_s": 1.0, "to_resize_s": 1.5},
    ]
    answers = measure.patch_answers(patches)
    cpu = answers["cpu"]
    assert (cpu["patches"], cpu["unanswered"]) == (5, 1)
    assert (cpu["answered_with_resize"], cpu["answered_keeping_allocation"]) == (2, 2)
    assert cpu["answer_resize_p50_s"] == pytest.approx(0.85)
    assert cpu["to_answer_p50_s"] == pytest.approx(0.5)
    assert answers["gpu"]["answered_with_resize"] == 1
    assert answers["all"]["patches"] == 6
    line = report.breakdown_lines({"patch_answers": answers})[0]
    assert line.startswith("- the operator's answer to a patch, CPU jobs: 5 patches, answered in")
    assert "(1 unanswered); 2 answered with a resize" in line
    assert line.endswith("2 keeping the allocation that ran")


@pytest.mark.parametrize(
    ("remaining_s", "steps_left", "at_max", "want_s", "why"),
    [
        (100.0, 100.0, False, 60.0, "room at MAX (100 steps at 8.5/s: 11.8 s): x 0.6"),
        (100.0, 765.0, False, 90.0, "x 0.6 would need more than 85 % of MAX's speed"),
        (100.0, 900.0, False, 100.0, "MAX barely makes the old deadline: not tightened"),
        (100.0, 900.0, True, 160.0, "a job at its max gets more time"),
    ],
)
def test_a_deadline_patch_leaves_the_job_a_deadline_its_max_can_meet(
    remaining_s: float, steps_left: float, at_max: bool, want_s: float, why: str
) -> None:
    got = measure.patched_remaining_s(remaining_s, steps_left, 10.0, at_max=at_max)
    assert got == pytest.approx(want_s), why


def _loop_metrics(commits: tuple[int, int, int, float], periods: tuple[int, int]) -> str:
    """Exposition of the loop's histograms: job commits within 1 s, 5 s, +Inf (cumulative)
    with their sum, and periods within 0.5 s and +Inf."""
    within_1, within_5, total, total_s = commits
    within_half, periods_total = periods
    return f"""\
decor_operator_reconcile_duration_seconds_bucket{{le="1.0"}} {within_1}
decor_operator_reconcile_duration_seconds_bucket{{le="5.0"}} {within_5}
decor_operator_reconcile_duration_seconds_bucket{{le="+Inf"}} {total}
decor_operator_reconcile_duration_seconds_count {total}
decor_operator_reconcile_duration_seconds_sum {total_s}
decor_operator_period_duration_seconds_bucket{{le="0.5"}} {within_half}
decor_operator_period_duration_seconds_bucket{{le="+Inf"}} {periods_total}
decor_operator_period_duration_seconds_count {periods_total}
decor_operator_period_duration_seconds_sum {0.25 * periods_total}
"""


def test_loop_costs_count_slow_commits_and_time_the_periods() -> None:
    from bench.scale.bench_scale import loop_costs

    before = measure.parse_metrics(_loop_metrics((10, 10, 10, 1.0), (4, 4)))
    after = measure.parse_metrics(_loop_metrics((100, 107, 110, 61.0), (102, 104)))
    costs = loop_costs(before, after)
    assert costs["commits_in_window"] == 100
    assert costs["commit_s_mean"] == pytest.approx(0.6)
    assert costs["commits_over_1s"] == 10 and costs["commits_over_5s"] == 3
    assert costs["loop_periods_in_window"] == 100
    assert costs["loop_period_s_p50"] == pytest.approx(0.5 * 50 / 98, abs=1e-4)
    assert costs["loop_period_s_p99"] == 0.5  # in +Inf: the last finite bound


def test_the_machine_s_busy_cores_come_from_proc_stat() -> None:
    before = measure.parse_machine_cpu("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n")
    # guest time (the 9th number) is in user time already; steal (the 8th) is not busy
    after = measure.parse_machine_cpu("cpu  250 0 100 900 50 0 0 30 10 0\ncpu0 1 2 3 4\n")
    assert before == (150.0, 0.0, 1000.0) and after == (350.0, 30.0, 1330.0)
    assert measure.machine_busy_cores(before, after, 2) == pytest.approx(2 * 200 / 330)
    assert measure.machine_steal_cores(before, after, 2) == pytest.approx(2 * 30 / 330)
    assert measure.machine_busy_cores(after, after, 2) is None
    assert measure.machine_steal_cores(after, after, 2) is None
    with pytest.raises(ValueError):
        measure.parse_machine_cpu("intr 1 2 3")


def steps_histogram(**by_step: tuple[int, int, float]) -> str:
    """Histogram ``s``'s exposition, per step: (count <= 0.1 s, count, sum)."""
    return "".join(
        f's_bucket{{step="{step}",le="0.1"}} {low}\n'
        f's_bucket{{step="{step}",le="+Inf"}} {count}\n'
        f's_count{{step="{step}"}} {count}\ns_sum{{step="{step}"}} {total}\n'
        for step, (low, count, total) in by_step.items()
    )


STEPS_BEFORE = steps_histogram(plan=(1, 1, 0.05), read=(4, 4, 0.2))
STEPS_AFTER = steps_histogram(plan=(3, 5, 2.05), read=(14, 14, 0.7))


def test_a_labelled_histogram_is_summed_per_label_value() -> None:
    before, after = measure.parse_metrics(STEPS_BEFORE), measure.parse_metrics(STEPS_AFTER)
    assert measure.histogram_delta(before, after, "s", step="plan") == [
        (0.1, 2.0),
        (float("inf"), 4.0),
    ]
    assert measure.histogram_summary(before, after, "s", step="plan") == {
        "count": 4,
        "s_total": 2.0,
        "s_mean": 0.5,
        "s_p99": 0.1,  # in +Inf: the last finite bound
    }
    read = measure.histogram_summary(before, after, "s", step="read")
    assert (read["count"], read["s_mean"]) == (10, 0.05)
    # Without a label to match, the label values' buckets are added up.
    assert measure.histogram_delta(before, after, "s")[-1] == (float("inf"), 14.0)
    assert measure.histogram_summary({}, {}, "s", step="plan")["s_mean"] is None


def test_a_window_with_nine_tenths_of_the_cores_busy_ran_saturated() -> None:
    assert measure.saturated(1.90, 2) and measure.saturated(1.80, 2)
    assert not measure.saturated(1.79, 2) and not measure.saturated(1.33, 2)
    assert not measure.saturated(None, 2) and not measure.saturated(1.9, None)


def test_a_saturated_run_does_not_replace_a_record_with_headroom(tmp_path: Path) -> None:
    from bench.scale.bench_scale import save

    results = tmp_path / "results.json"

    def run(jobs: int, busy: float, deviation: float) -> dict[str, object]:
        return {
            "jobs": jobs,
            "period_s": 10.0,
            "machine_cores": 2,
            "machine_busy_cores_mean": busy,
            "machine_saturated": measure.saturated(busy, 2),
            "mean_abs_deviation_pct": deviation,
            "deviation_by_group": {"gpu": {"mean_abs_pct": 7.27}, "cpu": {"mean_abs_pct": 0.76}},
            "date": f"run-{jobs}-{busy}",
        }

    assert save(run(1000, 1.33, 0.45), results)
    assert not save(run(1000, 1.90, 1.41), results)  # kept apart
    data = json.loads(results.read_text())
    assert [r["mean_abs_deviation_pct"] for r in data["records"]] == [0.45]
    assert [r["date"] for r in data["saturated_runs"]] == ["run-1000-1.9"]
    # With no record of its size from a run with headroom, a saturated one is the record,
    # and its section says what it is worth.
    assert save(run(300, 1.95, 0.9), results)
    report.write_report(results, tmp_path)
    text = (tmp_path / "README.md").read_text()
    assert "## Runs on a saturated machine (not in the table)" in text
    assert "1000 jobs, 10 s period, measured run-1000-1.9: 1.9 of 2 cores busy" in text
    assert "(gpu 7.27 %; cpu 0.76 %)" in text
    section_300 = text.split("### 300 jobs")[1].split("###")[0]
    assert report.SATURATED_WARNING in section_300
    assert report.SATURATED_WARNING not in text.split("### 1000 jobs")[1].split("##")[0]
    # A run with headroom replaces either.
    assert save(run(300, 1.2, 0.3), results)
    data = json.loads(results.read_text())
    assert sorted(r["jobs"] for r in data["records"]) == [300, 1000]
    assert not any(r["machine_saturated"] for r in data["records"])


def test_a_saturated_run_says_where_it_was_kept(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from bench.scale.bench_scale import say_if_saturated

    record = {"jobs": 1000, "machine_cores": 2, "machine_busy_cores_mean": 1.9}
    say_if_saturated({**record, "machine_saturated": False}, True, tmp_path)
    assert capsys.readouterr().err == ""
    say_if_saturated({**record, "machine_saturated": True}, False, tmp_path)
    err = capsys.readouterr().err
    assert "saturated (1.9 of 2 cores busy" in err and "kept under saturated_runs" in err
    say_if_saturated({**record, "machine_saturated": True}, True, tmp_path)
    assert "describe the machine as much as the operator" in capsys.readouterr().err
