"""A fake clock for code that takes its clock as an argument."""

from __future__ import annotations


class FakeClock:
    """A clock that only moves when told to (seconds): call it for the time, set ``now`` or
    :meth:`advance` it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
