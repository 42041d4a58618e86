"""Step time and restart cost of the reference trainer on one CUDA device, as real processes.

For each workload: a run of ``--steps`` steps gives the mean step time on the GPU (the
trainer's own ``step_s`` after its first step); a second run is stopped with SIGTERM at
about a third of its steps and resumed in a new process, and the resumed trainer's log gives
the restart cost it reports (``decor_training_restart_seconds``: checkpoint saved -> first
step after the resume done, the new process's imports and CUDA start-up included). The
same is measured on the CPU for comparison. Writes JSON to ``--out``.

    python -m bench.gpu_restart --out results.json     # where PyTorch sees a GPU

Used for docs/distributed.md ("On a GPU"); the control law takes a job's measured restart
cost from this metric, so this only says what a real restart costs, it tunes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKLOADS = {
    "resnet-64": ["--workload", "resnet", "--width", "64", "--batch-size", "64"],
    "vgg-64": ["--workload", "vgg", "--width", "64", "--batch-size", "64"],
    "lstm-256": ["--workload", "lstm", "--width", "256", "--batch-size", "64"],
}
RESTART = re.compile(r"restart cost ([0-9.]+) s")


def _command(device: str, workload: list[str], steps: int, ckpt: Path) -> list[str]:
    return [
        sys.executable, "-m", "decor_trainer.train", *workload, "--device", device,
        "--epochs", "1", "--steps-per-epoch", str(steps), "--seed", "3",
        "--checkpoint-dir", str(ckpt), "--progress-file", str(ckpt / "progress.json"),
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DECOR_")}


def _progress(ckpt: Path) -> dict[str, Any]:
    try:
        return json.loads((ckpt / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def step_time(device: str, workload: list[str], steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp)
        done = subprocess.run(_command(device, workload, steps, ckpt), env=_env(), text=True,
                              capture_output=True, timeout=600)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        return float(_progress(ckpt)["step_s"])


def restart_cost(device: str, workload: list[str], steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp)
        cmd = _command(device, workload, steps, ckpt)
        first = subprocess.Popen(cmd, env=_env(), stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 600
        while _progress(ckpt).get("steps", 0) < steps // 3 and first.poll() is None:
            if time.monotonic() > deadline:
                first.kill()
                raise RuntimeError("no progress")
            time.sleep(0.05)
        first.send_signal(signal.SIGTERM)
        if first.wait(timeout=600) != 0:
            raise RuntimeError("the stopped run did not exit 0")
        resumed = subprocess.run(cmd, env=_env(), text=True, capture_output=True, timeout=600)
        match = RESTART.search(resumed.stderr)
        if resumed.returncode != 0 or match is None:
            raise RuntimeError(resumed.stderr[-2000:])
        return float(match.group(1))


def measure(devices: list[str], steps: int, repeats: int) -> dict[str, Any]:
    import torch

    results: dict[str, Any] = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpus": os.cpu_count(),
        "steps": steps,
        "runs": {},
    }
    for name, workload in WORKLOADS.items():
        for device in devices:
            entry = {
                "step_s": [step_time(device, workload, steps) for _ in range(repeats)],
                "restart_s": [restart_cost(device, workload, steps) for _ in range(repeats)],
            }
            results["runs"][f"{name}/{device}"] = entry
            print(name, device, json.dumps(entry), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices", default="cuda,cpu")
    args = parser.parse_args(argv)
    results = measure(args.devices.split(","), args.steps, args.repeats)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
