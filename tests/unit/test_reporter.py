"""The progress reporter: metric values, both sinks, never raising, and the sidecar's source."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from decor_trainer import progress
from decor_trainer.reporter import ErrorLog, ProgressReporter, ProgressSnapshot
from decor_trainer.sidecar import ProgressFileSource, build_registry
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from support.clock import FakeClock

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
FILE_KEYS = {
    "steps",
    "samples",
    "steps_planned",
    "epochs",
    "epochs_planned",
    "step_s",
    "epoch_s",
    "t",
    "restart_s",
    "threads_follow_limit",
}


def contract_metric_names() -> set[str]:
    """Metric names in the contract's table (rows starting with a backquoted decor_ name)."""
    return set(re.findall(r"^\| `(decor_[a-z_]+)` \|", CONTRACT.read_text(), flags=re.M))


def value(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name)


def exposed_names(registry: CollectorRegistry) -> set[str]:
    """Sample names a scrape shows, without prometheus_client's per-counter ``_created``."""
    return {
        sample.name
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def test_metric_values_follow_steps_and_epochs() -> None:
    clock, wall = FakeClock(), FakeClock(1_795_860_000.0)
    registry = CollectorRegistry()
    reporter = ProgressReporter(
        steps_planned=8, epochs_planned=2, registry=registry, clock=clock, wall_clock=wall
    )
    assert value(registry, "decor_steps_completed_total") == 0
    assert value(registry, "decor_step_duration_seconds") == 0
    for step_s in (0.5, 0.25, 0.125):
        clock.advance(step_s)
        wall.advance(step_s)
        reporter.step_done(samples=32)
    reporter.epoch_done()

    assert value(registry, "decor_steps_completed_total") == 3
    assert value(registry, "decor_samples_completed_total") == 96
    assert value(registry, "decor_steps_planned") == 8
    assert value(registry, "decor_epochs_completed") == 1
    assert value(registry, "decor_epochs_planned") == 2
    assert value(registry, "decor_step_duration_seconds") == 0.125
    assert value(registry, "decor_epoch_duration_seconds") == 0.875
    assert value(registry, "decor_last_step_timestamp_seconds") == 1_795_860_000.875


def test_exposes_exactly_the_contract_metrics_with_help_and_no_labels() -> None:
    registry = CollectorRegistry()
    ProgressReporter(steps_planned=1, epochs_planned=1, registry=registry)
    names = contract_metric_names()
    assert len(names) == 10, f"contract table not found or changed: {names}"
    assert exposed_names(registry) == names
    for family in registry.collect():
        assert family.documentation
        assert all(sample.labels == {} for sample in family.samples)


def test_threads_following_the_limit_is_said_only_when_the_loop_says_so(tmp_path: Path) -> None:
    for says in (False, True):
        registry = CollectorRegistry()
        ProgressReporter(
            steps_planned=1, epochs_planned=1, registry=registry, threads_follow_limit=says
        )
        assert value(registry, "decor_threads_follow_limit") == float(says)
        path = tmp_path / f"{says}.json"
        reporter = ProgressReporter(
            steps_planned=1, epochs_planned=1, progress_file=path, threads_follow_limit=says
        )
        data = json.loads(path.read_text())
        assert data["threads_follow_limit"] is says
        assert ProgressSnapshot.from_mapping(data) == reporter.snapshot()
        sidecar = build_registry(path)
        assert value(sidecar, "decor_threads_follow_limit") == float(says)
    older = json.loads(ProgressSnapshot(1, 2, 3, 0, 1, 0.1, 0.0, 1.5e9).to_json())
    del older["threads_follow_limit"]  # an older trainer's file: not said
    assert ProgressSnapshot.from_mapping(older).threads_follow_limit is False
    assert (
        ProgressSnapshot.from_mapping({**older, "threads_follow_limit": 1}).threads_follow_limit
        is False
    )


def test_resumed_reporter_starts_at_the_checkpoint() -> None:
    registry = CollectorRegistry()
    reporter = ProgressReporter(
        steps_planned=400,
        epochs_planned=4,
        start_step=120,
        start_samples=3840,
        start_epoch=1,
        registry=registry,
    )
    reporter.step_done(samples=32)
    assert value(registry, "decor_steps_completed_total") == 121
    assert value(registry, "decor_samples_completed_total") == 3872
    assert value(registry, "decor_epochs_completed") == 1


def test_http_endpoint_serves_the_metrics() -> None:
    with ProgressReporter(
        steps_planned=10, epochs_planned=2, port=0, address="127.0.0.1"
    ) as reporter:
        assert reporter.port
        reporter.step_done(samples=4)
        reporter.step_done(samples=4)
        url = f"http://127.0.0.1:{reporter.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
            text = response.read().decode()
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["decor_steps_completed_total"] == 2
    assert samples["decor_samples_completed_total"] == 8
    assert samples["decor_steps_planned"] == 10
    # close() released the port
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", reporter.port), 1):
        pass


def test_port_in_use_is_logged_and_training_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        registry = CollectorRegistry()
        reporter = ProgressReporter(
            steps_planned=5, epochs_planned=1, port=port, address="127.0.0.1", registry=registry
        )
        reporter.step_done(samples=1)
        reporter.close()
    assert reporter.port is None
    assert value(registry, "decor_steps_completed_total") == 1
    assert any("cannot serve metrics" in r.message for r in caplog.records)


def test_progress_file_holds_the_contract_fields(tmp_path: Path) -> None:
    path = tmp_path / "run" / "progress.json"  # the directory is created
    clock = FakeClock()
    reporter = ProgressReporter(
        steps_planned=6, epochs_planned=2, progress_file=path, start_step=2, clock=clock
    )
    assert json.loads(path.read_text())["steps"] == 2  # written at once, before any step
    clock.advance(0.25)
    reporter.step_done(samples=16)
    data = json.loads(path.read_text())
    assert set(data) == FILE_KEYS
    assert data["steps"] == 3
    assert data["samples"] == 16
    assert data["steps_planned"] == 6
    assert data["epochs_planned"] == 2
    assert data["step_s"] == 0.25
    assert ProgressSnapshot.from_mapping(data) == reporter.snapshot()
    assert [p.name for p in path.parent.iterdir()] == ["progress.json"]  # no temp files left


def test_unwritable_progress_file_never_raises_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")  # a file where the directory should be: fails even for root
    registry = CollectorRegistry()
    reporter = ProgressReporter(
        steps_planned=100,
        epochs_planned=1,
        progress_file=blocker / "progress.json",
        registry=registry,
    )
    for _ in range(100):
        reporter.step_done(samples=2)
    reporter.epoch_done()
    assert value(registry, "decor_steps_completed_total") == 100
    file_errors = [r for r in caplog.records if "progress file" in r.message]
    # one line for the directory, one for the first failed write; not one per step
    assert 1 <= len(file_errors) <= 2, [r.message for r in file_errors]


def test_error_log_is_once_per_kind_then_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    errors = ErrorLog(logger=logging.getLogger("test.errors"), interval_s=60, clock=clock)
    caplog.set_level(logging.INFO, logger="test.errors")
    for _ in range(5):
        errors.report("a", "problem a")
    errors.report("b", "problem b")
    assert [r.message for r in caplog.records] == ["problem a", "problem b"]
    clock.advance(60)
    errors.report("a", "problem a")
    assert caplog.records[-1].message == "problem a (4 more like it not logged)"


def test_from_env_reads_the_contract_variables(tmp_path: Path) -> None:
    path = tmp_path / "progress.json"
    environ = {
        "DECOR_EPOCHS": "4",
        "DECOR_STEPS_PER_EPOCH": "60",
        "DECOR_PROGRESS_FILE": str(path),
    }
    reporter = ProgressReporter.from_env(environ=environ)
    assert reporter.progress_file == path
    assert reporter.port is None
    assert json.loads(path.read_text())["steps_planned"] == 240
    assert json.loads(path.read_text())["epochs_planned"] == 4


def test_from_env_serves_on_the_port_and_ignores_bad_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    environ = {"DECOR_EPOCHS": "four", "DECOR_METRICS_PORT": "0"}
    with ProgressReporter.from_env(environ=environ, address="127.0.0.1") as reporter:
        assert reporter.port
        assert reporter.snapshot().epochs_planned == 0
        assert reporter.snapshot().steps_planned == 0
    assert any("DECOR_EPOCHS" in r.message for r in caplog.records)


def test_two_line_helper_writes_the_progress_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("DECOR_PROGRESS_FILE", str(path))
    monkeypatch.setenv("DECOR_EPOCHS", "2")
    monkeypatch.setenv("DECOR_STEPS_PER_EPOCH", "3")
    progress.close()
    try:
        progress.step(samples=8)
        progress.step(samples=8)
        progress.epoch()
    finally:
        progress.close()
    data = json.loads(path.read_text())
    assert (data["steps"], data["samples"], data["epochs"], data["steps_planned"]) == (2, 16, 1, 6)


@pytest.mark.parametrize(
    "change",
    [
        {"steps": -1},
        {"steps": 1.5},
        {"steps": "3"},
        {"steps": True},
        {"step_s": float("nan")},
        {"t": float("inf")},
        {"epochs": None},
    ],
)
def test_snapshot_rejects_bad_fields(change: dict[str, object]) -> None:
    good = ProgressSnapshot(1, 2, 3, 0, 1, 0.5, 0.0, 1.0)
    data = {**json.loads(good.to_json()), **change}
    with pytest.raises(ValueError):
        ProgressSnapshot.from_mapping(data)


def test_snapshot_rejects_non_objects() -> None:
    with pytest.raises(ValueError):
        ProgressSnapshot.from_mapping([1, 2])


def test_sidecar_source_serves_last_good_values(tmp_path: Path) -> None:
    path = tmp_path / "progress.json"
    source = ProgressFileSource(path)
    assert source() is None  # no file yet: nothing to serve
    good = ProgressSnapshot(120, 3840, 400, 1, 4, 0.081, 8.2, 1_795_860_000.25)
    path.write_text(good.to_json())
    assert source() == good
    path.write_text('{"steps": 1')  # truncated
    assert source() == good
    path.write_text(json.dumps({"steps": 5}))  # fields missing
    assert source() == good
    path.unlink()
    assert source() == good


def test_sidecar_registry_exposes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "progress.json"
    registry = build_registry(path)
    assert exposed_names(registry) == set()
    path.write_text(ProgressSnapshot(120, 3840, 400, 1, 4, 0.081, 8.2, 1.5e9).to_json())
    assert exposed_names(registry) == contract_metric_names()
    assert value(registry, "decor_steps_completed_total") == 120
    assert value(registry, "decor_step_duration_seconds") == 0.081
    assert value(registry, "decor_last_step_timestamp_seconds") == 1.5e9


HELPER_LOOP = """
import sys
from decor_trainer import progress
for _ in range(int(sys.argv[1])):
    progress.step(samples=2)
print("done", flush=True)
"""


def _helper_env(port: int, steps_planned: int) -> dict[str, str]:
    """The environment the local runtime gives a trainer: the plan, the endpoint, the linger."""
    env = {
        **os.environ,
        "DECOR_EPOCHS": "1",
        "DECOR_STEPS_PER_EPOCH": str(steps_planned),
        "DECOR_METRICS_PORT": str(port),
        "DECOR_METRICS_ADDRESS": "127.0.0.1",
        "DECOR_METRICS_LINGER_S": "30",
    }
    env.pop("DECOR_PROGRESS_FILE", None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("steps", "lingers"), [(3, True), (2, False)])
def test_a_loop_that_finished_its_plan_serves_its_final_step_once_at_exit(
    steps: int, lingers: bool
) -> None:
    """The two-line helper lingers like the reference trainer (``DECOR_METRICS_LINGER_S``)
    once every planned step is done, until one scrape has shown the final step, so the
    controller stamps the finish with the last step's time; then it exits by itself. A loop
    that stops short of its plan exits at once."""
    port = _free_port()
    env = _helper_env(port, steps_planned=3)
    with subprocess.Popen(
        [sys.executable, "-c", HELPER_LOOP, str(steps)], env=env, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "done"
            if not lingers:
                assert child.wait(timeout=10) == 0
                return
            assert child.poll() is None, "exited before its final step could be scraped"
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
            values = {
                s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            }
            assert values["decor_steps_completed_total"] == 3 == values["decor_steps_planned"]
            assert child.wait(timeout=10) == 0, "the scrape ends the linger"
        finally:
            child.kill()


def test_sigterm_ends_the_helpers_linger_with_the_loops_exit_status() -> None:
    port = _free_port()
    env = _helper_env(port, steps_planned=1)
    with subprocess.Popen(
        [sys.executable, "-c", HELPER_LOOP, "1"], env=env, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "done"
            # No outside sign tells when the exit handler has taken SIGTERM over; the
            # interpreter reaches it within milliseconds of printing "done".
            time.sleep(0.5)
            assert child.poll() is None
            child.terminate()
            assert child.wait(timeout=10) == 0
        finally:
            child.kill()


def test_linger_waits_for_one_scrape_after_the_last_step() -> None:
    with ProgressReporter(
        steps_planned=3, epochs_planned=1, port=0, address="127.0.0.1"
    ) as reporter:
        reporter.step_done()
        started = time.monotonic()
        reporter.linger(30.0)  # the plan is not done: no linger
        assert time.monotonic() - started < 1.0
        reporter.step_done()
        reporter.step_done()
        assert reporter.finished
        calls: list[int] = []
        reporter.linger(30.0, stop=lambda: len(calls) > 2 or calls.append(1) is not None)
        assert time.monotonic() - started < 5.0 and len(calls) == 3  # until stop()
        url = f"http://127.0.0.1:{reporter.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            response.read()
        # A scrape after the last step: linger returns as soon as the server has counted it
        # (once its body is out), not after 30 s.
        reporter.linger(30.0)
        assert time.monotonic() - started < 5.0


def test_a_scrape_begun_before_the_last_step_does_not_end_the_linger() -> None:
    """A response made before the last step (it holds the step before) but sent in full
    after it is not the scrape that shows the finish: on a slow machine a trainer stopped
    lingering on it, exited, and the local runtime never saw its last step."""
    with ProgressReporter(
        steps_planned=2, epochs_planned=1, port=0, address="127.0.0.1"
    ) as reporter:
        reporter.step_done()
        server = reporter._server
        assert server is not None
        before_last = server._counted(lambda environ, start_response: [b"steps 1"])({}, None)
        reporter.step_done()
        before_last.close()  # its body is out only now
        started = time.monotonic()
        reporter.linger(1.0)
        assert time.monotonic() - started >= 0.9, "the linger ended on the step before"
        url = f"http://127.0.0.1:{reporter.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert b"decor_steps_completed_total 2.0" in response.read()
        started = time.monotonic()
        reporter.linger(30.0)  # a scrape begun after the last step ends it at once
        assert time.monotonic() - started < 1.0
