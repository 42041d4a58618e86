"""Measure what progress reporting costs per mini-batch: ``python -m decor_trainer.overhead``.

Times :meth:`ProgressReporter.step_done` with each sink (in-process endpoint; progress file
in a temporary directory) and the step of a tiny workload (ResNet, width 4, batch 4, one
thread), then prints one JSON object: microseconds per call, milliseconds per step and the
ratios. The tiny workload is the worst case: real models take far longer per step while
the reporter's cost stays the same.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .reporter import ProgressReporter


def _per_call_s(call: Callable[[], object], calls: int) -> float:
    """Mean wall time of ``call`` in seconds over ``calls`` calls (after a short warm-up)."""
    for _ in range(min(calls, 100)):
        call()
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls


def tiny_step_s(steps: int, threads: int) -> float:
    """Mean wall time in seconds of one training step of the tiny ResNet workload."""
    import torch

    from .workloads import WorkloadConfig, build_workload

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    workload = build_workload(WorkloadConfig("resnet", width=4, batch_size=4))
    optimizer = workload.optimizer()
    step = 0

    def one_step() -> None:
        nonlocal step
        inputs, targets = workload.batch(step)
        optimizer.zero_grad(set_to_none=True)
        workload.loss(workload.model(inputs), targets).backward()
        optimizer.step()
        step += 1

    for _ in range(5):
        one_step()
    return _per_call_s(one_step, steps)


def measure(
    calls: int = 20000, steps: int = 50, threads: int = 1, file_dir: str | None = None
) -> dict[str, float | str]:
    """Reporter cost per call (us) for both sinks, tiny step time (ms) and their ratios.

    The progress file goes to a temporary directory under ``file_dir`` (default: the system's
    temporary directory). Its cost depends on the file system: a rename over an existing
    file makes ext4 start writing the data back (``auto_da_alloc``), a tmpfs does not.
    """
    with ProgressReporter(
        steps_planned=calls * 2, epochs_planned=1, port=0, address="127.0.0.1"
    ) as reporter:
        in_process_s = _per_call_s(lambda: reporter.step_done(4), calls)
    with tempfile.TemporaryDirectory(dir=file_dir) as tmp:
        reporter = ProgressReporter(
            steps_planned=calls * 2, epochs_planned=1, progress_file=Path(tmp) / "progress.json"
        )
        file_s = _per_call_s(lambda: reporter.step_done(4), max(1, calls // 10))
    step_s = tiny_step_s(steps, threads)
    return {
        "progress_file_dir": tempfile.gettempdir() if file_dir is None else file_dir,
        "in_process_step_done_us": round(in_process_s * 1e6, 3),
        "progress_file_step_done_us": round(file_s * 1e6, 3),
        "tiny_step_ms": round(step_s * 1e3, 3),
        "in_process_ratio": in_process_s / step_s,
        "progress_file_ratio": file_s / step_s,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decor_trainer.overhead", description=__doc__)
    parser.add_argument("--calls", type=int, default=20000, help="step_done calls to time")
    parser.add_argument("--steps", type=int, default=50, help="training steps to time")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the steps")
    parser.add_argument("--file-dir", help="where to write the progress file (e.g. a tmpfs)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.calls, args.steps, args.threads, args.file_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
