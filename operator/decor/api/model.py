"""Typed records for a DeadlineTrainingJob manifest, and their parsing and validation.

The same YAML a user gives to ``kubectl apply`` is what the local runtime reads, so this
module is the one place that knows the manifest's shape. It is pure: no I/O, no clock.
Every validation error names the offending field, e.g.
``spec.resources.min: must be <= spec.resources.max (3 > 2)``.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from decor_trainer import contract

from decor.api import vocabulary

Mode = Literal["cpu", "gpu"]
Policy = Literal["decor", "decor-nn"]
POLICIES: tuple[str, ...] = ("decor", "decor-nn")
MODES: tuple[str, ...] = ("cpu", "gpu")
BATCH_POLICIES: tuple[str, ...] = ("fixedGlobal", "scaleWithWorkers")

DEFAULT_METRICS_PATH = "/metrics"
# A metrics path is a plain absolute path: letters, digits, ``._~-`` and ``/``; no ``..`` or
# ``//`` (the CRD's pattern and CEL rule say the same), at most METRICS_PATH_MAX_CHARS.
METRICS_PATH_PATTERN = r"^/[A-Za-z0-9._~/-]*$"
METRICS_PATH_MAX_CHARS = 256
# A claim name is a DNS subdomain (what Kubernetes accepts as an object name).
CLAIM_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
CLAIM_NAME_MAX_CHARS = 253
# Control periods of the published law: 1 s for CPU, 5 s for GPU.
DEFAULT_PERIOD_S = {"cpu": 1.0, "gpu": 5.0}
# Smallest allocation when the manifest gives none: DECOR-NN's MIN is one core / one GPU.
DEFAULT_MIN = {"cpu": 1.0, "gpu": 1.0}


class ManifestError(ValueError):
    """A manifest is invalid. ``field`` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class ResourceSpec:
    """Allocation bounds. CPU in cores (0.25 = 250m), GPU as an integer count."""

    mode: Mode
    min: float
    max: float
    initial: float
    # ``initial`` was written in the spec (else it is the mode's default, and a tight
    # deadline by spec.estimate starts at MAX: control.start_allocation).
    initial_given: bool = False
    batch_policy: str | None = None  # gpu: fixedGlobal | scaleWithWorkers (None: the trainer's)
    # gpu: most GPUs one worker pod holds; a larger count runs as several pods (0: one pod).
    gpus_per_pod: int = 0


@dataclass(frozen=True)
class ControlSpec:
    """How the controller runs. Unset gains fall back to the policy's defaults."""

    policy: Policy = "decor"
    period_s: float = 1.0
    safety_margin_s: float | None = None
    k: float | None = None
    ti_s: float | None = None
    restart_cost_s: float | None = None
    max_restarts: int | None = None  # GPU: changes of count to save GPUs (control.Settings)


@dataclass(frozen=True)
class CheckpointSpec:
    """Where the trainer checkpoints: ``path`` in its container; ``claim_name``: the user's
    own PersistentVolumeClaim mounted there (never deleted by DECOR); ``keep``: keep the
    volume the operator made for the job when the job is deleted."""

    path: str | None = None
    claim_name: str | None = None
    keep: bool = False


@dataclass(frozen=True)
class MetricsSpec:
    port: int = contract.DEFAULT_METRICS_PORT
    path: str = DEFAULT_METRICS_PATH


