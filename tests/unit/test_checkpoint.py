"""Checkpoint helpers: atomic save, exact restore, stop on SIGTERM, periodic saving."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
import torch
from decor_trainer.checkpoint import (
    PeriodicSaver,
    TrainingPosition,
    checkpoint_path,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
    stop_on_signals,
)
from decor_trainer.workloads import WorkloadConfig, build_workload
from support.clock import FakeClock


def train_steps(workload_name: str, steps: range) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    workload = build_workload(WorkloadConfig(workload_name, width=4, batch_size=4, seed=1))
    optimizer = workload.optimizer()
    for step in steps:
        inputs, targets = workload.batch(step)
        optimizer.zero_grad()
        workload.loss(workload.model(inputs), targets).backward()
        optimizer.step()
    return workload.model, optimizer


def fresh(workload_name: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(99)  # different initial weights: the load must overwrite them
    workload = build_workload(WorkloadConfig(workload_name, width=4, batch_size=4, seed=1))
    return workload.model, workload.optimizer()


def assert_same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("workload_name", ["resnet", "lstm"])
def test_round_trip_restores_model_optimizer_position_and_rng(
    tmp_path: Path, workload_name: str
) -> None:
    model, optimizer = train_steps(workload_name, range(3))
    path = checkpoint_path(tmp_path)
    random.seed(5)
    torch.manual_seed(5)
    save_checkpoint(
        path,
        model=model,
        optimizer=optimizer,
        position=TrainingPosition(step=3, epoch=1, samples=12),
        meta={"workload": {"name": workload_name}},
    )
    expected_torch, expected_python = torch.rand(3), random.random()

    model2, optimizer2 = fresh(workload_name)
    position = load_checkpoint(path, model=model2, optimizer=optimizer2)

    assert position == TrainingPosition(step=3, epoch=1, samples=12)
    assert_same_state(model.state_dict(), model2.state_dict())
    state, state2 = optimizer.state_dict()["state"], optimizer2.state_dict()["state"]
    assert state.keys() == state2.keys()
    for key in state:
        assert_same_state(state[key], state2[key])
    assert torch.equal(torch.rand(3), expected_torch)
    assert random.random() == expected_python
    assert read_checkpoint(path)["meta"] == {"workload": {"name": workload_name}}  # type: ignore[index]


def test_resumed_training_equals_uninterrupted_training(tmp_path: Path) -> None:
    torch.set_num_threads(1)  # bitwise equality needs the same reduction order
    straight, _ = train_steps("resnet", range(4))
    first, optimizer = train_steps("resnet", range(2))
    path = checkpoint_path(tmp_path)
    save_checkpoint(path, model=first, optimizer=optimizer, position=TrainingPosition(step=2))

    torch.manual_seed(0)
    workload = build_workload(WorkloadConfig("resnet", width=4, batch_size=4, seed=1))
    optimizer = workload.optimizer()
    position = load_checkpoint(path, model=workload.model, optimizer=optimizer)
    assert position is not None
    for step in range(position.step, 4):
        inputs, targets = workload.batch(step)
        optimizer.zero_grad()
        workload.loss(workload.model(inputs), targets).backward()
        optimizer.step()
    assert_same_state(straight.state_dict(), workload.model.state_dict())


def test_no_checkpoint_means_start_from_scratch(tmp_path: Path) -> None:
    model, optimizer = fresh("vgg")
    assert load_checkpoint(tmp_path / "checkpoint.pt", model=model, optimizer=optimizer) is None


def test_failed_save_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, optimizer = train_steps("vgg", range(1))
    path = checkpoint_path(tmp_path)
    save_checkpoint(path, model=model, optimizer=optimizer, position=TrainingPosition(step=1))

    def broken_save(obj: object, f: object) -> None:
        f.write(b"partial")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model=model, optimizer=optimizer, position=TrainingPosition(step=2))
    monkeypatch.undo()

    assert load_checkpoint(path, model=model, optimizer=optimizer) == TrainingPosition(step=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_sigterm_sets_the_stop_flag_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not stop.requested and time.monotonic() < deadline:
            time.sleep(0.001)  # the handler runs between bytecodes of the main thread
        assert stop.requested
        assert stop.signal_number == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before


def test_periodic_saver_is_due_every_interval() -> None:
    clock = FakeClock(0.0)
    saver = PeriodicSaver(every_s=30, clock=clock)
    assert not saver.due()
    clock.now = 29.9
    assert not saver.due()
    clock.now = 30
    assert saver.due()
    saver.saved()
    assert not saver.due()
    clock.now = 60
    assert saver.due()


def test_periodic_saver_zero_means_never() -> None:
    clock = FakeClock(0.0)
    saver = PeriodicSaver(every_s=0, clock=clock)
    clock.now = 1e9
    assert not saver.due()
    with pytest.raises(ValueError):
        PeriodicSaver(every_s=-1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_checkpoint_resumes_on_cpu_and_back(tmp_path: Path) -> None:
    model, optimizer = fresh("resnet")
    model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    inputs = torch.randn(2, 3, 32, 32, device="cuda")
    model(inputs).sum().backward()
    optimizer.step()
    path = checkpoint_path(tmp_path)
    save_checkpoint(path, model=model, optimizer=optimizer, position=TrainingPosition(step=1))

    cpu_model, cpu_optimizer = fresh("resnet")
    assert load_checkpoint(path, model=cpu_model, optimizer=cpu_optimizer) is not None
    assert_same_state({k: v.cpu() for k, v in model.state_dict().items()}, cpu_model.state_dict())

    gpu_model, _ = fresh("resnet")
    gpu_model.cuda()
    gpu_optimizer = torch.optim.SGD(gpu_model.parameters(), lr=0.1, momentum=0.9)
    assert load_checkpoint(path, model=gpu_model, optimizer=gpu_optimizer) is not None
    buffers = [s["momentum_buffer"] for s in gpu_optimizer.state.values()]
    assert buffers and all(b.is_cuda for b in buffers)
