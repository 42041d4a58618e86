"""Write the benchmark report from its results: ``python -m bench.report [OUT]``.

Reads ``OUT/results.json`` and ``OUT/traces.json`` (default OUT: docs/benchmarks), writes
``OUT/README.md`` and its PNG plots. ``summarize`` and ``render_markdown`` are pure (tested
in tests/unit/test_bench_report.py); the ``plot_*`` functions and ``write_report`` write files.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from bench import benchlib as bl
from bench import plotting

ROOT = Path(__file__).resolve().parents[1]
POLICY_COLOURS = {
    "decor": "tab:blue",
    "decor-nn": "tab:orange",
    "static-max": "tab:gray",
    "static-oracle": "tab:green",
}
TRACE_SCENARIO_PREFERENCE = ("move-0.8", "disturb", "d1.8", "move-1.3", "d1.5", "d2.5", "d1.0")


# ---------------------------------------------------------------------------------------
# Pure: numbers and text


def summarize(results: dict[str, Any], traces: dict[str, Any] | None = None) -> dict[str, Any]:
    """Aggregates, target checks and run statistics of a results document; ``traces``
    (``traces.json``) sets the 1.0x runs that left MAX beside MAX at their own speed."""
    records = results.get("records", [])
    local = bl.aggregate(records, "local")
    left_max = None if traces is None else bl.left_max_runs(bl.of_runtime(records, "local"), traces)
    cluster = bl.aggregate(records, "k8s") if bl.of_runtime(records, "k8s") else None
    overhead = results.get("overhead") or {}
    ratio = overhead.get("worst_ratio")
    per_workload = {}
    for workload in sorted({r["workload"] for r in records}):
        mine = [r for r in records if r["workload"] == workload]
        per_workload[workload] = bl.aggregate(mine)
    loads = [float(r["load_1m"]) for r in records if r.get("load_1m") is not None]
    others = [float(r["others_cores"]) for r in records if r.get("others_cores") is not None]
    steal = [float(r["steal_cores"]) for r in records if r.get("steal_cores") is not None]
    # static MAX on the d1.0 setting runs exactly the profile's all-cores run again: how far
    # it lands from the profile's time is how much the machine's speed moved since.
    speed_moves = [
        100.0 * (float(r["finished_s"]) / float(r["all_cores_s"]) - 1.0)
        for r in records
        if r["policy"] == "static-max" and r["scenario"] == "d1.0"
        if r.get("finished_s") and r.get("all_cores_s")
    ]
    quiet = bl.aggregate([r for r in records if not r.get("noisy")], "local")
    return {
        "local": local,
        "local_quiet": quiet,
        "cluster": cluster,
        "checks": bl.target_checks(local, ratio, cluster, left_max),
        "left_max": left_max,
        "per_workload": per_workload,
        "runs": len(bl.of_runtime(records, "local")),
        "failed": sum(1 for r in records if not bl.valid(r)),
        "discarded": len(results.get("discarded", [])),
        "noisy": sum(1 for r in records if r.get("noisy")),
        "load_median": median(loads) if loads else None,
        "load_max": max(loads) if loads else None,
        "others_median": median(others) if others else None,
        "others_max": max(others) if others else None,
        "steal_median": median(steal) if steal else None,
        "steal_max": max(steal) if steal else None,
        "static_max_vs_profile": (min(speed_moves), max(speed_moves)) if speed_moves else None,
    }


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def _status(met: bool | None) -> str:
    return "not measured" if met is None else ("**met**" if met else "**NOT met**")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = [
        "| " + " | ".join(h.replace("|", "\\|") for h in header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
    ]
    # a "|" inside a cell (|deviation|) would split it: escape it
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _cluster_section(cluster: dict[str, Any] | None, results: dict[str, Any]) -> list[str]:
    """The cluster path: the same jobs as DeadlineTrainingJobs on the test bed."""
    if cluster is None:
        return []
    meta = results.get("k8s") or {}
    code_hash = meta.get("code_hash")
    dates = sorted(
        r["date"] for r in bl.of_runtime(results.get("records", []), "k8s") if r.get("date")
    )
    profiles = meta.get("profiles") or {}
    t_text = ", ".join(f"{w} {float(p['all_cores_s']):.1f} s" for w, p in sorted(profiles.items()))
    out = [
        "",
        "## Cluster path",
        "",
        "The same jobs as DeadlineTrainingJobs on the single-node test bed (kube-apiserver, "
        "kubelet and containerd built from source, Kubernetes 1.35): the operator reads progress "
        "from the pod's /metrics endpoint (no Prometheus) and resizes the pod in place. "
        "Deadlines are factors of T measured on the cluster (one all-cores job there; pod "
        "start-up included"
        + (f": {t_text}" if t_text else "")
        + "). Core-seconds integrate the pod's CPU limit as the kubelet reports it."
        + (
            f" Code measured: git `{meta.get('git_head', '?')}`, controller, runtime and trainer "
            f"hash `{code_hash}`."
            if code_hash
            else ""
        )
        + (f" Runs from {dates[0]} to {dates[-1]}" if dates else "")
        + (
            f" on {machine['cores']} cores, {machine.get('model', '?')}."
            if (machine := meta.get("machine"))
            else "."
        ),
        "",
    ]
    out += _table(
        ["scenario", *cluster["policies"]],
        [
            [scenario] + [
                f"{_pct(c.mean_dev_pct, signed=True)} ({c.runs})"
                if (c := cluster["cells"].get(p, {}).get(scenario)) else "–"
                for p in cluster["policies"]
            ]
            for scenario in cluster["scenarios"]
        ]
        + [
            ["**mean |dev|, feasible**"] + [
                f"**{_pct(c.mean_abs_dev_pct)}** ({c.runs})"
                if (c := cluster["feasible"].get(p)) and c.runs else "–"
                for p in cluster["policies"]
            ]
        ],
    )  # fmt: skip
    out += ["", "Cells: signed deviation from the deadline in % (runs)."]
    return out


def _tight_section(tight: bl.TightComparison, left: list[bl.LeftMax] | None) -> list[str]:
    """1.0x: each decor run beside the static MAX run of its workload and repetition, and the
    runs that left MAX beside MAX at their own speed."""
    if not tight.pairs:
        return []
    out = _pairs_table(tight) + _pairs_means(tight)
    if left is None:
        return out + ["", "Without the runs' traces the runs that left MAX are not known."]
    out += ["", _held_and_left(tight, left)]
    if not left:
        return out
    return out + _left_max_runs(tight, left)


def _pairs_table(tight: bl.TightComparison) -> list[str]:
    """The 1.0x pairs: each `decor` run's and its static MAX run's signed deviation (%)."""
    out = [
        "",
        "## At 1.0x, pair by pair",
        "",
        "A deadline only MAX can meet: `decor` against static MAX on the same workload in the "
        "same repetition (signed deviation, %). The share is `decor`'s mean allocation from "
        "its start to its last step, as a fraction of MAX (static MAX: 1).",
        "",
    ]
    out += _table(
        ["workload", "repetition", "decor", "static MAX", "difference", "decor's share of MAX"],
        [
            [p.workload, str(p.repetition), _pct(p.decor_dev_pct, signed=True),
             _pct(p.max_dev_pct, signed=True), _pct(p.difference_pct, signed=True),
             "–" if p.decor_share_of_max is None else f"{p.decor_share_of_max:.3f}"]
            for p in tight.pairs
        ],
    )  # fmt: skip
    return out


def _pairs_means(tight: bl.TightComparison) -> list[str]:
    """The 1.0x pairs' means (%, with one standard error) and their late runs."""
    se = tight.standard_error_pct
    return [
        "",
        f"Mean over {len(tight.pairs)} pairs: `decor` {_pct(tight.mean_decor_pct, signed=True)}"
        f"%, static MAX {_pct(tight.mean_max_pct, signed=True)}%, difference "
        f"{_pct(tight.mean_difference_pct, signed=True)}%"
        + ("" if se is None else f" +- {_pct(se)}% (one standard error of the mean)")
        + (
            "."
            if (share := tight.mean_share_of_max) is None
            else f"; `decor`'s mean allocation {share:.3f} of MAX."
        ),
        "",
        f"Late runs: `decor` {tight.late_decor} of {len(tight.pairs)}, static MAX "
        f"{tight.late_max}; mean lateness (a run's deviation where positive, else 0): `decor` "
        f"{_pct(tight.mean_lateness_decor_pct)}%, static MAX {_pct(tight.mean_lateness_max_pct)}%.",
    ]


