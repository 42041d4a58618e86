"""docs/benchmarks/scale/README.md and plots, generated from results.json (``make
bench-scale-report``). Every number in the README comes from the records."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import plotting
from bench.scale.measure import SATURATED_SHARE, percentile

HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS = HERE.parents[1] / "docs/benchmarks/scale/results.json"

TARGETS: dict[str, tuple[float, str]] = {
    "operator_cores_mean": (0.5, "cores"),
    "operator_rss_mib_max": (500.0, "MiB"),
    "api_requests_per_s_per_job": (0.3, "req/s/job"),
    "drift_p99_s": (1.0, "s"),
    "patch_to_resize_p99_s": (2.0, "s"),
    "mean_abs_deviation_pct": (1.0, "%"),
}
"""Issue 11's targets at 1,000 jobs with a 10 s period (each an upper bound)."""

ONE_PROCESS_UNTIL = "2026-11-27"
"""Records measured before this day ran the operator as one process: they have no replica
fields, and their cells for them are left blank."""

COLUMNS = (
    ("jobs", "jobs"),
    ("period_s", "period s"),
    ("operator_replicas", "replicas"),
    ("operator_cores_mean", "operator cores (mean)"),
    ("operator_rss_mib_max", "operator RSS MiB (max)"),
    ("standby_cores_mean", "standby cores (mean)"),
    ("standby_rss_mib_max", "standby RSS MiB (max)"),
    ("api_requests_per_s_per_job", "API req/s per job"),
    ("prometheus_queries_per_s", "Prometheus queries/s"),
    ("drift_p99_s", "drift p99 s"),
    ("patch_to_resize_p50_s", "patch->resize p50 s"),
    ("patch_to_resize_p99_s", "patch->resize p99 s"),
    ("mean_abs_deviation_pct", "mean abs deviation %"),
)
PLOTTED = (
    ("operator_cores_mean", "operator CPU (cores)"),
    ("operator_rss_mib_max", "operator RSS (MiB)"),
    ("api_requests_per_s_per_job", "API requests/s per job"),
    ("prometheus_queries_per_s", "Prometheus queries/s"),
    ("drift_p99_s", "period drift p99 (s)"),
    ("patch_to_resize_p99_s", "deadline patch -> resize p99 (s)"),
)


