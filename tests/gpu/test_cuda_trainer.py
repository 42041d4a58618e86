"""The reference trainer on a CUDA device, as real processes: each workload trains on the GPU,
a SIGTERM saves and the resume on the GPU matches an uninterrupted run bit for bit
(``--deterministic``), and a checkpoint moves between the GPU and the CPU both ways (a job
that falls back from GPUs to CPUs, or gets one, loses and repeats no step).

Runs only where PyTorch sees a CUDA device (``make gpu-test``; docs/distributed.md records
the runs and what they measured). CI has no GPU: ``make test`` does not collect this folder.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from decor_trainer.checkpoint import read_checkpoint
from decor_trainer.reporter import ProgressSnapshot
from integration.test_trainer import PORT_LINE, running, scrape, trainer_env
from support.waiting import wait_for

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TIMEOUT_S = 180.0
COMMON = ["--seed", "3", "--threads", "2", "--batch-size", "16", "--width", "16"]
PLAN = ["--workload", "resnet", "--epochs", "2", "--steps-per-epoch", "30"]
STEPS, SAMPLES = 60, 60 * 16


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "decor_trainer.train", *COMMON, *args]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args), env=trainer_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )


def final_state(checkpoint_dir: Path) -> dict[str, Any]:
    data = read_checkpoint(checkpoint_dir / "checkpoint.pt")
    assert data is not None
    return data


def stop_after_steps(args: list[str], steps: int) -> None:
    """Run the trainer with ``args`` until it reports ``steps`` steps, then SIGTERM it; it
    must save and exit 0."""
    with running(command(*args, "--metrics-port", "0", "--metrics-address", "127.0.0.1")) as p:
        port = int(p.wait_for_line(PORT_LINE).group(1))
        wait_for(
            lambda: scrape(port)["decor_steps_completed_total"] >= steps, f"{steps} steps",
            TIMEOUT_S,
        )  # fmt: skip
        p.popen.send_signal(signal.SIGTERM)
        assert p.wait() == 0, p.text()


@pytest.mark.parametrize("workload", ["resnet", "vgg", "lstm"])
def test_each_workload_trains_on_the_gpu(tmp_path: Path, workload: str) -> None:
    progress = tmp_path / "progress.json"
    result = run(
        "--workload", workload, "--epochs", "2", "--steps-per-epoch", "3", "--device", "cuda",
        "--checkpoint-dir", str(tmp_path / "ckpt"), "--progress-file", str(progress),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "on cuda:0" in result.stderr
    snapshot = ProgressSnapshot.from_mapping(json.loads(progress.read_text()))
    assert (snapshot.steps, snapshot.samples, snapshot.epochs) == (6, 6 * 16, 2)
    assert snapshot.step_s > 0


def test_sigterm_then_resume_on_the_gpu_matches_a_straight_run(tmp_path: Path) -> None:
    gpu = [*PLAN, "--device", "cuda", "--deterministic"]
    straight = run(*gpu, "--checkpoint-dir", str(tmp_path / "straight"))
    assert straight.returncode == 0, straight.stderr

    stopped_dir, step_log = tmp_path / "stopped", tmp_path / "steps.log"
    stop_after_steps([*gpu, "--checkpoint-dir", str(stopped_dir), "--step-log", str(step_log)], 5)
    stopped_at = final_state(stopped_dir)["step"]
    assert 5 <= stopped_at < STEPS, "SIGTERM came too late to test a resume"
    resumed = run(*gpu, "--checkpoint-dir", str(stopped_dir), "--step-log", str(step_log))
    assert resumed.returncode == 0, resumed.stderr
    assert f"at step {stopped_at}/{STEPS}" in resumed.stderr
    assert "restart cost" in resumed.stderr
    assert [int(line) for line in step_log.read_text().split()] == list(range(STEPS))

    reference, resumed_state = final_state(tmp_path / "straight"), final_state(stopped_dir)
    assert reference["step"] == resumed_state["step"] == STEPS
    for name, tensor in reference["model"].items():
        assert torch.equal(tensor, resumed_state["model"][name]), name


@pytest.mark.parametrize(("first", "then"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_moves_between_gpu_and_cpu(tmp_path: Path, first: str, then: str) -> None:
    ckpt, step_log, progress = tmp_path / "ckpt", tmp_path / "steps.log", tmp_path / "p.json"
    logs = ["--checkpoint-dir", str(ckpt), "--step-log", str(step_log)]
    stop_after_steps([*PLAN, "--device", first, *logs], 3)
    stopped_at = final_state(ckpt)["step"]
    assert 3 <= stopped_at < STEPS, "SIGTERM came too late to test a resume"
    resumed = run(*PLAN, "--device", then, *logs, "--progress-file", str(progress))
    assert resumed.returncode == 0, resumed.stderr
    assert f"on {then}" in resumed.stderr and f"at step {stopped_at}/{STEPS}" in resumed.stderr
    assert [int(line) for line in step_log.read_text().split()] == list(range(STEPS))
    snapshot = ProgressSnapshot.from_mapping(json.loads(progress.read_text()))
    assert (snapshot.steps, snapshot.samples) == (STEPS, SAMPLES)
    assert all(t.device.type == "cpu" for t in final_state(ckpt)["model"].values())


def test_only_the_visible_gpus_are_used(tmp_path: Path) -> None:
    """``CUDA_VISIBLE_DEVICES`` (what the device plugin sets) is what the trainer sees: with
    none visible, ``--device cuda`` is a usage error (exit 2), not a silent CPU run."""
    env = {**trainer_env(), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        command(*PLAN, "--device", "cuda", "--checkpoint-dir", str(tmp_path / "ckpt")),
        env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "no CUDA device" in result.stderr