def _left_max_runs(tight: bl.TightComparison, left: list[bl.LeftMax]) -> list[str]:
    """Each `decor` run that left MAX beside MAX at that run's own speed (signed deviation,
    %), and how many were late where MAX at that speed would have been on time."""
    late = [x for x in left if x.decor_dev_pct > 0]
    out = [
        "",
        "### The runs that left MAX",
        "",
        "A pair's two runs differ by the speed of the run as much as by the policy: at one "
        "allocation a run trains at one rate throughout, and that rate differs between runs. "
        "So each `decor` run that left MAX is also set beside MAX at its own speed: "
        "its last sample at MAX, plus the rest of the work at the rate it had at MAX until "
        "then (`benchlib.finish_at_max_s`; signed deviation, %).",
        "",
    ]
    out += _table(
        ["workload", "repetition", "decor", "MAX at that run's speed", "decor later by"],
        [
            [x.workload, str(x.repetition), _pct(x.decor_dev_pct, signed=True),
             "–" if x.at_max_dev_pct is None else _pct(x.at_max_dev_pct, signed=True),
             "–" if x.at_max_dev_pct is None
             else _pct(x.decor_dev_pct - x.at_max_dev_pct, signed=True)]
            for x in left
        ],
    )  # fmt: skip
    # unmeasured (it left MAX too soon): MAX counts as on time
    lost = [x for x in late if x.at_max_dev_pct is None or x.at_max_dev_pct <= 0]
    out += [
        "",
        f"`decor` left MAX in {len(left)} of its {len(tight.pairs)} paired runs and finished "
        f"late in {len(late)} of them"
        + (
            ""
            if not late
            else f" (latest {_pct(max(x.decor_dev_pct for x in late), signed=True)}%)"
        )
        + f"; late where MAX at that run's speed would have been on time: {len(lost)}.",
    ]
    return out


