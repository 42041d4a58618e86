"""The jobs' status writes and Events off the period's path (decor.service.status_writer):
in order per job, two waiting writes merged only where that is exact, gone and failed told
back, never sent in another leader term, Events bounded; a controller whose background write
failed writes its whole status again; and a period waits for no write or Event."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from decor.adapter.kube import Fenced, KubeError
from decor.service import job, status_writer
from decor.service.config import OperatorConfig
from decor.service.operator_metrics import OperatorMetrics
from decor.service.status_writer import StatusWriter, compose
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.fake_kube import merge_patch  # noqa: E402
from support.fake_trainers import FakeTrainer, linear_speed  # noqa: E402
from support.scenario import Bench, job_body, scenario_config  # noqa: E402

KEY = ("ns", "train")


# --- compose: one patch that does what two do, or none -----------------------------------------


def test_compose_keeps_what_the_first_set_and_the_second_did_not_touch() -> None:
    first = {"phase": "Running", "eta": None, "controller": {"a": 1, "b": 2}}
    then = {"phase": "Succeeded", "controller": {"b": 3}}
    assert compose(first, then) == {
        "phase": "Succeeded",
        "eta": None,
        "controller": {"a": 1, "b": 3},
    }


@pytest.mark.parametrize("first", [{"outcome": None}, {"outcome": 3}, {"outcome": [1]}])
def test_a_value_then_an_object_does_not_compose(first: dict[str, Any]) -> None:
    # {"outcome": {"x": 1}} after a delete is not {"outcome": {"x": 1}} merged into what is
    # there: the old object's other fields are gone after the delete.
    assert compose(first, {"outcome": {"x": 1}}) is None


json_leaf = st.one_of(st.none(), st.integers(0, 3), st.lists(st.integers(0, 2), max_size=2))
keys = st.sampled_from(["a", "b", "c"])
objects = st.recursive(
    st.dictionaries(keys, json_leaf, max_size=3),
    lambda inner: st.dictionaries(keys, st.one_of(json_leaf, inner), max_size=3),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(target=objects, first=objects, then=objects)
def test_compose_is_the_two_patches_one_after_the_other(
    target: dict[str, Any], first: dict[str, Any], then: dict[str, Any]
) -> None:
    merged = compose(first, then)
    if merged is not None:
        assert merge_patch(target, merged) == merge_patch(merge_patch(target, first), then)


# --- the writer ----------------------------------------------------------------------------------


class SlowKube:
    """Records each status patch; a patch waits for ``release`` while ``hold`` is set."""

    def __init__(self, answer: Any = True) -> None:
        self.sent: list[dict[str, Any]] = []
        self.answer = answer
        self.hold = threading.Event()
        self.release = threading.Event()
        self.entered = threading.Event()

    def patch_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any], uid: str | None = None
    ) -> bool:
        self.entered.set()
        if self.hold.is_set():
            assert self.release.wait(5)
        if isinstance(self.answer, Exception):
            raise self.answer
        self.sent.append({"uid": uid, **status})
        return bool(self.answer)

    def post_event(self, body: Mapping[str, Any]) -> None:
        self.entered.set()
        if self.hold.is_set():
            assert self.release.wait(5)
        if body["reason"] == "Broken":
            raise RuntimeError("no route to the API server")
        self.sent.append({"event": body["reason"], "thread": threading.current_thread().name})


def test_with_no_workers_a_write_is_sent_at_once() -> None:
    kube = SlowKube()
    writer = StatusWriter(kube, workers=0)  # type: ignore[arg-type]
    assert writer.write(KEY, "u1", {"phase": "Running"})
    assert kube.sent == [{"uid": "u1", "phase": "Running"}]


def test_a_jobs_writes_are_sent_in_order_the_waiting_ones_merged() -> None:
    kube = SlowKube()
    kube.hold.set()
    writer = StatusWriter(kube, workers=4)  # type: ignore[arg-type]
    assert writer.write(KEY, "u1", {"phase": "Pending", "allocation": "1"})
    assert kube.entered.wait(5)  # the first is in flight, held
    assert writer.write(KEY, "u1", {"phase": "Running", "eta": "t1"})
    assert writer.write(KEY, "u1", {"eta": "t2", "stepsDone": 5})
    assert writer.backlog() == 2  # one in flight, one waiting (the two merged)
    kube.release.set()
    writer.close()
    assert kube.sent == [
        {"uid": "u1", "phase": "Pending", "allocation": "1"},
        {"uid": "u1", "phase": "Running", "eta": "t2", "stepsDone": 5},
    ]
    assert writer.backlog() == 0


def test_writes_that_do_not_compose_are_both_sent() -> None:
    kube = SlowKube()
    kube.hold.set()
    writer = StatusWriter(kube, workers=2)  # type: ignore[arg-type]
    writer.write(KEY, "u1", {"phase": "Running"})
    assert kube.entered.wait(5)
    writer.write(KEY, "u1", {"outcome": None})
    writer.write(KEY, "u1", {"outcome": {"met": True}})
    kube.release.set()
    writer.close()
    assert [s.get("outcome", "-") for s in kube.sent] == ["-", None, {"met": True}]


def test_a_job_found_gone_is_told_at_its_next_write() -> None:
    kube = SlowKube(answer=False)
    writer = StatusWriter(kube, workers=2)  # type: ignore[arg-type]
    assert writer.write(KEY, "u1", {"phase": "Running"})  # not known yet
    writer.close()
    assert writer.gone(KEY, "u1")
    assert not writer.gone(KEY, "u2")  # a new job of the same name is another
    assert not writer.write(KEY, "u1", {"phase": "Running"})
    writer.forget(KEY)
    assert not writer.gone(KEY, "u1")


def test_a_failed_write_is_told_once_and_a_fenced_one_is_dropped() -> None:
    kube = SlowKube(answer=KubeError("patch", 500, "etcd timeout"))
    writer = StatusWriter(kube, workers=2)  # type: ignore[arg-type]
    writer.write(KEY, "u1", {"phase": "Running"})
    writer.close()
    assert writer.take_failed(KEY) and not writer.take_failed(KEY)

    kube = SlowKube(answer=Fenced("patch"))
    writer = StatusWriter(kube, workers=2)  # type: ignore[arg-type]
    writer.write(KEY, "u1", {"phase": "Running"})
    writer.close()
    assert not writer.take_failed(KEY) and not writer.gone(KEY, "u1")


def test_a_job_forgotten_while_its_write_is_in_flight_leaves_nothing_behind() -> None:
    kube = SlowKube(answer=False)  # the write will find the job gone
    kube.hold.set()
    writer = StatusWriter(kube, workers=2)  # type: ignore[arg-type]
    writer.write(KEY, "u1", {"phase": "Running"})
    assert kube.entered.wait(5)
    writer.forget(KEY)  # the loop saw the job leave the view
    kube.release.set()
    assert writer.flush()
    assert not writer.gone(KEY, "u1") and writer.backlog() == 0
    writer.close()


def test_a_write_is_never_sent_in_another_term() -> None:
    kube = SlowKube()
    kube.hold.set()
    term = [1]
    writer = StatusWriter(kube, workers=2, term=lambda: term[0])  # type: ignore[arg-type]
    writer.write(KEY, "u1", {"phase": "Running"})  # term 1, in flight
    assert kube.entered.wait(5)
    writer.write(KEY, "u1", {"phase": "Succeeded"})  # term 1, waiting
    term[0] = 2  # this replica lost the Lease and took it again
    writer.write(KEY, "u1", {"allocation": "2"})  # term 2: not merged into term 1's
    kube.release.set()
    writer.close()
    assert [s.get("phase", s.get("allocation")) for s in kube.sent] == ["Running", "2"]


def event(reason: str) -> dict[str, Any]:
    return {"involvedObject": {"name": KEY[1]}, "reason": reason}


def test_with_no_workers_an_event_is_posted_at_once_in_the_callers_thread() -> None:
    kube = SlowKube()
    writer = StatusWriter(kube, workers=0)  # type: ignore[arg-type]
    writer.post_event(KEY, event("PodCreated"))
    assert kube.sent == [{"event": "PodCreated", "thread": threading.current_thread().name}]


def test_a_jobs_events_and_writes_are_sent_in_the_order_it_made_them() -> None:
    kube = SlowKube()
    kube.hold.set()
    writer = StatusWriter(kube, workers=4)  # type: ignore[arg-type]
    writer.post_event(KEY, event("PodCreated"))
    assert kube.entered.wait(5)  # in flight, held
    writer.write(KEY, "u1", {"phase": "Pending"})
    writer.post_event(KEY, event("Resized"))
    writer.write(KEY, "u1", {"allocation": "2"})  # not merged over the Event between them
    writer.write(KEY, "u1", {"eta": "t1"})  # merged with the write before it
    assert writer.backlog() == 4  # one in flight, three waiting
    kube.release.set()
    writer.close()
    assert [{k: v for k, v in s.items() if k != "thread"} for s in kube.sent] == [
        {"event": "PodCreated"},
        {"uid": "u1", "phase": "Pending"},
        {"event": "Resized"},
        {"uid": "u1", "allocation": "2", "eta": "t1"},
    ]
    assert threading.current_thread().name not in {s.get("thread") for s in kube.sent}


def test_an_event_made_in_one_term_is_not_sent_in_another() -> None:
    kube, term = SlowKube(), [1]
    kube.hold.set()
    writer = StatusWriter(kube, workers=2, term=lambda: term[0])  # type: ignore[arg-type]
    writer.post_event(KEY, event("First"))
    assert kube.entered.wait(5)
    writer.post_event(KEY, event("Second"))
    term[0] = 2  # this replica lost the lease and won it again meanwhile
    kube.release.set()
    assert writer.flush()
    writer.post_event(KEY, event("Third"))
    writer.close()
    assert [s["event"] for s in kube.sent] == ["First", "Third"]


def test_beyond_the_bound_an_event_is_dropped_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(status_writer, "MAX_EVENTS_WAITING", 3)
    kube, dropped = SlowKube(), []
    kube.hold.set()
    writer = StatusWriter(kube, workers=2, on_event_dropped=lambda: dropped.append(1))  # type: ignore[arg-type]
    writer.post_event(KEY, event("R0"))
    assert kube.entered.wait(5)  # in flight: no longer waiting
    for n in range(1, 6):
        writer.post_event(KEY, event(f"R{n}"))
    writer.write(KEY, "u1", {"phase": "Running"})  # status writes are not bounded by it
    assert len(dropped) == 2  # R4 and R5
    kube.release.set()
    assert writer.flush()
    sent = [s.get("event", s.get("phase")) for s in kube.sent]
    assert sent == ["R0", "R1", "R2", "R3", "Running"]
    writer.post_event(KEY, event("R6"))  # room again once they were sent
    writer.close()
    assert len(dropped) == 2 and kube.sent[-1]["event"] == "R6"


def test_an_event_that_fails_costs_nothing_after_it() -> None:
    kube = SlowKube()
    writer = StatusWriter(kube, workers=1)  # type: ignore[arg-type]
    for reason in ("Broken", "Resized"):
        writer.post_event(KEY, event(reason))
    writer.write(KEY, "u1", {"phase": "Succeeded"})
    writer.close()
    assert [s.get("event", s.get("phase")) for s in kube.sent] == ["Resized", "Succeeded"]
    assert writer.backlog() == 0


def _controller(
    kube: SlowKube, writer: StatusWriter, clock: Callable[[], float]
) -> job.JobController:
    """Job ns/train (uid u1) whose status goes through ``writer``."""
    return job.JobController(
        "ns",
        "train",
        "u1",
        kube=kube,  # type: ignore[arg-type]
        config=OperatorConfig(),
        operator_metrics=OperatorMetrics(CollectorRegistry()),
        clock=clock,
        status_writer=writer,
    )


def test_a_controller_writes_its_whole_status_again_after_a_failed_write() -> None:
    kube = SlowKube(answer=KubeError("patch", 500, "etcd timeout"))
    writer = StatusWriter(kube, workers=2)  # type: ignore[arg-type]
    now = [1000.0]
    controller = _controller(kube, writer, lambda: now[0])
    controller.status = {"phase": "Running", "allocation": "1"}
    assert controller._write()
    assert writer.flush()
    assert kube.sent == []
    kube.answer = True
    now[0] += 1.0  # nothing changed since: without the failure, nothing would be written
    assert controller._write()
    assert writer.flush()
    assert kube.sent == [{"uid": "u1", "phase": "Running", "allocation": "1"}]
    now[0] += 1.0
    assert controller._write() and writer.flush()
    assert len(kube.sent) == 1  # written: the next period writes nothing


def test_a_controller_whose_write_found_the_job_gone_stops() -> None:
    kube = SlowKube(answer=False)
    writer = StatusWriter(kube, workers=2)  # type: ignore[arg-type]
    controller = _controller(kube, writer, lambda: 1000.0)
    controller.status = {"phase": "Running"}
    assert controller._write()  # sent in the background: not known yet
    assert writer.flush()
    assert not controller._write()  # the next period learns it
    writer.close()


# --- the loop: its period waits for no status write, and decides the same -------------------------


def test_a_period_with_several_commit_workers_does_not_wait_for_a_status_write() -> None:
    bench = Bench({"node-a": (8.0, 0)}, scenario_config(commit_workers=4))
    patch, held, entered = bench.kube.patch_job_status, threading.Event(), threading.Event()

    def slow_patch(*args: Any, **kwargs: Any) -> bool:
        entered.set()
        assert held.wait(10)
        return patch(*args, **kwargs)

    bench.kube.patch_job_status = slow_patch  # type: ignore[method-assign]
    bench.apply(job_body("resnet", initial="2"), FakeTrainer(1000, 100, linear_speed(1.0)))
    bench.period()  # the period creates the trainer and returns; its status write is held
    assert entered.wait(5)
    assert len(bench.pods("resnet")) == 1
    assert bench.phase("resnet") is None and bench.loop.status_writer.backlog() >= 1
    held.set()
    assert bench.loop.status_writer.flush()
    assert bench.phase("resnet") == "Pending"


def test_a_period_with_several_commit_workers_does_not_wait_for_an_event() -> None:
    bench = Bench({"node-a": (8.0, 0)}, scenario_config(commit_workers=4))
    post, held, entered = bench.kube.post_event, threading.Event(), threading.Event()

    def slow_post(body: Mapping[str, Any]) -> None:
        entered.set()
        assert held.wait(10)
        post(body)

    bench.kube.post_event = slow_post  # type: ignore[method-assign]
    bench.apply(job_body("resnet", initial="2"), FakeTrainer(1000, 100, linear_speed(1.0)))
    bench.period()  # the period creates the trainer and returns; its Event is held
    assert entered.wait(5)
    assert len(bench.pods("resnet")) == 1
    assert bench.kube.events == [] and bench.loop.status_writer.backlog() >= 1
    held.set()
    assert bench.loop.status_writer.flush()
    assert [e["reason"] for e in bench.kube.events] == ["PodCreated"]
    assert bench.phase("resnet") == "Pending"  # its status, written after it
    bench.loop.close()


def _closed_loops(workers: int) -> dict[str, Any]:
    """Three jobs on a node with room for all (no job's commit takes another's room), one
    deadline patched mid-run, until every job ends; with ``workers`` > 1 the status writes
    and Events are sent in the background and waited for after each period."""
    bench = Bench({"node-a": (32.0, 0)}, scenario_config(commit_workers=workers))
    for name, duration in (("resnet", "700s"), ("bert", "900s"), ("llm", "1200s")):
        bench.apply(
            job_body(name, initial="1", duration=duration),
            FakeTrainer(1000, 100, linear_speed(1.0), exits=True),
        )
    calls_by_period: list[Counter[str]] = []
    for period in range(400):
        before = len(bench.kube.record)
        bench.period(then=lambda: bench.loop.status_writer.flush())
        if period == 20:
            bench.patch_spec("bert", {"duration": "600s"})
        calls_by_period.append(
            Counter(
                f"{e['call']} {e.get('name', '')}"
                for e in bench.kube.record[before:]
                if "call" in e and e["call"] != "patch_job_status"
            )
        )
        if all(bench.phase(n) in ("Succeeded", "Failed") for n in ("resnet", "bert", "llm")):
            break
    return {
        "status": {n: bench.status(n) for n in ("resnet", "bert", "llm")},
        "calls": calls_by_period,
    }


def test_background_status_writes_leave_every_decision_and_status_the_same() -> None:
    inline, background = _closed_loops(1), _closed_loops(4)
    assert {n: s["phase"] for n, s in inline["status"].items()} == dict.fromkeys(
        ("resnet", "bert", "llm"), "Succeeded"
    )
    assert background["status"] == inline["status"]
    assert background["calls"] == inline["calls"]
