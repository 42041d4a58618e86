"""PyTorch's intra-op threads follow the CPU limit the trainer runs under.

DECOR resizes a trainer's CPU limit (CFS quota) while it runs. PyTorch's CPU kernels run
one OpenMP thread per usable CPU by default, and those threads meet at a barrier after
every parallel region: with more threads than the limit has whole cores, CFS throttles
the group part of every period while threads wait for one another. On the benchmark's
2-core machine two threads under a 1-core limit trained ResNet at half the speed of one
thread; beside a CPU-bound neighbour they stalled almost completely.

So the trainer runs ``floor(limit)`` threads (at least 1, at most the CPUs in its affinity
mask) and re-reads the limit every tenth of a second: ``torch.set_num_threads`` takes
effect at the next parallel region (OpenMP backend). Re-read once a second, a change ran up
to a whole second at the old count, in phase with a controller that also decides once a
second: VGG stepped up from one core to two trained 33 steps in its first second there,
as at one core, against 55 after. A re-read costs about 26 µs here. ``--threads N`` pins the count instead
(bitwise-reproducible CPU runs need a fixed count).

The limit comes from the process's own cgroup: ``cpu.max`` (v2) or
``cpu.cfs_quota_us``/``cpu.cfs_period_us`` (v1), located through ``/proc/self/cgroup``
and ``/proc/self/mountinfo`` so that it works on a host and inside a container.
:class:`CpuLimitReader` locates the folder again only when ``/proc/self/cgroup`` changes
(the process moved to another group), so a re-read costs two small file reads, not a parse
of every mount.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

RECHECK_S = 0.1


def threads_for(limit_cores: float | None, cpus: int) -> int:
    """Threads for a CPU limit: its whole cores, at least 1, at most ``cpus``.

    ``None`` (no limit) gives ``cpus``. A tiny tolerance keeps 1.9999 cores from a
    rounded quota at 2 threads.
    """
    cpus = max(1, cpus)
    if limit_cores is None:
        return cpus
    return max(1, min(cpus, math.floor(limit_cores + 1e-3)))


def parse_cpu_max(text: str) -> float | None:
    """Cores of a cgroup v2 ``cpu.max`` ("max 100000" or "150000 100000")."""
    fields = text.split()
    if not fields or fields[0] == "max":
        return None
    period = int(fields[1]) if len(fields) > 1 else 100_000
    return int(fields[0]) / period if period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """Cores of a cgroup v1 quota and period (a quota of -1 means no limit)."""
    quota, period = int(quota_text), int(period_text)
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def cpu_cgroup_dirs(cgroup_text: str, mountinfo_text: str) -> list[tuple[str, Path]]:
    """``(version, directory)`` of this process's CPU cgroup, v1 before v2.

    ``cgroup_text`` is ``/proc/self/cgroup`` ("4:cpu,cpuacct:/path" or "0::/path");
    ``mountinfo_text`` is ``/proc/self/mountinfo``, whose cgroup mounts give the mount
    point and the cgroup path mounted there (``/`` on a host, the container's own cgroup
    inside a container).
    """
    v1_path = v2_path = None
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and v2_path is None:
            v2_path = path
        elif "cpu" in controllers.split(","):
            v1_path = path
    found: list[tuple[str, Path]] = []
    for line in mountinfo_text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point, fstype, options = fields[3], fields[4], tail[0], tail[2]
        if fstype == "cgroup" and v1_path is not None and "cpu" in options.split(","):
            found.append(("v1", _join(mount_point, root, v1_path)))
        elif fstype == "cgroup2" and v2_path is not None:
            found.append(("v2", _join(mount_point, root, v2_path)))
    found.sort(key=lambda item: item[0])
    return found


def _join(mount_point: str, root: str, path: str) -> Path:
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return Path(mount_point) / path.lstrip("/")


def _limit_in(dirs: list[tuple[str, Path]]) -> float | None:
    """The quota of the first of ``dirs`` whose files read; None without a limit."""
    for version, folder in dirs:
        try:
            if version == "v2":
                return parse_cpu_max((folder / "cpu.max").read_text())
            return parse_cfs(
                (folder / "cpu.cfs_quota_us").read_text(),
                (folder / "cpu.cfs_period_us").read_text(),
            )
        except (OSError, ValueError, IndexError):
            continue
    return None


class CpuLimitReader:
    """Cores the process at ``proc`` may use by its cgroup's CFS quota; None without a limit.

    Each call reads ``cgroup``; only when it differs from the last call's are the mounts
    parsed again to locate the quota files.
    """

    def __init__(self, proc: Path = Path("/proc/self")) -> None:
        self._proc = proc
        self._cgroup_text: str | None = None
        self._dirs: list[tuple[str, Path]] = []

    def __call__(self) -> float | None:
        try:
            cgroup_text = (self._proc / "cgroup").read_text()
            if cgroup_text != self._cgroup_text:
                mounts = (self._proc / "mountinfo").read_text()
                self._dirs = cpu_cgroup_dirs(cgroup_text, mounts)
                self._cgroup_text = cgroup_text
        except OSError:
            return None
        return _limit_in(self._dirs)


def usable_cpus() -> int:
    """CPUs in this process's affinity mask (the affinity actuator changes it at run time)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class ThreadFollower:
    """Keeps ``set_threads`` at :func:`threads_for` the current limit; call :meth:`poll` often.

    Reads the limit at most every ``recheck_s`` seconds; calls ``set_threads`` only when the
    count changes. ``changes`` counts those calls after the first.
    """

    def __init__(
        self,
        set_threads: Callable[[int], None],
        read_limit: Callable[[], float | None] | None = None,
        read_cpus: Callable[[], int] = usable_cpus,
        clock: Callable[[], float] = time.monotonic,
        recheck_s: float = RECHECK_S,
    ) -> None:
        self._set, self._read_cpus = set_threads, read_cpus
        self._read_limit = read_limit if read_limit is not None else CpuLimitReader()
        self._clock, self._recheck_s = clock, recheck_s
        self._next_s = float("-inf")
        self.threads: int | None = None
        self.changes = 0

    def poll(self) -> int:
        """The thread count in effect after re-reading the limit if it is due."""
        now = self._clock()
        if now >= self._next_s:
            self._next_s = now + self._recheck_s
            wanted = threads_for(self._read_limit(), self._read_cpus())
            if wanted != self.threads:
                if self.threads is not None:
                    self.changes += 1
                self._set(wanted)
                self.threads = wanted
        assert self.threads is not None
        return self.threads