@dataclass(frozen=True)
class JobSpec:
    """A validated DeadlineTrainingJob. Exactly one of ``deadline`` / ``duration_s`` is set,
    unless ``best_effort`` (no deadline: it trains on capacity nobody else needs)."""

    name: str
    namespace: str
    epochs: int
    resources: ResourceSpec
    control: ControlSpec
    template: dict[str, Any]
    deadline: datetime | None = None
    duration_s: float | None = None
    steps_per_epoch: int | None = None
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    metrics: MetricsSpec = field(default_factory=MetricsSpec)
    suspend: bool = False
    priority: int = 0  # higher gives way last when the cluster cannot meet every deadline
    best_effort: bool = False  # no deadline: gets capacity that deadline jobs leave idle
    # Seconds per step at ``estimate_allocation`` (spec.estimate), for admission before the
    # job's own speed was measured; None: unknown.
    estimate_step_s: float | None = None
    estimate_allocation: float | None = None

    @property
    def estimate(self) -> tuple[float, float] | None:
        """(seconds per step, at this allocation) from ``spec.estimate``; None: not given."""
        if self.estimate_step_s is None or self.estimate_allocation is None:
            return None
        return self.estimate_step_s, self.estimate_allocation

    @property
    def planned_steps(self) -> float:
        """Steps the spec plans (0 when the trainer decides its steps per epoch)."""
        return float(self.epochs * self.steps_per_epoch) if self.steps_per_epoch else 0.0

    def deadline_s(self, start_s: float) -> float:
        """Absolute deadline (Unix seconds) of a job that started at ``start_s``; infinite
        for a best-effort job."""
        if self.best_effort:
            return math.inf
        if self.deadline is not None:
            return self.deadline.timestamp()
        assert self.duration_s is not None
        return start_s + self.duration_s

    @property
    def trainer_container(self) -> dict[str, Any]:
        """The first container of the template: the one DECOR resizes."""
        return dict(self.template["spec"]["containers"][0])


# ---------------------------------------------------------------------------------------
# Scalar parsers (each raises ManifestError naming ``where``)

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_s(value: Any, where: str) -> float:
    """Seconds from a number (seconds) or a Go-style string such as ``90s`` or ``1h30m``."""
    if isinstance(value, bool):
        raise ManifestError(where, f"must be a duration such as 90s or 1h30m, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ManifestError(
                    where, f"must be a duration such as 90s or 1h30m, got {value!r}"
                ) from None
            seconds = sum(float(n) * _DURATION_UNIT_S[u] for n, u in parts)
    else:
        raise ManifestError(where, f"must be a duration such as 90s or 1h30m, got {value!r}")
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ManifestError(where, f"must be positive (a finite duration), got {value!r}")
    return seconds


def parse_time(value: Any, where: str) -> datetime:
    """An RFC 3339 timestamp with a time zone (``2026-11-22T12:00:00Z``)."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ManifestError(
                where, f"must be an RFC 3339 time such as 2026-11-22T12:00:00Z, got {value!r}"
            ) from None
    else:
        raise ManifestError(where, f"must be an RFC 3339 time, got {value!r}")
    if parsed.tzinfo is None:
        raise ManifestError(where, f"needs a time zone (e.g. a trailing Z), got {value!r}")
    return parsed.astimezone(UTC)


def format_time(value: datetime | float) -> str:
    """RFC 3339 in UTC with a Z, to the second (what the API server stores)."""
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_cpu_cores(value: Any, where: str) -> float:
    """Cores from ``2``, ``0.5``, ``"1.5"`` or millicores ``"250m"``."""
    if isinstance(value, bool):
        raise ManifestError(
            where, f"must be cores (e.g. 2 or 0.5) or millicores (500m), got {value!r}"
        )
    try:
        if isinstance(value, str) and value.strip().endswith("m"):
            cores = float(value.strip()[:-1]) / 1000.0
        else:
            cores = float(value)
    except (TypeError, ValueError):
        raise ManifestError(
            where, f"must be cores (e.g. 2 or 0.5) or millicores (500m), got {value!r}"
        ) from None
    if not (cores > 0 and math.isfinite(cores)):
        raise ManifestError(where, f"must be positive (a finite number of cores), got {value!r}")
    return cores


_QUANTITY = re.compile(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?")
_QUANTITY_SCALE = {
    None: 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
    "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip


GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource a GPU job's trainer is allocated."""


