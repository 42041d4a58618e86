"""A data-parallel world that spans pods, as real processes on this host (CPU, gloo).

Each "pod" is one launcher, ``python -m decor_trainer.train``, with the variables the operator
gives a pod of a multi-pod job: ``DECOR_WORKERS`` (its workers), ``DECOR_WORLD_SIZE``,
``DECOR_RANK_OFFSET`` and the rendezvous ``MASTER_ADDR``/``MASTER_PORT`` of global rank 0.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from decor_trainer.distributed import LOCALHOST, free_port
from support.waiting import wait_for
from test_data_parallel import (
    LSTM,
    TIMEOUT_S,
    Trainer,
    global_order,
    lines,
    samples_by_step,
)

STEPS = 400
"""Global steps of the job: a few seconds of the tiny LSTM, enough for two stops mid-run."""
BATCH = 4
"""Global batch (samples per step): 2 per worker in a world of 2."""
STEPS_BEFORE_STOP = 5
"""Steps a stage runs, at least, before its SIGTERM."""
PLAN = [*LSTM, "--batch-size", str(BATCH), "--epochs", "1", "--steps-per-epoch", str(STEPS)]
POD_OFFSETS = (0, 1)
"""Two pods of one worker each: global ranks 0 and 1."""


def pod_env(rank_offset: int, port: int) -> dict[str, str]:
    """One pod of a world of two single-worker pods meeting at rank 0's port on this host."""
    return {
        "DECOR_WORKERS": "1",
        "DECOR_WORLD_SIZE": str(len(POD_OFFSETS)),
        "DECOR_RANK_OFFSET": str(rank_offset),
        "MASTER_ADDR": LOCALHOST,
        "MASTER_PORT": str(port),
    }


def start_pods(args: list[list[str]], stderr_prefix: Path) -> list[Trainer]:
    """The two pods, pod i running ``args[i]``; a fresh rendezvous port for each world."""
    port = free_port()
    return [
        Trainer(args[offset], Path(f"{stderr_prefix}-pod{offset}.err"), pod_env(offset, port))
        for offset in POD_OFFSETS
    ]


def stop(trainers: list[Trainer]) -> None:
    for trainer in trainers:
        trainer.popen.send_signal(signal.SIGTERM)
    for trainer in trainers:
        assert trainer.wait() == 0, trainer.stderr


def test_two_pods_one_pod_two_pods_with_sigterm_run_every_step_and_sample_once(
    tmp_path: Path,
) -> None:
    reference_log = tmp_path / "reference.samples"
    reference = Trainer([*PLAN, "--sample-log", str(reference_log)], tmp_path / "reference.err")
    try:
        sample_log, step_log = tmp_path / "pods.samples", tmp_path / "steps.log"
        common = [
            *PLAN, "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every-s", "0",
            "--sample-log", str(sample_log), "--step-log", str(step_log),
        ]  # fmt: skip
        # Each pod has its own progress file, as each has its own sidecar.
        pod_args = [
            [*common, "--progress-file", str(tmp_path / f"pod{i}.json")] for i in POD_OFFSETS
        ]
        stopped_at = []

        pods = start_pods(pod_args, tmp_path / "stage1")
        wait_for(lambda: lines(step_log) >= STEPS_BEFORE_STOP, "steps on two pods", TIMEOUT_S)
        stop(pods)
        stopped_at.append(lines(step_log))
        assert re.search(rf"checkpoint \(stop\) at step {stopped_at[-1]} saved", pods[0].stderr)

        alone = Trainer(pod_args[0], tmp_path / "stage2.err")  # one pod, no DECOR_WORLD_SIZE
        wait_for(
            lambda: lines(step_log) >= stopped_at[0] + STEPS_BEFORE_STOP,
            "steps on one pod",
            TIMEOUT_S,
        )
        stop([alone])
        stopped_at.append(lines(step_log))
        assert "with 1 workers (checkpoint written with 2)" in alone.stderr

        pods = start_pods(pod_args, tmp_path / "stage3")
        for pod in pods:
            assert pod.wait() == 0, pod.stderr
        assert "with 2 workers (checkpoint written with 1)" in pods[0].stderr
        assert reference.wait() == 0, reference.stderr
    finally:
        if reference.popen.poll() is None:
            reference.popen.kill()
            reference.popen.wait()

    assert stopped_at[0] < stopped_at[1] < STEPS, "a SIGTERM came too late to test a resume"
    assert [int(s) for s in step_log.read_text().split()] == list(range(STEPS))  # each once
    pods_order, straight = global_order(sample_log), global_order(reference_log)
    assert pods_order == straight  # the same samples in the same global order
    assert sorted(i for step in pods_order for i in step) == list(range(STEPS * BATCH))
    worlds = {s: {w for _, w, _ in e} for s, e in samples_by_step(sample_log).items()}
    assert {s for s, w in worlds.items() if w == {1}} == set(range(*stopped_at))
    assert {s for s, w in worlds.items() if w == {2}} == set(range(STEPS)) - set(range(*stopped_at))
    # Rank 0's pod alone reports, with the global counts; the other pod never wrote progress.
    progress = json.loads((tmp_path / "pod0.json").read_text())
    assert (progress["steps"], progress["samples"]) == (STEPS, STEPS * BATCH)
    assert not (tmp_path / "pod1.json").exists()


def test_pods_that_do_not_share_the_checkpoint_directory_stop_before_training(
    tmp_path: Path,
) -> None:
    shared, elsewhere = tmp_path / "ckpt", tmp_path / "elsewhere"
    step_log = tmp_path / "steps.log"
    saved_steps = 3
    first = Trainer(
        [*PLAN, "--checkpoint-dir", str(shared), "--exit-at-step", str(saved_steps),
         "--step-log", str(step_log)],
        tmp_path / "first.err",
    )  # fmt: skip
    assert first.wait() == 0, first.stderr
    assert lines(step_log) == saved_steps

    # Pod 1 sees an empty directory where pod 0 sees the checkpoint at step 3.
    pods = start_pods(
        [
            [*PLAN, "--checkpoint-dir", str(d), "--step-log", str(step_log)]
            for d in (shared, elsewhere)
        ],
        tmp_path / "split",
    )
    codes = [pod.wait() for pod in pods]
    for pod, directory in zip(pods, (shared, elsewhere), strict=True):
        assert re.search(
            rf"rank\(s\) \[1\] would resume at another position than rank 0 \(step {saved_steps},"
            rf".*the checkpoint directory {re.escape(str(directory))} must be shared by every "
            "worker pod",
            pod.stderr,
        ), pod.stderr
    assert codes == [2, 2]  # usage errors, like an incompatible checkpoint
    assert lines(step_log) == saved_steps  # not one step trained
