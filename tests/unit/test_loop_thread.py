"""The control loop's own thread: a period, then a wait that a wake ends at once, a period
that fails does not end the loop, and a stop ends it after the period in progress."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

import pytest
from decor.service.config import OperatorConfig
from decor.service.handlers import Runtime
from decor.service.loop import IDLE_PERIOD_S
from decor.service.operator_metrics import OperatorMetrics
from prometheus_client import CollectorRegistry

LONG_WAIT_S = 60.0
"""What the fake period returns: only a wake (or a stop) ends the wait before the test ends."""


class FakePeriods:
    """Stands in for ControlLoop.run_period: counts its calls; raises on the calls asked to."""

    def __init__(self, fail_on: set[int] | None = None) -> None:
        self.calls = 0
        self.fail_on = fail_on or set()
        self.called = threading.Condition()

    def __call__(self) -> float:
        with self.called:
            self.calls += 1
            self.called.notify_all()
            if self.calls in self.fail_on:
                raise RuntimeError("a period failed")
        return LONG_WAIT_S

    def wait_for_calls(self, n: int, timeout_s: float = 5.0) -> bool:
        with self.called:
            return self.called.wait_for(lambda: self.calls >= n, timeout=timeout_s)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def _runtime(periods: FakePeriods, registry: CollectorRegistry) -> Runtime:
    config = dataclasses.replace(OperatorConfig(), watch_nodes=False, commit_workers=1)
    current = Runtime(
        config=config,
        kube=None,  # type: ignore[arg-type]  # the fake period makes no call
        metrics=OperatorMetrics(registry),
    )
    current.loop.run_period = periods  # type: ignore[method-assign]
    return current


@pytest.fixture
def periods(registry: CollectorRegistry) -> Iterator[tuple[Runtime, FakePeriods]]:
    fake = FakePeriods(fail_on={2})
    current = _runtime(fake, registry)
    current.start_loop()
    yield current, fake
    current.stop_loop()
    assert current.thread is not None
    current.thread.join(5.0)
    assert not current.thread.is_alive()


def test_a_wake_ends_the_wait_between_periods_at_once(
    periods: tuple[Runtime, FakePeriods],
) -> None:
    current, fake = periods
    assert fake.wait_for_calls(1)
    time.sleep(0.2)
    assert fake.calls == 1  # waiting the period's 60 s
    started = time.monotonic()
    current.wake.set()  # a job's spec changed (from kopf's event loop)
    assert fake.wait_for_calls(2)
    assert time.monotonic() - started < 1.0


def test_a_failed_period_is_counted_and_the_loop_goes_on(
    periods: tuple[Runtime, FakePeriods], registry: CollectorRegistry
) -> None:
    current, fake = periods
    assert fake.wait_for_calls(1)
    current.wake.set()
    assert fake.wait_for_calls(2)  # this one raises
    assert fake.wait_for_calls(3, timeout_s=IDLE_PERIOD_S + 5.0)  # after the idle period
    assert registry.get_sample_value("decor_operator_reconcile_errors_total") == 1.0


def test_a_stop_ends_the_loop_after_its_period(registry: CollectorRegistry) -> None:
    fake = FakePeriods()
    current = _runtime(fake, registry)
    current.start_loop()
    assert fake.wait_for_calls(1)
    current.stop_loop()
    assert current.thread is not None
    current.thread.join(5.0)
    assert not current.thread.is_alive()
    assert fake.calls == 1
