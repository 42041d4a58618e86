"""Polling for tests that watch real processes: wait until a predicate holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(
    predicate: Callable[[], Any], what: str, timeout_s: float, interval_s: float = 0.01
) -> Any:
    """Poll ``predicate`` every ``interval_s`` seconds until it returns something truthy, and
    return that; fail the test, naming ``what``, after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
