"""``kubectl dtj``: a kubectl plugin for DeadlineTrainingJobs (installed as ``kubectl-dtj``).

::

    kubectl dtj get [NAME] [-n NS | -A]       progress, ETA vs deadline, allocation, admission
    kubectl dtj deadline NAME +20m            move the deadline 20 minutes later (-5m: earlier)
    kubectl dtj deadline NAME --at 2026-11-22T12:00:00Z
    kubectl dtj plot NAME -o job.png [--prometheus URL]

The deadline command sends the same merge patch users write by hand (docs/user-guide.md):
``spec.deadline`` for a job with an absolute deadline, ``spec.duration`` (seconds from
``status.startTime``) for a job with a relative one. It talks to the cluster of the current
kubeconfig (``KUBECONFIG`` honoured; ``--kubeconfig``/``--context`` override) through the
``kubernetes`` client. Parsing, formatting and plotting are pure functions, tested without a
cluster; only :class:`Cluster` does I/O.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from decor.api import vocabulary

ADMISSION_CONDITIONS = (vocabulary.CONDITION_ADMITTED, vocabulary.VERDICT_QUEUED)
"""Condition types that carry the planner's admission verdict, in order of preference."""
PROMETHEUS_TIMEOUT_S = 10.0
PLOT_POINTS = 200
"""Points per series asked of Prometheus for a plot (the step is the job's span over this)."""
MIN_STEP_S = 1.0
PLOT_DPI = 100
PLOT_SIZE_IN = (9.0, 6.0)

_RELATIVE = re.compile(r"^([+-])((?:\d+(?:\.\d+)?[hms])+)$")
_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0}


class UsageError(ValueError):
    """A bad argument; the message says what to write instead."""


# --- pure: time and arguments ----------------------------------------------------------------


def parse_relative_s(text: str) -> float:
    """Signed seconds from ``+20m``, ``-90s``, ``+1h30m`` (a sign is required)."""
    match = _RELATIVE.match(text.strip())
    if not match:
        raise UsageError(f"{text!r} is not a move such as +20m, -90s or +1h30m")
    seconds = sum(float(n) * _UNIT_S[u] for n, u in _PART.findall(match.group(2)))
    return seconds if match.group(1) == "+" else -seconds


