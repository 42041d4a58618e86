"""Progress callbacks driven by the real libraries: a Hugging Face Trainer for a few steps on
a tiny model, then resumed from its checkpoint; the reporter's counters match the steps.

Lightning cannot be imported on the host's PyTorch (Debian's 1.13 under Python 3.11: see
decor_trainer.callbacks); its tests run in the PyTorch 2.x trainer image's root filesystem
with the pinned releases (cluster/trainer-rootfs-tests.sh, trainer_image/frameworks-torch2.txt)
and skip with the reason elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from decor_trainer.callbacks import DecorLightningCallback, DecorTrainerCallback  # noqa: E402
from decor_trainer.reporter import ProgressReporter  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

BATCH = 4
SAMPLES = 32
FEATURES = 4
FIRST_STEPS = 5
TOTAL_STEPS = 8
CHECKPOINT_EVERY = 3


class TinyRegression(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(FEATURES, 1)

    def forward(self, x: Any, labels: Any = None) -> dict[str, Any]:
        out = self.linear(x).squeeze(-1)
        return {"loss": ((out - labels) ** 2).mean(), "logits": out}


class Seeded(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, samples: int = SAMPLES) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, i: int) -> dict[str, Any]:
        x = torch.randn(FEATURES, generator=torch.Generator().manual_seed(i))
        return {"x": x, "labels": x.sum()}


def hf_trainer(output: Path, max_steps: int, callback: Any) -> Any:
    args = transformers.TrainingArguments(
        output_dir=str(output), per_device_train_batch_size=BATCH, max_steps=max_steps,
        save_steps=CHECKPOINT_EVERY, logging_steps=1000, report_to=[], use_cpu=True,
        disable_tqdm=True,
    )  # fmt: skip
    return transformers.Trainer(
        model=TinyRegression(), args=args, train_dataset=Seeded(), callbacks=[callback]
    )


def test_hf_callback_counts_every_step_in_a_given_registry(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    reporter = ProgressReporter(steps_planned=FIRST_STEPS, epochs_planned=1, registry=registry)
    hf_trainer(tmp_path, FIRST_STEPS, DecorTrainerCallback(reporter)).train()
    assert registry.get_sample_value("decor_steps_completed_total") == FIRST_STEPS
    assert registry.get_sample_value("decor_samples_completed_total") == FIRST_STEPS * BATCH
    assert registry.get_sample_value("decor_last_step_timestamp_seconds") > 0


def test_hf_callback_resumes_at_the_checkpoints_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the environment (the sidecar's progress file), as in a trainer pod: the resumed
    run's counter starts at the checkpoint's step, not at 0, and ends at the total."""
    progress_file = tmp_path / "progress.json"
    monkeypatch.setenv("DECOR_PROGRESS_FILE", str(progress_file))
    hf_trainer(tmp_path / "out", FIRST_STEPS, DecorTrainerCallback()).train()
    first = json.loads(progress_file.read_text())
    assert (first["steps"], first["samples"], first["steps_planned"]) == (
        FIRST_STEPS, FIRST_STEPS * BATCH, FIRST_STEPS,
    )  # fmt: skip
    # the pod is replaced: a new process resumes from the last checkpoint (step 3 of 5 is
    # older; Trainer saves at the end too, so the newest is step 5)
    resumed = DecorTrainerCallback()
    trainer = hf_trainer(tmp_path / "out", TOTAL_STEPS, resumed)
    trainer.train(resume_from_checkpoint=True)
    final = json.loads(progress_file.read_text())
    assert final["steps"] == trainer.state.global_step == TOTAL_STEPS
    assert final["samples"] == TOTAL_STEPS * BATCH
    assert final["steps_planned"] == TOTAL_STEPS


def test_callback_errors_never_reach_training(tmp_path: Path) -> None:
    class Broken(ProgressReporter):
        def step_done(self, samples: int = 0) -> None:
            raise RuntimeError("disk full")

    broken = Broken(steps_planned=FIRST_STEPS, epochs_planned=1, registry=CollectorRegistry())
    trainer = hf_trainer(tmp_path, FIRST_STEPS, DecorTrainerCallback(broken))
    trainer.train()
    assert trainer.state.global_step == FIRST_STEPS


