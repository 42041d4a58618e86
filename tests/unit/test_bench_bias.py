"""The deviation split of bench/bias.py."""

from __future__ import annotations

import pytest

from bench import bias


def _rows(etas: list[float], deadline_s: float = 100.0) -> list[dict[str, float]]:
    """One row a second from t = 1, progress rising to just below 1."""
    n = len(etas)
    return [
        {"t_s": float(i + 1), "eta_s": eta, "deadline_s": deadline_s, "progress": (i + 1) / (n + 1)}
        for i, eta in enumerate(etas)
    ]


def test_the_parts_add_up_to_the_deviation_and_name_their_source() -> None:
    # Aimed 0.1 s early and predicted 1 s early until the end game (starts at 100 - 0.1 - 10
    # = 89.9 s), then the prediction moves 0.5 s later; the run ends 0.2 s before its last
    # prediction.
    etas = [99.0] * 89 + [99.0 + 0.05 * i for i in range(1, 11)]
    split = bias.decompose(_rows(etas), finished_s=99.3, margin_s=0.1)
    assert split is not None
    assert split.plan == pytest.approx(-1.0)
    assert split.end_game == pytest.approx(0.5)
    assert split.prediction == pytest.approx(-0.2)
    assert split.margin == pytest.approx(-0.1)
    assert split.deviation == pytest.approx(split.plan + split.end_game + split.prediction)


def test_without_a_margin_the_end_game_starts_a_tenth_of_d_before_the_deadline() -> None:
    etas = [99.0] * 90 + [99.5] * 9  # the 90th row (t = 90 s) is the last before the end game
    split = bias.decompose(_rows(etas), finished_s=99.5)
    assert split is not None
    assert (split.plan, split.end_game, split.margin) == (
        pytest.approx(-1.0),
        pytest.approx(0.5),
        0.0,
    )


def test_a_run_shorter_than_its_end_game_has_no_split() -> None:
    assert bias.decompose(_rows([9.0, 9.0], deadline_s=1.0), finished_s=1.0) is None
    assert bias.decompose([], finished_s=1.0) is None


def test_render_groups_by_workload() -> None:
    split = bias.Split(deviation=-0.5, plan=-0.4, end_game=0.1, prediction=-0.2, margin=-0.2)
    table = bias.render({"resnet/d1.5/r0": split, "vgg/d1.5/r0": split})
    assert "| resnet | 1 | -0.50 | -0.40 | -0.20 | +0.10 | -0.20 |" in table
    assert "| all | 2 |" in table
