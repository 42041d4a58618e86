"""Reading training progress: the only module that talks to Prometheus or a /metrics endpoint.

Two sources, one result (``control.Observation`` or None):
* ``scrape_observation``: GET the trainer's (or sidecar's) ``/metrics`` and parse the text
  exposition format;
* ``prometheus_observation``: instant queries against a Prometheus server's HTTP API.

Missing or malformed metrics give None (the controller then holds the allocation); the
reason is returned alongside so callers can log it. Metric names are in docs/contract.md.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from decor.control import Observation

STEPS_DONE = "decor_steps_completed_total"
STEPS_PLANNED = "decor_steps_planned"
LAST_STEP_TIME = "decor_last_step_timestamp_seconds"
EPOCHS_DONE = "decor_epochs_completed"
SAMPLES_DONE = "decor_samples_completed_total"

DEFAULT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Progress:
    """What the trainer last reported."""

    steps_done: float
    steps_planned: float
    last_step_time_s: float | None  # Unix s of the last completed step (None before any)
    epochs_done: float | None = None


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
    return Progress(
        steps_done=steps,
        steps_planned=planned,
        last_step_time_s=last if last and last > 0 else None,
        epochs_done=samples.get(EPOCHS_DONE),
    )


def observation_from_progress(
    progress: Progress, now_s: float, allocation: float, pending: bool = False
) -> Observation:
    """An Observation stamped with the last step's completion time when known.

    Using the step's own time stamp instead of the scrape time removes the quantisation of
    counting whole steps between scrapes.
    """
    stamp = progress.last_step_time_s if progress.last_step_time_s is not None else now_s
    return Observation(
        time_s=min(stamp, now_s),
        steps_done=progress.steps_done,
        steps_total=progress.steps_planned,
        allocation=allocation,
        pending=pending,
    )


def _http_get(url: str, timeout_s: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (our URL)
            return response.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise MetricsError(f"cannot read {url}: {exc}") from exc


def scrape_progress(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Progress:
    """Progress from a /metrics endpoint (raises MetricsError)."""
    return progress_from_samples(parse_exposition(_http_get(url, timeout_s)))


def query_prometheus(
    base_url: str, query: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> float | None:
    """One instant query; the single result's value, None when the result is empty."""
    url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        body = json.loads(_http_get(url, timeout_s))
    except json.JSONDecodeError as exc:
        raise MetricsError(f"Prometheus answered with malformed JSON: {exc}") from exc
    if body.get("status") != "success":
        raise MetricsError(f"Prometheus query failed: {body.get('error', body)}")
    result = body.get("data", {}).get("result", [])
    if not result:
        return None
    try:
        return float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise MetricsError(f"unexpected Prometheus result: {result[0]!r}") from exc


def prometheus_progress(
    base_url: str, namespace: str, pod: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Progress:
    """Progress of one pod from a Prometheus server (raises MetricsError).

    Series are selected by the ``namespace`` and ``pod`` labels that a Kubernetes pod scrape
    configuration attaches.
    """
    selector = f'{{namespace="{namespace}",pod="{pod}"}}'
    samples: dict[str, float] = {}
    for name in (STEPS_DONE, STEPS_PLANNED, LAST_STEP_TIME, EPOCHS_DONE):
        value = query_prometheus(base_url, f"max({name}{selector})", timeout_s)
        if value is not None:
            samples[name] = value
    return progress_from_samples(samples)


def scrape_observation(url: str, allocation: float, pending: bool = False) -> Observation | None:
    """Observation from a /metrics endpoint now, or None when progress is unreadable."""
    try:
        return observation_from_progress(scrape_progress(url), time.time(), allocation, pending)
    except MetricsError:
        return None


def prometheus_observation(
    base_url: str, namespace: str, pod: str, allocation: float, pending: bool = False
) -> Observation | None:
    """Observation from a Prometheus server now, or None when progress is unreadable."""
    try:
        progress = prometheus_progress(base_url, namespace, pod)
    except MetricsError:
        return None
    return observation_from_progress(progress, time.time(), allocation, pending)
