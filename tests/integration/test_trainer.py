"""The reference trainer and the sidecar as real processes: train, scrape, SIGTERM, resume."""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from decor.adapter.scrape import scrape_progress
from decor.core import progress
from decor_trainer.checkpoint import StopRequest, read_checkpoint
from decor_trainer.reporter import ProgressSnapshot
from decor_trainer.train import main, parse_args, train
from prometheus_client.parser import text_string_to_metric_families
from support.waiting import wait_for

TIMEOUT_S = 60.0
UNPINNED = ["--batch-size", "4", "--width", "4", "--vocab-size", "50", "--seq-len", "8"]
UNPINNED += ["--seed", "3"]
TINY = [*UNPINNED, "--threads", "1"]
PORT_LINE = re.compile(r"on http://127\.0\.0\.1:(\d+)/metrics")


def trainer_env() -> dict[str, str]:
    """The test process's environment without the contract's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("DECOR_")}


def train_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "decor_trainer.train", *TINY, *args]


class Process:
    """A child process whose stderr lines are collected by a thread (no blocking reads)."""

    def __init__(self, command: list[str]) -> None:
        self.popen = subprocess.Popen(
            command, env=trainer_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.lines.put(line)

    def wait_for_line(self, pattern: re.Pattern[str]) -> re.Match[str]:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.popen.poll() is not None and self.lines.empty():
                    break
                continue
            self.stderr.append(line)
            match = pattern.search(line)
            if match:
                return match
        pytest.fail(f"no line matching {pattern.pattern!r}; stderr so far:\n{self.text()}")

    def wait(self) -> int:
        rc = self.popen.wait(timeout=TIMEOUT_S)
        self._reader.join(timeout=TIMEOUT_S)
        while not self.lines.empty():
            self.stderr.append(self.lines.get())
        return rc

    def text(self) -> str:
        return "".join(self.stderr)


@contextmanager
def running(command: list[str]) -> Iterator[Process]:
    process = Process(command)
    try:
        yield process
    finally:
        if process.popen.poll() is None:
            process.popen.kill()
        process.wait()
        assert process.popen.stderr is not None
        process.popen.stderr.close()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        train_command(*args), env=trainer_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )


def scrape(port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def final_state(checkpoint_dir: Path) -> dict[str, Any]:
    data = read_checkpoint(checkpoint_dir / "checkpoint.pt")
    assert data is not None
    return data


@pytest.mark.parametrize("workload", ["resnet", "vgg", "lstm"])
def test_each_workload_trains_to_the_planned_steps(tmp_path: Path, workload: str) -> None:
    progress = tmp_path / "progress.json"
    result = run(
        "--workload", workload, "--epochs", "2", "--steps-per-epoch", "3",
        "--checkpoint-dir", str(tmp_path / "ckpt"), "--progress-file", str(progress),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    snapshot = ProgressSnapshot.from_mapping(json.loads(progress.read_text()))
    assert (snapshot.steps, snapshot.samples, snapshot.epochs) == (6, 24, 2)
    assert (snapshot.steps_planned, snapshot.epochs_planned) == (6, 2)
    assert snapshot.step_s > 0 and snapshot.epoch_s > 0 and snapshot.t > 0
    assert snapshot.threads_follow_limit is False  # pinned by --threads
    assert final_state(tmp_path / "ckpt")["step"] == 6
    assert len(re.findall(r"epoch \d/2 done", result.stderr)) == 2


@pytest.mark.parametrize(("pinned", "said"), [(False, True), (True, False)])
def test_threads_that_follow_the_limit_are_said_so(pinned: bool, said: bool) -> None:
    """Without ``--threads`` the trainer's threads follow its CPU limit, and the operator's
    own reader of its /metrics says so (``decor_threads_follow_limit``: the law then does not
    measure a limit between whole cores); pinned, it does not."""
    threads = ["--threads", "1"] if pinned else []
    command = [
        sys.executable, "-m", "decor_trainer.train", *UNPINNED, *threads, "--workload", "resnet",
        "--epochs", "1", "--steps-per-epoch", "2", "--metrics-port", "0",
        "--metrics-address", "127.0.0.1", "--metrics-linger-s", "60",
    ]  # fmt: skip
    with running(command) as trainer:
        url = f"http://127.0.0.1:{trainer.wait_for_line(PORT_LINE).group(1)}/metrics"

        def done() -> progress.Progress | None:
            read = scrape_progress(url)
            return read if read.steps_done >= 2 else None

        assert wait_for(done, "2 steps", TIMEOUT_S).threads_follow_limit is said
        trainer.popen.send_signal(signal.SIGTERM)
        assert trainer.wait() == 0, trainer.text()


def test_sigterm_then_resume_loses_and_repeats_no_step(tmp_path: Path) -> None:
    plan = ["--workload", "resnet", "--epochs", "2", "--steps-per-epoch", "20", "--device", "cpu"]
    straight_dir, stopped_dir = tmp_path / "straight", tmp_path / "stopped"
    step_log = tmp_path / "steps.log"
    # The uninterrupted reference run goes on in parallel (one thread each, two cores).
    straight = subprocess.Popen(
        train_command(*plan, "--checkpoint-dir", str(straight_dir), "--progress-file",
                      str(tmp_path / "straight.json")),
        env=trainer_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        command = train_command(
            *plan, "--checkpoint-dir", str(stopped_dir), "--step-log", str(step_log),
            "--metrics-port", "0", "--metrics-address", "127.0.0.1",
        )  # fmt: skip
        with running(command) as first:
            port = int(first.wait_for_line(PORT_LINE).group(1))
            wait_for(lambda: scrape(port)["decor_steps_completed_total"] >= 3, "3 steps", TIMEOUT_S)
            first.popen.send_signal(signal.SIGTERM)
            assert first.wait() == 0, first.text()
        stopped_at = final_state(stopped_dir)["step"]
        assert 3 <= stopped_at < 40, "SIGTERM came too late to test a resume"
        logged = [int(line) for line in step_log.read_text().split()]
        assert logged == list(range(stopped_at))

        progress = tmp_path / "resumed.json"
        resumed = run(
            *plan, "--checkpoint-dir", str(stopped_dir), "--step-log", str(step_log),
            "--progress-file", str(progress),
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        assert f"resumed from {stopped_dir / 'checkpoint.pt'} at step {stopped_at}/40" in (
            resumed.stderr
        )
        assert [int(line) for line in step_log.read_text().split()] == list(range(40))
        snapshot = ProgressSnapshot.from_mapping(json.loads(progress.read_text()))
        assert (snapshot.steps, snapshot.samples, snapshot.epochs) == (40, 160, 2)
        assert straight.wait(timeout=TIMEOUT_S) == 0
    finally:
        if straight.poll() is None:
            straight.kill()
            straight.wait()

    reference, resumed_state = final_state(straight_dir), final_state(stopped_dir)
    assert reference["step"] == resumed_state["step"] == 40
    for name, tensor in reference["model"].items():
        assert torch.equal(tensor, resumed_state["model"][name]), name


def test_fail_at_step_exits_non_zero(tmp_path: Path) -> None:
    result = run(
        "--workload", "vgg", "--epochs", "1", "--steps-per-epoch", "5", "--fail-at-step", "2",
        "--progress-file", str(tmp_path / "progress.json"),
    )  # fmt: skip
    assert result.returncode == 1
    assert "--fail-at-step 2" in result.stderr
    assert json.loads((tmp_path / "progress.json").read_text())["steps"] == 2


def test_sidecar_serves_the_progress_file(tmp_path: Path) -> None:
    path = tmp_path / "progress.json"
    command = [sys.executable, "-m", "decor_trainer.sidecar", "--file", str(path)]
    command += ["--port", "0", "--address", "127.0.0.1"]
    with running(command) as sidecar:
        port = int(sidecar.wait_for_line(PORT_LINE).group(1))
        assert not any(name.startswith("decor_") for name in scrape(port))
        path.write_text(ProgressSnapshot(120, 3840, 400, 1, 4, 0.081, 8.2, 1.5e9).to_json())
        metrics = scrape(port)
        assert metrics["decor_steps_completed_total"] == 120
        assert metrics["decor_samples_completed_total"] == 3840
        assert metrics["decor_steps_planned"] == 400
        assert metrics["decor_epoch_duration_seconds"] == 8.2
        path.write_text("{not json")
        assert scrape(port)["decor_steps_completed_total"] == 120  # last good values
        sidecar.popen.send_signal(signal.SIGTERM)
        assert sidecar.wait() == 0


# In-process runs of main(): argument handling and edge cases, no interpreter start-up.


def tiny_args(tmp_path: Path, *args: str) -> list[str]:
    return [*TINY, "--workload", "vgg", "--progress-file", str(tmp_path / "p.json"), *args]


def test_unwritable_progress_file_does_not_break_training(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    args = [*TINY, "--workload", "vgg", "--epochs", "1", "--steps-per-epoch", "4"]
    args += ["--progress-file", str(blocker / "progress.json")]
    args += ["--checkpoint-dir", str(tmp_path / "ckpt")]
    assert main(args, environ={}) == 0
    assert final_state(tmp_path / "ckpt")["step"] == 4


def test_crash_resumes_from_the_periodic_checkpoint(tmp_path: Path) -> None:
    args = tiny_args(tmp_path, "--epochs", "1", "--steps-per-epoch", "6")
    args += ["--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every-s", "1e-9"]
    with pytest.raises(RuntimeError, match="fail-at-step 3"):
        main([*args, "--fail-at-step", "3"], environ={})
    assert final_state(tmp_path / "ckpt")["step"] == 3  # saved after every step
    assert main(args, environ={}) == 0
    assert json.loads((tmp_path / "p.json").read_text())["steps"] == 6


def test_stop_requested_during_set_up_saves_and_exits_0(tmp_path: Path) -> None:
    stop = StopRequest()
    stop.request(signal.SIGTERM)
    args = parse_args(tiny_args(tmp_path, "--checkpoint-dir", str(tmp_path / "ckpt")), environ={})
    assert train(args, stop) == 0
    assert final_state(tmp_path / "ckpt")["step"] == 0


def test_finished_checkpoint_makes_a_rerun_a_no_op(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    args = tiny_args(tmp_path, "--epochs", "1", "--steps-per-epoch", "2")
    args += ["--checkpoint-dir", str(tmp_path / "ckpt")]
    assert main(args, environ={}) == 0
    caplog.clear()
    caplog.set_level(logging.INFO)
    assert main(args, environ={}) == 0
    assert "nothing to do" in caplog.text


def test_checkpoint_of_another_workload_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = ["--epochs", "1", "--steps-per-epoch", "1", "--checkpoint-dir", str(tmp_path / "c")]
    assert main(tiny_args(tmp_path, *base), environ={}) == 0
    assert main(tiny_args(tmp_path, *base, "--width", "8"), environ={}) == 2
    assert "width=4" in caplog.text and "width=8" in caplog.text


def test_environment_supplies_the_defaults(tmp_path: Path) -> None:
    environ = {
        "DECOR_EPOCHS": "2",
        "DECOR_STEPS_PER_EPOCH": "2",
        "DECOR_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "DECOR_PROGRESS_FILE": str(tmp_path / "env.json"),
    }
    assert main([*TINY, "--workload", "lstm"], environ=environ) == 0
    assert json.loads((tmp_path / "env.json").read_text())["steps"] == 4
    assert final_state(tmp_path / "ckpt")["step"] == 4


@pytest.mark.parametrize(
    ("args", "environ", "message"),
    [
        (["--epochs", "0"], {}, "--epochs: must be >= 1"),
        (["--workload", "gpt"], {}, "invalid choice"),
        (["--metrics-port", "70000"], {}, "0..65535"),
        ([], {"DECOR_EPOCHS": "four"}, "DECOR_EPOCHS='four'"),
        ([], {"DECOR_STEPS_PER_EPOCH": "-3"}, "DECOR_STEPS_PER_EPOCH='-3'"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(
    args: list[str], environ: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args, environ=environ)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_cuda_without_a_device_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert main(tiny_args(tmp_path, "--device", "cuda"), environ={}) == 2
    assert "no CUDA device" in caplog.text