def quantity_value(value: Any) -> float | None:
    """A Kubernetes quantity (``"128Mi"``, ``"500m"``, ``2``) as a number in base units; None
    for anything that is not one (a bool, a malformed string, a negative or infinite value)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
        return number if math.isfinite(number) and number >= 0 else None
    if isinstance(value, str):
        return _text_quantity(value)
    return None


@functools.lru_cache(maxsize=1024)
def _text_quantity(text: str) -> float | None:
    """:func:`quantity_value` of a string (the same few recur in every pod: parsed once)."""
    match = _QUANTITY.fullmatch(text.strip())
    if not match:
        return None
    try:
        number = float(match.group(1)) * _QUANTITY_SCALE[match.group(2)]
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def format_cpu(cores: float) -> str:
    """A Kubernetes CPU quantity in millicores: 1.25 -> ``1250m``."""
    return f"{round(cores * 1000)}m"


def parse_gpu_count(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ManifestError(where, f"must be a whole number of GPUs, got {value!r}")
    try:
        count = int(value)
    except ValueError:
        raise ManifestError(where, f"must be a whole number of GPUs, got {value!r}") from None
    if count < 1:
        raise ManifestError(where, f"must be at least 1, got {value!r}")
    return float(count)


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(where, f"must be a positive integer, got {value!r}")
    if value < 1:
        raise ManifestError(where, f"must be a positive integer, got {value!r}")
    return value


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ManifestError(where, f"must be a mapping, got {type(value).__name__}")
    return value


def _reject_unknown(section: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise ManifestError(
            f"{where}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})"
        )


# ---------------------------------------------------------------------------------------


def parse_resources(raw: Any) -> ResourceSpec:
    where = "spec.resources"
    section = _mapping(raw, where)
    if not section:
        raise ManifestError(where, "is required (mode, min, max, initial)")
    _reject_unknown(section, {"mode", "min", "max", "initial", "batchPolicy", "gpusPerPod"}, where)
    mode = section.get("mode", "cpu")
    if mode not in MODES:
        raise ManifestError(f"{where}.mode", f"must be one of cpu, gpu; got {mode!r}")
    parse = parse_cpu_cores if mode == "cpu" else parse_gpu_count
    if "max" not in section:
        raise ManifestError(f"{where}.max", "is required")
    max_ = parse(section["max"], f"{where}.max")
    min_ = (
        parse(section["min"], f"{where}.min") if "min" in section else min(DEFAULT_MIN[mode], max_)
    )
    if "initial" in section:
        initial = parse(section["initial"], f"{where}.initial")
    elif mode == "cpu":
        # One core: a job's start (imports, data loading) runs mostly on one thread, and the
        # controller moves as soon as it has measured the speed. GPUs: MAX (a change restarts).
        initial = min(max_, max(min_, 1.0))
    else:
        initial = max_
    if min_ > max_:
        raise ManifestError(f"{where}.min", f"must be <= {where}.max ({min_:g} > {max_:g})")
    if not min_ <= initial <= max_:
        raise ManifestError(
            f"{where}.initial", f"must be within [min, max] = [{min_:g}, {max_:g}], got {initial:g}"
        )
    batch_policy = section.get("batchPolicy")
    if batch_policy is not None:
        if batch_policy not in BATCH_POLICIES:
            raise ManifestError(
                f"{where}.batchPolicy",
                f"must be one of {', '.join(BATCH_POLICIES)}; got {batch_policy!r}",
            )
        if mode != "gpu":
            raise ManifestError(
                f"{where}.batchPolicy", "applies to mode gpu (its workers follow the GPU count)"
            )
    gpus_per_pod = 0
    if "gpusPerPod" in section:
        if mode != "gpu":
            raise ManifestError(
                f"{where}.gpusPerPod", "applies to mode gpu (a CPU job is always one pod)"
            )
        gpus_per_pod = int(parse_gpu_count(section["gpusPerPod"], f"{where}.gpusPerPod"))
    return ResourceSpec(
        mode=mode,
        min=min_,
        max=max_,
        initial=initial,
        initial_given="initial" in section,
        batch_policy=batch_policy,
        gpus_per_pod=gpus_per_pod,
    )


def parse_control(raw: Any, mode: Mode) -> ControlSpec:
    where = "spec.control"
    section = _mapping(raw, where)
    _reject_unknown(
        section,
        {
            "policy",
            "periodSeconds",
            "safetyMarginSeconds",
            "gains",
            "restartCostSeconds",
            "maxRestarts",
        },  # fmt: skip
        where,
    )
    policy = section.get("policy", "decor")
    if policy not in POLICIES:
        raise ManifestError(f"{where}.policy", f"must be one of decor, decor-nn; got {policy!r}")
    period_s = DEFAULT_PERIOD_S[mode]
    if "periodSeconds" in section:
        period_s = parse_duration_s(section["periodSeconds"], f"{where}.periodSeconds")
    margin = section.get("safetyMarginSeconds")
    if margin is not None:
        margin = _non_negative(margin, f"{where}.safetyMarginSeconds")
    gains = _mapping(section.get("gains"), f"{where}.gains")
    _reject_unknown(gains, {"k", "tiSeconds"}, f"{where}.gains")
    k = _positive(gains["k"], f"{where}.gains.k") if "k" in gains else None
    ti_s = (
        _positive(gains["tiSeconds"], f"{where}.gains.tiSeconds") if "tiSeconds" in gains else None
    )
    restart = section.get("restartCostSeconds")
    if restart is not None:
        restart = _non_negative(restart, f"{where}.restartCostSeconds")
    max_restarts = section.get("maxRestarts")
    if max_restarts is not None:
        max_restarts = _positive_int(max_restarts, f"{where}.maxRestarts")
    return ControlSpec(
        policy=policy,
        period_s=period_s,
        safety_margin_s=margin,
        k=k,
        ti_s=ti_s,
        restart_cost_s=restart,
        max_restarts=max_restarts,
    )


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ManifestError(where, f"must be a positive number, got {value!r}")
    return float(value)


def _non_negative(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ManifestError(where, f"must be a number >= 0, got {value!r}")
    return float(value)


T = TypeVar("T")

MAX_JOB_NAME_LENGTH = 52
"""The longest job name whose derived names all build: its Service ``NAME-rendezvous`` and
claim ``NAME-checkpoint`` (+11 characters), and the pod name ``NAME-INDEX`` used as a label
value (63 at most: room for a 10-digit index). The CRD's ``metadata.name`` says the same."""
JOB_NAME_PATTERN = r"[a-z]([-a-z0-9]*[a-z0-9])?"
"""DNS-1035 (a Service name must start with a letter)."""


