"""A commit held up by a slow API call (decor.service.loop.COMMIT_WAIT_S): with several commit
workers the period stops waiting for it, the other jobs go on period after period, and the
slow job takes no part until its commit returns; a deadline patch made meanwhile is answered
then. The API server is the unit tests' fake cluster; the slow call is its create, held."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from decor.api import vocabulary
from decor.api.model import parse_time
from decor.service import loop as loop_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.fake_trainers import FakeTrainer, linear_speed  # noqa: E402
from support.scenario import Bench, job_body, scenario_config  # noqa: E402

WAIT_S = 0.2


class HeldCreate:
    """The fake cluster's ``create_pod``, held for the pods of one job until ``release``."""

    def __init__(self, bench: Bench, job: str) -> None:
        self.create, self.job = bench.kube.create_pod, job
        self.entered, self.release = threading.Event(), threading.Event()
        bench.kube.create_pod = self  # type: ignore[method-assign]

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if body["metadata"]["labels"].get(vocabulary.LABEL_JOB) == self.job:
            self.entered.set()
            assert self.release.wait(20), "the test never released the held create"
        return self.create(body)


def _calls(bench: Bench, since: int, job: str) -> list[str]:
    """The calls the operator made for ``job``'s pods or status since record entry ``since``."""
    return [
        e["call"]
        for e in bench.kube.record[since:]
        if "call" in e and job in str(e.get("name") or e.get("body", {}).get("metadata", {}))
    ]


@pytest.fixture()
def held() -> tuple[Bench, HeldCreate]:
    bench = Bench({"node-a": (16.0, 0)}, scenario_config(commit_workers=4))
    for name in ("slow", "quick"):
        bench.apply(
            job_body(name, initial="1", duration="900s"),
            FakeTrainer(1000, 100, linear_speed(1.0)),
        )
    return bench, HeldCreate(bench, "slow")


def test_a_slow_commit_holds_neither_its_period_nor_the_next(
    held: tuple[Bench, HeldCreate], monkeypatch: pytest.MonkeyPatch
) -> None:
    bench, create = held
    monkeypatch.setattr(loop_module, "COMMIT_WAIT_S", WAIT_S)
    started = time.monotonic()
    bench.period()
    assert time.monotonic() - started < 5 * WAIT_S + 1.0, "the period waited for the held call"
    assert create.entered.is_set()
    assert [p["metadata"]["name"] for p in bench.pods("quick")], "the other job got no pod"
    assert not bench.pods("slow")
    registry = bench.loop.metrics.registry
    outlasting = vocabulary.METRIC_COMMITS_OUTLASTING + "_total"
    assert registry.get_sample_value(outlasting) == 1.0
    assert bench.loop.status_writer.flush(5)  # the slow job's first status, sent beside
    # Periods go on for the other job; the slow one is in none while its create is held.
    quick, slow = (bench.loop.controllers[("ml", name)] for name in ("quick", "slow"))
    slow_due_s = slow.next_due_s
    for _ in range(3):
        since = len(bench.kube.record)
        bench.period()
        assert _calls(bench, since, "slow") == []
        assert quick.next_due_s > bench.now  # the quick job ran in this period
    assert slow.next_due_s == slow_due_s  # and the slow one in none
    assert registry.get_sample_value(outlasting) == 1.0  # counted once, not per period
    create.release.set()
    assert bench.loop.flush(10)
    assert [p["metadata"]["name"] for p in bench.pods("slow")]
    bench.period()
    assert slow.next_due_s > bench.now  # back in the periods once its commit returned


def test_a_patch_made_while_the_commit_runs_is_answered_when_it_returns(
    held: tuple[Bench, HeldCreate], monkeypatch: pytest.MonkeyPatch
) -> None:
    bench, create = held
    monkeypatch.setattr(loop_module, "COMMIT_WAIT_S", WAIT_S)
    bench.period()
    assert create.entered.is_set() and bench.loop.status_writer.flush(5)
    first = parse_time(bench.status("slow")["deadline"], "deadline").timestamp()
    bench.patch_spec("slow", {"duration": "600s"})
    bench.period(advance_s=0.5)  # the job is in no period while its commit runs
    assert bench.loop.status_writer.flush(5)
    assert parse_time(bench.status("slow")["deadline"], "deadline").timestamp() == first
    create.release.set()
    assert bench.loop.flush(10)
    bench.period(advance_s=0.5)  # the wake was kept: due at once, before its own period
    assert bench.loop.flush(10)
    assert parse_time(bench.status("slow")["deadline"], "deadline").timestamp() == first - 300


def test_with_one_commit_worker_the_period_waits_for_every_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = Bench({"node-a": (16.0, 0)}, scenario_config(commit_workers=1))
    bench.apply(job_body("slow", initial="1"), FakeTrainer(1000, 100, linear_speed(1.0)))
    create = HeldCreate(bench, "slow")
    monkeypatch.setattr(loop_module, "COMMIT_WAIT_S", WAIT_S)
    threading.Timer(3 * WAIT_S, create.release.set).start()
    bench.period()
    assert create.release.is_set() and [p["metadata"]["name"] for p in bench.pods("slow")]
