"""Sharding, batch policies, data order, worker counts and the launcher of decor_trainer.distributed."""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from decor_trainer import distributed, train
from decor_trainer.checkpoint import restart_seconds, saved_at_s
from decor_trainer.contract import (
    DEFAULT_MASTER_PORT,
    POLICY_FIXED_GLOBAL,
    POLICY_SCALE_WITH_WORKERS,
)
from decor_trainer.distributed import (
    BatchPolicy,
    DataOrder,
    PodWorld,
    WorldInfo,
    launch_workers,
    shard_indices,
    split_evenly,
    worker_count,
)
from decor_trainer.reporter import ProgressReporter, ProgressSnapshot
from decor_trainer.workloads import WorkloadConfig, build_workload
from prometheus_client import CollectorRegistry


@pytest.mark.parametrize(("items", "parts"), [(10, 3), (4, 4), (7, 2), (5, 1), (2, 5)])
def test_split_evenly_keeps_order_and_sizes_differ_by_at_most_one(items: int, parts: int) -> None:
    pieces = split_evenly(list(range(items)), parts)
    assert len(pieces) == parts
    assert [i for piece in pieces for i in piece] == list(range(items))
    sizes = [len(piece) for piece in pieces]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(
    ("batch", "world", "micro"), [(4, 1, None), (4, 2, None), (7, 2, None), (10, 3, 2), (12, 2, 4)]
)
def test_shards_of_all_ranks_give_back_the_global_batch_once(
    batch: int, world: int, micro: int | None
) -> None:
    policy = BatchPolicy(POLICY_FIXED_GLOBAL, batch, world, micro_batch=micro)
    global_indices = list(range(100, 100 + batch))
    per_rank = [shard_indices(global_indices, policy, rank) for rank in range(world)]
    rounds = policy.accumulation_rounds
    assert all(len(shards) == rounds for shards in per_rank)  # DDP needs equal pass counts
    assert all(shard.indices for shards in per_rank for shard in shards)
    if micro is not None:
        assert all(len(s.indices) <= micro for shards in per_rank for s in shards)
    rejoined = [
        i for k in range(rounds) for rank in range(world) for i in per_rank[rank][k].indices
    ]
    assert rejoined == global_indices
    # Weights make the average over workers of the weighted gradients the global mean's.
    assert sum(s.loss_weight for shards in per_rank for s in shards) == pytest.approx(world)


def test_weighted_shard_gradients_average_to_the_global_batch_gradient() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    inputs, targets = torch.randn(7, 5), torch.randint(0, 3, (7,))
    policy = BatchPolicy(POLICY_FIXED_GLOBAL, 7, 3, micro_batch=2)  # uneven, 2 rounds
    torch.nn.functional.cross_entropy(model(inputs), targets).backward()
    assert model.weight.grad is not None
    expected = model.weight.grad.clone()
    summed = torch.zeros_like(expected)
    for rank in range(policy.world_size):
        model.zero_grad()
        for shard in shard_indices(list(range(7)), policy, rank):
            loss = torch.nn.functional.cross_entropy(
                model(inputs[shard.indices]), targets[shard.indices]
            )
            (loss * shard.loss_weight).backward()
        assert model.weight.grad is not None
        summed += model.weight.grad
    torch.testing.assert_close(summed / policy.world_size, expected)  # what DDP averages


def test_a_global_batch_too_small_for_the_workers_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot give each of 3 workers"):
        BatchPolicy(POLICY_FIXED_GLOBAL, 2, 3)
    with pytest.raises(ValueError, match="accumulation rounds"):
        BatchPolicy(POLICY_FIXED_GLOBAL, 5, 2, micro_batch=1)  # 3 rounds of 2, 2, 1 samples
    with pytest.raises(ValueError, match="unknown batch policy"):
        BatchPolicy("double", 4, 1)


def test_batch_policies_global_batch_and_learning_rate_rule() -> None:
    fixed = BatchPolicy(POLICY_FIXED_GLOBAL, 32, 4)
    assert (fixed.global_batch, fixed.lr_scale) == (32, 1.0)
    assert fixed.lr_scale_at(step=10, start_step=10, start_scale=1.0) == 1.0
    scaled = BatchPolicy(POLICY_SCALE_WITH_WORKERS, 32, 4, lr_warmup_steps=10)
    assert (scaled.global_batch, scaled.lr_scale) == (128, 4.0)
    # A linear ramp from the scale at the start (or in the checkpoint) to M over 10 steps.
    ramp = [scaled.lr_scale_at(step, start_step=100, start_scale=2.0) for step in range(100, 112)]
    assert ramp[0] == pytest.approx(2.2) and ramp[4] == pytest.approx(3.0)
    assert ramp[9:] == [4.0, 4.0, 4.0]
    assert all(a <= b for a, b in zip(ramp, ramp[1:], strict=False))