def fmt(value: Any) -> str:
    """A number as the README shows it (3 significant digits); None: ``-`` (not measured)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def cell(record: Mapping[str, Any], key: str) -> str:
    """A table cell: blank when the record has no such field (an older record), else
    :func:`fmt` of it."""
    return fmt(record[key]) if key in record else ""


def replica_lines(record: Mapping[str, Any]) -> list[str]:
    """Which replica led the window, and what the standby cost beside it."""
    count = record.get("operator_replicas")
    if count is None:
        return []
    if count == 1:
        return ["- replicas: 1 (no leader election); its figures are the operator's"]
    lease = record.get("lease") or {}
    leader = record.get("leader")
    if leader is None:
        return [
            f"- replicas: {count}; the lead moved in the window or the reads disagree (Lease "
            f"holder {lease.get('holder_at_start')} at its start, {lease.get('holder_at_end')} "
            f"at its end, {lease.get('transitions_in_window')} transitions): the operator's "
            "figures are the replicas' together; no standby figure"
        ]
    retaken = next(
        (r.get("takeovers_in_window") for r in record.get("replicas") or []
         if r.get("identity") == leader),
        None,
    )  # fmt: skip
    lines = [
        f"- replicas: {count}, leader election on; {leader} led the whole window (the Lease's "
        f"holder at its start and end, {lease.get('transitions_in_window')} transitions; its "
        "`decor_operator_leader` 1 and every other's 0 at both ends"
        + (
            f"; it took its own Lease again {fmt(retaken)} time(s), after missed renewals"
            if retaken
            else ""
        )
        + "); the operator's CPU and RSS above are its own, the API requests all replicas' "
        "together"
    ]
    for replica in record.get("replicas") or []:
        kinds = replica.get("requests_per_s_by_kind") or {}
        busiest = sorted(kinds.items(), key=lambda kv: -kv[1])[:4]
        lines.append(
            f"- {replica['role']} {replica['identity']}: {fmt(replica.get('cores_mean'))} "
            f"cores (mean), {fmt(replica.get('rss_mib_max'))} MiB RSS (max), "
            f"{fmt(replica.get('api_requests_per_s'))} API req/s"
            + (" (" + ", ".join(f"`{k}` {fmt(v)}" for k, v in busiest) + ")" if busiest else "")
            + gc_text(replica)
        )
    return lines


def verdict(record: Mapping[str, Any]) -> list[str]:
    """One line per target: measured value against it."""
    lines = []
    for key, (bound, unit) in TARGETS.items():
        value = record.get(key)
        if value is None:
            lines.append(f"- {key}: not measured (target < {bound:g} {unit})")
            continue
        mark = "meets" if value < bound else "MISSES"
        lines.append(f"- {key}: {fmt(value)} {unit} — {mark} the target (< {bound:g} {unit})")
        if (
            key == "patch_to_resize_p99_s"
            and record.get("first_resize_any_cause_p99_s") is not None
        ):
            lines.append(
                f"  (over the {record.get('deadline_patches_answered_with_resize')} patches "
                f"answered with a resize; the first resize of any cause after each patch: p50 "
                f"{fmt(record.get('first_resize_any_cause_p50_s'))} s, p99 "
                f"{fmt(record['first_resize_any_cause_p99_s'])} s)"
            )
    return lines


LOOP_THREAD = "asyncio_0"
"""The thread kopf's executor runs the control loop's periods in."""


def profile_lines(run: Mapping[str, Any]) -> list[str]:
    """Where the control loop's thread spent its wall time in a ``--profile`` run."""
    profile = run.get("profile") or {}
    frames = [
        e for e in profile.get("innermost_operator_frame") or [] if e["thread"] == LOOP_THREAD
    ]
    if not frames:
        return []
    lines = [
        "",
        f"Where the loop's thread spent its time (a `--profile` run of this size, "
        f"{profile.get('samples')} stack samples over {profile.get('seconds')} s; wall time, "
        "waiting included):",
        "",
    ]
    for e in frames[:8]:
        where = e["frame"] if e["frame"] != "(no operator frame)" else "idle (between periods)"
        lines.append(f"- {where}: {100 * e['share']:.1f} %")
    return lines


def breakdown_lines(record: Mapping[str, Any]) -> list[str]:
    """Where the deviation and the patch latencies come from: per group of jobs."""
    lines = []
    groups = record.get("deviation_by_group") or {}
    parts = [
        f"{name} {g['jobs']} jobs {fmt(g['mean_abs_pct'])} % (max {fmt(g['max_abs_pct'])} %)"
        for name, g in groups.items()
        if g.get("jobs")
    ]
    if parts:
        lines.append("- mean |deviation| by group: " + "; ".join(parts))
    patches = record.get("patches") or []
    for mode in ("cpu", "gpu"):
        seen = sorted(p["to_resize_s"] for p in patches if p["mode"] == mode and p["to_resize_s"])
        missed = sum(1 for p in patches if p["mode"] == mode and p["to_resize_s"] is None)
        if seen or missed:
            spread = (
                f"p50 {fmt(percentile(seen, 0.5))} s, p90 {fmt(percentile(seen, 0.9))} s, "
                f"max {fmt(seen[-1])} s"
                if seen
                else "none resized"
            )
            lines.append(
                f"- patch to resize, {mode.upper()} jobs: {len(seen) + missed} patches, {spread}"
                + (f", {missed} never followed by a resize" if missed else "")
            )
    answers = record.get("patch_answers") or {}
    for kind, a in answers.items():
        if kind == "all" or not a.get("patches"):
            continue
        lines.append(
            f"- the operator's answer to a patch, {kind.upper()} jobs: {a['patches']} patches, "
            f"answered in p50 {fmt(a['to_answer_p50_s'])} s / p99 {fmt(a['to_answer_p99_s'])} s"
            f"{f' ({u} unanswered)' if (u := a['unanswered']) else ''}; "
            f"{a['answered_with_resize']} answered with a resize (p50 "
            f"{fmt(a['answer_resize_p50_s'])} s, p99 {fmt(a['answer_resize_p99_s'])} s), "
            f"{a['answered_keeping_allocation']} keeping the allocation that ran"
        )
    return lines