def parse_time_s(text: str) -> float:
    """Unix seconds from an RFC 3339 time with a zone (``Z`` or ``+02:00``)."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(f"{text!r} is not an RFC 3339 time such as 2026-11-22T12:00:00Z") from exc
    if parsed.tzinfo is None:
        raise UsageError(f"{text!r} has no time zone: add Z or an offset")
    return parsed.timestamp()


def format_time(seconds: float) -> str:
    """RFC 3339 in UTC to the second, as the API server stores times."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_span(seconds: float) -> str:
    """A signed span for people: ``+4m10s``, ``-35s``, ``+2h05m``."""
    sign = "-" if seconds < 0 else "+"
    total = round(abs(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{sign}{hours}h{minutes:02d}m"
    if minutes:
        return f"{sign}{minutes}m{secs:02d}s"
    return f"{sign}{secs}s"


def _cluster_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "-n", "--namespace", default=default, help="namespace (default: the context's)"
    )
    parser.add_argument(
        "--kubeconfig", default=default, help="kubeconfig file (default: $KUBECONFIG)"
    )
    parser.add_argument("--context", default=default, help="kubeconfig context")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl dtj", description="Look at and steer DeadlineTrainingJobs."
    )
    _cluster_options(parser, default=None)
    # kubectl takes -n, --kubeconfig and --context after the subcommand as well
    # (`kubectl dtj get -n ml`); there they override the ones given before it.
    after = argparse.ArgumentParser(add_help=False)
    _cluster_options(after, default=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    get = commands.add_parser(
        "get", parents=[after], help="progress, ETA vs deadline, allocation, admission"
    )
    get.add_argument("name", nargs="?")
    get.add_argument("-A", "--all-namespaces", action="store_true")
    deadline = commands.add_parser("deadline", parents=[after], help="move a job's deadline")
    deadline.add_argument("name")
    deadline.add_argument("move", nargs="?", help="+20m, -90s, +1h30m: from the current deadline")
    deadline.add_argument("--at", help="an absolute RFC 3339 time")
    plot = commands.add_parser(
        "plot", parents=[after], help="progress vs set point and allocation over time"
    )
    plot.add_argument("name")
    plot.add_argument("-o", "--output", required=True, help="PNG file to write")
    plot.add_argument("--prometheus", help="Prometheus base URL for the history")
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parsed arguments; ``deadline`` needs exactly one of MOVE and ``--at`` (UsageError)."""
    # argparse takes "-5m" for an option; a leading space keeps it a move (stripped later)
    tokens = [f" {a}" if re.match(r"^-\d", a) else a for a in argv]
    args = build_parser().parse_args(tokens)
    if args.command == "deadline" and (args.move is None) == (args.at is None):
        raise UsageError("give a move such as +20m or --at TIME, not both or neither")
    return args


# --- pure: reading a job ---------------------------------------------------------------------


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def admission(status: Mapping[str, Any]) -> str:
    """The planner's verdict: status.admission, else an Admitted/Queued condition, else '-'."""
    if status.get("admission"):
        return str(status["admission"])
    for kind in ADMISSION_CONDITIONS:
        condition = _condition(status, kind)
        if condition is not None:
            if kind == vocabulary.CONDITION_ADMITTED and condition.get("status") != "True":
                return str(condition.get("reason") or "NotAdmitted")
            return kind if condition.get("status") == "True" else f"Not{kind}"
    return "-"


def health(status: Mapping[str, Any]) -> str:
    """The law's verdict: the first true condition among the control conditions."""
    for kind in (
        vocabulary.CONDITION_COMPLETE,
        vocabulary.CONDITION_DEADLINE_MISSED,
        vocabulary.CONDITION_INFEASIBLE,
        vocabulary.CONDITION_AT_RISK,
        vocabulary.CONDITION_METRICS_UNAVAILABLE,
    ):
        condition = _condition(status, kind)
        if condition is not None and condition.get("status") == "True":
            return kind
    condition = _condition(status, vocabulary.CONDITION_ON_TRACK)
    return (
        vocabulary.CONDITION_ON_TRACK
        if condition is not None and condition.get("status") == "True"
        else "-"
    )


HEADER = ("NAMESPACE", "NAME", "PHASE", "PROGRESS", "ETA-DEADLINE", "ALLOCATION", "STATE",
          "ADMISSION", "DEADLINE")  # fmt: skip


def job_row(job: Mapping[str, Any]) -> tuple[str, ...]:
    """One line of ``kubectl dtj get``. ETA-DEADLINE is the predicted finish minus the
    deadline: negative is early, positive late."""
    status = job.get("status") or {}
    meta = job["metadata"]
    progress = status.get("progress")
    eta, deadline = status.get("eta"), status.get("deadline")
    slack = "-"
    if eta and deadline:
        slack = format_span(parse_time_s(eta) - parse_time_s(deadline))
    allocation = str(status.get("allocation") or "-")
    desired = status.get("desiredAllocation")
    if desired and str(desired) != allocation:
        allocation = f"{allocation}->{desired}"
    return (
        str(meta.get("namespace", "")),
        str(meta["name"]),
        str(status.get("phase") or "-"),
        "-" if progress is None else f"{float(progress) * 100:.1f}%",
        slack,
        allocation,
        health(status),
        admission(status),
        str(deadline or "-"),
    )


def format_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def deadline_patch(job: Mapping[str, Any], new_deadline_s: float) -> dict[str, Any]:
    """The merge patch a user writes by hand: spec.deadline for an absolute deadline, or
    spec.duration (whole seconds from status.startTime) for a relative one."""
    spec = job.get("spec") or {}
    if "duration" in spec and "deadline" not in spec:
        start = (job.get("status") or {}).get("startTime")
        if not start:
            raise UsageError("the job has a duration and has not started: move it with --at later")
        duration_s = math.ceil(new_deadline_s - parse_time_s(start))
        if duration_s <= 0:
            raise UsageError(f"{format_time(new_deadline_s)} is before the job started ({start})")
        return {"spec": {"duration": f"{duration_s}s"}}
    return {"spec": {"deadline": format_time(new_deadline_s)}}


def current_deadline_s(job: Mapping[str, Any]) -> float:
    """The effective deadline: status.deadline, else spec.deadline (UsageError if neither)."""
    for source in (
        (job.get("status") or {}).get("deadline"),
        (job.get("spec") or {}).get("deadline"),
    ):
        if source:
            return parse_time_s(str(source))
    raise UsageError("the job has no deadline yet (a duration starts when the job starts)")


# --- pure: plotting --------------------------------------------------------------------------


@dataclass(frozen=True)
class PlotData:
    """What ``plot`` draws. Times are Unix seconds; progress and set point 0..1."""

    title: str
    start_s: float
    deadline_s: float
    progress: list[tuple[float, float]]
    allocation: list[tuple[float, float]]
    allocation_unit: str
    source: str
    eta_s: float | None = None


def allocation_value(text: Any) -> float | None:
    """Cores from ``1500m``/``2``, or a GPU count; None if absent."""
    if text is None or text == "":
        return None
    raw = str(text)
    return float(raw[:-1]) / 1000.0 if raw.endswith("m") else float(raw)


def plot_data_from_status(job: Mapping[str, Any], now_s: float) -> PlotData:
    """What the job's status alone shows: status keeps no history, so progress is a straight
    line from (start, 0) to (now, progress) with the ETA projected, and the allocation is the
    value in effect now, drawn flat."""
    status = job.get("status") or {}
    meta = job["metadata"]
    if not status.get("startTime"):
        raise UsageError("the job has not started: nothing to plot")
    start_s = parse_time_s(status["startTime"])
    deadline_s = current_deadline_s(job)
    progress = float(status.get("progress") or 0.0)
    eta_s = parse_time_s(status["eta"]) if status.get("eta") else None
    allocation = allocation_value(status.get("allocation"))
    mode = ((job.get("spec") or {}).get("resources") or {}).get("mode", "cpu")
    return PlotData(
        title=f"{meta.get('namespace', '')}/{meta['name']}",
        start_s=start_s,
        deadline_s=deadline_s,
        progress=[(start_s, 0.0), (now_s, progress)],
        allocation=[] if allocation is None else [(start_s, allocation), (now_s, allocation)],
        allocation_unit="GPUs" if mode == "gpu" else "cores",
        source="job status (no history kept: progress interpolated, allocation as of now)",
        eta_s=eta_s,
    )


def set_point(times_s: Sequence[float], start_s: float, deadline_s: float) -> list[float]:
    """SP = (t - start) / (deadline - start), clamped to 0..1."""
    span_s = max(deadline_s - start_s, 1e-9)
    return [min(1.0, max(0.0, (t - start_s) / span_s)) for t in times_s]


def render_png(data: PlotData, path: str) -> int:
    """Two panels sharing the time axis: progress vs set point, and allocation. Returns the
    number of axes drawn (2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=PLOT_SIZE_IN)
    try:
        end_s = max([data.deadline_s] + [t for t, _ in data.progress + data.allocation])
        if data.eta_s is not None:
            end_s = max(end_s, data.eta_s)

        def rel_min(t: float) -> float:
            return (t - data.start_s) / 60.0

        ramp = [data.start_s, data.deadline_s, end_s]
        top.plot([rel_min(t) for t in ramp], set_point(ramp, data.start_s, data.deadline_s),
                 "--", color="grey", label="set point")  # fmt: skip
        if data.progress:
            top.plot([rel_min(t) for t, _ in data.progress], [v for _, v in data.progress],
                     color="tab:blue", label="progress")  # fmt: skip
            if data.eta_s is not None:
                last_t, last_v = data.progress[-1]
                top.plot([rel_min(last_t), rel_min(data.eta_s)], [last_v, 1.0], ":",
                         color="tab:blue", label="projected (ETA)")  # fmt: skip
        top.axvline(rel_min(data.deadline_s), color="tab:red", linewidth=1, label="deadline")
        top.set_ylabel("progress (0..1)")
        top.set_ylim(0.0, 1.05)
        top.legend(loc="upper left")
        top.set_title(f"{data.title}: {data.source}", fontsize="small")
        if data.allocation:
            bottom.step([rel_min(t) for t, _ in data.allocation], [v for _, v in data.allocation],
                        where="post", color="tab:green")  # fmt: skip
        bottom.axvline(rel_min(data.deadline_s), color="tab:red", linewidth=1)
        bottom.set_ylabel(f"allocation ({data.allocation_unit})")
        bottom.set_xlabel("minutes since the job started")
        bottom.set_ylim(bottom=0.0)
        fig.tight_layout()
        fig.savefig(path, dpi=PLOT_DPI)
        return len(fig.axes)
    finally:
        plt.close(fig)


# --- I/O -------------------------------------------------------------------------------------


def prometheus_range(
    url: str, query: str, start_s: float, end_s: float
) -> list[tuple[float, float]]:
    """The first series of a range query, as (time, value) pairs ([] when none)."""
    step_s = max(MIN_STEP_S, (end_s - start_s) / PLOT_POINTS)
    params = urllib.parse.urlencode(
        {"query": query, "start": start_s, "end": end_s, "step": f"{step_s:.3f}"}
    )
    with urllib.request.urlopen(  # noqa: S310 - the user's Prometheus URL
        f"{url.rstrip('/')}/api/v1/query_range?{params}", timeout=PROMETHEUS_TIMEOUT_S
    ) as response:
        body = json.load(response)
    result = body.get("data", {}).get("result") or []
    if not result:
        return []
    return [(float(t), float(v)) for t, v in result[0]["values"] if math.isfinite(float(v))]


def plot_data_from_prometheus(job: Mapping[str, Any], url: str, now_s: float) -> PlotData:
    """History from Prometheus: progress from the trainer's metrics (all of the job's pods,
    by the decor_job label of the chart's PodMonitor or the pod name), allocation from the
    chart's kube-state-metrics config (decor_job_allocation); status fills what is missing."""
    base = plot_data_from_status(job, now_s)
    meta = job["metadata"]
    ns, name = meta.get("namespace", ""), meta["name"]
    # A regular expression inside a PromQL string: its backslashes are escaped once more.
    pattern = re.escape(name).replace("\\", "\\\\")
    pods = f'namespace="{ns}",pod=~"{pattern}-.*"'
    progress = prometheus_range(
        url,
        f"max(decor_steps_completed_total{{{pods}}}) / max(decor_steps_planned{{{pods}}} > 0)",
        base.start_s,
        now_s,
    )
    allocation = prometheus_range(
        url, f'decor_job_allocation{{namespace="{ns}",job="{name}"}}', base.start_s, now_s
    )
    return PlotData(
        title=base.title,
        start_s=base.start_s,
        deadline_s=base.deadline_s,
        progress=progress or base.progress,
        allocation=allocation or base.allocation,
        allocation_unit=base.allocation_unit,
        source=f"Prometheus {url}"
        + ("" if progress else "; no progress series: from status")
        + ("" if allocation else "; no decor_job_allocation series: allocation from status"),
        eta_s=base.eta_s,
    )


class Cluster:
    """The DeadlineTrainingJob API of the current kubeconfig."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        from kubernetes import client, config

        config.load_kube_config(config_file=kubeconfig, context=context)
        self.api = client.CustomObjectsApi()
        _contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        if context:
            active = next(c for c in _contexts if c["name"] == context)
        self.default_namespace = (active.get("context") or {}).get("namespace") or "default"

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        body: Any = self.api.get_namespaced_custom_object(
            vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL, name
        )
        return dict(body)

    def list(self, namespace: str | None) -> list[dict[str, Any]]:
        body: Any
        if namespace is None:
            body = self.api.list_cluster_custom_object(
                vocabulary.API_GROUP, vocabulary.API_VERSION, vocabulary.PLURAL
            )
        else:
            body = self.api.list_namespaced_custom_object(
                vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL
            )
        return list(body.get("items") or [])

    def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.api.patch_namespaced_custom_object(
            vocabulary.API_GROUP, vocabulary.API_VERSION, namespace, vocabulary.PLURAL, name, patch
        )


def run(args: argparse.Namespace, cluster: Cluster, now_s: float) -> str:
    """Carry out one command; returns what to print."""
    namespace = args.namespace or cluster.default_namespace
    if args.command == "get":
        if args.name:
            jobs = [cluster.get(namespace, args.name)]
        else:
            jobs = cluster.list(None if args.all_namespaces else namespace)
        if not jobs:
            return "No DeadlineTrainingJobs found."
        return format_table([HEADER, *(job_row(j) for j in jobs)])
    job = cluster.get(namespace, args.name)
    if args.command == "deadline":
        if args.at is not None:
            new_s = parse_time_s(args.at)
        else:
            new_s = current_deadline_s(job) + parse_relative_s(args.move)
        patch = deadline_patch(job, new_s)
        cluster.patch(namespace, args.name, patch)
        return (
            f"{namespace}/{args.name}: deadline -> {format_time(new_s)} (patch {json.dumps(patch)})"
        )
    if args.prometheus:
        data = plot_data_from_prometheus(job, args.prometheus, now_s)
    else:
        data = plot_data_from_status(job, now_s)
    render_png(data, args.output)
    return f"wrote {args.output} ({data.source})"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        print(run(args, Cluster(args.kubeconfig, args.context), time.time()))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a CLI reports, it does not trace back
        reason = getattr(exc, "reason", None) or exc
        print(f"error: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
