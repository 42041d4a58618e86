"""The trainer's thread count follows its CPU limit: parsing, locating the cgroup, polling."""

from __future__ import annotations

from pathlib import Path

import pytest
from decor_trainer.threads import (
    CpuLimitReader,
    ThreadFollower,
    cpu_cgroup_dirs,
    parse_cfs,
    parse_cpu_max,
    threads_for,
)

# /proc/self/{cgroup,mountinfo} as seen on a cgroup v1 host, in a v1 container (the mount's
# root is the container's own cgroup) and in a v2 container (cgroup namespace: path "/").
V1_HOST_CGROUP = "9:name=systemd:/\n4:cpu,cpuacct:/decor/job\n3:memory:/\n"
V1_HOST_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "33 31 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
)
V1_POD = "/kubepods/podabc/0123cid"
V1_CONTAINER_CGROUP = f"4:cpu,cpuacct:{V1_POD}\n"
V1_CONTAINER_MOUNTS = (
    f"700 690 0:29 {V1_POD} /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
)
V2_CONTAINER_CGROUP = "0::/\n"
V2_CONTAINER_MOUNTS = "800 790 0:27 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize(
    ("limit", "cpus", "threads"),
    [
        (None, 8, 8),
        (0.3, 2, 1),
        (1.0, 2, 1),
        (1.5, 2, 1),
        (1.9995, 2, 2),
        (2.0, 2, 2),
        (6.0, 2, 2),
        (3.7, 16, 3),
        (None, 0, 1),
    ],
)
def test_threads_are_the_whole_cores_of_the_limit(
    limit: float | None, cpus: int, threads: int
) -> None:
    assert threads_for(limit, cpus) == threads


def test_quota_files_parse_to_cores() -> None:
    assert parse_cpu_max("max 100000\n") is None
    assert parse_cpu_max("150000 100000\n") == pytest.approx(1.5)
    assert parse_cfs("-1\n", "100000\n") is None
    assert parse_cfs("50000\n", "100000\n") == pytest.approx(0.5)
    with pytest.raises(ValueError):
        parse_cfs("lots", "100000")


def test_cgroup_dir_on_a_v1_host() -> None:
    assert cpu_cgroup_dirs(V1_HOST_CGROUP, V1_HOST_MOUNTS) == [
        ("v1", Path("/sys/fs/cgroup/cpu,cpuacct/decor/job"))
    ]


def test_cgroup_dir_in_a_v1_container_is_the_mount_point() -> None:
    assert cpu_cgroup_dirs(V1_CONTAINER_CGROUP, V1_CONTAINER_MOUNTS) == [
        ("v1", Path("/sys/fs/cgroup/cpu,cpuacct"))
    ]


def test_cgroup_dir_in_a_v2_container() -> None:
    assert cpu_cgroup_dirs(V2_CONTAINER_CGROUP, V2_CONTAINER_MOUNTS) == [
        ("v2", Path("/sys/fs/cgroup"))
    ]


def _fake_proc(tmp_path: Path, cgroup: str, quota: str | None) -> Path:
    """A /proc/self whose v2 cgroup mount is a folder under tmp_path, holding cpu.max."""
    group = tmp_path / "fs"
    group.mkdir()
    if quota is not None:
        (group / "cpu.max").write_text(quota)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text(f"800 790 0:27 / {group} rw - cgroup2 cgroup2 rw\n")
    return proc


def test_read_cpu_limit_from_files(tmp_path: Path) -> None:
    assert CpuLimitReader(_fake_proc(tmp_path, "0::/\n", "75000 100000\n"))() == pytest.approx(0.75)


def test_unreadable_limit_is_no_limit(tmp_path: Path) -> None:
    assert CpuLimitReader(_fake_proc(tmp_path, "0::/\n", None))() is None
    assert CpuLimitReader(tmp_path / "no-such-proc")() is None


def test_reader_rereads_the_quota_and_locates_the_group_again_only_after_a_move(
    tmp_path: Path,
) -> None:
    proc = _fake_proc(tmp_path, "0::/\n", "75000 100000\n")
    read = CpuLimitReader(proc)
    assert read() == pytest.approx(0.75)
    (tmp_path / "fs" / "cpu.max").write_text("150000 100000\n")
    (proc / "mountinfo").write_text("not parsed again while the cgroup is the same\n")
    assert read() == pytest.approx(1.5)
    moved = tmp_path / "fs" / "job"
    moved.mkdir()
    (moved / "cpu.max").write_text("50000 100000\n")
    (proc / "mountinfo").write_text(f"800 790 0:27 / {tmp_path / 'fs'} rw - cgroup2 cgroup2 rw\n")
    (proc / "cgroup").write_text("0::/job\n")
    assert read() == pytest.approx(0.5)


def test_follower_rereads_the_limit_once_a_period_and_sets_only_changes() -> None:
    now = [0.0]
    limit: list[float | None] = [1.0]
    calls: list[int] = []
    follower = ThreadFollower(
        calls.append, read_limit=lambda: limit[0], read_cpus=lambda: 4,
        clock=lambda: now[0], recheck_s=1.0,
    )  # fmt: skip
    assert follower.poll() == 1
    limit[0] = 3.0
    now[0] = 0.5
    assert follower.poll() == 1  # not due yet
    now[0] = 1.0
    assert follower.poll() == 3
    now[0] = 2.0
    assert follower.poll() == 3  # unchanged: no call
    limit[0] = None
    now[0] = 3.0
    assert follower.poll() == 4
    assert calls == [1, 3, 4]
    assert follower.changes == 2
