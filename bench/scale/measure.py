"""The scale benchmark's pure parts: job manifests, and turning what was read (the API
server's audit log and /metrics, Prometheus's and the operator's /metrics, /proc samples,
patch and resize times, job outcomes) into one results record. No I/O here.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from decor.api import vocabulary

RESULT_FIELDS = (
    "jobs",
    "period_s",
    "operator_cores_mean",
    "operator_rss_mib_max",
    "api_requests_per_s_per_job",
    "prometheus_queries_per_s",
    "drift_p99_s",
    "patch_to_resize_p50_s",
    "patch_to_resize_p99_s",
    "mean_abs_deviation_pct",
)
"""The fields every record of docs/benchmarks/scale/results.json has ."""

KWOK_NODE_SELECTOR = {"type": "kwok"}
KWOK_TOLERATION = {
    "key": "kwok.x-k8s.io/node",
    "operator": "Exists",
    "effect": "NoSchedule",
}
CPU_WORKLOADS = ("resnet", "vgg", "lstm")
"""Reference workloads whose measured speed curves the simulated CPU trainers follow."""
GPU_WORKLOAD = "gpu"
TRAINER_IMAGE = "localhost/decor/trainer:0.1.0"
"""Never pulled: kwok runs no container. Named as a real job would."""
CHECKPOINT_PATH = "/checkpoint"
MIB = 1024 * 1024

Metrics = dict[str, list[tuple[dict[str, str], float]]]
"""A /metrics read: name -> [(labels, value)] (:func:`parse_metrics`)."""


# ---------------------------------------------------------------------------------------------
# The fleet of jobs


@dataclass(frozen=True)
class JobPlan:
    """One benchmark job: its workload, size and deadline."""

    name: str
    mode: str  # cpu | gpu
    workload: str
    epochs: int
    steps_per_epoch: int
    duration_s: float
    min_allocation: float
    max_allocation: float


MAX_ALLOCATION = 4
"""Every simulated job's max (cores or GPUs)."""
NEED_MAX_SPEED_SHARE = 0.85
"""A job's deadline needs at most this share of its workload's best speed up to its max: the
rest is room for pods started late on a loaded bed and the simulated noise (a deadline that
only the best speed makes measures the workload, not the law)."""


def plan_jobs(
    count: int,
    *,
    gpu_share: float,
    duration_s: tuple[float, float],
    target_allocation: tuple[float, float],
    rates: Mapping[str, Any],
    startup_s: float,
    seed: int,
) -> list[JobPlan]:
    """``count`` jobs, ``gpu_share`` of them GPU jobs, each sized so that the allocation the
    deadline needs is drawn from ``target_allocation`` (cores or GPUs): steps =
    speed(target) x (deadline - start-up), at most :data:`NEED_MAX_SPEED_SHARE` of the
    workload's best speed up to its max (a workload that runs no faster above one core
    needs less than one core). ``rates``: workload -> callable(allocation) -> steps/s (the
    simulator's curves). Deterministic for a ``seed``."""
    rng = random.Random(seed)
    gpu_jobs = round(count * gpu_share)
    best = {  # each workload's best speed up to the max
        name: max(rate(float(cores)) for cores in range(1, MAX_ALLOCATION + 1))
        for name, rate in rates.items()
    }
    plans = []
    for index in range(count):
        gpu = index % max(1, round(1 / gpu_share)) == 0 and gpu_jobs > 0 if gpu_share else False
        if gpu:
            gpu_jobs -= 1
        mode = "gpu" if gpu else "cpu"
        workload = GPU_WORKLOAD if gpu else CPU_WORKLOADS[index % len(CPU_WORKLOADS)]
        deadline_s = rng.uniform(*duration_s)
        target = rng.uniform(*target_allocation)
        if gpu:
            target = float(max(1, round(target)))
        speed = min(rates[workload](target), NEED_MAX_SPEED_SHARE * best[workload])
        steps = max(1, round(speed * max(1.0, deadline_s - startup_s)))
        epochs = 4
        plans.append(
            JobPlan(
                name=f"scale-{index:04d}",
                mode=mode,
                workload=workload,
                epochs=epochs,
                steps_per_epoch=max(1, math.ceil(steps / epochs)),
                duration_s=round(deadline_s),
                min_allocation=1.0 if gpu else 0.5,
                max_allocation=float(MAX_ALLOCATION),
            )
        )
    return plans