def test_data_order_is_a_permutation_per_pass_and_independent_of_how_it_is_read() -> None:
    order = DataOrder(seed=3, dataset_size=10)
    first, second = order.indices(0, 10), order.indices(10, 10)
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second  # a new permutation for every pass
    pieces = order.indices(0, 4) + order.indices(4, 9) + order.indices(13, 7)
    assert pieces == DataOrder(seed=3, dataset_size=10).indices(0, 20) == first + second
    assert DataOrder(seed=4, dataset_size=10).indices(0, 10) != first


@pytest.mark.parametrize("name", ["resnet", "lstm"])
def test_a_sample_does_not_depend_on_the_batch_it_is_drawn_in(name: str) -> None:
    workload = build_workload(WorkloadConfig(name, width=4, batch_size=4, seq_len=6, seed=2))
    inputs, targets = workload.samples([5, 9, 2])
    alone_inputs, alone_targets = workload.samples([9])
    assert torch.equal(inputs[1:2], alone_inputs) and torch.equal(targets[1:2], alone_targets)
    other_inputs, _ = workload.samples([6])
    assert not torch.equal(other_inputs, alone_inputs)


def test_worker_count_rules() -> None:
    assert worker_count(None, {}, cuda_devices=0) == 1
    assert worker_count(None, {"DECOR_WORKERS": "3"}, cuda_devices=0) == 3  # CPU test bed
    assert worker_count(None, {"DECOR_WORKERS": "3"}, cuda_devices=2) == 2  # one per GPU
    assert worker_count(None, {}, cuda_devices=4) == 4
    assert worker_count(2, {"DECOR_WORKERS": "3"}, cuda_devices=0) == 2  # the flag wins
    with pytest.raises(ValueError, match="only 1 CUDA devices"):
        worker_count(2, {}, cuda_devices=1)
    with pytest.raises(ValueError, match="DECOR_WORKERS='0'"):
        worker_count(None, {"DECOR_WORKERS": "0"}, cuda_devices=0)


def test_world_info_reads_the_torchrun_environment() -> None:
    assert WorldInfo.from_env({}) is None
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    world = WorldInfo.from_env(env)
    assert world == WorldInfo(rank=3, world_size=4, local_rank=1, local_world_size=2)
    assert not world.is_main
    with pytest.raises(ValueError, match="inconsistent"):
        WorldInfo.from_env({"RANK": "4", "WORLD_SIZE": "4"})


SERVICE_IP = "10.96.0.17"
"""An address that reaches the pod holding rank 0 (a Service IP)."""


@pytest.mark.parametrize(
    ("workers", "env", "expected"),
    [
        # One pod, as before: its workers are the world; a free port is taken at launch.
        (2, {}, PodWorld(2, 2)),
        (1, {"DECOR_WORLD_SIZE": "1"}, PodWorld(1, 1)),
        (2, {"MASTER_PORT": "4000"}, PodWorld(2, 2, master_port=4000)),
        # The pod holding rank 0 of a world of 4 over two pods: the default port.
        (2, {"DECOR_WORLD_SIZE": "4"}, PodWorld(2, 4, master_port=DEFAULT_MASTER_PORT)),
        # The other pod: ranks 2 and 3, meeting rank 0 through a Service.
        (
            2,
            {"DECOR_WORLD_SIZE": "4", "DECOR_RANK_OFFSET": "2", "MASTER_ADDR": SERVICE_IP},
            PodWorld(2, 4, 2, SERVICE_IP, DEFAULT_MASTER_PORT),
        ),
        (
            1,
            {"DECOR_WORLD_SIZE": " 2 ", "DECOR_RANK_OFFSET": "1", "MASTER_ADDR": SERVICE_IP,
             "MASTER_PORT": "29501"},
            PodWorld(1, 2, 1, SERVICE_IP, 29501),
        ),
        (1, {"DECOR_WORLD_SIZE": "", "DECOR_RANK_OFFSET": ""}, PodWorld(1, 1)),  # empty = unset
    ],
)  # fmt: skip
def test_pod_world_from_the_environment(
    workers: int, env: dict[str, str], expected: PodWorld
) -> None:
    assert PodWorld.from_env(workers, env) == expected


