"""The README's cluster quick start, followed as written, from a fresh clone, on the test bed.

The block of README.md marked ``<!-- cluster-quick-start ... -->`` is read here and run line
by line in a ``git clone`` of this repository (what is committed), with bash, from the
clone's root. Only the settings the README leaves to its reader change: ``REGISTRY`` (the
bed's registry, DECOR_E2E_REGISTRY), ``NS`` (this test's namespace) and ``PREFIX`` (a
directory of this test, first on PATH, instead of /usr/local). The watch
(``kubectl get dtj ... -w``) is interrupted as a reader would, with Ctrl-C (SIGINT to its
process group), once it shows the job Running.

The job must then reach Succeeded near its moved deadline, and ``kubectl dtj get`` must work
from ``$PREFIX/bin``. While it runs, the NetworkPolicy of docs/operations.md ("Network
policy") is applied in its namespace beside a default deny of ingress: the API server must
accept both and their selectors must pick the trainer pod and the chart's operator pods. The
test bed's CNI (the ``bridge`` plugin, cluster/cluster-up.sh) does not enforce
NetworkPolicy, so there the job succeeding says nothing about the policy; on a cluster that
enforces it, the job could not read its progress without the documented rule.

The README installs a cluster-wide operator (it serves every namespace): the test runs
``alone``. The clone gets its own Python environment (``DECOR_CACHE`` points at a directory
of this test holding links to the machine's cache, built tools and image layers, and a venv
over the packages of the one running this test): ``make install`` re-points the editable
install of the environment it finds at the clone, and the machine's shared one must keep
pointing at its own checkout.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import IN_CI
from decor.api.model import parse_duration_s
from test_operator import (
    DEVIATION_BOUND_PERCENT,
    REGISTRY,
    REPO,
    condition,
    delete_jobs,
    get_job,
    helm_or_skip,
    report,
    trainer_pods,
    wait_succeeded,
)

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

README = REPO / "README.md"
OPERATIONS = REPO / "docs" / "operations.md"
BLOCK_MARKER = "<!-- cluster-quick-start"
# The settings the README leaves to its reader, at the top of its block.
SETTINGS = ("REGISTRY", "NS", "PREFIX")
EXAMPLE = "examples/resnet-cluster.yaml"  # the job the README applies (in the clone)
JOB = "resnet-demo"  # its name
OPERATOR_NAMESPACE = "decor-system"  # the README's helm install
MOVE_S = 20.0  # the README's `kubectl dtj deadline ... +20s`
# Seconds a step may take: building and pushing both images from an empty image cache is the
# longest (the operator's image alone when only the code changed).
STEP_TIMEOUT_S = {"make images": 1800.0}
DEFAULT_STEP_TIMEOUT_S = 300.0
_ASSIGNMENT = re.compile(r"^([A-Z_][A-Z0-9_]*)=(\S+)(?:\s+#.*)?$")


# ============================================================================================
# the README's block


@dataclass(frozen=True)
class QuickStart:
    """The README's cluster quick start: the reader's settings, the lines that set up the
    shell (sourced before every command) and the commands, in order."""

    settings: dict[str, str]
    prelude: list[str]
    commands: list[str]


def fenced_block_after(text: str, marker: str) -> str:
    """The body of the ```bash block that directly follows the line holding ``marker``."""
    at = text.find(marker)
    assert at >= 0, f"README.md has no block marked {marker!r}"
    after = text[text.index("\n", at) + 1 :]
    match = re.match(r"```bash\n(.*?)^```", after, re.S | re.M)
    assert match, f"the line {marker!r} in README.md is not followed by a ```bash block"
    return match.group(1)


def logical_lines(body: str) -> list[str]:
    """Non-blank lines of a shell block, each continued (trailing backslash) line joined to
    the next one as bash reads it."""
    lines: list[str] = []
    pending = ""
    for line in body.splitlines():
        pending += line
        if line.endswith("\\"):
            pending += "\n"
            continue
        if pending.strip():
            lines.append(pending)
        pending = ""
    assert not pending, f"the block ends inside a continued line: {pending!r}"
    return lines


def quick_start(text: str) -> QuickStart:
    """The marked block of README.md, split into settings, prelude and commands."""
    settings: dict[str, str] = {}
    prelude: list[str] = []
    commands: list[str] = []
    for line in logical_lines(fenced_block_after(text, BLOCK_MARKER)):
        assignment = _ASSIGNMENT.match(line)
        if assignment and not commands:
            settings[assignment.group(1)] = assignment.group(2)
        elif line.startswith(". ") and not commands:
            prelude.append(line)
        else:
            commands.append(line)
    assert tuple(settings) == SETTINGS, f"the block's settings are {list(settings)}"
    return QuickStart(settings=settings, prelude=prelude, commands=commands)