# A patch tightens a job's deadline to this share of the time it has left, or loosens it by
# the other factor for a job already at its max; a tightened one still leaves MAX this
# much speed to spare (a deadline MAX cannot meet measures the workload, not the law).
PATCH_TIGHTEN, PATCH_LOOSEN, PATCH_MAX_SPEED_SHARE = 0.6, 1.6, 0.85


def patched_remaining_s(
    remaining_s: float, steps_left: float, steps_per_s_at_max: float, at_max: bool
) -> float:
    """The time left that a deadline patch gives a job: ``remaining_s`` x 1.6 for a job at
    its max; else x 0.6, but no less than its ``steps_left`` take at 85 % of its speed at
    max, and never more than it had."""
    if at_max:
        return remaining_s * PATCH_LOOSEN
    floor_s = steps_left / (PATCH_MAX_SPEED_SHARE * steps_per_s_at_max)
    return min(remaining_s, max(remaining_s * PATCH_TIGHTEN, floor_s))


def job_manifest(plan: JobPlan, namespace: str, period_s: float) -> dict[str, Any]:
    """The DeadlineTrainingJob of ``plan``, for pods on kwok's fake nodes."""
    container: dict[str, Any] = {
        "name": "trainer",
        "image": TRAINER_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["python3", "-m", "decor_trainer.train"],
        "args": ["--workload", plan.workload],
    }
    pod_spec: dict[str, Any] = {
        "nodeSelector": dict(KWOK_NODE_SELECTOR),
        "tolerations": [dict(KWOK_TOLERATION)],
        "containers": [container],
    }
    spec: dict[str, Any] = {
        "duration": f"{plan.duration_s:g}s",
        "epochs": plan.epochs,
        "stepsPerEpoch": plan.steps_per_epoch,
        "resources": {
            "mode": plan.mode,
            "min": f"{plan.min_allocation:g}",
            "max": f"{plan.max_allocation:g}",
        },
        "control": {"periodSeconds": period_s},
        "template": {"spec": pod_spec},
    }
    if plan.mode == "gpu":
        # The checkpoint lives in the template's own volume: no claim to provision here.
        container["volumeMounts"] = [{"name": "checkpoint", "mountPath": CHECKPOINT_PATH}]
        pod_spec["volumes"] = [{"name": "checkpoint", "emptyDir": {}}]
        spec["checkpoint"] = {"path": CHECKPOINT_PATH}
    return {
        "apiVersion": f"{vocabulary.API_GROUP}/{vocabulary.API_VERSION}",
        "kind": vocabulary.KIND,
        "metadata": {"name": plan.name, "namespace": namespace},
        "spec": spec,
    }


def nodes_for(plans: Sequence[JobPlan], node_cores: float, node_gpus: float) -> tuple[int, int]:
    """(CPU nodes, GPU nodes) that hold every job at 3/4 of its max: room to grow for most,
    contention when many want their max at once."""
    share = 0.75
    cpu = sum(p.max_allocation * share for p in plans if p.mode == "cpu")
    gpu = sum(p.max_allocation * share for p in plans if p.mode == "gpu")
    return max(1, math.ceil(cpu / node_cores)), (math.ceil(gpu / node_gpus) if gpu else 0)


# ---------------------------------------------------------------------------------------------
# Reading what was measured


def parse_time_s(stamp: str) -> float:
    """RFC 3339 with optional fraction (the audit log's microseconds) -> Unix s."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def audit_counts(
    lines: Iterable[str], user: str, start_s: float, end_s: float
) -> Counter[tuple[str, str]]:
    """Requests of ``user`` received in [start_s, end_s), by (verb, resource[/subresource]),
    from the API server's JSON audit log (one event per request: ResponseComplete)."""
    return audit_counts_by_user(lines, [user], start_s, end_s)[user]


