"""The pure parts of running several local jobs: the live view, the CLI's arguments, the
summary, and what the runtime hands the planner. No trainer runs here."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from decor import cli
from decor.api import vocabulary
from decor.api.model import parse_job
from decor.core import control, planner
from decor.local import runtime as local

ROOT = Path(__file__).resolve().parents[2]


def job_doc(name: str) -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "resnet-cpu.yaml").read_text()))
    doc["metadata"]["name"] = name
    return doc


def test_board_redraws_in_place_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    board = cli.LiveBoard(tty=True)
    board.show(["a  line one", "b  line two"])
    board.show(["a  line three", "b  line four"])
    out = capsys.readouterr().out
    # The second drawing goes back up one line and clears to the end of the screen.
    assert out == "a  line one\nb  line two" + "\r\033[1A\033[J" + "a  line three\nb  line four"


def test_board_note_goes_above_the_board(capsys: pytest.CaptureFixture[str]) -> None:
    board = cli.LiveBoard(tty=True)
    board.show(["a  running"])
    board.note("b: queued: no room", True)
    board.note("a progress line the board already shows", False)
    board.close()
    assert capsys.readouterr().out == "a  running" + "\r\033[J" + "b: queued: no room\n" + (
        "a  running\n"
    )


def test_board_off_a_terminal_prints_blocks_at_most_once_per_period(
    capsys: pytest.CaptureFixture[str],
) -> None:
    board = cli.LiveBoard(tty=False, period_s=3600.0)
    board.show(["a  first"])
    board.show(["a  second"])  # within the period: not printed
    board.note("a: deadline moved", True)
    assert capsys.readouterr().out == "a  first\na: deadline moved\n"


def test_run_takes_several_manifests_and_planner_options() -> None:
    args = cli.build_parser().parse_args(
        ["run", "a.yaml", "b.yaml", "--local", "--planner", "edf", "--stagger", "10s"]
    )
    assert args.job == ["a.yaml", "b.yaml"]
    assert args.planner == planner.POLICY_EDF and cli._stagger_s(args.stagger) == 10.0
    one = cli.build_parser().parse_args(["run", "a.yaml"])
    assert one.job == ["a.yaml"] and one.planner == planner.POLICY_DECOR
    assert cli._stagger_s(one.stagger) == 0.0


def test_stagger_with_one_job_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(job_doc("a")))
    assert cli.main(["run", str(path), "--stagger", "5s"]) == 2


def test_the_deadline_command_still_takes_one_job_name() -> None:
    args = cli.build_parser().parse_args(["deadline", "resnet-demo", "--duration", "70s"])
    assert args.name == "resnet-demo" and args.duration == "70s"


def summary(**overrides: Any) -> dict[str, Any]:
    base = local.RunSummary(
        name="a",
        policy="decor",
        exit_code=0,
        complete=True,
        deadline_s=60.0,
        finished_s=59.0,
        deviation_pct=-1.0 / 0.6,
        core_seconds=70.0,
        actuations=12,
        min_cores=0.25,
        max_cores=2.0,
        limiter="cgroup-v1",
        out_dir="out/a",
    ).to_dict()
    return {**base, **overrides}


def test_a_single_jobs_summary_is_unchanged() -> None:
    text = cli.format_summary(summary())
    assert text.splitlines() == [
        "job a (decor, CPU via cgroup-v1, 0.25-2 cores)",
        "  finished 59.0s after start; deadline 60.0s; deviation -1.67% (on time)",
        "  core-seconds 70.0; actuations 12",
        "  trace out/a/trace.json, plot out/a/trace.png, log out/a/trainer.log",
    ]


def test_a_queued_jobs_summary_says_how_long_it_waited() -> None:
    text = cli.format_summary(summary(queued_s=12.5, planner="decor"))
    assert "  waited 12.5s for the planner before starting" in text.splitlines()


def test_several_jobs_need_distinct_names_and_one_arrival_each(tmp_path: Path) -> None:
    jobs = [parse_job(job_doc("same")), parse_job(job_doc("same"))]
    with pytest.raises(ValueError, match="share a name"):
        local.run_local_many(jobs, local.LocalOptions(out_dir=tmp_path))
    jobs = [parse_job(job_doc("a")), parse_job(job_doc("b"))]
    with pytest.raises(ValueError, match="one arrival"):
        local.run_local_many(jobs, local.LocalOptions(out_dir=tmp_path), arrivals_s=[0.0])
    with pytest.raises(ValueError, match="one arrival"):
        local.run_local_many(jobs, local.LocalOptions(out_dir=tmp_path), arrivals_s=[0.0, -1.0])
    assert not any(tmp_path.iterdir()), "nothing may start before the arguments are checked"


def test_free_port_skips_ports_promised_to_other_trainers() -> None:
    first = local.free_port(0)
    second = local.free_port(first, taken={first})
    assert second != first


def test_a_waiting_row_holds_nothing_and_names_the_verdict() -> None:
    settings = control.Settings(
        mode="cpu", min_allocation=0.25, max_allocation=2.0, start_s=100.0, deadline_s=160.0
    )
    state = control.initial_state(settings, 1.0)
    grant = planner.Grant(
        "b", 0.0, None, vocabulary.VERDICT_QUEUED, "no room", earliest_deadline_s=300.0
    )
    row = local._waiting_row(130.0, 100.0, settings.deadline_s, state, grant)
    assert row.allocation == 0.0 and row.granted == 0.0 and row.requested == 1.0
    assert row.verdict == vocabulary.VERDICT_QUEUED and row.condition == vocabulary.VERDICT_QUEUED
    assert row.t_s == 30.0 and row.set_point == pytest.approx(0.5)
    assert row.progress != row.progress  # NaN: nothing measured while waiting