def is_watch(command: str) -> bool:
    """A command that runs until interrupted (``kubectl get ... -w``)."""
    return "-w" in shlex.split(command, comments=True)


def script(settings: dict[str, str], prelude: list[str], command: str) -> str:
    """What bash runs for one command: the reader's settings, the prelude, the command."""
    assignments = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
    return "\n".join(["set -e", *assignments, *prelude, command])


def test_the_readme_marks_its_cluster_quick_start() -> None:
    """No cluster needed: the block exists, starts with the reader's settings, and holds the
    path the cluster test follows."""
    steps = quick_start(README.read_text())
    assert steps.settings["REGISTRY"] == "127.0.0.1:5000", steps.settings
    assert [shlex.split(line, comments=True) for line in steps.prelude] == [
        [".", "cluster/env.sh"]
    ], steps.prelude
    firsts = [" ".join(shlex.split(c, comments=True)[:2]) for c in steps.commands]
    assert firsts[:2] == ["make install", "make images"], firsts
    assert sum(is_watch(c) for c in steps.commands) == 1, steps.commands
    assert firsts[-2:] == ["kubectl dtj", "kubectl dtj"], firsts
    for command in steps.commands:
        words = shlex.split(command, comments=True)
        assert "$NS" in words or "decor-system" in words or words[0] == "make", command


# ============================================================================================
# a fresh clone with its own Python environment


