"""A trainer's progress as the operator reads it: the exposition's samples, parsed into a
:class:`Progress` (or the :class:`MetricsError` saying why there is none), and Prometheus's
answer grouped by pod. Pure: the HTTP reads are :mod:`decor.adapter.scrape`'s. Metric names
are in docs/contract.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from decor_trainer import contract

from decor.core.control import Observation

# The samples read, by their exposition names (a counter's carries ``_total``).
STEPS_DONE = f"{contract.STEPS_COMPLETED}_total"
STEPS_PLANNED = contract.STEPS_PLANNED
LAST_STEP_TIME = contract.LAST_STEP_TIMESTAMP
EPOCHS_DONE = contract.EPOCHS_COMPLETED
RESTART_SECONDS = contract.RESTART_DURATION
SAMPLES_DONE = f"{contract.SAMPLES_COMPLETED}_total"
THREADS_FOLLOW_LIMIT = contract.THREADS_FOLLOW_LIMIT
PROGRESS_NAMES = (
    STEPS_DONE,
    STEPS_PLANNED,
    LAST_STEP_TIME,
    EPOCHS_DONE,
    RESTART_SECONDS,
    THREADS_FOLLOW_LIMIT,
)


@dataclass(frozen=True)
class Progress:
    """What the trainer last reported."""

    steps_done: float
    steps_planned: float
    last_step_time_s: float | None  # Unix s of the last completed step (None before any)
    epochs_done: float | None = None
    restart_s: float | None = None  # the trainer's last restart, save to first step (None: 0)
    threads_follow_limit: bool = False  # one thread per whole core of its CPU limit, it says


class MetricsError(Exception):
    """Progress could not be read; the message says why."""


def parse_exposition(text: str) -> dict[str, float]:
    """Unlabelled samples of the Prometheus text format: name -> value.

    Labelled series are ignored (the reporter publishes none); so are comments.
    """
    samples: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 2 or "{" in parts[0]:
            continue
        try:
            samples[parts[0]] = float(parts[1])
        except ValueError:
            continue
    return samples


def progress_from_samples(samples: dict[str, float]) -> Progress:
    """Validate the reporter's samples into Progress, or raise MetricsError."""
    missing = [name for name in (STEPS_DONE, STEPS_PLANNED) if name not in samples]
    if missing:
        raise MetricsError(f"metrics missing: {', '.join(missing)}")
    steps, planned = samples[STEPS_DONE], samples[STEPS_PLANNED]
    if not (math.isfinite(steps) and math.isfinite(planned)) or steps < 0 or planned <= 0:
        raise MetricsError(f"implausible progress: {steps:g} of {planned:g} steps")
    last = samples.get(LAST_STEP_TIME)
    restart = samples.get(RESTART_SECONDS)
    return Progress(
        steps_done=steps,
        steps_planned=planned,
        last_step_time_s=last if last and last > 0 else None,
        epochs_done=samples.get(EPOCHS_DONE),
        restart_s=restart
        if restart is not None and math.isfinite(restart) and restart > 0
        else None,
        threads_follow_limit=samples.get(THREADS_FOLLOW_LIMIT) == 1.0,
    )


def observation_from_progress(
    progress: Progress, now_s: float, allocation: float, pending: bool = False
) -> Observation:
    """An Observation stamped with the last step's completion time when known.

    Using the step's own time stamp instead of the scrape time removes the quantisation of
    counting whole steps between scrapes. A count of zero has no stamp: it starts no speed
    interval (``Observation.anchors``), since the first step began before the read that saw
    none done (Prometheus's sample can be a scrape interval old). A CPU job whose first
    interval ran from such a read to its first step measured a 4.5x too fast step, and was
    shrunk before its second sample.
    """
    stamp = progress.last_step_time_s if progress.last_step_time_s is not None else now_s
    return Observation(
        time_s=min(stamp, now_s),
        steps_done=progress.steps_done,
        steps_total=progress.steps_planned,
        allocation=allocation,
        pending=pending,
        restart_s=progress.restart_s,
        threads_follow_limit=progress.threads_follow_limit,
        anchors=progress.last_step_time_s is not None or progress.steps_done > 0,
    )


PodKey = tuple[str, str]  # (namespace, pod)
ProgressRead = Progress | MetricsError


def instance_host(instance: str) -> str:
    """The host of a Prometheus ``instance`` label: ``10.88.0.5:9100`` -> ``10.88.0.5``,
    ``[fd00::5]:9100`` -> ``fd00::5``, a bare host as it is."""
    if instance.startswith("["):
        return instance[1:].partition("]")[0]
    host, colon, port = instance.rpartition(":")
    return host if colon and port.isdigit() and ":" not in host else instance


def progress_by_pod(
    result: list[dict[str, object]], pod_ips: Mapping[PodKey, str] | None = None
) -> dict[PodKey, ProgressRead]:
    """Group an instant vector of the progress metrics by (namespace, pod); the largest value
    of a name wins (a pod scraped twice, e.g. by two jobs of a scrape configuration).

    ``pod_ips``: each pod's IP. A series then counts for a pod only when Prometheus scraped
    it from that pod (its ``instance`` is the pod's address): the ``namespace``/``pod``
    labels a target exposes are the target's to write (with ``honor_labels``, or a scrape
    configuration that does not set them), so a trainer could otherwise report a finished
    step count for another namespace's pod (docs/security.md)."""
    samples: dict[PodKey, dict[str, float]] = {}
    for series in result:
        labels = series.get("metric")
        value = series.get("value")
        if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
            continue
        key = (str(labels.get("namespace", "")), str(labels.get("pod", "")))
        if pod_ips is not None and (
            not pod_ips.get(key) or instance_host(str(labels.get("instance", ""))) != pod_ips[key]
        ):
            continue
        name = str(labels.get("__name__", ""))
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            continue
        pod = samples.setdefault(key, {})
        pod[name] = max(number, pod.get(name, -math.inf))
    reads: dict[PodKey, ProgressRead] = {}
    for key, pod_samples in samples.items():
        try:
            reads[key] = progress_from_samples(pod_samples)
        except MetricsError as exc:
            reads[key] = exc
    return reads
