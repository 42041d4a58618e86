"""The chart's alerts, evaluated by Prometheus's own rule engine.

The PrometheusRule of helm/decor (``monitoring.prometheusRule.enabled=true``) is rendered
with ``helm template``; its rule groups go to ``promtool check rules`` and
``promtool test rules`` (Debian's ``prometheus`` package, in cluster/lib.sh's
CLUSTER_PACKAGES) with input series for each alert: a case where it must fire (with its
labels and its annotations as rendered) and cases where it must not (a condition that is
False, one that clears before the alert's ``for``, an operator whose periods are on time).
Once with the chart's defaults and once with other values, so that each value is seen to
reach its rule. No cluster is needed; without helm or promtool the test is skipped (failed
in CI).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "decor"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
NAMESPACE = "ml"
MINUTES_EVALUATED = 20  # each input series spans this many one-minute samples
# DecorOperatorPeriodsLate's input: every period late by 10-30 s (its histogram's bucket),
# which histogram_quantile puts at 10 + 0.99 x 20 = 29.8 s for the p99.
LATE_P99_S = 29.8
LATENESS_BUCKETS_S = ("1", "5", "10", "30", "+Inf")


def tool_or_skip(name: str) -> str:
    """``name`` on PATH or in the test bed's tools directory (cluster/lib.sh: TOOLS_BIN,
    where cluster/install-tools.sh puts helm); skipped without it, failed in CI."""
    found = shutil.which(name)
    if found is None:
        tools = subprocess.run(
            ["bash", "-c", '. cluster/lib.sh >/dev/null 2>&1; printf %s "$TOOLS_BIN"'],
            cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
        ).stdout  # fmt: skip
        found = shutil.which(name, path=tools) if tools else None
    if found is None:
        reason = f"{name} not found (cluster/install-tools.sh installs helm; apt-get install prometheus gives promtool)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@dataclass(frozen=True)
class RuleValues:
    """The chart values the alerts read (monitoring.prometheusRule)."""

    at_risk_for: str
    metrics_unavailable_for: str
    period_lateness_s: float
    severity: str

    def helm_args(self) -> list[str]:
        prefix = "monitoring.prometheusRule."
        values = {
            "enabled": "true",
            "atRiskFor": self.at_risk_for,
            "metricsUnavailableFor": self.metrics_unavailable_for,
            "periodLatenessSeconds": f"{self.period_lateness_s:g}",
            "severity": self.severity,
        }
        return [arg for k, v in values.items() for arg in ("--set", f"{prefix}{k}={v}")]


def chart_defaults() -> RuleValues:
    rule = yaml.safe_load((CHART / "values.yaml").read_text())["monitoring"]["prometheusRule"]
    return RuleValues(
        at_risk_for=rule["atRiskFor"],
        metrics_unavailable_for=rule["metricsUnavailableFor"],
        period_lateness_s=float(rule["periodLatenessSeconds"]),
        severity=rule["severity"],
    )


OTHER_VALUES = RuleValues(
    at_risk_for="2m", metrics_unavailable_for="12m", period_lateness_s=40, severity="page"
)


def minutes(duration: str) -> int:
    """Whole minutes of a Prometheus duration written in m or h (``5m``, ``1h``)."""
    match = re.fullmatch(r"(\d+)([mh])", duration)
    assert match, f"{duration!r}: this test reads durations in whole minutes or hours"
    return int(match.group(1)) * (60 if match.group(2) == "h" else 1)


def rendered_groups(helm: str, values: RuleValues) -> list[dict[str, Any]]:
    """The rule groups of the chart's PrometheusRule, rendered with ``values``."""
    result = subprocess.run(
        [helm, "template", "decor", str(CHART), "--namespace", "decor-system",
         "--show-only", "templates/prometheusrule.yaml", *values.helm_args()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (rule,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert rule["kind"] == "PrometheusRule", rule
    return list(rule["spec"]["groups"])


# ============================================================================================
# promtool's unit tests, one per alert


def condition_series(job: str, type_: str, reason: str, values: str) -> dict[str, str]:
    """kube-state-metrics' decor_job_condition for one job (helm/decor/files)."""
    labels = f'namespace="{NAMESPACE}",job="{job}",type="{type_}",reason="{reason}"'
    return {"series": f"decor_job_condition{{{labels}}}", "values": values}


def job_alert_test(alert: str, type_: str, for_min: int, severity: str) -> dict[str, Any]:
    """Jobs whose condition ``type_`` is True throughout (``late``), True under two reasons one
    after the other (``moved``: the alert keeps its pending time), False throughout
    (``fine``) and True for less than ``for`` (``blip``), and what fires when."""
    total = MINUTES_EVALUATED
    half = for_min // 2 + 1
    series = [
        condition_series("late", type_, "Before", f"1x{total}"),
        condition_series("moved", type_, "Before", f"1x{half - 1} stale"),
        condition_series("moved", type_, "After", f"{'_ ' * half}1x{total - half}"),
        condition_series("fine", type_, "Fine", f"0x{total}"),
        condition_series("blip", type_, "Before", f"1x{for_min - 2} 0x{total - for_min + 1}"),
    ]
    firing = [
        {"exp_labels": {"severity": severity, "namespace": NAMESPACE, "job": job},
         "exp_annotations": job_annotations(alert, job)}
        for job in ("late", "moved")
    ]  # fmt: skip
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": f"{for_min - 1}m", "alertname": alert, "exp_alerts": []},
            {"eval_time": f"{for_min + 1}m", "alertname": alert, "exp_alerts": firing},
            {"eval_time": f"{total - 1}m", "alertname": alert, "exp_alerts": firing},
        ],
    }


def job_annotations(alert: str, job: str) -> dict[str, str]:
    """What the alert's annotations say about ``job`` in NAMESPACE."""
    where = f"{NAMESPACE}/{job}"
    if alert == "DecorJobAtRisk":
        return {
            "summary": f"DeadlineTrainingJob {where} may miss its deadline",
            "description": "It needs more than 90% of spec.resources.max (or is behind at max). "
            f"kubectl describe dtj -n {NAMESPACE} {job} says why; raise max or move the deadline.",
        }
    return {
        "summary": f"The operator cannot read the progress of {where}",
        "description": "Its allocation is held while no progress sample can be read. The "
        "condition's message says why (docs/operations.md, Troubleshooting).",
    }


def lateness_series(bucket_s: str) -> list[dict[str, str]]:
    """decor_operator_period_lateness_seconds: 60 periods a minute, each late by at most
    ``bucket_s`` and by more than the bucket below it."""
    at = LATENESS_BUCKETS_S.index(bucket_s)
    return [
        {"series": f'decor_operator_period_lateness_seconds_bucket{{le="{le}"}}',
         "values": f"0+60x{MINUTES_EVALUATED}" if i >= at else f"0x{MINUTES_EVALUATED}"}
        for i, le in enumerate(LATENESS_BUCKETS_S)
    ]  # fmt: skip


def periods_late_tests(threshold_s: float, severity: str) -> list[dict[str, Any]]:
    """Periods 10-30 s late (fires after its 10m when the threshold is below the p99) and
    periods under 1 s late (never fires)."""
    alert = "DecorOperatorPeriodsLate"
    late = [] if LATE_P99_S <= threshold_s else [{
        "exp_labels": {"severity": severity},
        "exp_annotations": {
            "summary": "The DECOR operator's control periods run late",
            "description": f"p99 lateness {LATE_P99_S:g}s: the loop is saturated. Lengthen the "
            "periods, give the API server more CPU, or split jobs between operators "
            "(docs/operations.md, Sizing).",
        },
    }]  # fmt: skip
    return [
        {"interval": "1m", "input_series": lateness_series("30"),
         "alert_rule_test": [{"eval_time": "9m", "alertname": alert, "exp_alerts": []},
                             {"eval_time": "15m", "alertname": alert, "exp_alerts": late}]},
        {"interval": "1m", "input_series": lateness_series("1"),
         "alert_rule_test": [{"eval_time": "15m", "alertname": alert, "exp_alerts": []}]},
    ]  # fmt: skip


def unit_tests(values: RuleValues) -> list[dict[str, Any]]:
    at_risk, unavailable = minutes(values.at_risk_for), minutes(values.metrics_unavailable_for)
    assert 3 <= at_risk + 1 < MINUTES_EVALUATED and 3 <= unavailable + 1 < MINUTES_EVALUATED
    return [
        job_alert_test("DecorJobAtRisk", "AtRisk", at_risk, values.severity),
        job_alert_test(
            "DecorJobMetricsUnavailable", "MetricsUnavailable", unavailable, values.severity
        ),
        *periods_late_tests(values.period_lateness_s, values.severity),
    ]


@pytest.mark.parametrize("values", [chart_defaults(), OTHER_VALUES], ids=["defaults", "other"])
def test_the_chart_alerts_fire_when_they_must_and_only_then(
    values: RuleValues, tmp_path: Path
) -> None:
    helm, promtool = tool_or_skip("helm"), tool_or_skip("promtool")
    groups = rendered_groups(helm, values)
    alerts = {r["alert"] for g in groups for r in g["rules"]}
    assert alerts == {"DecorJobAtRisk", "DecorJobMetricsUnavailable", "DecorOperatorPeriodsLate"}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    checked = subprocess.run(
        [promtool, "check", "rules", "rules.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": unit_tests(values)}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        [promtool, "test", "rules", "tests.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