GROWTH_FROM_JOBS = 100
"""The smallest size of ``make bench-scale``'s grid: cost per job is compared from there up
(a 50-job run is the harness's smoke size, its fixed costs spread over few jobs)."""


def per_job_growth(records: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """Ratio of ``key`` per job at the largest size to the smallest from
    :data:`GROWTH_FROM_JOBS`, among the runs at the largest run's period (1.0 = flat). Keys
    ending in ``_per_job`` are per job already."""
    if not records:
        return None
    period = max(records, key=lambda r: r["jobs"])["period_s"]
    pts = sorted(
        (r["jobs"], r[key])
        for r in records
        if r["period_s"] == period and r["jobs"] >= GROWTH_FROM_JOBS and r.get(key) is not None
    )
    if len(pts) < 2:
        return None
    (n0, v0), (n1, v1) = pts[0], pts[-1]
    if not v0:
        return None
    return v1 / v0 if key.endswith("_per_job") else (v1 / n1) / (v0 / n0)


def render(
    records: Sequence[Mapping[str, Any]], saturated_runs: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The page (Markdown): results table, how each number is measured, one section per
    record, the runs kept apart because their machine was saturated, the growth of the cost
    per job, how to run it."""
    records = sorted(records, key=lambda r: (r["period_s"], r["jobs"]))
    out = [
        "# Scale: the operator's replicas, many jobs",
        "",
        "Generated by `bench/scale/scale_report.py` from [results.json](results.json); do not edit.",
        "Run with `make bench-scale` (100, 300 and 1,000 jobs; see the end for how long) or",
        "`make bench-scale-smoke` (50 jobs, a few minutes, asserts no performance).",
        "",
        "**What is real and what is simulated.** Real: etcd, kube-apiserver and kube-scheduler",
        "(the test bed's Kubernetes 1.35 build), Prometheus (Debian's), and the operator (this",
        "checkout with the chart's default settings, cluster-wide: two processes electing the",
        "one that acts through a Lease, as the chart's `replicaCount: 2`; `--replicas 1` runs",
        f"one process without an election; records from before {ONE_PROCESS_UNTIL} ran one",
        "process and leave the replica columns blank). Fake: the nodes (kwok). SIMULATED: the",
        "trainers and the kubelet's in-place resize answers",
        "(`bench/scale/simulator.py`): each pod's progress follows the reference workloads'",
        "measured speed curves at its applied CPU (GPU jobs: an assumed curve), with noise;",
        "past the last profiled core a curve is extrapolated, flat where it slowed (the LSTM's",
        "two cores ran slower than one; records measured before git f92c5ce let it rise past",
        "two cores, and sized jobs to need speeds only that rise could give).",
        "",
        "## Results",
        "",
        "| " + " | ".join(title for _, title in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in records:
        out.append("| " + " | ".join(cell(r, key) for key, _ in COLUMNS) + " |")
    out += HOW_MEASURED
    for r in records:
        out += _record_section(r)
    out += _saturated_section(saturated_runs)
    out += _growth_section(records)
    out += RUNNING
    return "\n".join(out) + "\n"


HOW_MEASURED = [
    "",
    "![costs against jobs](costs.png)",
    "",
    "How each number is measured: which replica led from the leader Lease",
    "(`decor-system/decor-operator`: its holder and transitions) and each replica's",
    "`decor_operator_leader` gauge at the window's start and end; operator CPU and RSS from",
    "`/proc` of the leader's process over the measurement window, the standby's from its own",
    '("standby" columns); API requests from the API server\'s audit log, every request of',
    "the replicas' own client certificates (user `decor-operator-N` for replica N; the",
    "one-process records: `decor-operator`), all replicas together for the API column,",
    "each on its own below (kwok, the scheduler, the simulator and the driver each have",
    "their own); the loop's figures from the replicas' `/metrics` added up; Prometheus",
    'queries from Prometheus\'s `prometheus_http_requests_total{handler="/api/v1/query"}`;',
    "drift from the operator's `decor_operator_period_lateness_seconds` histogram (p99 as",
    "`histogram_quantile`); the operator's answer to a `spec.duration` patch from the",
    "driver's job watch (its status write of the new deadline, in the period that planned",
    "with it), the first resize after the patch from the driver's pod watch (the first",
    "change of the trainer's CPU in the pod spec, or the GPU pod's deletion for its",
    "restart): an answer came with a resize when the resize was seen within 1 s of it, else",
    "it kept the allocation that ran (the law found it still right, or the planner had no",
    "room). Patch to resize is measured over the answers that came with a resize; the first",
    "resize of any cause after each patch (for an answer that kept the allocation, another",
    "period's decision) is given beside it; the two 50-job records (2026-11-23) predate",
    "that and give the first resize of any cause as patch to resize. Deviation from each",
    "job's `status.outcome.deviationPercent`.",
    "",
]
"""The paragraph after the results table: where each number comes from."""


def loop_lines(r: Mapping[str, Any]) -> list[str]:
    """The control loop's lines of a record: commits and plans, status writes waiting, its
    periods and slow commits."""
    out: list[str] = []
    loop = r.get("loop") or {}
    if loop.get("commit_s_mean") is not None:
        busy = (loop.get("commit_s_total") or 0) + (loop.get("plan_s_total") or 0)
        out.append(
            f"- loop: {loop.get('commits_in_window')} job commits at "
            f"{1000 * loop['commit_s_mean']:.1f} ms each (a job's API calls one after "
            f"another; the operator's commit workers run several jobs at once), "
            f"{loop.get('plans_in_window')} plans at "
            f"{1000 * (loop.get('plan_s_mean') or 0):.1f} ms; the two steps' time summed "
            f"over the workers: {busy / max(1e-9, r.get('window_s') or 1):.2f}x the window"
        )
        if loop.get("status_writes_waiting_at_end") is not None:
            out.append(
                f"- status writes waiting or in flight at the window's end (sent beside the "
                f"periods): {loop['status_writes_waiting_at_end']}"
            )
        if loop.get("loop_periods_in_window"):
            out.append(
                f"- the loop's periods that ran jobs: {loop['loop_periods_in_window']}, "
                f"{1000 * (loop.get('loop_period_s_mean') or 0):.0f} ms mean, p50 "
                f"{loop.get('loop_period_s_p50')} s, p99 {loop.get('loop_period_s_p99')} s; "
                f"job commits over 1 s: {loop.get('commits_over_1s')}, over 5 s: "
                f"{loop.get('commits_over_5s')}"
            )
        out.extend(step_lines(loop.get("steps") or {}))
    return out


def machine_text(r: Mapping[str, Any]) -> str:
    """How busy the whole machine was over the window: its own processes, and the cores the
    hypervisor took (steal time: counted apart from 2026-11-28 on, in "busy" before)."""
    busy, steal = r.get("machine_busy_cores_mean"), r.get("machine_steal_cores_mean")
    if busy is None:
        return "."
    text = f", {busy} of them busy on average over the window (the whole machine: the bed, both replicas and the driver"
    if steal is None:
        return text + "; steal time included)."
    return text + f"), {steal} taken by the hypervisor for other guests (steal time)."


def step_lines(steps: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Where the periods' wall time went, step by step (records from 2026-11-28 on)."""
    parts = [
        f"{step} {1000 * s['s_mean']:.1f} ms mean, p99 {fmt(s.get('s_p99'))} s"
        for step, s in steps.items()
        if s.get("s_mean") is not None
    ]
    return ["- the periods' steps: " + "; ".join(parts)] if parts else []


def gc_text(replica: Mapping[str, Any]) -> str:
    """A replica's garbage collections in the window by generation: how many, how long in
    all and at p99 (records from 2026-11-28 on; empty before)."""
    parts = [
        f"gen {generation} {g['count']} x {1000 * g['s_mean']:.1f} ms mean "
        f"(p99 {fmt(g.get('s_p99'))} s, {fmt(g.get('s_total'))} s in all)"
        for generation, g in (replica.get("gc_pauses") or {}).items()
        if g.get("count")
    ]
    return "; garbage collection: " + ", ".join(parts) if parts else ""


def _record_section(r: Mapping[str, Any]) -> list[str]:
    """One record's section: its setting, the targets' verdicts, the loop, breakdown and
    profile, the operator's requests by kind."""
    out: list[str] = []
    out.append(f"### {r['jobs']} jobs, {fmt(r['period_s'])} s period")
    out.append("")
    out.append(
        f"{r.get('gpu_jobs', 0)} GPU jobs; kwok nodes {r.get('kwok_nodes')}; window "
        f"{fmt(r.get('window_s'))} s with {r.get('running_at_window_start')} jobs Running at "
        f"its start; {r.get('periods_in_window')} job periods in it; deadline patches "
        f"{r.get('deadline_patches')} ({r.get('deadline_patches_without_resize')} not "
        f"followed by a resize within the timeout); outcomes {r.get('outcomes')}; "
        f"measured {r.get('date')} on {r.get('machine_cores')} cores" + machine_text(r)
    )
    if r.get("note"):
        out += ["", f"*{r['note']}.*"]
    if r.get("machine_saturated"):
        out += ["", SATURATED_WARNING]
    out += ["", "Against the targets (set for 1,000 jobs at a 10 s period):", ""]
    out += verdict(r)
    out += replica_lines(r)
    out += loop_lines(r)
    out += breakdown_lines(r)
    out += profile_lines(r.get("profile_run") or r)
    kinds = r.get("operator_requests_per_s_by_kind") or {}
    if kinds:
        out += ["", "Operator requests per second by verb and resource:", ""]
        out += [f"- `{k}`: {fmt(v)}" for k, v in sorted(kinds.items(), key=lambda x: -x[1])]
    out.append("")
    return out


SATURATED_WARNING = (
    "**Saturated machine**: its own processes kept at least "
    f"{100 * SATURATED_SHARE:.0f} % of its cores busy over the window; the operator's periods, "
    "the API server and the simulated trainers queued for the CPU, and these figures describe "
    "the machine as much as the operator."
)


def _saturated_section(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The runs that did not replace a record of their size because their machine was
    saturated (``bench_scale.save``), each in a line: when, how busy, what it measured."""
    if not runs:
        return []
    out = [
        "## Runs on a saturated machine (not in the table)",
        "",
        "A run whose machine was saturated (at least "
        f"{100 * SATURATED_SHARE:.0f} % of its cores busy over the window) does not replace a "
        "record of its size from a run with headroom; it is kept here.",
        "",
    ]
    for r in runs:
        groups = r.get("deviation_by_group") or {}
        by_group = "; ".join(
            f"{name} {fmt(g.get('mean_abs_pct'))} %"
            for name, g in groups.items()
            if name in ("cpu", "gpu") and g.get("mean_abs_pct") is not None
        )
        out.append(
            f"- {r['jobs']} jobs, {fmt(r['period_s'])} s period, measured {r.get('date')}: "
            f"{fmt(r.get('machine_busy_cores_mean'))} of {r.get('machine_cores')} cores busy; "
            f"drift p99 {fmt(r.get('drift_p99_s'))} s; {r.get('running_at_window_start')} jobs "
            f"Running at the window's start; mean |deviation| "
            f"{fmt(r.get('mean_abs_deviation_pct'))} %"
            + (f" ({by_group})" if by_group else "")
            + (f". {r['note']}" if r.get("note") else "")
        )
    out.append("")
    return out


def _growth_section(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """How the operator's cores and API requests per job grow to the largest size."""
    out: list[str] = []
    growth = [
        (key, per_job_growth(records, key))
        for key in ("operator_cores_mean", "api_requests_per_s_per_job")
    ]
    if any(g is not None for _, g in growth):
        out += [f"## Cost per job from {GROWTH_FROM_JOBS} jobs to the largest size", ""]
        for key, g in growth:
            if g is not None:
                per = "(already per job)" if key.endswith("_per_job") else "per job"
                out.append(f"- {key} {per}: x{g:.2f} (1.00 = flat)")
        out.append("")
    return out


RUNNING = [
    "## Running it",
    "",
    "```",
    "make scale-up            # the bed alone: KUBECONFIG=/var/lib/decor-scale/admin.kubeconfig",
    "make bench-scale         # 100, 300, 1,000 jobs: a fresh bed for each size, then this page",
    "make bench-scale BENCH_ARGS='--jobs 100'      # one size",
    "make bench-scale BENCH_ARGS='--jobs 1000'     # the 1,000-job size alone (~22 min)",
    "make bench-scale BENCH_ARGS='--replicas 1'    # one operator process, no leader election",
    "make bench-scale-smoke   # 50 jobs into a temp dir; checks the harness, not the numbers",
    "make scale-down",
    "```",
    "",
    "The bed (`cluster/scale/`) is its own etcd, kube-apiserver (audit log on), kube-scheduler,",
    "kwok (`sigs.k8s.io/kwok`, built once from the Go module proxy at the version pinned in",
    "`cluster/scale/lib.sh`, with its upstream fast pod/node stages and Lease heartbeats),",
    "Prometheus and the simulator, on its own ports on 127.0.0.1 and its own state under",
    "`/var/lib/decor-scale`; the main test bed can run beside it. It reuses the Kubernetes",
    "binaries of `cluster/build-k8s.sh` (`DECOR_SCALE_K8S_BIN` points elsewhere). No",
    "kube-controller-manager runs, so the ServiceAccount and TaintNodesByCondition admission",
    "plugins are off. kwok has no in-place resize, and its Stage API cannot express one (a",
    "stage matches and patches one object; a kubelet answers a resize against every other pod",
    "on the node, Deferred when it is full), so the simulator plays that part of the kubelet.",
    "Each size takes about its longest deadline x 1.1 plus 5 minutes (bed,",
    "creation, warm-up, end game): about 20 minutes at the full grid's deadlines, an hour for",
    "all three, on a quiet machine with at least 4 cores (the operator, API server, etcd,",
    "Prometheus and simulator share it; the operator's numbers are its own process only).",
    "",
    "The operator runs as `--replicas` processes (default 2) of this checkout, replica N with",
    "its own client certificate (user `decor-operator-N`, Lease identity the same), its",
    "`/metrics` on port 18080 + N (`--operator-metrics-port`) and its log in",
    "`/var/lib/decor-scale/logs/operator-N.log` (`--keep-logs DIR` copies the logs before",
    "the bed is taken down); the Lease `decor-operator` lives in the bed's `decor-system`",
    "namespace, at the chart's default timings (15 s, 10 s, 2 s). The standby watches and",
    "keeps its views as the leader does, runs no control period and sends no write; its CPU,",
    "memory and requests are what a second replica costs.",
    "",
]


def plot(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    plt = plotting.pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (key, title) in zip(axes.flat, PLOTTED, strict=True):
        for period in sorted({r["period_s"] for r in records}):
            pts = sorted(
                (r["jobs"], r[key])
                for r in records
                if r["period_s"] == period and r.get(key) is not None
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=f"period {period:g} s")
        target = TARGETS.get(key)
        if target:
            ax.axhline(target[0], color="red", linestyle="--", linewidth=1, label="target")
        ax.set_title(title)
        ax.set_xlabel("concurrent jobs")
        ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("DECOR operator cost against the number of jobs (kwok + simulated trainers)")
    plotting.save(fig, path, dpi=90)


def write_report(results: Path, out_dir: Path) -> None:
    data = json.loads(results.read_text())
    records = data.get("records", [])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "README.md").write_text(render(records, data.get("saturated_runs", ())))
    if records:
        plot(records, out_dir / "costs.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.scale_report", description=__doc__)
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    args = parser.parse_args(argv)
    write_report(args.results, args.results.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
