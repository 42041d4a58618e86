"""kubectl dtj: argument parsing, deadline moves, the table and the PNG (no cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from decor import kubectl_dtj as dtj

START = "2026-11-22T12:00:00Z"
START_S = dtj.parse_time_s(START)


def job(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "resnet", "namespace": "ml"},
        "spec": spec if spec is not None else {"deadline": "2026-11-22T12:10:00Z"},
        "status": status,
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("+20m", 1200.0), ("-90s", -90.0), ("+1h30m", 5400.0), ("+0.5h", 1800.0), (" -5m", -300.0)],
)
def test_relative_moves(text: str, seconds: float) -> None:
    assert dtj.parse_relative_s(text) == seconds


@pytest.mark.parametrize("text", ["20m", "+", "+20", "+20d", "soon", "+-5m"])
def test_relative_moves_need_a_sign_and_units(text: str) -> None:
    with pytest.raises(dtj.UsageError):
        dtj.parse_relative_s(text)


def test_absolute_times_need_a_zone() -> None:
    assert dtj.parse_time_s("2026-11-22T13:00:00+01:00") == START_S
    with pytest.raises(dtj.UsageError):
        dtj.parse_time_s("2026-11-22T12:00:00")


def test_arguments() -> None:
    args = dtj.parse_args(["-n", "ml", "deadline", "resnet", "-5m"])
    assert (args.command, args.namespace, args.name) == ("deadline", "ml", "resnet")
    assert dtj.parse_relative_s(args.move) == -300.0
    assert dtj.parse_args(["deadline", "resnet", "--at", START]).at == START
    assert dtj.parse_args(["get", "-A"]).all_namespaces is True
    plot = dtj.parse_args(["plot", "resnet", "-o", "x.png", "--prometheus", "http://p:9090"])
    assert (plot.output, plot.prometheus) == ("x.png", "http://p:9090")
    for bad in (["deadline", "resnet"], ["deadline", "resnet", "+5m", "--at", START]):
        with pytest.raises(dtj.UsageError):
            dtj.parse_args(bad)
    with pytest.raises(SystemExit):
        dtj.parse_args(["plot", "resnet"])  # -o is required


def test_cluster_options_go_before_or_after_the_subcommand() -> None:
    """As with kubectl itself: `kubectl dtj get -n ml` (after wins over before)."""
    assert dtj.parse_args(["get", "-n", "ml"]).namespace == "ml"
    assert dtj.parse_args(["-n", "ml", "get"]).namespace == "ml"
    args = dtj.parse_args(["-n", "a", "deadline", "resnet", "+5m", "-n", "b", "--context", "c"])
    assert (args.namespace, args.context, args.kubeconfig) == ("b", "c", None)


def test_deadline_patch_is_the_hand_written_one() -> None:
    absolute = job(deadline="2026-11-22T12:10:00Z", startTime=START)
    new_s = dtj.current_deadline_s(absolute) + dtj.parse_relative_s("+20m")
    assert dtj.deadline_patch(absolute, new_s) == {"spec": {"deadline": "2026-11-22T12:30:00Z"}}
    relative = job({"duration": "10m"}, deadline="2026-11-22T12:10:00Z", startTime=START)
    new_s = dtj.current_deadline_s(relative) + dtj.parse_relative_s("+1m")
    assert dtj.deadline_patch(relative, new_s) == {"spec": {"duration": "660s"}}
    with pytest.raises(dtj.UsageError):
        dtj.deadline_patch(relative, START_S - 1)
    with pytest.raises(dtj.UsageError):
        dtj.deadline_patch(job({"duration": "10m"}), START_S)  # not started


def test_get_row_shows_progress_eta_vs_deadline_allocation_and_admission() -> None:
    body = job(
        phase="Running", progress=0.4231, eta="2026-11-22T12:09:20Z",
        deadline="2026-11-22T12:10:00Z", allocation="1500m", desiredAllocation="1250m",
        conditions=[
            {"type": "OnTrack", "status": "True"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
        ],
    )  # fmt: skip
    row = dtj.job_row(body)
    assert row[:8] == (
        "ml",
        "resnet",
        "Running",
        "42.3%",
        "-40s",
        "1500m->1250m",
        "OnTrack",
        "Admitted",
    )
    queued = job(
        phase="Queued", conditions=[{"type": "Admitted", "status": "False", "reason": "Queued"}]
    )
    assert dtj.job_row(queued)[2:8] == ("Queued", "-", "-", "-", "-", "Queued")
    table = dtj.format_table([dtj.HEADER, row])
    assert table.splitlines()[0].split() == list(dtj.HEADER)


def test_format_span() -> None:
    assert [dtj.format_span(s) for s in (-35, 250, 7500, 0)] == ["-35s", "+4m10s", "+2h05m", "+0s"]


def test_plot_writes_a_png_with_two_axes(tmp_path: Path) -> None:
    import matplotlib.image

    body = job(
        {"deadline": "2026-11-22T12:10:00Z", "resources": {"mode": "cpu"}},
        startTime=START, deadline="2026-11-22T12:10:00Z", progress=0.5,
        eta="2026-11-22T12:09:00Z", allocation="2500m",
    )  # fmt: skip
    data = dtj.plot_data_from_status(body, now_s=START_S + 270)
    assert data.progress == [(START_S, 0.0), (START_S + 270, 0.5)]
    assert data.allocation == [(START_S, 2.5), (START_S + 270, 2.5)]
    assert "no history" in data.source
    out = tmp_path / "job.png"
    axes = dtj.render_png(data, str(out))
    assert axes == 2
    image = matplotlib.image.imread(out)
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_set_point_is_a_clamped_ramp() -> None:
    assert dtj.set_point([0, 50, 100, 200], 0.0, 100.0) == [0.0, 0.5, 1.0, 1.0]


def test_allocation_values() -> None:
    assert [dtj.allocation_value(v) for v in ("1500m", "2", 1, None)] == [1.5, 2.0, 1.0, None]