def tree_copy(value: T) -> T:
    """A deep copy of an API object or status, the same as ``copy.deepcopy`` makes (a dict or
    list met twice is copied once and shared as in ``value``), about three times as fast:
    dicts, lists and JSON scalars are copied here, anything else by ``copy.deepcopy``."""
    return _tree_copy(value, {})


def _tree_copy(value: Any, memo: dict[int, Any]) -> Any:
    kind = type(value)
    if kind is str or kind is float or kind is int or kind is bool or value is None:
        return value
    if kind is not dict and kind is not list:
        return copy.deepcopy(value, memo)
    done = memo.get(id(value))
    if done is not None:
        return done
    if kind is dict:
        out: dict[Any, Any] = {}
        memo[id(value)] = out
        for key, item in value.items():
            out[_tree_copy(key, memo)] = _tree_copy(item, memo)
        return out
    items: list[Any] = []
    memo[id(value)] = items
    for item in value:
        items.append(_tree_copy(item, memo))
    return items


def without_nulls(value: Any) -> Any:
    """``value`` with every null mapping entry and list item removed, at any depth. A null in
    a template means "unset": removed here, it cannot defeat a default (``setdefault`` keeps
    an explicit None) or a check (``runAsUser: null`` is not 0), and never reaches a pod."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value if v is not None]
    return value


_OBJECT, _LIST, _TEXT, _TEXTS = "an object", "a list of objects", "a string", "a list of strings"
_POD_SHAPES = {
    "containers": _LIST, "initContainers": _LIST, "volumes": _LIST, "securityContext": _OBJECT,
    "restartPolicy": _TEXT, "tolerations": _LIST, "nodeSelector": _OBJECT, "affinity": _OBJECT,
    "imagePullSecrets": _LIST, "serviceAccountName": _TEXT, "priorityClassName": _TEXT,
    "nodeName": _TEXT, "resources": _OBJECT, "resourceClaims": _LIST,
}  # fmt: skip
_CONTAINER_SHAPES = {
    "name": _TEXT, "image": _TEXT, "imagePullPolicy": _TEXT, "command": _TEXTS, "args": _TEXTS,
    "env": _LIST, "envFrom": _LIST, "ports": _LIST, "volumeMounts": _LIST, "resources": _OBJECT,
    "resizePolicy": _LIST, "securityContext": _OBJECT, "restartPolicy": _TEXT,
}  # fmt: skip
_CONTEXT_SHAPES = {"capabilities": _OBJECT, "seccompProfile": _OBJECT, "sysctls": _LIST}
_NESTED_SHAPES = {
    "resources": {"limits": _OBJECT, "requests": _OBJECT, "claims": _LIST},
    "capabilities": {"add": _TEXTS, "drop": _TEXTS},
}


def _shape_ok(value: Any, shape: str) -> bool:
    if shape == _OBJECT:
        return isinstance(value, dict)
    if shape == _TEXT:
        return isinstance(value, str)
    if not isinstance(value, list):
        return False
    kind = dict if shape == _LIST else str
    return all(isinstance(item, kind) for item in value)


def _check_shapes(node: Mapping[str, Any], shapes: Mapping[str, str], where: str) -> None:
    """The fields of ``node`` that the operator reads have the type the API defines."""
    for key, shape in shapes.items():
        if key in node and not _shape_ok(node[key], shape):
            raise ManifestError(f"{where}.{key}", f"must be {shape}, got {node[key]!r:.80}")
        nested = _NESTED_SHAPES.get(key)
        if nested is not None and isinstance(node.get(key), dict):
            _check_shapes(node[key], nested, f"{where}.{key}")


def _check_template_shapes(spec: Mapping[str, Any], where: str) -> None:
    _check_shapes(spec, _POD_SHAPES, where)
    if isinstance(spec.get("securityContext"), dict):
        _check_shapes(spec["securityContext"], _CONTEXT_SHAPES, f"{where}.securityContext")
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            at = f"{where}.{kind}[{i}]"
            _check_shapes(container, _CONTAINER_SHAPES, at)
            context = container.get("securityContext")
            if isinstance(context, dict):
                _check_shapes(context, _CONTEXT_SHAPES, f"{at}.securityContext")


MAX_TEMPLATE_BYTES = 64 * 1024
"""The largest ``spec.template`` (as compact JSON) the operator reads: a pod template is a
few KiB, and what the operator parses, judges and builds each period stays bounded (the API
server takes objects up to ~1.5 MiB; docs/security.md has the measured cost)."""
OVERSIZED_TEMPLATE_KEY = "decor.dev/oversized-template-bytes"
"""What the operator's job view keeps of a template over :data:`MAX_TEMPLATE_BYTES`: its
size alone (views.bounded_job), so that a thousand such jobs cost no memory."""


def template_bytes(raw: Any) -> int:
    """The size of ``raw`` as compact JSON (what the limit counts)."""
    return len(json.dumps(raw, separators=(",", ":"), default=str))


def parse_template(raw: Any) -> dict[str, Any]:
    """``spec.template`` checked for what the operator needs, its nulls removed."""
    where = "spec.template"
    if isinstance(raw, dict) and OVERSIZED_TEMPLATE_KEY in raw:
        size = raw[OVERSIZED_TEMPLATE_KEY]
    else:
        size = template_bytes(raw)
    if size > MAX_TEMPLATE_BYTES:
        raise ManifestError(
            where, f"is {size} bytes as JSON; at most {MAX_TEMPLATE_BYTES} are accepted"
        )
    template = without_nulls(_mapping(raw, where))
    spec = _mapping(template.get("spec"), f"{where}.spec")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ManifestError(f"{where}.spec.containers", "must list at least one container")
    first = containers[0]
    if not isinstance(first, dict):
        raise ManifestError(f"{where}.spec.containers[0]", "must be a mapping")
    _check_template_shapes(spec, f"{where}.spec")
    metadata = template.get("metadata")
    if metadata is not None:
        _check_shapes(
            _mapping(metadata, f"{where}.metadata"),
            {"labels": _OBJECT, "annotations": _OBJECT},
            f"{where}.metadata",
        )
    if not first.get("name"):
        raise ManifestError(f"{where}.spec.containers[0].name", "is required")
    for key in ("command", "args"):
        value = first.get(key)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            raise ManifestError(f"{where}.spec.containers[0].{key}", "must be a list of strings")
    if not first.get("command") and not first.get("image"):
        raise ManifestError(f"{where}.spec.containers[0]", "needs a command or an image")
    return template


def parse_job(manifest: Any) -> JobSpec:
    """Validate a DeadlineTrainingJob manifest (as loaded from YAML) into a JobSpec.

    Raises ManifestError naming the first offending field (checked in the order below).
    """
    name, namespace, spec = _parse_envelope(manifest)
    best_effort, deadline, duration_s = _parse_deadline(spec)
    if "epochs" not in spec:
        raise ManifestError("spec.epochs", "is required")
    epochs = _positive_int(spec["epochs"], "spec.epochs")
    steps_per_epoch = None
    if spec.get("stepsPerEpoch") is not None:
        steps_per_epoch = _positive_int(spec["stepsPerEpoch"], "spec.stepsPerEpoch")
    resources = parse_resources(spec.get("resources"))
    control = parse_control(spec.get("control"), resources.mode)
    template = parse_template(spec.get("template"))
    checkpoint = _parse_checkpoint(spec.get("checkpoint"), resources.mode)
    metrics = _parse_metrics(spec.get("metrics"))
    estimate_step_s, estimate_allocation = _parse_estimate(spec.get("estimate"), resources.mode)
    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ManifestError("spec.priority", f"must be an integer, got {priority!r}")
    suspend = spec.get("suspend", False)
    if not isinstance(suspend, bool):
        raise ManifestError("spec.suspend", f"must be true or false, got {suspend!r}")
    return JobSpec(
        name=name,
        namespace=namespace,
        deadline=deadline,
        duration_s=duration_s,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        resources=resources,
        control=control,
        template=template,
        checkpoint=checkpoint,
        metrics=metrics,
        suspend=suspend,
        priority=priority,
        best_effort=best_effort,
        estimate_step_s=estimate_step_s,
        estimate_allocation=estimate_allocation,
    )


_SPEC_FIELDS = {
    "deadline",
    "duration",
    "epochs",
    "stepsPerEpoch",
    "resources",
    "control",
    "template",
    "checkpoint",
    "metrics",
    "suspend",
    "priority",
    "bestEffort",
    "estimate",
}


def _parse_envelope(manifest: Any) -> tuple[str, str, dict[str, Any]]:
    """(name, namespace, spec) of a manifest whose apiVersion and kind are this operator's,
    whose name is a DNS-1035 label and whose spec is a mapping of known fields only."""
    if not isinstance(manifest, dict):
        raise ManifestError("(document)", "must be a mapping with apiVersion, kind, metadata, spec")
    api_version = manifest.get("apiVersion")
    if api_version != f"{vocabulary.API_GROUP}/{vocabulary.API_VERSION}":
        raise ManifestError(
            "apiVersion",
            f"must be {vocabulary.API_GROUP}/{vocabulary.API_VERSION}, got {api_version!r}",
        )
    if manifest.get("kind") != vocabulary.KIND:
        raise ManifestError("kind", f"must be {vocabulary.KIND}, got {manifest.get('kind')!r}")
    metadata = _mapping(manifest.get("metadata"), "metadata")
    name = metadata.get("name")
    if (
        not isinstance(name, str)
        or not re.fullmatch(JOB_NAME_PATTERN, name)
        or len(name) > MAX_JOB_NAME_LENGTH
    ):
        raise ManifestError(
            "metadata.name",
            f"must be a DNS-1035 label (a lower-case letter first, then letters, digits, -) "
            f"of at most {MAX_JOB_NAME_LENGTH} characters, got {name!r}",
        )
    namespace = metadata.get("namespace") or "default"
    spec = _mapping(manifest.get("spec"), "spec")
    if not spec:
        raise ManifestError("spec", "is required")
    _reject_unknown(spec, _SPEC_FIELDS, "spec")
    return name, namespace, spec


def _parse_deadline(spec: Mapping[str, Any]) -> tuple[bool, datetime | None, float | None]:
    """(best effort?, deadline, duration in seconds): exactly one of ``deadline`` and
    ``duration`` for a deadline job, neither for a best-effort one."""
    has_deadline = spec.get("deadline") is not None
    has_duration = spec.get("duration") is not None
    best_effort = spec.get("bestEffort", False)
    if not isinstance(best_effort, bool):
        raise ManifestError("spec.bestEffort", f"must be true or false, got {best_effort!r}")
    if best_effort and (has_deadline or has_duration):
        raise ManifestError("spec.bestEffort", "a best-effort job has no deadline or duration")
    if not best_effort and has_deadline == has_duration:
        raise ManifestError("spec.deadline", "set exactly one of spec.deadline and spec.duration")
    deadline = parse_time(spec["deadline"], "spec.deadline") if has_deadline else None
    duration_s = parse_duration_s(spec["duration"], "spec.duration") if has_duration else None
    return best_effort, deadline, duration_s


def _parse_checkpoint(raw: Any, mode: str) -> CheckpointSpec:
    """``spec.checkpoint``: a path (required with a claim, and in gpu mode, where GPU changes
    restart the trainer), the job's own PersistentVolumeClaim name, and ``keep``."""
    checkpoint_raw = _mapping(raw, "spec.checkpoint")
    _reject_unknown(checkpoint_raw, {"path", "claimName", "keep"}, "spec.checkpoint")
    claim_name = checkpoint_raw.get("claimName")
    if claim_name is not None and (
        not isinstance(claim_name, str)
        or len(claim_name) > CLAIM_NAME_MAX_CHARS
        or not re.fullmatch(CLAIM_NAME_PATTERN, claim_name)
    ):
        raise ManifestError(
            "spec.checkpoint.claimName",
            f"must be a PersistentVolumeClaim name (lower case, digits, - and .), got {claim_name!r}",
        )
    keep = checkpoint_raw.get("keep", False)
    if not isinstance(keep, bool):
        raise ManifestError("spec.checkpoint.keep", f"must be true or false, got {keep!r}")
    checkpoint = CheckpointSpec(path=checkpoint_raw.get("path"), claim_name=claim_name, keep=keep)
    if claim_name is not None and not checkpoint.path:
        raise ManifestError("spec.checkpoint.path", "is required with spec.checkpoint.claimName")
    if mode == "gpu" and not checkpoint.path:
        raise ManifestError(
            "spec.checkpoint.path", "is required in gpu mode (GPU changes restart the trainer)"
        )
    return checkpoint


