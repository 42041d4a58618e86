"""Images in a registry: the arguments of cluster/push-images.sh (through its --dry-run, which
builds and pushes nothing), the helm lines it prints against the chart's values, and the
containerd side of the test bed's registry (the hosts.toml of cluster/registry.sh and the
config_path that cluster/cluster-up.sh gives containerd)."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PUSH = REPO / "cluster" / "push-images.sh"
REGISTRY_SH = REPO / "cluster" / "registry.sh"
CHART = REPO / "helm" / "decor"
# The variables the script reads; a caller's own must not leak into these tests.
SCRIPT_ENV = ("REGISTRY", "REGISTRY_INSECURE", "IMAGE_TAG", "REGISTRY_AUTHFILE")


def run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in SCRIPT_ENV}
    return subprocess.run(
        ["bash", str(script), *args], env={**clean, **env},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def dry_run(*args: str, **env: str) -> str:
    result = run(PUSH, "--dry-run", *args, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def chart_app_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def lib_setting(name: str) -> str:
    result = subprocess.run(
        ["bash", "-c", f'. "{REPO}/cluster/lib.sh"; printf %s "${name}"'],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return result.stdout


# --- push-images.sh: what it pushes and what it tells the user to install -----------------------


def test_pushes_both_images_under_decor_at_the_charts_version() -> None:
    out = dry_run("registry.example.com:5443/ml/team")
    version, to = chart_app_version(), "docker://registry.example.com:5443/ml/team/decor"
    assert f"push operator {to}/operator:{version}" in out
    assert f"push trainer {to}/trainer:{version}" in out


def test_tls_is_verified_unless_the_registry_is_declared_plain_http() -> None:
    assert "TLS verification: true" in dry_run("registry.example.com")
    assert "over HTTP" not in dry_run("registry.example.com")
    for out in (
        dry_run("127.0.0.1:5000", REGISTRY_INSECURE="1"),
        dry_run("--insecure", "127.0.0.1:5000"),
    ):
        assert "TLS verification: false" in out
        assert 'server = "http://127.0.0.1:5000"' in out  # what the nodes then need


def test_registry_tag_and_credentials_come_from_arguments_or_the_environment() -> None:
    out = dry_run(REGISTRY="reg.example.com/x/", IMAGE_TAG="1.2.3-rc1")
    assert "docker://reg.example.com/x/decor/operator:1.2.3-rc1" in out  # trailing / dropped
    assert "docker://reg.example.com/x/decor/trainer:1.2.3-rc1" in out
    out = dry_run("--tag", "dev", "--authfile", "/nonexistent/auth.json", "reg.example.com")
    assert "docker://reg.example.com/decor/operator:dev" in out


def helm_sets(out: str) -> dict[str, str]:
    return dict(re.findall(r"--set '?([\w.\[\]]+)=([^\s']+)", out))


def test_the_printed_helm_lines_name_chart_values_that_exist() -> None:
    out = dry_run("registry.example.com/ml", IMAGE_TAG="0.9.0")
    assert "helm install decor helm/decor" in out
    sets = helm_sets(out)
    assert sets["image.repository"] == "registry.example.com/ml/decor/operator"
    assert sets["image.tag"] == "0.9.0"
    assert sets["trainer.sidecarImage"] == "registry.example.com/ml/decor/trainer:0.9.0"
    assert sets["imagePullSecrets[0].name"] == "SECRET"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in sets:
        node: Any = values
        for part in re.sub(r"\[\d+\]\.\w+$", "", key).split("."):
            assert isinstance(node, dict) and part in node, f"{key}: no such chart value"
            node = node[part]


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {}, "no registry given"),
        (("http://registry.example.com",), {}, "without a scheme"),
        (("registry.example.com/Team",), {}, "not a repository prefix"),
        (("registry.example.com/ml:1.0",), {}, "not a repository prefix"),
        (("registry.example.com@sha256",), {}, "not a registry host"),
        (("registry.example.com",), {"REGISTRY_INSECURE": "maybe"}, "REGISTRY_INSECURE must be"),
        (("--tag", "no/slash", "registry.example.com"), {}, "not an image tag"),
        (("--bogus", "registry.example.com"), {}, "unknown option --bogus"),
    ],
)
def test_bad_arguments_are_refused_with_a_reason(
    args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    result = run(PUSH, "--dry-run", *args, **env)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert "push operator" not in result.stdout


# --- the test bed's registry, as containerd sees it -------------------------------------------


def test_the_test_beds_registry_is_on_loopback() -> None:
    host, _, port = lib_setting("BED_REGISTRY").rpartition(":")
    assert ipaddress.ip_address(host).is_loopback
    assert port.isdigit()
    config = REGISTRY_SH.read_text()
    assert re.search(r"^  addr: \$BED_REGISTRY$", config, re.M), "the registry listens elsewhere"


def test_hosts_toml_sends_containerd_to_the_registry_over_plain_http(tmp_path: Path) -> None:
    result = run(REGISTRY_SH, "hosts", str(tmp_path))
    assert result.returncode == 0, result.stderr
    address = lib_setting("BED_REGISTRY")
    (path,) = tmp_path.rglob("hosts.toml")
    assert path.parent == tmp_path / address  # containerd looks the host:port up by name
    hosts = tomllib.loads(path.read_text())
    assert hosts["server"] == f"http://{address}"
    assert hosts["host"] == {f"http://{address}": {"capabilities": ["pull", "resolve"]}}


def test_cluster_up_points_containerd_at_that_hosts_directory() -> None:
    script = (REPO / "cluster" / "cluster-up.sh").read_text()
    (body,) = re.findall(r'cat > "\$cfg/containerd\.toml" <<EOF\n(.*?)^EOF$', script, re.S | re.M)
    config = tomllib.loads(re.sub(r"\$(\w+)", r"<\1>", body))  # the shell's variables, named
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["registry"] == {"config_path": "<CONTAINERD_HOSTS_DIR>"}
    hosts_written = script.index('registry.sh" hosts "$CONTAINERD_HOSTS_DIR"')
    assert hosts_written < script.index("start_daemon containerd")
