"""Every image the project builds runs as a numeric non-root user (Kubernetes can then check
``runAsNonRoot`` without a passwd entry): the Dockerfiles, the CUDA one included, and the
images the test bed builds without Docker (cluster/build-images.sh)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted(p for p in REPO.rglob("Dockerfile*") if ".git" not in p.parts)


def test_the_dockerfiles_are_found() -> None:
    names = {str(p.relative_to(REPO)) for p in DOCKERFILES}
    assert {
        "operator/Dockerfile",
        "trainer_image/Dockerfile",
        "trainer_image/Dockerfile.cuda",
    } <= names


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_each_dockerfile_ends_as_a_numeric_non_root_user(path: Path) -> None:
    users = re.findall(r"^USER\s+(\S+)\s*$", path.read_text(), flags=re.MULTILINE)
    assert users, f"{path} sets no USER: it would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) != 0), users[-1]


def test_the_test_beds_images_run_as_non_root_users() -> None:
    script = (REPO / "cluster" / "build-images.sh").read_text()
    users = dict(re.findall(r"^(TRAINER_USER|OPERATOR_USER)=(\d+):\d+", script, re.MULTILINE))
    assert set(users) == {"TRAINER_USER", "OPERATOR_USER"}
    assert all(int(uid) != 0 for uid in users.values())