@pytest.mark.parametrize(
    ("workers", "env", "error"),
    [
        (1, {"DECOR_WORLD_SIZE": "two"}, "DECOR_WORLD_SIZE='two': not an integer"),
        (1, {"DECOR_WORLD_SIZE": "1.5"}, "DECOR_WORLD_SIZE='1.5': not an integer"),
        (1, {"DECOR_WORLD_SIZE": "0"}, "DECOR_WORLD_SIZE='0': must be >= 1"),
        (1, {"DECOR_RANK_OFFSET": "-1"}, "DECOR_RANK_OFFSET='-1': must be >= 0"),
        (2, {"DECOR_WORLD_SIZE": "1"}, "DECOR_RANK_OFFSET=0 \\+ 2 workers in this pod > "),
        (
            2,
            {"DECOR_WORLD_SIZE": "3", "DECOR_RANK_OFFSET": "2", "MASTER_ADDR": SERVICE_IP},
            "ranks would fall outside the world",
        ),
        (1, {"DECOR_WORLD_SIZE": "2", "DECOR_RANK_OFFSET": "1"}, "no MASTER_ADDR"),
        (1, {"MASTER_PORT": "http"}, "MASTER_PORT='http': not an integer"),
        (1, {"MASTER_PORT": "0"}, "MASTER_PORT='0': must be in 1..65535"),
        (1, {"MASTER_PORT": "65536"}, "MASTER_PORT='65536': must be in 1..65535"),
    ],
)
def test_pod_world_refuses_a_bad_or_inconsistent_environment(
    workers: int, env: dict[str, str], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        PodWorld.from_env(workers, env)


def test_the_trainer_refuses_an_inconsistent_pod_with_exit_status_2(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {"DECOR_WORKERS": "2", "DECOR_WORLD_SIZE": "3", "DECOR_RANK_OFFSET": "2",
           "MASTER_ADDR": SERVICE_IP}  # fmt: skip
    assert train.main(["--device", "cpu"], env) == train.EXIT_USAGE
    assert "DECOR_RANK_OFFSET=2 + 2 workers in this pod > DECOR_WORLD_SIZE=3" in caplog.text


def test_a_pods_workers_get_consecutive_global_ranks() -> None:
    pod = PodWorld(2, 5, rank_offset=3, master_addr=SERVICE_IP, master_port=DEFAULT_MASTER_PORT)
    assert [pod.rank_env(i) for i in range(2)] == [
        {"RANK": "3", "LOCAL_RANK": "0", "WORLD_SIZE": "5", "LOCAL_WORLD_SIZE": "2"},
        {"RANK": "4", "LOCAL_RANK": "1", "WORLD_SIZE": "5", "LOCAL_WORLD_SIZE": "2"},
    ]
    # What the workers read back is the place the pod gave them.
    assert WorldInfo.from_env(pod.rank_env(1)) == WorldInfo(4, 5, 1, 2)


def test_restart_seconds_from_the_save_stamp() -> None:
    assert restart_seconds({"saved_at_s": 100.0}, 103.5) == pytest.approx(3.5)
    assert restart_seconds({}, 103.5) is None and saved_at_s({}) is None


def test_reporter_publishes_the_restart_cost(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    progress = tmp_path / "progress.json"
    reporter = ProgressReporter(
        steps_planned=4, epochs_planned=1, registry=registry, progress_file=progress
    )
    assert registry.get_sample_value("decor_training_restart_seconds") == 0.0
    reporter.restart_done(4.25)
    assert registry.get_sample_value("decor_training_restart_seconds") == 4.25
    assert json.loads(progress.read_text())["restart_s"] == 4.25
    # An older trainer's progress file has no restart_s: read as 0, not an error.
    older = {k: v for k, v in json.loads(progress.read_text()).items() if k != "restart_s"}
    assert ProgressSnapshot.from_mapping(older).restart_s == 0.0


# --- the launcher and a teardown that hangs -----------------------------------------------


def _hang(*args: object, **kwargs: object) -> None:
    """Never returns: waits for the signal that ends the process (the launcher's)."""
    signal.pause()


def _end_the_run_then_hang_in_teardown(status: int) -> int:
    """A launched worker: joins a real gloo group with the others, ends its run with
    ``status``, then hangs tearing the group down (as a worker did once in a CI run on
    PyTorch 2.6, here made to happen every time)."""
    distributed.unblock_stop_signals()
    distributed.init_process_group(WorldInfo.from_env(os.environ), torch.device("cpu"))
    torch.distributed.destroy_process_group = _hang
    distributed.close_process_group(status)
    return 99  # not reached


def _hang_in_the_run() -> int:
    distributed.unblock_stop_signals()
    _hang()
    return 99  # not reached


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fails a test still running a minute on (the launcher waits in the test's process)."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError("still waiting for the workers after 60 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.usefixtures("alarm")
def test_workers_whose_teardown_hangs_after_their_run_are_killed_with_its_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MASTER_ADDR", "unset")  # launch_workers sets both: restored after
    monkeypatch.setenv("MASTER_PORT", "0")
    started = time.monotonic()
    status = launch_workers(
        functools.partial(_end_the_run_then_hang_in_teardown, 3),
        PodWorld(2, 2),
        teardown_grace_s=2.0,
    )
    assert status == 3  # the run's status, not the kill's
    assert time.monotonic() - started < 45


@pytest.mark.usefixtures("alarm")
def test_a_worker_still_in_its_run_is_not_taken_for_a_hung_teardown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MASTER_ADDR", "unset")
    monkeypatch.setenv("MASTER_PORT", "0")
    with pytest.raises(TimeoutError):  # nothing ended its run: the launcher keeps waiting
        signal.alarm(8)
        launch_workers(_hang_in_the_run, PodWorld(2, 2), teardown_grace_s=0.5)