def _parse_metrics(raw: Any) -> MetricsSpec:
    """``spec.metrics``: the sidecar's port (1-65535) and a plain absolute path."""
    metrics_raw = _mapping(raw, "spec.metrics")
    _reject_unknown(metrics_raw, {"port", "path"}, "spec.metrics")
    port = metrics_raw.get("port", contract.DEFAULT_METRICS_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ManifestError("spec.metrics.port", f"must be a port number 1-65535, got {port!r}")
    path = metrics_raw.get("path", DEFAULT_METRICS_PATH)
    if not isinstance(path, str) or not path.startswith("/"):
        raise ManifestError("spec.metrics.path", f"must start with /, got {path!r}")
    if (
        len(path) > METRICS_PATH_MAX_CHARS
        or not re.fullmatch(METRICS_PATH_PATTERN, path)
        or ".." in path
        or "//" in path
    ):
        raise ManifestError(
            "spec.metrics.path",
            "must be a plain path of letters, digits, . _ ~ - and / (no .., //, ? or #, "
            f"at most {METRICS_PATH_MAX_CHARS} characters), got {path!r}",
        )
    return MetricsSpec(port=port, path=path)


def _parse_estimate(raw: Any, mode: str) -> tuple[float | None, float | None]:
    """``spec.estimate``: (seconds per step, at the allocation in cores or GPUs), both or
    neither."""
    estimate_raw = _mapping(raw, "spec.estimate")
    _reject_unknown(estimate_raw, {"stepSeconds", "allocation"}, "spec.estimate")
    if not estimate_raw:
        return None, None
    if "stepSeconds" not in estimate_raw or "allocation" not in estimate_raw:
        raise ManifestError("spec.estimate", "needs both stepSeconds and allocation")
    estimate_step_s = _positive(estimate_raw["stepSeconds"], "spec.estimate.stepSeconds")
    estimate_allocation = (
        parse_cpu_cores(estimate_raw["allocation"], "spec.estimate.allocation")
        if mode == "cpu"
        else parse_gpu_count(estimate_raw["allocation"], "spec.estimate.allocation")
    )
    return estimate_step_s, estimate_allocation