def _held_and_left(tight: bl.TightComparison, left: list[bl.LeftMax]) -> str:
    """The paired difference split by whether ``decor`` left MAX: where it held MAX the two
    runs ran one allocation, and what they differ by is the spread between runs."""
    left_keys = {(x.workload, x.repetition) for x in left}
    held = [p for p in tight.pairs if (p.workload, p.repetition) not in left_keys]
    moved = [p for p in tight.pairs if (p.workload, p.repetition) in left_keys]

    def part(pairs: list[bl.TightPair]) -> str:
        return _pct(sum(p.difference_pct for p in pairs) / len(tight.pairs), signed=True)

    return (
        "Split by whether `decor` left MAX (each part: its pairs' differences summed, over all "
        f"{len(tight.pairs)} pairs): the {len(held)} pairs where it held MAX throughout, both "
        f"runs at one allocation, {part(held)}%; the {len(moved)} where it left MAX, "
        f"{part(moved)}%." + ("" if left else " No `decor` run left MAX.")
    )


def _minutes(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 60:.0f} min"


def render_markdown(
    results: dict[str, Any],
    summary: dict[str, Any],
    images: dict[str, str],
) -> str:
    """The README of the benchmark (Markdown). ``images`` maps plot names to file names."""
    local = summary["local"]
    out = _header(results, summary)
    out += _targets_section(summary)
    out += _scenarios_section(local["scenarios"])
    out += _deviation_section(local, images)
    out += _tight_section(local["tight"], summary["left_max"])
    out += _core_seconds_section(local, images)
    out += _per_workload_section(summary)
    out += _cluster_section(summary["cluster"], results)
    out += _traces_section(images)
    out += _workloads_section(results, images)
    out += _overhead_section(results)
    out += _records_section(results)
    out += _reproduce_section()
    return "\n".join(out)


