"""End to end: training loops written with Hugging Face's Trainer and with Lightning, each
reporting through its one-line callback (decor_trainer.callbacks), run as DeadlineTrainingJobs
on the trainer image (localhost/decor/trainer: Debian trixie's PyTorch 2.x,
the pinned transformers and Lightning of trainer_image/frameworks-torch2.txt, and the
decor-trainer wheel installed with pip as a user's image takes it).

The scripts are the repository's examples (examples/own-loop/hf_train.py and
lightning_train.py), passed to ``python3 -c``, so the image holds nothing made for the test.
Each job must finish within the suite's deviation bound, and the operator must have read
every optimizer step from the callback's progress reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_operator import (  # noqa: F401 - fixtures used by name
    DEVIATION_BOUND_PERCENT,
    LANE_SCALE,
    OperatorProcess,
    condition,
    crd,
    create_job,
    job_manifest,
    lane_steps,
    operator,
    report,
    trainer_pods,
    wait_succeeded,
)

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "own-loop"
DURATION_S = 150
"""Each job's deadline, seconds after its start. At CPU_MAX a job would finish in about half
of it (sized from a run on the test bed), so the controller has to throttle it."""


def framework_job(name: str, image: str, script: str, args: list[str], epochs: int,
                  steps_per_epoch: int) -> dict[str, Any]:  # fmt: skip
    """The suite's job manifest running ``examples/own-loop/<script>`` with ``args`` instead of
    the reference trainer; ``epochs`` x ``steps_per_epoch`` optimizer steps."""
    manifest = job_manifest(name, image, epochs=epochs, steps_per_epoch=steps_per_epoch,
                            duration=f"{DURATION_S}s")  # fmt: skip
    (trainer,) = manifest["spec"]["template"]["spec"]["containers"]
    trainer["command"] = ["python3", "-c", (EXAMPLES / script).read_text()]
    trainer["args"] = args
    return manifest


def run_to_deadline(kube: Any, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create the job, wait for it to succeed, check deadline and steps; its final status."""
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    create_job(kube, namespace, manifest)
    status = wait_succeeded(kube, namespace, name, timeout=2 * DURATION_S)
    pods = trainer_pods(kube, namespace, name)
    report(name, status, pods_seen=len(pods))
    assert abs(status["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, status
    assert status["stepsDone"] == status["stepsTotal"] == spec["epochs"] * spec["stepsPerEpoch"]
    assert condition(status, "Complete")["status"] == "True"
    return status


def test_hugging_face_trainer_job_meets_its_deadline(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    # 3200 samples, batch 4, accumulation 2: 400 optimizer steps an epoch in an 800m lane
    # (LANE_SCALE). In a pod on the test bed 2000 steps of the tiny BERT were 74 % done at 150 s
    # at 800m; 800 steps met the deadline at -0.5 %, throttled by 59 resizes.
    steps = lane_steps(400)
    args = ["--samples", str(steps * 4 * 2), "--batch-size", "4", "--accumulation", "2",
            "--save-every", "100", "--log-every", "100"]  # fmt: skip
    manifest = framework_job("hf-trainer", trainer_image, "hf_train.py", args, 2, steps)
    run_to_deadline(kube, namespace, manifest)


def test_lightning_job_meets_its_deadline(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    # Batch 16, accumulation 2: 32 samples an optimizer step. 1400 steps in an 800m lane
    # (LANE_SCALE; 700 at 400m). Unscaled, 1200 steps on an AMD EPYC VM were Infeasible at
    # 400m from the first fit and ended 9.4 % late; 300 steps on an Intel Xeon VM finished at
    # half the span even at the 100m floor, so the steps are not scaled to the machine
    # (machine_scale, a ResNet's speed, shrinks them 2.7x on that EPYC): 700 at the floor
    # would still take longer than the span there.
    steps_per_epoch = round(700 * LANE_SCALE)
    args = ["--samples", str(steps_per_epoch * 16 * 2), "--batch-size", "16",
            "--accumulation", "2", "--width", "512"]  # fmt: skip
    manifest = framework_job("lightning", trainer_image, "lightning_train.py", args, 2,
                              steps_per_epoch)  # fmt: skip
    run_to_deadline(kube, namespace, manifest)
