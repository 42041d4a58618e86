"""The own-loop examples (examples/own-loop) as jobs of the local runtime.

Each example runs as ``decor run JOB.yaml --local``, is stopped mid-run (SIGTERM to ``decor``,
which passes it to the trainer: it saves a checkpoint and exits 0), and runs again from the
same checkpoint directory. Every step must run exactly once across the restart, with the
same losses as a run that was never stopped, and the reporter's counts must be exact.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from decor.local.trace import read_trace
from decor_trainer.checkpoint import read_checkpoint

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "own-loop"
TIMEOUT_S = 120.0


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the contract's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECOR_")}
    return {**env, **extra}


def job_file(
    tmp_path: Path, example: str, *, epochs: int, steps_per_epoch: int, cores: str,
    args: list[str], checkpoint_dir: Path,
) -> Path:  # fmt: skip
    """The example's manifest, shortened for a test: fewer steps at a fixed pace of
    ``cores`` (min and initial; the work is too small for the law to raise it), and the
    checkpoint directory under ``tmp_path``."""
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    spec = doc["spec"]
    spec.update(epochs=epochs, stepsPerEpoch=steps_per_epoch, duration="60s")
    spec["resources"] = {"mode": "cpu", "min": cores, "max": "1", "initial": cores}
    spec["checkpoint"] = {"path": str(checkpoint_dir)}
    spec["template"]["spec"]["containers"][0]["args"] = args
    path = tmp_path / example
    path.write_text(yaml.safe_dump(doc))
    return path


def decor_run(job: Path, out: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """``decor run JOB --local`` from the repository's root (the manifests name the
    examples by paths relative to it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "decor.cli", "run", str(job), "--local", "--out", str(out)],
        cwd=ROOT,
        env=clean_env(DECOR_STATE_DIR=str(tmp_path / "state")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def log_text(out: Path) -> str:
    path = out / "trainer.log"
    return path.read_text() if path.exists() else ""


def stop_when(proc: subprocess.Popen[str], out: Path, pattern: str, count: int) -> None:
    """SIGTERM ``decor`` once the trainer's log has ``count`` lines matching ``pattern``."""
    deadline = time.monotonic() + TIMEOUT_S
    while len(re.findall(pattern, log_text(out), re.M)) < count:
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {count} lines {pattern!r} in {TIMEOUT_S} s:\n{log_text(out)}")
        try:  # between two looks at the log, wait on the run itself: it must not end
            proc.wait(timeout=0.01)
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(f"the run ended before it was stopped:\n{log_text(out)}")
    proc.send_signal(signal.SIGTERM)


def finish(proc: subprocess.Popen[str]) -> str:
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return output


def final_line(log: str) -> re.Match[str]:
    match = re.search(
        r"^(stopped|finished): (\d+)/(\d+) steps, (\d+) samples(?:, restart ([\d.]+) s)?$",
        log,
        re.M,
    )
    assert match, log
    return match


# --- the plain PyTorch loop ------------------------------------------------------------------

SAMPLES, BATCH, EPOCHS = 1000, 64, 4
STEPS_PER_EPOCH = -(-SAMPLES // BATCH)  # 16: the last batch of an epoch has 40 samples
STEPS = EPOCHS * STEPS_PER_EPOCH
LOOP_ARGS = ["--samples", str(SAMPLES), "--batch-size", str(BATCH), "--hidden", "256"]
LOOP_ARGS += ["--log-every", "1", "--checkpoint-every", "10"]
STEP_LINE = r"^step (\d+)/\d+ loss (\S+)$"


def samples_after(steps: int) -> int:
    """Samples the loop has consumed after ``steps`` steps (short last batch per epoch)."""
    epochs, steps_in_epoch = divmod(steps, STEPS_PER_EPOCH)
    return epochs * SAMPLES + steps_in_epoch * BATCH


def step_losses(log: str) -> list[tuple[int, str]]:
    return [(int(step), loss) for step, loss in re.findall(STEP_LINE, log, re.M)]


def test_plain_loop_stopped_and_resumed_runs_every_step_once(tmp_path: Path) -> None:
    straight = subprocess.run(
        [sys.executable, str(EXAMPLES / "train.py"), *LOOP_ARGS],
        env=clean_env(
            DECOR_EPOCHS=str(EPOCHS),
            DECOR_CHECKPOINT_DIR=str(tmp_path / "straight"),
            DECOR_METRICS_PORT="0",
        ),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert straight.returncode == 0, straight.stderr
    reference = step_losses(straight.stdout)
    assert [step for step, _ in reference] == list(range(1, STEPS + 1))

    checkpoints = tmp_path / "checkpoints"
    job = job_file(
        tmp_path, "job.yaml", epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, cores="250m",
        args=LOOP_ARGS, checkpoint_dir=checkpoints,
    )  # fmt: skip
    first_out, second_out = tmp_path / "first", tmp_path / "second"
    first = decor_run(job, first_out, tmp_path)
    stop_when(first, first_out, STEP_LINE, 5)
    finish(first)
    first_log = log_text(first_out)
    assert "resumed" not in first_log
    stopped = final_line(first_log)
    stopped_at = int(stopped.group(2))
    assert stopped.group(1) == "stopped" and 5 <= stopped_at < STEPS, first_log
    saved = read_checkpoint(checkpoints / "checkpoint.pt")
    assert saved is not None and saved["step"] == stopped_at
    assert (int(stopped.group(3)), int(stopped.group(4))) == (STEPS, samples_after(stopped_at))
    assert float(stopped.group(5)) == 0.0  # no restart yet

    second = decor_run(job, second_out, tmp_path)
    output = finish(second)
    assert second.returncode == 0, output + log_text(second_out)
    second_log = log_text(second_out)
    resumed = f"resumed from {checkpoints / 'checkpoint.pt'} at step {stopped_at}/{STEPS}"
    assert second_log.count("resumed from") == 1 and resumed in second_log, second_log
    finished = final_line(second_log)
    assert finished.group(1) == "finished"
    assert [int(finished.group(n)) for n in (2, 3, 4)] == [STEPS, STEPS, samples_after(STEPS)]
    assert float(finished.group(5)) > 0.0  # the restart's cost was reported

    # Every step once, in order, with the losses of the run that was never stopped: the model,
    # the optimizer, the RNG (dropout) and the data position all came back exactly.
    assert step_losses(first_log) + step_losses(second_log) == reference

    summary, rows = read_trace(second_out / "trace.json")
    assert summary["complete"] and summary["exit_code"] == 0, summary
    seen = [r for r in rows if r.condition != "MetricsUnavailable"]
    assert seen and min(r.steps_done for r in seen) >= stopped_at  # counters from the checkpoint
    assert (seen[-1].steps_done, seen[-1].steps_total) == (STEPS, STEPS)


# --- Hugging Face's Trainer --------------------------------------------------------------------

HF_SAMPLES, HF_BATCH, HF_ACCUMULATION, HF_EPOCHS = 128, 4, 2, 3
HF_STEPS_PER_EPOCH = HF_SAMPLES // HF_BATCH // HF_ACCUMULATION  # 16 optimizer steps
HF_STEPS = HF_EPOCHS * HF_STEPS_PER_EPOCH
HF_ARGS = ["--samples", str(HF_SAMPLES), "--batch-size", str(HF_BATCH)]
HF_ARGS += ["--accumulation", str(HF_ACCUMULATION), "--log-every", "1", "--save-every", "1000"]
HF_LOG_LINE = r"^\{'loss': "


def logged_steps(output_dir: Path) -> list[tuple[int, float, float]]:
    """(optimizer step, loss, gradient norm) of every logged step, from the Trainer's state."""
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [(h["step"], h["loss"], h["grad_norm"]) for h in state["log_history"] if "loss" in h]


def test_hugging_face_trainer_stopped_and_resumed_runs_every_optimizer_step_once(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    straight = subprocess.run(
        [sys.executable, str(EXAMPLES / "hf_train.py"), *HF_ARGS],
        env=clean_env(
            DECOR_EPOCHS=str(HF_EPOCHS),
            DECOR_CHECKPOINT_DIR=str(tmp_path / "straight"),
            DECOR_METRICS_PORT="0",
        ),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert straight.returncode == 0, straight.stderr
    reference = logged_steps(tmp_path / "straight")
    assert [step for step, _, _ in reference] == list(range(1, HF_STEPS + 1))

    output_dir = tmp_path / "checkpoints"
    job = job_file(
        tmp_path, "hf-job.yaml", epochs=HF_EPOCHS, steps_per_epoch=HF_STEPS_PER_EPOCH,
        cores="500m", args=HF_ARGS, checkpoint_dir=output_dir,
    )  # fmt: skip
    first_out, second_out = tmp_path / "first", tmp_path / "second"
    first = decor_run(job, first_out, tmp_path)
    stop_when(first, first_out, HF_LOG_LINE, 3)
    finish(first)
    first_log = log_text(first_out)
    stopped = final_line(first_log)
    stopped_at = int(stopped.group(2))
    assert stopped.group(1) == "stopped" and 3 <= stopped_at < HF_STEPS, first_log
    # Optimizer steps, not mini-batches; each is batch x accumulation samples.
    per_step = HF_BATCH * HF_ACCUMULATION
    assert (int(stopped.group(3)), int(stopped.group(4))) == (HF_STEPS, stopped_at * per_step)
    assert [p.name for p in output_dir.glob("checkpoint-*")] == [f"checkpoint-{stopped_at}"]

    second = decor_run(job, second_out, tmp_path)
    output = finish(second)
    assert second.returncode == 0, output + log_text(second_out)
    second_log = log_text(second_out)
    assert f"resuming from {output_dir / f'checkpoint-{stopped_at}'}\n" in second_log, second_log
    finished = final_line(second_log)
    assert finished.group(1) == "finished"
    assert [int(finished.group(n)) for n in (2, 3, 4)] == [HF_STEPS, HF_STEPS, HF_STEPS * per_step]
    # The state holds the steps logged before the stop and after the resume: every optimizer
    # step once, with the loss and gradient norm of the run that was never stopped.
    assert logged_steps(output_dir) == reference
    assert len(re.findall(HF_LOG_LINE, first_log + second_log, re.M)) == HF_STEPS

    summary, rows = read_trace(second_out / "trace.json")
    assert summary["complete"] and summary["exit_code"] == 0, summary
    seen = [r for r in rows if r.condition != "MetricsUnavailable"]
    assert seen and min(r.steps_done for r in seen) >= stopped_at
    assert (seen[-1].steps_done, seen[-1].steps_total) == (HF_STEPS, HF_STEPS)  # the final step