def audit_counts_by_user(
    lines: Iterable[str], users: Sequence[str], start_s: float, end_s: float
) -> dict[str, Counter[tuple[str, str]]]:
    """Per user of ``users`` (each operator replica has its own client identity), its
    requests received in [start_s, end_s) by (verb, resource[/subresource]), from the API
    server's JSON audit log (one event per request: ResponseComplete). Every user of
    ``users`` has an entry, empty when it sent nothing; other users' requests are left out."""
    counts: dict[str, Counter[tuple[str, str]]] = {user: Counter() for user in users}
    for line in lines:
        if not any(user in line for user in users):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        user = (event.get("user") or {}).get("username")
        if user not in counts:
            continue
        received = parse_time_s(str(event.get("requestReceivedTimestamp")))
        if not start_s <= received < end_s:
            continue
        ref = event.get("objectRef") or {}
        resource = str(ref.get("resource") or event.get("requestURI", "?").split("?")[0])
        if ref.get("subresource"):
            resource += "/" + str(ref["subresource"])
        counts[user][(str(event.get("verb")), resource)] += 1
    return counts


def per_second_by_kind(
    counts: Mapping[tuple[str, str], float], window_s: float
) -> dict[str, float]:
    """Requests per second by ``"verb resource"`` over a window of ``window_s`` seconds."""
    return {
        f"{verb} {resource}": round(count / window_s, 4)
        for (verb, resource), count in sorted(counts.items())
    }


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition -> name -> [(labels, value)]."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if "{" in head:
            name, _, rest = head.partition("{")
            labels = _parse_labels(rest.rstrip("}"))
        else:
            name, labels = head, {}
        try:
            out.setdefault(name.strip(), []).append((labels, float(value)))
        except ValueError:
            continue
    return out


def merge_metrics(reads: Iterable[Mapping[str, list[tuple[dict[str, str], float]]]]) -> Metrics:
    """Several processes' /metrics reads as one: samples of the same name and labels added
    (the replicas' counters and histogram buckets summed; a gauge too)."""
    sums: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for read in reads:
        for name, samples in read.items():
            for labels, value in samples:
                key = tuple(sorted(labels.items()))
                by_labels = sums.setdefault(name, {})
                by_labels[key] = by_labels.get(key, 0.0) + value
    return {
        name: [(dict(key), value) for key, value in by_labels.items()]
        for name, by_labels in sums.items()
    }


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.index("=", i)
        key = text[i:eq].strip().lstrip(",").strip()
        j = eq + 2  # past ="
        value = []
        while text[j] != '"':
            if text[j] == "\\":
                j += 1
            value.append(text[j])
            j += 1
        labels[key] = "".join(value)
        i = j + 1
        while i < len(text) and text[i] in ", ":
            i += 1
    return labels


def metric_sum(
    metrics: Mapping[str, list[tuple[dict[str, str], float]]],
    name: str,
    **match: str,
) -> float:
    """Sum of ``name``'s samples whose labels include ``match``."""
    return sum(
        value
        for labels, value in metrics.get(name, [])
        if all(labels.get(k) == v for k, v in match.items())
    )


def histogram_delta(
    before: Mapping[str, list[tuple[dict[str, str], float]]],
    after: Mapping[str, list[tuple[dict[str, str], float]]],
    name: str,
    **match: str,
) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of ``name``'s buckets between two reads (those whose
    labels include ``match``, added up)."""

    def buckets(m: Mapping[str, list[tuple[dict[str, str], float]]]) -> dict[float, float]:
        out: dict[float, float] = {}
        for labels, value in m.get(f"{name}_bucket", []):
            if all(labels.get(k) == v for k, v in match.items()):
                le = float(labels["le"])
                out[le] = out.get(le, 0.0) + value
        return out

    b, a = buckets(before), buckets(after)
    return sorted((le, a[le] - b.get(le, 0.0)) for le in a)


def histogram_mean_delta(
    before: Mapping[str, list[tuple[dict[str, str], float]]],
    after: Mapping[str, list[tuple[dict[str, str], float]]],
    name: str,
    **match: str,
) -> tuple[float, float]:
    """(count, sum) of histogram ``name`` observed between two reads (the samples whose
    labels include ``match``)."""
    count = metric_sum(after, f"{name}_count", **match) - metric_sum(
        before, f"{name}_count", **match
    )
    total = metric_sum(after, f"{name}_sum", **match) - metric_sum(before, f"{name}_sum", **match)
    return count, total


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus's histogram_quantile over cumulative (upper bound, count) buckets: linear
    within the bucket; the highest finite bound when it falls in +Inf. None without data."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return previous_bound
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (
                count - previous_count
            )
        previous_bound, previous_count = bound, count
    return previous_bound


def histogram_summary(
    before: Mapping[str, list[tuple[dict[str, str], float]]],
    after: Mapping[str, list[tuple[dict[str, str], float]]],
    name: str,
    **match: str,
) -> dict[str, Any]:
    """Histogram ``name`` between two reads (its samples whose labels include ``match``):
    how many observations, their total and mean seconds, and the p99 as Prometheus
    interpolates it within a bucket."""
    count, total = histogram_mean_delta(before, after, name, **match)
    p99 = histogram_quantile(0.99, histogram_delta(before, after, name, **match))
    return {
        "count": int(count),
        "s_total": round(total, 3),
        "s_mean": round(total / count, 5) if count else None,
        "s_p99": rounded(p99),
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` (0-1) percentile by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


ANSWER_RESIZE_WINDOW_S = 1.0
"""A resize seen within this long of the operator's answer to a patch (its status write of
the new deadline, which follows the period's resize) is that answer's resize."""


def answered_with_resize(patch: Mapping[str, Any]) -> bool:
    """Whether the operator's answer to ``patch`` came with a resize (seen within
    :data:`ANSWER_RESIZE_WINDOW_S` of it); else it kept the allocation, or never answered."""
    return (
        patch.get("to_answer_s") is not None
        and patch.get("to_resize_s") is not None
        and patch["to_resize_s"] <= patch["to_answer_s"] + ANSWER_RESIZE_WINDOW_S
    )


def patch_answers(patches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How the operator answered the deadline patches (``to_answer_s``: patch to the status
    write of the new deadline; ``to_resize_s``: patch to the first resize after it, of any
    cause). An answer either resized (the resize came with it) or kept the allocation (the
    law found the one running still right, or the planner had no room): a later resize is
    then not the patch's answer. Percentiles in seconds, by job kind too."""

    def summary(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        answered = [p for p in group if p.get("to_answer_s") is not None]
        resized = [p for p in answered if answered_with_resize(p)]
        to_answer = [float(p["to_answer_s"]) for p in answered]
        to_resize = [float(p["to_resize_s"]) for p in resized]
        return {
            "patches": len(group),
            "unanswered": len(group) - len(answered),
            "answered_with_resize": len(resized),
            "answered_keeping_allocation": len(answered) - len(resized),
            "to_answer_p50_s": rounded(percentile(to_answer, 0.5)),
            "to_answer_p99_s": rounded(percentile(to_answer, 0.99)),
            "answer_resize_p50_s": rounded(percentile(to_resize, 0.5)),
            "answer_resize_p99_s": rounded(percentile(to_resize, 0.99)),
        }

    kinds = sorted({str(p.get("mode")) for p in patches})
    return {
        "all": summary(patches),
        **{kind: summary([p for p in patches if p.get("mode") == kind]) for kind in kinds},
    }


@dataclass(frozen=True)
class ProcSample:
    """One /proc read of the operator: Unix s, CPU seconds used so far, resident bytes."""

    time_s: float
    cpu_s: float
    rss_bytes: int


def parse_proc_stat(stat: str, clock_ticks_per_s: int) -> float:
    """CPU seconds (user + system) from the text of /proc/PID/stat."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / clock_ticks_per_s


class MachineCpu(NamedTuple):
    """The whole machine's CPU time from /proc/stat, in clock ticks."""

    busy: float
    """user, nice, system, irq and softirq (guest time is already in user time)."""
    steal: float
    """The hypervisor ran other guests while this machine had work to run."""
    total: float
    """Every kind of time, idle, iowait and steal included."""


def parse_machine_cpu(stat: str) -> MachineCpu:
    """The whole machine's CPU time from the text of /proc/stat (its ``cpu`` line)."""
    fields = stat.splitlines()[0].split()
    if fields[0] != "cpu":
        raise ValueError(f"not /proc/stat: {stat[:40]!r}")
    user, nice, system, idle, iowait, irq, softirq, steal = (float(v) for v in fields[1:9])
    busy = user + nice + system + irq + softirq
    return MachineCpu(busy, steal, busy + idle + iowait + steal)


def machine_busy_cores(before: MachineCpu, after: MachineCpu, cores: int) -> float | None:
    """Mean cores the machine's own processes kept busy between two reads."""
    total = after.total - before.total
    return None if total <= 0 else cores * (after.busy - before.busy) / total


SATURATED_SHARE = 0.9
"""A window in which the machine's own processes kept at least this share of its cores busy
ran on a saturated machine: the operator's periods, the API server and the simulated
trainers queued for the CPU, and its figures describe the machine as much as the operator
(three 1,000-job runs on a 2-core VM at 1.90-1.98 cores: drift p99 2.5-8.9 s, CPU jobs
0.76-3.47 % off, against 1.33 cores, 0.16 s and 0.11 % on a VM with headroom)."""


def saturated(busy_cores: float | None, cores: int | None) -> bool:
    """Whether a window with ``busy_cores`` busy on average of ``cores`` ran saturated
    (``SATURATED_SHARE``); False where either is not known."""
    if busy_cores is None or not cores:
        return False
    return busy_cores >= SATURATED_SHARE * cores


def machine_steal_cores(before: MachineCpu, after: MachineCpu, cores: int) -> float | None:
    """Mean cores the hypervisor gave other guests between two reads (steal time)."""
    total = after.total - before.total
    return None if total <= 0 else cores * (after.steal - before.steal) / total


def parse_proc_rss(status: str) -> int:
    """VmRSS in bytes from the text of /proc/PID/status."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_mib_max(samples: Sequence[ProcSample]) -> float | None:
    """The largest resident memory of the samples in MiB (one decimal); 0 for none."""
    return rounded(max((s.rss_bytes for s in samples), default=0) / MIB, 1)


def cores_mean(samples: Sequence[ProcSample]) -> float | None:
    """Mean cores over the samples' span."""
    if len(samples) < 2 or samples[-1].time_s <= samples[0].time_s:
        return None
    return (samples[-1].cpu_s - samples[0].cpu_s) / (samples[-1].time_s - samples[0].time_s)


def build_record(
    *,
    jobs: int,
    period_s: float,
    window_s: float,
    proc: Sequence[ProcSample],
    operator_requests: Mapping[tuple[str, str], int],
    all_requests: Mapping[tuple[str, str], float],
    prometheus_queries: float,
    lateness_buckets: Sequence[tuple[float, float]],
    patches: Sequence[Mapping[str, Any]],
    resize_timeout_s: float,
    deviations_pct: Sequence[float],
    outcomes: Mapping[str, int],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One results record (every field of :data:`RESULT_FIELDS`, plus the breakdowns).

    ``patches``: one entry per deadline patch (``to_answer_s``, ``to_resize_s``). Patch to
    resize counts the patches the operator answered with a resize; an answer that kept the
    allocation has no resize of its own, and the first later resize (another period's
    decision) is recorded apart, as ``first_resize_any_cause_*``, within ``resize_timeout_s``."""
    total = sum(operator_requests.values())
    to_resize, any_cause = _patch_to_resize_s(patches, resize_timeout_s)
    by_kind = per_second_by_kind(operator_requests, window_s)
    mean_abs = sum(abs(d) for d in deviations_pct) / len(deviations_pct) if deviations_pct else None
    record: dict[str, Any] = {
        "jobs": jobs,
        "period_s": period_s,
        "operator_cores_mean": rounded(cores_mean(proc)),
        "operator_rss_mib_max": rss_mib_max(proc),
        "api_requests_per_s_per_job": rounded(total / window_s / jobs if jobs else None),
        "prometheus_queries_per_s": rounded(prometheus_queries / window_s),
        "drift_p99_s": rounded(histogram_quantile(0.99, lateness_buckets)),
        "patch_to_resize_p50_s": rounded(percentile(to_resize, 0.5)),
        "patch_to_resize_p99_s": rounded(percentile(to_resize, 0.99)),
        "mean_abs_deviation_pct": rounded(mean_abs),
        "window_s": round(window_s, 1),
        "api_requests_per_s": rounded(total / window_s),
        "operator_requests_per_s_by_kind": by_kind,
        "all_clients_requests_per_s": rounded(sum(all_requests.values()) / window_s),
        "drift_p50_s": rounded(histogram_quantile(0.5, lateness_buckets)),
        "periods_in_window": int(lateness_buckets[-1][1]) if lateness_buckets else 0,
        "deadline_patches": len(patches),
        "deadline_patches_answered_with_resize": len(to_resize),
        "first_resize_any_cause_p50_s": rounded(percentile(any_cause, 0.5)),
        "first_resize_any_cause_p99_s": rounded(percentile(any_cause, 0.99)),
        "deadline_patches_without_resize": len(patches) - len(any_cause),
        "jobs_finished": len(deviations_pct),
        "outcomes": dict(outcomes),
        "max_abs_deviation_pct": rounded(max((abs(d) for d in deviations_pct), default=None)),
    }
    record.update(extra or {})
    return record


def _patch_to_resize_s(
    patches: Sequence[Mapping[str, Any]], resize_timeout_s: float
) -> tuple[list[float], list[float]]:
    """Seconds from each deadline patch to its resize: over the patches answered with a
    resize, and to the first resize of any cause within ``resize_timeout_s``."""
    to_resize = [float(p["to_resize_s"]) for p in patches if answered_with_resize(p)]
    any_cause = [
        float(p["to_resize_s"])
        for p in patches
        if p.get("to_resize_s") is not None and p["to_resize_s"] <= resize_timeout_s
    ]
    return to_resize, any_cause


def deviation_by_group(
    deviations_pct: Mapping[str, float], plans: Sequence[JobPlan], patched: Iterable[str]
) -> dict[str, dict[str, float | int | None]]:
    """Mean and max |deviation| (and how many jobs) per group of jobs: CPU or GPU, with its
    deadline patched in the window or not. Jobs without a deviation are left out."""
    mode = {p.name: p.mode for p in plans}
    moved = set(patched)
    groups: dict[str, list[float]] = {"cpu": [], "gpu": [], "patched": [], "unpatched": []}
    for name, deviation in deviations_pct.items():
        groups[mode.get(name, "cpu")].append(abs(deviation))
        groups["patched" if name in moved else "unpatched"].append(abs(deviation))
    return {
        group: {
            "jobs": len(values),
            "mean_abs_pct": rounded(sum(values) / len(values)) if values else None,
            "max_abs_pct": rounded(max(values, default=None)),
        }
        for group, values in groups.items()
    }


def worst_jobs(
    jobs: Iterable[Mapping[str, Any]], mode_of: Mapping[str, str], count: int = 5
) -> list[dict[str, Any]]:
    """The ``count`` jobs farthest from their deadlines, with what they did (to see why)."""
    rows: list[dict[str, Any]] = []
    for job in jobs:
        status = job.get("status") or {}
        deviation = (status.get("outcome") or {}).get("deviationPercent")
        if deviation is None:
            continue
        name = str(job["metadata"]["name"])
        rows.append(
            {
                "job": name,
                "mode": mode_of.get(name, "cpu"),
                "deviation_pct": float(deviation),
                **{k: status.get(k) for k in ("resizes", "restarts", "podsCreated", "podFailures")},
            }
        )
    return sorted(rows, key=lambda r: -abs(r["deviation_pct"]))[:count]


def rounded(value: float | None, digits: int = 4) -> float | None:
    """``value`` rounded to ``digits`` decimals; None stays None (not measured)."""
    return None if value is None else round(value, digits)