def lightning_or_skip() -> Any:
    try:
        import lightning.pytorch as pl
    except Exception as exc:  # noqa: BLE001 - ImportError, or it breaks on this PyTorch
        pytest.skip(f"Lightning does not import here: {exc!r}")
    return pl


def lightning_fit(pl: Any, root: Path, max_steps: int, callback: Any, ckpt: Path | None) -> Any:
    """Fit the tiny regression with Lightning for ``max_steps`` optimizer steps (from ``ckpt``
    when given); returns the trainer."""

    class Module(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.model = TinyRegression()

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
            return self.model(batch["x"], batch["labels"])["loss"]

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    # an epoch of FIRST_STEPS batches: the checkpoint ends an epoch (Lightning warns when a
    # run resumes inside one from a data loader without a state_dict)
    loader = torch.utils.data.DataLoader(Seeded(FIRST_STEPS * BATCH), batch_size=BATCH)
    trainer = pl.Trainer(max_steps=max_steps, callbacks=[callback], default_root_dir=root,
                         logger=False, enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, accelerator="cpu")  # fmt: skip
    trainer.fit(Module(), loader, ckpt_path=str(ckpt) if ckpt else None)
    return trainer


# These runs train on the CPU on purpose; Lightning warns about it where a GPU is visible.
CPU_ON_PURPOSE = pytest.mark.filterwarnings("ignore:GPU available but not used")
# Lightning 2.6.6's own pytree helper on PyTorch >= 2.11 (past the tested 1.13-2.6): torch
# deprecates the isinstance check Lightning makes; not ours to change.
LIGHTNING_ON_NEWER_TORCH = pytest.mark.filterwarnings(
    r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"
)
# The tiny in-memory loader runs in the training process on purpose; Lightning suggests
# loader workers wherever the machine has more than two cores.
IN_PROCESS_LOADER = pytest.mark.filterwarnings(
    "ignore:The 'train_dataloader' does not have many workers"
)


@CPU_ON_PURPOSE
@LIGHTNING_ON_NEWER_TORCH
@IN_PROCESS_LOADER
def test_lightning_callback_counts_steps_and_resumes(tmp_path: Path) -> None:
    pl = lightning_or_skip()
    registry = CollectorRegistry()
    reporter = ProgressReporter(steps_planned=0, epochs_planned=0, registry=registry)
    trainer = lightning_fit(pl, tmp_path, FIRST_STEPS, DecorLightningCallback(reporter), None)
    assert registry.get_sample_value("decor_steps_completed_total") == FIRST_STEPS
    checkpoint = tmp_path / "last.ckpt"
    trainer.save_checkpoint(checkpoint)
    lightning_fit(pl, tmp_path, TOTAL_STEPS, DecorLightningCallback(reporter), checkpoint)
    assert registry.get_sample_value("decor_steps_completed_total") == TOTAL_STEPS


@CPU_ON_PURPOSE
@LIGHTNING_ON_NEWER_TORCH
@IN_PROCESS_LOADER
def test_lightning_callback_resumes_at_the_checkpoints_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a trainer pod (the sidecar's progress file): the replaced process resumes from the
    checkpoint, its counters start at the checkpoint's step and samples, and end at the total."""
    pl = lightning_or_skip()
    progress_file = tmp_path / "progress.json"
    monkeypatch.setenv("DECOR_PROGRESS_FILE", str(progress_file))
    callback = DecorLightningCallback(samples_per_step=BATCH)
    trainer = lightning_fit(pl, tmp_path, FIRST_STEPS, callback, None)
    first = json.loads(progress_file.read_text())
    assert (first["steps"], first["samples"], first["steps_planned"]) == (
        FIRST_STEPS, FIRST_STEPS * BATCH, FIRST_STEPS,
    )  # fmt: skip
    checkpoint = tmp_path / "step5.ckpt"
    trainer.save_checkpoint(checkpoint)
    resumed = lightning_fit(
        pl, tmp_path, TOTAL_STEPS, DecorLightningCallback(samples_per_step=BATCH), checkpoint
    )
    final = json.loads(progress_file.read_text())
    assert final["steps"] == resumed.global_step == TOTAL_STEPS
    assert final["samples"] == TOTAL_STEPS * BATCH
    assert final["steps_planned"] == TOTAL_STEPS
