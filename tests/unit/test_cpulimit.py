"""Where the local runtime's cgroup v1 limiter puts a job's group: inside the runtime's own
group of the ``cpu`` hierarchy (a fake hierarchy in a temporary directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from decor.local.cpulimit import CgroupV1Limiter, make_limiter, own_v1_cpu_group


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    (tmp_path / "cpu" / "ci-idle").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("proc_cgroup", "group"),
    [
        ("4:memory:/x\n2:cpuacct:/\n1:cpu:/ci-idle\n0::/\n", "cpu/ci-idle"),
        ("3:cpu,cpuacct:/ci-idle\n", "cpu/ci-idle"),
        ("1:cpu:/\n", "cpu"),
        # a group this mount does not show (a container that sees only its own part)
        ("1:cpu:/kubepods/pod1/abc\n", "cpu"),
        ("0::/\n", "cpu"),  # no v1 cpu line
    ],
)
def test_the_own_group_is_read_from_proc_self_cgroup(
    root: Path, proc_cgroup: str, group: str
) -> None:
    assert own_v1_cpu_group(root, proc_cgroup) == root / group


def test_a_job_group_nests_in_the_runtime_group(root: Path) -> None:
    limiter = make_limiter("decor-job", root, "1:cpu:/ci-idle\n")
    assert isinstance(limiter, CgroupV1Limiter)
    assert limiter.group.parent == root / "cpu" / "ci-idle" / "decor"
    assert limiter.group.name.startswith("decor-job-")
    assert (limiter.group / "cpu.cfs_period_us").read_text() == "100000"