def _header(results: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """Title, grid, machine, quietness, code and wall time of the runs."""
    machine = results.get("machine", {})
    dates = sorted(
        r["date"] for r in bl.of_runtime(results.get("records", []), "local") if r.get("date")
    )
    out: list[str] = [
        "# DECOR benchmarks",
        "",
        "Generated by `python -m bench.report` from [`results.json`](results.json); do not edit by "
        "hand. How to run it: [Reproduce](#reproduce).",
        "",
        f"- **Grid**: `{results.get('grid', '?')}` ({results.get('sizes', 'small')} workload sizes), "
        f"{summary['runs']} runs on the local runtime"
        + (f", {summary['failed']} failed" if summary["failed"] else "")
        + (f"; {dates[0]} to {dates[-1]}" if dates else ""),
        f"- **Machine**: {machine.get('cores', '?')} cores, {machine.get('model', '?')}, "
        f"Linux {machine.get('kernel', '?')}; CPU actuated by "
        + ", ".join(sorted({r.get("limiter", "?") for r in results.get("records", [])}) or ["?"]),
        f"- **Quietness**: 1-minute load at run start median {_pct(summary['load_median'])}, max "
        f"{_pct(summary['load_max'])} (our own previous run included); CPU used by processes outside "
        f"the benchmark during a run median {_pct(summary['others_median'])}, max "
        f"{_pct(summary['others_max'])} cores"
        + (
            f"; steal time (the hypervisor running other guests) median "
            f"{_pct(summary['steal_median'])}, max {_pct(summary['steal_max'])} cores"
            if summary["steal_max"] is not None
            else "; steal time not recorded"
        )
        + f"; {summary['discarded']} runs repeated because other processes or the hypervisor "
        f"disturbed them, {summary['noisy']} kept although disturbed",
    ]
    if summary["static_max_vs_profile"] is not None:
        low, high = summary["static_max_vs_profile"]
        out.append(
            f"- **Machine speed**: static MAX on the d1.0 setting (the profile's all-cores run "
            f"again) finished {low:+.1f} % to {high:+.1f} % of the profile's time; the further "
            "from 0, the more the machine's speed moved between the profile and the runs"
        )
    if results.get("code_hash"):
        out.append(
            f"- **Code measured**: git `{results.get('git_head', '?')}`, hash of the controller, "
            f"runtime and trainer sources `{results['code_hash']}`"
        )
    wall = results.get("wall_s", {})
    if wall:
        profile_s = sum(v for k, v in wall.items() if k.startswith("profile-"))
        out.append(
            f"- **Wall time**: profiles {_minutes(profile_s)}, runs {_minutes(wall.get('runs'))}"
        )
    return out


def _targets_section(summary: dict[str, Any]) -> list[str]:
    """The targets, measured, met or not; the deviation without the disturbed runs."""
    out: list[str] = ["", "## Targets", ""]
    out += _table(
        ["target", "measured", "status"],
        [[c.name, c.detail, _status(c.met)] for c in summary["checks"]],
    )
    if summary["noisy"]:
        quiet = summary["local_quiet"]["feasible"]
        parts = [
            f"{policy} {_pct(cell.mean_abs_dev_pct)}% ({cell.runs} runs)"
            for policy in bl.CONTROLLED
            if (cell := quiet.get(policy)) is not None and cell.runs
        ]
        out += [
            "",
            f"Without the {summary['noisy']} disturbed runs (others > {bl.NOISY_OTHERS_CORES} "
            f"cores, or steal > {bl.NOISY_STEAL_SHARE:.0%} of the cores), mean |deviation| "
            f"over the feasible settings: " + ("; ".join(parts) or "no runs left") + ".",
        ]
    return out


def _scenarios_section(scenarios: Sequence[str]) -> list[str]:
    """What the feasible settings, the scenarios and the policies are."""
    out: list[str] = [
        "",
        "Feasible settings: final deadline >= 1.4 T (1.5x, 1.8x, 2.5x, both moves, the "
        "disturbance). Core-seconds are counted from the start to the last step, against the "
        "static oracle's run of the same setting (what it used, measured the same way), over "
        "the undisturbed feasible settings whose oracle runs at most one core (where it is the "
        "least a run can use; see the core-seconds section); the static oracle cannot foresee a "
        "disturbance. "
        "Each record's `oracle_core_seconds` is the profile's prediction of that cost "
        "(allocation x predicted finish); the speed of this VM at a fixed allocation drifts "
        "between the profile and the runs, so the comparison uses the oracle's own run, taken "
        "in the same block as the controllers'.",
        "",
        "## Scenarios and policies",
        "",
        "T is the all-cores run time of each workload, measured once in its profile. Deadline "
        "moves are relative to the original deadline and happen at 30% of it.",
        "",
    ]
    out += _table(
        ["scenario", "what", "final deadline / T", "feasible"],
        [
            [name, bl.SCENARIOS[name].description, f"{bl.SCENARIOS[name].final_factor:.2f}",
             "yes" if bl.SCENARIOS[name].feasible else "no"]
            for name in scenarios
        ],
    )  # fmt: skip
    out += [
        "",
        "- `decor`: the default law (shrinking horizon + online speed model); "
        "`decor-nn`: the published DECOR-NN PI law (K = 50, Ti = 12 s). Both from MIN 0.25 "
        "core to MAX all cores, control period 1 s; `decor` starts at the spec's default (one "
        "core), `decor-nn` at MAX (its published law).",
        "- `static-max`: all cores for the whole run. `static-oracle`: the constant allocation "
        "that the profiled speed curve predicts finishes exactly at the final deadline, "
        "run for real. The curve comes from whole static runs of the job at 1/4, 1/2, 3/4 of "
        "MAX and at MAX. The reference trainer runs one thread per whole core of its limit, so "
        "its curve is a staircase above one core: a limit is interpolated only between "
        "profiled allocations with its thread count (1.7 cores run like the 1.5-core profile) "
        "and a deadline one thread cannot meet takes the next whole core; `encoder` (a user's "
        "own loop, PyTorch's default threads) is interpolated between all of them. The curve "
        "is exact at the "
        "profiled allocations, so what the oracle runs miss by is the run-to-run spread of "
        "this machine plus the interpolation.",
    ]
    return out


def _deviation_section(local: dict[str, Any], images: dict[str, str]) -> list[str]:
    """Mean and max |deviation| and mean signed deviation, per scenario and policy (%)."""
    policies, scenarios = local["policies"], local["scenarios"]
    out: list[str] = [
        "",
        "## Deviation from the deadline",
        "",
        "Signed deviation = (finish - deadline) / deadline duration; cells are mean |deviation| "
        "/ max |deviation| in % (runs). `late>1%` counts runs more than 1% late.",
        "",
    ]
    rows = []
    for scenario in scenarios:
        row = [scenario]
        for policy in policies:
            cell = local["cells"].get(policy, {}).get(scenario)
            row.append(
                "–" if cell is None
                else f"{_pct(cell.mean_abs_dev_pct)} / {_pct(cell.max_abs_dev_pct)} ({cell.runs})"
                + (f", late>1%: {cell.late_over_tol}" if cell.late_over_tol else "")
                + (f", {cell.failed} failed" if cell.failed else "")
            )  # fmt: skip
        rows.append(row)
    feasible_row = ["**feasible, all**"]
    for policy in policies:
        cell = local["feasible"].get(policy)
        feasible_row.append(
            "–" if cell is None or cell.runs == 0
            else f"**{_pct(cell.mean_abs_dev_pct)}** / {_pct(cell.max_abs_dev_pct)} ({cell.runs}), late>1%: {cell.late_over_tol}"
        )  # fmt: skip
    rows.append(feasible_row)
    out += _table(["scenario", *policies], rows)
    out += ["", "Mean signed deviation (%; negative = early):", ""]
    out += _table(
        ["scenario", *policies],
        [
            [scenario] + [
                _pct(c.mean_dev_pct, signed=True) if (c := local["cells"].get(p, {}).get(scenario)) else "–"
                for p in policies
            ]
            for scenario in scenarios
        ],
    )  # fmt: skip
    if "deviation" in images:
        out += ["", f"![deviation per policy and scenario]({images['deviation']})"]
    return out


def _core_seconds_section(local: dict[str, Any], images: dict[str, str]) -> list[str]:
    """Core-seconds against the static oracle's run, per scenario and policy (%)."""
    policies, scenarios = local["policies"], local["scenarios"]
    out: list[str] = [
        "",
        "## Core-seconds against the static oracle",
        "",
        "Mean of (core-seconds to the last step / the oracle run's - 1), in %. Positive = "
        "more CPU than the oracle. The oracle's run is the least a run can use where its "
        "allocation is at most one core: there speed is proportional to the quota, so cores x "
        "time is the work whatever the allocation. Above one core the reference trainer runs "
        "one thread per whole core, so a constant allocation pays for a fraction no thread uses, "
        "or finishes early on the next whole core, where alternating two whole-core levels pays "
        "for neither; the target is judged where the oracle runs at most one core.",
        "",
    ]
    totals = [
        ("**undisturbed feasible**", "undisturbed_feasible"),
        ("**of which the oracle at most one core** (the target)", "oracle_least"),
        ("**of which the oracle above one core**", "oracle_above_one_core"),
    ]
    out += _table(
        ["scenario", *policies],
        [
            [scenario] + [
                _pct(c.mean_cs_over_oracle_pct, signed=True) if (c := local["cells"].get(p, {}).get(scenario)) else "–"
                for p in policies
            ]
            for scenario in scenarios
        ]
        + [
            [label] + [
                _pct(c.mean_cs_over_oracle_pct, signed=True) if (c := local[key].get(p)) else "–"
                for p in policies
            ]
            for label, key in totals
        ],
    )  # fmt: skip
    if "core_seconds" in images:
        out += ["", f"![core-seconds vs oracle]({images['core_seconds']})"]
    return out


def _per_workload_section(summary: dict[str, Any]) -> list[str]:
    """Deviation and core-seconds per workload and controlled policy, feasible settings."""
    out: list[str] = []
    if summary["per_workload"]:
        out += ["", "## Per workload (feasible settings)", ""]
        pw_rows = []
        for workload, agg in summary["per_workload"].items():
            for policy in bl.CONTROLLED:
                cell = agg["feasible"].get(policy)
                if cell is None or cell.runs == 0:
                    continue
                cost = agg["undisturbed_feasible"].get(policy)
                pw_rows.append([
                    workload, policy, _pct(cell.mean_abs_dev_pct), _pct(cell.max_abs_dev_pct),
                    str(cell.late_over_tol),
                    _pct(cost.mean_cs_over_oracle_pct if cost else None, signed=True),
                ])  # fmt: skip
        out += _table(
            [
                "workload",
                "policy",
                "mean |dev| %",
                "max |dev| %",
                "late>1%",
                "core-s vs oracle % (undisturbed)",
            ],
            pw_rows,
        )
    return out


def _traces_section(images: dict[str, str]) -> list[str]:
    """One run's trace per policy (plots), if any were drawn."""
    out: list[str] = []
    traces = [k for k in images if k.startswith("trace:")]
    if traces:
        out += ["", "## Progress against the set point", "",
                "One run per policy (the same workload and scenario where the policy ran it): progress and the set point t/D "
                "(top; red lines: the deadlines in force), cores in effect (bottom).", ""]  # fmt: skip
        for key in traces:
            out += [f"![{key[6:]}]({images[key]})", ""]
    return out


def _workloads_section(results: dict[str, Any], images: dict[str, str]) -> list[str]:
    """Each workload's size, steps, all-cores time T (s) and profiled speed (steps/s)."""
    out: list[str] = ["", "## Workloads and speed curves", ""]
    profiles = results.get("profiles", {})
    prof_rows = []
    for name, prof in profiles.items():
        size = prof.get("size", {})
        curve = ", ".join(f"{p['cores']:g}: {p['steps_per_s']:.2f}" for p in prof["curve"])
        prof_rows.append([
            name, f"width {size.get('width')}, batch {size.get('batch_size')}", str(prof["steps"]),
            f"{prof['all_cores_s']:.1f}", curve,
        ])  # fmt: skip
    out += _table(["workload", "size", "steps", "T (s)", "steps/s at cores"], prof_rows)
    if "speed" in images:
        out += ["", f"![speed curves]({images['speed']})"]
    return out


def _overhead_section(results: dict[str, Any]) -> list[str]:
    """What one progress report costs (µs) against a step (ms), per workload."""
    out: list[str] = ["", "## Reporter overhead", ""]
    overhead = results.get("overhead") or {}
    if overhead.get("tool"):
        tool = overhead["tool"]
        out += [
            f"`python -m decor_trainer.overhead`: one `step_done` costs "
            f"{tool['in_process_step_done_us']:.1f} µs in-process (/metrics) and "
            f"{tool['progress_file_step_done_us']:.1f} µs with the progress file; a tiny "
            f"ResNet step (width 4, batch 4, 1 thread) takes {tool['tiny_step_ms']:.1f} ms "
            f"(ratios {100 * tool['in_process_ratio']:.3f}% and {100 * tool['progress_file_ratio']:.3f}%).",
            "Against the benchmark's own step times at all cores (step time with the reporter = "
            "without it + one call):",
            "",
        ]
        out += _table(
            ["workload", "step (ms)", "reporter / step"],
            [
                [name, f"{1000 * w['step_s']:.1f}", f"{100 * w['ratio']:.4f}%"]
                for name, w in overhead.get("per_workload", {}).items()
            ],
        )
    else:
        out.append("Not measured" + (f": {overhead['error']}" if overhead.get("error") else "."))
    return out


def _records_section(results: dict[str, Any]) -> list[str]:
    """Every run's record, folded away."""
    out: list[str] = []
    records = results.get("records", [])
    if records:
        out += ["", "## Every run", "", "<details><summary>all records</summary>", ""]
        out += _table(
            ["runtime", "workload", "scenario", "policy", "rep", "deadline s", "finished s", "dev %",
             "core-s", "oracle core-s", "actuations", "load", "others", "steal"],
            [
                [r.get("runtime", "local"), r["workload"], r["scenario"], r["policy"], str(r["repetition"]),
                 f"{r['deadline_s']:.1f}",
                 "–" if r.get("finished_s") is None else f"{r['finished_s']:.1f}",
                 _pct(r.get("deviation_pct"), signed=True),
                 f"{r.get('core_seconds_to_finish') or r['core_seconds']:.1f}",
                 _num(r.get("oracle_core_seconds")), str(r["actuations"]),
                 _pct(r.get("load_1m")), _pct(r.get("others_cores")), _pct(r.get("steal_cores"))]
                for r in records
            ],
        )  # fmt: skip
        out += ["", "</details>"]
    return out


def _reproduce_section() -> list[str]:
    """How to run the benchmark again."""
    return [
        "",
        "## Reproduce",
        "",
        "```bash",
        "make bench-smoke     # 2-3 min: exercises the harness, asserts nothing about performance",
        "make bench-quick     # ~3 h: 6 workloads (T ~ 23 s), every scenario, decor/decor-nn x2",
        "make bench           # the full grid (T ~ 60 s): several hours",
        "make bench-k8s       # ~45 min: the cluster subset (test bed up, 60 runs, test bed down)",
        "python -m bench.report   # this page, from results.json",
        "```",
        "",
        "The harness waits for a quiet machine (1-minute load < 1, no build or test running) and "
        "repeats runs that other processes disturbed; `--resume` continues an interrupted grid.",
        "",
    ]


# ---------------------------------------------------------------------------------------
# Plots (write files)


def plot_metric(
    records: list[dict[str, Any]], summary: dict[str, Any], path: Path, metric: str
) -> None:
    """Per scenario, one dot per run and policy: signed deviation, or core-seconds vs oracle."""
    plt = plotting.pyplot()
    local = summary["local"]
    scenarios, policies = local["scenarios"], local["policies"]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / max(1, len(policies))
    for j, policy in enumerate(policies):
        xs, ys = [], []
        for i, scenario in enumerate(scenarios):
            for r in records:
                if r["policy"] != policy or r["scenario"] != scenario or not bl.valid(r):
                    continue
                if metric == "deviation":
                    y = float(r["deviation_pct"])
                else:
                    ratio = bl.cs_over_oracle_pct(r, local["oracle_core_seconds"])
                    if ratio is None:
                        continue
                    y = ratio
                xs.append(i + (j - (len(policies) - 1) / 2) * width)
                ys.append(y)
        ax.scatter(xs, ys, s=18, color=POLICY_COLOURS.get(policy), label=policy, alpha=0.85)
    ax.axhline(0, color="black", linewidth=0.8)
    if metric == "deviation":
        ax.axhspan(-1, 1, color="green", alpha=0.08, label="±1%")
        ax.set_ylabel("deviation from deadline (%)")
        ax.set_yscale("symlog", linthresh=2)
    else:
        ax.axhspan(-5, 5, color="green", alpha=0.08, label="±5%")
        ax.set_ylabel("core-seconds vs oracle (%)")
    ax.set_xticks(range(len(scenarios)), scenarios)
    ax.legend(fontsize=8, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    plotting.save(fig, path, dpi=110)


def pick_trace(records: list[dict[str, Any]], traces: dict[str, Any], policy: str) -> str | None:
    """The key of one representative trace of ``policy`` (same setting for every policy)."""
    for scenario in TRACE_SCENARIO_PREFERENCE:
        for r in sorted(records, key=lambda r: (r["workload"] != "resnet", r["repetition"])):
            key = bl.record_key(r)
            if (
                r["policy"] == policy
                and r["scenario"] == scenario
                and key in traces
                and bl.valid(r)
            ):
                return key
    return None


def plot_trace(trace: dict[str, Any], record: dict[str, Any], path: Path) -> None:
    plt = plotting.pyplot()
    t = trace["t_s"]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
    progress = [math.nan if p is None else p for p in trace["progress"]]
    top.plot(t, progress, label="progress")
    top.plot(t, [min(1.0, s) for s in trace["set_point"]], "--", label="set point t/D")
    for d in sorted(set(trace["deadline_s"])):
        top.axvline(d, color="red", linewidth=0.8)
        bottom.axvline(d, color="red", linewidth=0.8)
    if record.get("disturb_on_s") is not None:
        for ax in (top, bottom):
            ax.axvspan(
                record["disturb_on_s"],
                record.get("disturb_off_s") or t[-1],
                color="orange",
                alpha=0.15,
            )
    if record.get("finished_s") is not None:
        top.axvline(
            record["finished_s"], color="black", linestyle=":", linewidth=1, label="finished"
        )
    top.set_ylim(0, 1.05)
    top.set_ylabel("progress")
    top.legend(loc="upper left", fontsize=8)
    dev = record.get("deviation_pct")
    top.set_title(
        f"{record['policy']}: {record['workload']}, {record['scenario']}, rep {record['repetition']}"
        + ("" if dev is None else f" — deviation {dev:+.2f}%")
    )
    bottom.step(t, trace["cores"], where="post")
    bottom.set_ylabel("cores")
    bottom.set_xlabel("seconds since start")
    bottom.set_ylim(bottom=0)
    plotting.save(fig, path, dpi=100)


def plot_speed(profiles: dict[str, Any], path: Path) -> None:
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, prof in profiles.items():
        top = max(p["steps_per_s"] for p in prof["curve"])
        ax.plot(
            [p["cores"] for p in prof["curve"]],
            [p["steps_per_s"] / top for p in prof["curve"]],
            "o-",
            label=name,
        )
    ax.plot([0, 2], [0, 1], ":", color="gray", label="linear")
    ax.set_xlabel("cores (CFS quota)")
    ax.set_ylabel("speed / speed at all cores")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    plotting.save(fig, path, dpi=100)


def write_report(out: Path) -> Path:
    """Regenerate ``out/README.md`` and its plots from ``out/results.json``."""
    results = json.loads((out / "results.json").read_text())
    traces_path = out / "traces.json"
    # No traces.json (a results.json copied alone): the runs that left MAX are unknown.
    traces = json.loads(traces_path.read_text()) if traces_path.exists() else None
    summary = summarize(results, traces)
    records = results.get("records", [])
    images: dict[str, str] = {}
    if records:
        plot_metric(records, summary, out / "deviation.png", "deviation")
        images["deviation"] = "deviation.png"
        plot_metric(records, summary, out / "core_seconds.png", "core_seconds")
        images["core_seconds"] = "core_seconds.png"
    by_key = {bl.record_key(r): r for r in records}
    for policy in bl.POLICIES:
        key = None if traces is None else pick_trace(records, traces, policy)
        if traces is not None and key is not None:
            name = f"trace-{policy}.png"
            plot_trace(traces[key], by_key[key], out / name)
            images[f"trace:{policy}"] = name
    if results.get("profiles"):
        plot_speed(results["profiles"], out / "speed.png")
        images["speed"] = "speed.png"
    readme = out / "README.md"
    readme.write_text(render_markdown(results, summary, images))
    return readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    parser.add_argument(
        "out", nargs="?", default=str(ROOT / "docs" / "benchmarks"), help="folder with results.json"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    if not (out / "results.json").exists():
        print(f"no {out / 'results.json'}; run python -m bench.harness first", file=sys.stderr)
        return 2
    readme = write_report(out)
    summary = summarize(json.loads((out / "results.json").read_text()))
    print(f"wrote {readme}")
    for check in summary["checks"]:
        print(
            f"  [{'met' if check.met else 'not measured' if check.met is None else 'NOT met'}] {check.name}: {check.detail}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