def clone_cache(root: Path) -> Path:
    """A DECOR_CACHE for the clone: links to every entry of the machine's cache but its
    Python environments, and a venv named as the one running this test (the clone's
    hack/venv.sh computes the same name from the same files) that sees that one's packages;
    marked complete, so that hack/venv.sh only installs the clone into it, editable."""
    shared = Path(os.environ.get("DECOR_CACHE", "/var/cache/decor"))
    cache = root / "cache"
    cache.mkdir()
    for entry in shared.iterdir():
        if not entry.name.startswith("venv-"):
            (cache / entry.name).symlink_to(entry)
    venv = cache / Path(sys.prefix).name
    subprocess.run(
        ["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    own_site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    # a path line only: the shared venv's own .pth files (its editable install) are not read
    (own_site / "decor-shared-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    (venv / ".complete").touch()
    return cache


def fresh_clone(root: Path) -> Path:
    """``git clone`` of this repository at its current commit."""
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    clone = root / "decor"
    for args in (["clone", "--quiet", str(REPO), str(clone)],
                 ["-C", str(clone), "checkout", "--quiet", "--detach", head]):  # fmt: skip
        subprocess.run(["git", *args], check=True, capture_output=True, timeout=120)
    return clone


@dataclass
class Reader:
    """A reader's shell in the clone: runs one README command at a time."""

    clone: Path
    env: dict[str, str]
    settings: dict[str, str]
    prelude: list[str]

    def run(self, command: str) -> str:
        """Run a command to its end; its stdout. Fails the test when it fails."""
        first = " ".join(shlex.split(command, comments=True)[:2])
        timeout = STEP_TIMEOUT_S.get(first, DEFAULT_STEP_TIMEOUT_S)
        t0 = time.monotonic()
        result = subprocess.run(
            ["nice", "-n", "19", "bash", "-c", script(self.settings, self.prelude, command)],
            cwd=self.clone, env=self.env, capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip
        print(f"[quick start {time.monotonic() - t0:5.1f}s] {command}\n{result.stdout[-3000:]}")
        assert result.returncode == 0, (
            f"README step failed ({result.returncode}): {command}\n{result.stderr[-4000:]}"
        )
        return result.stdout

    def watch_until(self, command: str, phases: tuple[str, ...], timeout: float) -> str:
        """Run a watch until a line of it shows one of ``phases``, then Ctrl-C (SIGINT to its
        process group); what it printed."""
        lines: list[str] = []
        with subprocess.Popen(
            ["bash", "-c", script(self.settings, self.prelude, command)],
            cwd=self.clone, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        ) as process:  # fmt: skip
            reader = threading.Thread(target=read_lines, args=(process.stdout, lines))
            reader.start()
            try:
                return "".join(wait_for_lines(lines, phases, timeout, process, command))
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGINT)
                process.wait(timeout=30)
                reader.join(timeout=30)
                print(f"[quick start watch] {command}\n{''.join(lines)[-3000:]}")


def read_lines(stream: Any, lines: list[str]) -> None:
    """Append each line of ``stream`` to ``lines`` as it comes (in a thread)."""
    for line in stream:
        lines.append(line)


def wait_for_lines(
    lines: list[str], phases: tuple[str, ...], timeout: float, process: Any, command: str
) -> list[str]:
    """Poll ``lines`` (filled by a reader thread) until one names a phase; the lines."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(set(line.split()) & set(phases) for line in list(lines)):
            return list(lines)
        assert process.poll() is None, f"the watch ended ({process.returncode}): {lines}"
        time.sleep(0.5)
    raise AssertionError(f"{command} showed none of {phases} within {timeout:.0f}s: {lines}")


# ============================================================================================
# the documented NetworkPolicy


def documented_network_policy(namespace: str) -> dict[str, Any]:
    """The NetworkPolicy of docs/operations.md ("Network policy"), put in ``namespace``
    (the docs' ``ml``: "each namespace that runs jobs")."""
    text = OPERATIONS.read_text()
    section = text[text.index("\n## Network policy") :]
    match = re.search(r"```yaml\n(.*?)^```", section, re.S | re.M)
    assert match, "docs/operations.md: no yaml block under 'Network policy'"
    policy = dict(yaml.safe_load(match.group(1)))
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["namespace"] == "ml", policy
    policy["metadata"]["namespace"] = namespace
    return policy


def selector(label_selector: dict[str, Any]) -> str:
    """A LabelSelector as kubectl's ``-l`` text (matchLabels; Exists, DoesNotExist, In)."""
    terms = [f"{k}={v}" for k, v in (label_selector.get("matchLabels") or {}).items()]
    for expression in label_selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        if operator == "Exists":
            terms.append(key)
        elif operator == "DoesNotExist":
            terms.append(f"!{key}")
        elif operator == "In":
            terms.append(f"{key} in ({','.join(expression['values'])})")
        else:
            raise AssertionError(f"selector operator {operator} not handled here")
    assert terms, "an empty selector selects everything"
    return ",".join(terms)


def names(kube: Any, *args: str) -> set[str]:
    """The names kubectl lists for ``args`` (``get KIND -l ...``)."""
    listed = json.loads(kube.kubectl(*args, "-o", "json"))
    return {item["metadata"]["name"] for item in listed["items"]}


def apply_network_policies(kube: Any, namespace: str, path: Path) -> dict[str, Any]:
    """A default deny of ingress and the documented policy, applied in ``namespace``; the
    documented one as the API server stored it."""
    deny = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny-ingress", "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }  # fmt: skip
    policy = documented_network_policy(namespace)
    path.write_text(yaml.safe_dump_all([deny, policy]))
    kube.kubectl("apply", "-f", str(path))
    name = policy["metadata"]["name"]
    return dict(
        json.loads(kube.kubectl("-n", namespace, "get", "networkpolicy", name, "-o", "json"))
    )


def check_policy_selects(kube: Any, namespace: str, stored: dict[str, Any]) -> None:
    """The stored policy admits, on the trainers' metrics port, exactly the operator's pods
    (the Deployment's own selector) of the operator's namespace, into the job's pods."""
    spec = stored["spec"]
    trainers = {p.metadata.name for p in trainer_pods(kube, namespace, JOB)}
    assert trainers, "no trainer pod"
    pods = names(kube, "-n", namespace, "get", "pods", "-l", selector(spec["podSelector"]))
    assert pods == trainers, (pods, trainers)
    (rule,) = spec["ingress"]
    (source,) = rule["from"]
    assert names(kube, "get", "namespaces", "-l", selector(source["namespaceSelector"])) == {
        OPERATOR_NAMESPACE
    }
    deployment = json.loads(
        kube.kubectl("-n", OPERATOR_NAMESPACE, "get", "deployment", "decor", "-o", "json")
    )
    operators = names(kube, "-n", OPERATOR_NAMESPACE, "get", "pods", "-l",
                      selector(deployment["spec"]["selector"]))  # fmt: skip
    sources = names(kube, "-n", OPERATOR_NAMESPACE, "get", "pods", "-l",
                    selector(source["podSelector"]))  # fmt: skip
    assert sources == operators and len(operators) == deployment["spec"]["replicas"], (
        sources, operators,
    )  # fmt: skip
    ports = {(p["protocol"], p["port"]) for p in rule["ports"]}
    for pod in trainer_pods(kube, namespace, JOB):
        annotated = int(pod.metadata.annotations["prometheus.io/port"])
        assert ports == {("TCP", annotated)}, (ports, annotated)


# ============================================================================================
# the test


def seconds_between(start: str, end: str) -> float:
    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return (parse(end) - parse(start)).total_seconds()


@pytest.fixture
def operator_namespace_free(kube: Any) -> Iterator[None]:
    """The README installs into decor-system: it must not exist yet; afterwards the release
    and the namespace go (waited for, so that the next run finds it free)."""
    existing = kube.kubectl(
        "get", "namespace", OPERATOR_NAMESPACE, "--ignore-not-found", "-o", "name"
    )
    if existing.strip():
        pytest.fail(f"namespace {OPERATOR_NAMESPACE} exists already: the README installs there")
    yield
    helm = helm_or_skip()
    subprocess.run(
        [helm, "--kubeconfig", kube.kubeconfig, "-n", OPERATOR_NAMESPACE, "uninstall", "decor"],
        capture_output=True, timeout=180, check=False,
    )  # fmt: skip
    kube.kubectl("delete", "namespace", OPERATOR_NAMESPACE, "--ignore-not-found", "--wait=false")
    kube.wait_for(
        lambda: not kube.kubectl("get", "namespace", OPERATOR_NAMESPACE, "--ignore-not-found",
                                 "-o", "name").strip(),
        180, f"namespace {OPERATOR_NAMESPACE} to go",
    )  # fmt: skip


def _skip_outside_ci(reason: str) -> None:
    """Skip for ``reason`` on another cluster (kind); in CI, where the bed is, fail."""
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def test_the_readme_cluster_quick_start_runs_a_job_to_succeeded(
    kube: Any, namespace: str, tmp_path: Path, operator_namespace_free: None
) -> None:
    helm_or_skip()
    if not REGISTRY:
        _skip_outside_ci(
            "the README's cluster quick start pushes to a registry; DECOR_E2E_REGISTRY is empty"
        )
    steps = quick_start(README.read_text())
    prefix = tmp_path / "prefix"
    clone = fresh_clone(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "KUBECONFIG")}  # fmt: skip
    env["DECOR_CACHE"] = str(clone_cache(tmp_path))
    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    settings = {"REGISTRY": REGISTRY, "NS": namespace, "PREFIX": str(prefix)}
    reader = Reader(clone=clone, env=env, settings=settings, prelude=steps.prelude)
    bed = reader.run('printf "%s" "$KUBECONFIG"')
    if Path(bed).resolve() != Path(kube.kubeconfig).resolve():
        _skip_outside_ci(
            f"the README's quick start is the test bed's ({bed}); KUBECONFIG is {kube.kubeconfig}"
        )
    t0 = time.monotonic()
    outputs: dict[str, str] = {}
    try:
        for command in steps.commands:
            if is_watch(command):
                outputs[command] = reader.watch_until(command, ("Running", "Succeeded"), 300)
            else:
                outputs[command] = reader.run(command)
        print(f"[quick start] the block ran in {time.monotonic() - t0:.0f}s")
        check_the_readme_path(kube, namespace, reader, prefix, clone, steps, outputs)
        stored = apply_network_policies(kube, namespace, tmp_path / "policies.yaml")
        check_policy_selects(kube, namespace, stored)
        final = wait_succeeded(kube, namespace, JOB, timeout=420)
        report(JOB, final)
        moved = seconds_between(final["startTime"], final["deadline"])
        example = yaml.safe_load((clone / EXAMPLE).read_text())
        duration_s = parse_duration_s(example["spec"]["duration"], "spec.duration")
        assert abs(moved - (duration_s + MOVE_S)) <= 1.0, (final["startTime"], final["deadline"])
        assert abs(final["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, final[
            "outcome"
        ]
        assert condition(final, "MetricsUnavailable").get("status") == "False", final
        shown = reader.run(f"kubectl dtj get -n {shlex.quote(namespace)} {JOB}")
        assert "Succeeded" in shown.split(), shown
    finally:
        delete_jobs(kube, namespace)


def check_the_readme_path(
    kube: Any, namespace: str, reader: Reader, prefix: Path, clone: Path, steps: QuickStart,
    outputs: dict[str, str],
) -> None:  # fmt: skip
    """What the block's commands did: kubectl-dtj linked under $PREFIX/bin to the clone's
    environment, the operator from the registry, the job's table shown, its deadline moved."""
    link = prefix / "bin" / "kubectl-dtj"
    assert link.is_symlink(), f"make install made no {link}"
    where = reader.run("kubectl-dtj --help >/dev/null && command -v kubectl-dtj")
    assert where.strip() == str(link), where
    imported = reader.run(
        f"{link.resolve().parent}/python -c 'import decor; print(decor.__file__)'"
    )
    assert imported.strip().startswith(str(clone)), imported
    (operator_pod, *_) = kube.core.list_namespaced_pod(
        OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/name=decor"
    ).items
    assert operator_pod.spec.containers[0].image.startswith(f"{REGISTRY}/decor/operator:"), (
        operator_pod.spec.containers[0].image
    )
    (get_command, move_command) = steps.commands[-2:]
    table = outputs[get_command]
    assert JOB in table and ("Running" in table.split() or "Succeeded" in table.split()), table
    assert "deadline ->" in outputs[move_command], outputs[move_command]
    spec = get_job(kube, namespace, JOB)["spec"]
    assert "duration" in spec and "deadline" not in spec, spec
