"""The fourth benchmark workload: a user's own loop reporting through the two-line helper."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from decor_trainer import encoder_loop, progress


@pytest.fixture(autouse=True)
def fresh_progress() -> Iterator[None]:
    progress.close()
    yield
    progress.close()


def test_the_loop_trains_the_plan_decor_gives_it_and_reports_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    progress_file = tmp_path / "progress.json"
    monkeypatch.setenv("DECOR_PROGRESS_FILE", str(progress_file))
    monkeypatch.setenv("DECOR_EPOCHS", "2")
    monkeypatch.setenv("DECOR_STEPS_PER_EPOCH", "3")
    assert encoder_loop.main(["--width", "16", "--heads", "2", "--batch-size", "4"]) == 0
    final = json.loads(progress_file.read_text())
    assert (final["steps"], final["steps_planned"], final["samples"]) == (6, 6, 24)
    assert final["epochs"] == 2


def test_the_loop_learns() -> None:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = encoder_loop.EncoderClassifier(vocab=50, seq_len=8, width=32, layers=1, heads=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(150):
        tokens, labels = encoder_loop.make_batch(generator, 64, 8, 50)
        loss = F.cross_entropy(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-20:]) / 20 < 0.8 * sum(losses[:20]) / 20


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SystemExit):
        encoder_loop.parse_args(["--width", "30", "--heads", "4"])
    with pytest.raises(SystemExit):
        encoder_loop.parse_args(["--epochs", "0"])
    with pytest.raises(SystemExit):
        encoder_loop.parse_args(["--threads", "-1"])


def test_threads_pins_the_loop_to_that_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setenv("DECOR_PROGRESS_FILE", str(tmp_path / "progress.json"))
    before = torch.get_num_threads()
    seen: list[int] = []
    monkeypatch.setattr(progress, "epoch", lambda: seen.append(torch.get_num_threads()))
    try:
        args = ["--threads", "1", "--width", "16", "--heads", "2", "--batch-size", "4"]
        assert encoder_loop.main([*args, "--epochs", "1", "--steps-per-epoch", "2"]) == 0
    finally:
        torch.set_num_threads(before)
    assert seen == [1]
