"""Limiting the CPU of a local process tree: cgroup v1, cgroup v2, or CPU affinity.

``make_limiter(name)`` picks what this machine allows, in that order of preference:
* cgroup v1: a child group under the ``cpu`` hierarchy, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``,
  inside this process's own group there: a runtime started in a limited group (a CI job's,
  a service's) keeps its trainers within that group's share;
* cgroup v2: a child group with the ``cpu`` controller, ``cpu.max``;
* affinity: pin the process's threads to ceil(cores) CPUs (coarse: whole cores only), used
  when cgroups cannot be written (not root, read-only mount). The caller is told why.

A limiter is used as: ``limiter.preexec`` as Popen's ``preexec_fn`` (the child joins the
group before it starts any thread), ``limiter.attach(pid)`` after start (affinity only),
``limiter.apply(cores)`` returning the cores actually in effect, ``limiter.close()``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Protocol

CFS_PERIOD_US = 100_000  # the kernel's default CFS period: 100 ms
CGROUP_ROOT = Path("/sys/fs/cgroup")


class CpuLimiter(Protocol):
    kind: str  # "cgroup-v1" | "cgroup-v2" | "affinity"
    note: str  # one line for the user about how CPU is limited

    def preexec(self) -> None: ...
    def attach(self, pid: int) -> None: ...
    def apply(self, cores: float) -> float: ...
    def read(self) -> float: ...
    def close(self) -> None: ...


class CgroupV1Limiter:
    kind = "cgroup-v1"

    def __init__(self, group: Path) -> None:
        group.mkdir(parents=True, exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        self.group = group
        self.note = f"CPU limited by cgroup v1 CFS quota in {group}"

    def preexec(self) -> None:
        (self.group / "cgroup.procs").write_text(str(os.getpid()))

    def attach(self, pid: int) -> None:
        (self.group / "cgroup.procs").write_text(str(pid))

    def apply(self, cores: float) -> float:
        quota = max(1000, round(cores * CFS_PERIOD_US))
        (self.group / "cpu.cfs_quota_us").write_text(str(quota))
        return self.read()

    def read(self) -> float:
        quota = int((self.group / "cpu.cfs_quota_us").read_text())
        period = int((self.group / "cpu.cfs_period_us").read_text())
        return math.inf if quota < 0 else quota / period

    def close(self) -> None:
        _remove_group(self.group, self.group.parent / "cgroup.procs")


class CgroupV2Limiter:
    kind = "cgroup-v2"

    def __init__(self, group: Path) -> None:
        group.mkdir(parents=True, exist_ok=True)
        self.group = group
        self.note = f"CPU limited by cgroup v2 cpu.max in {group}"

    def preexec(self) -> None:
        (self.group / "cgroup.procs").write_text(str(os.getpid()))

    def attach(self, pid: int) -> None:
        (self.group / "cgroup.procs").write_text(str(pid))

    def apply(self, cores: float) -> float:
        quota = max(1000, round(cores * CFS_PERIOD_US))
        (self.group / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")
        return self.read()

    def read(self) -> float:
        quota, period = (self.group / "cpu.max").read_text().split()
        return math.inf if quota == "max" else int(quota) / int(period)

    def close(self) -> None:
        _remove_group(self.group, self.group.parent / "cgroup.procs")


class AffinityLimiter:
    """Fallback without cgroups: whole CPUs only, so 1.3 cores becomes 2 CPUs."""

    kind = "affinity"

    def __init__(self, reason: str) -> None:
        self.cpus = sorted(os.sched_getaffinity(0))
        self.pid: int | None = None
        self.cores = float(len(self.cpus))
        self.note = f"cgroups not writable ({reason}); limiting by CPU affinity, whole cores only"

    def preexec(self) -> None:
        return None

    def attach(self, pid: int) -> None:
        self.pid = pid

    def apply(self, cores: float) -> float:
        count = max(1, min(len(self.cpus), math.ceil(cores - 1e-9)))
        if self.pid is not None:
            for task in Path(f"/proc/{self.pid}/task").glob("*"):
                try:
                    os.sched_setaffinity(int(task.name), self.cpus[:count])
                except OSError:
                    continue  # a thread that just ended
        self.cores = float(count)
        return self.cores

    def read(self) -> float:
        return self.cores

    def close(self) -> None:
        return None


def _remove_group(group: Path, parent_procs: Path) -> None:
    """Move any leftover task to the parent group, then remove the group."""
    try:
        for pid in (group / "cgroup.procs").read_text().split():
            try:
                parent_procs.write_text(pid)
            except OSError:
                continue
        group.rmdir()
    except OSError:
        pass  # already gone, or a task is still exiting: the kernel frees it later


def own_v1_cpu_group(root: Path, proc_cgroup: str) -> Path:
    """This process's group in the cgroup v1 ``cpu`` hierarchy mounted at ``root/cpu``, from
    ``proc_cgroup`` (/proc/self/cgroup); the hierarchy's root where that group is not a
    directory there (a container that sees only its own part of the hierarchy)."""
    top = root / "cpu"
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            own = top / path.strip("/")
            return own if own.is_dir() else top
    return top


def make_limiter(name: str, root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> CpuLimiter:
    """The best limiter this machine allows for a job called ``name`` (cgroup v1: in this
    process's own group, read from ``proc_cgroup``, /proc/self/cgroup by default)."""
    leaf = f"{name}-{os.getpid()}"
    reason = "no cgroup cpu controller found"
    try:
        if (root / "cpu" / "cpu.cfs_quota_us").exists():
            if proc_cgroup is None:
                proc_cgroup = Path("/proc/self/cgroup").read_text()
            return CgroupV1Limiter(own_v1_cpu_group(root, proc_cgroup) / "decor" / leaf)
        if "cpu" in (root / "cgroup.controllers").read_text().split():
            parent = root / "decor"
            parent.mkdir(exist_ok=True)
            (root / "cgroup.subtree_control").write_text("+cpu")
            (parent / "cgroup.subtree_control").write_text("+cpu")
            return CgroupV2Limiter(parent / leaf)
    except OSError as exc:
        reason = f"{exc.strerror or exc}: {exc.filename or ''}".strip(": ")
    return AffinityLimiter(reason)
