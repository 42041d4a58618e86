"""The SIMULATED trainer fleet: one process that plays the kubelet's resize role and every
trainer for DECOR's pods on kwok's fake nodes of the scale test bed.

kwok makes pods on its fake nodes Running (and deletes them when asked) but has no in-place
resize, and its Stage API cannot express one: a stage sees one object, while a kubelet
answers a resize against everything else on the node (Deferred when the node is full). So
this process, for every pod labelled ``decor.dev/job`` on a node:

* answers resizes as a kubelet does: applies the trainer's new CPU in
  ``status.containerStatuses[].resources`` (and ``allocatedResources``) when the node has
  room, else sets ``PodResizePending`` (Deferred, or Infeasible above the node's size);
* trains: each pod's progress advances at the speed its applied allocation gives on a
  reference workload's measured speed curve (``--workload`` of the trainer's args;
  :mod:`fleet`), with noise; a replaced pod (GPU change, deletion) resumes at the step it
  reached (the trainer's checkpoint on SIGTERM) after a start-up delay;
* ends the pod ``Succeeded`` at its last step (the trainer exits 0);
* serves every trainer's progress on one ``/metrics`` endpoint with the reporter's metric
  names and ``namespace``/``pod`` labels, for the real Prometheus to scrape.

Run: ``python -m bench.scale.simulator --kubeconfig K --port 19100 --profiles
docs/benchmarks/results.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from decor.api import vocabulary
from decor.core import build

from bench.scale import fleet

log = logging.getLogger("decor.scale.simulator")

METRICS_PORT = 9100
"""The port named in each series' ``instance`` (the trainers' default metrics port)."""
DEFAULT_TICK_S = 0.5
"""How often trainers advance and resizes are answered."""
DEFAULT_STARTUP_S = 5.0
"""Seconds from a container's start to its first step (imports, model, checkpoint load)."""
NODE_RELIST_S = 30.0
"""Nodes are listed again this often (their capacity does not change during a run)."""
WATCH_TIMEOUT_S = 300
RETRY_S = 2.0
MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT_S = 30.0


def rfc3339(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Fleet:
    """The simulated trainers and kubelet state, driven by :meth:`tick`."""

    def __init__(
        self,
        core: Any,
        curves: Mapping[str, fleet.SpeedCurve],
        *,
        startup_s: float,
        noise: float,
        linger_s: float = 0.0,
        seed: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = core
        self.curves = curves
        self.startup_s = startup_s
        self.linger_s = linger_s
        self.noise = noise
        self.seed = seed
        self.clock = clock
        self.lock = threading.Lock()
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, tuple[float, float]] = {}
        self.trainers: dict[tuple[str, str], fleet.SimTrainer] = {}
        self.checkpoints: dict[str, float] = {}  # job uid -> steps saved
        self.finished: set[tuple[str, str]] = set()
        self.patches = 0

    # --- views fed by the watch ---------------------------------------------------------------

    def put_pod(self, pod: dict[str, Any], deleted: bool = False) -> None:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        with self.lock:
            if deleted:
                self.pods.pop(key, None)
                self._checkpoint(key, pod)
            else:
                self.pods[key] = pod
                if meta.get("deletionTimestamp"):
                    self._checkpoint(key, pod)

    def replace_pods(self, pods: list[dict[str, Any]]) -> None:
        with self.lock:
            self.pods = {
                (str(p["metadata"]["namespace"]), str(p["metadata"]["name"])): p for p in pods
            }

    def _checkpoint(self, key: tuple[str, str], pod: Mapping[str, Any]) -> None:
        """The trainer saves its exact step on SIGTERM; the next pod of the job resumes it."""
        trainer = self.trainers.pop(key, None)
        if trainer is not None:
            self.checkpoints[_job_uid(pod)] = float(trainer.whole_steps)

    # --- one tick -------------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.clock()
        with self.lock:
            pods = list(self.pods.values())
        on_nodes = [p for p in pods if (p.get("spec") or {}).get("nodeName") in self.nodes]
        held = fleet.held_by_node(on_nodes)  # one pass: each resize is O(1), not O(pods)
        for pod in on_nodes:
            try:
                self._tick_pod(pod, held, now)
            except Exception as exc:  # noqa: BLE001 - one pod must not stop the fleet
                log.warning("pod %s: %s", pod["metadata"]["name"], exc)

    def _tick_pod(self, pod: dict[str, Any], held: dict[str, float], now: float) -> None:
        meta = pod["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        status = pod.get("status") or {}
        if meta.get("deletionTimestamp") or key in self.finished:
            return
        if status.get("phase") != "Running" or not build.container_running(
            pod, str(fleet.trainer_container(pod).get("name"))
        ):
            return
        gpu = fleet.gpus_of(pod) > 0
        allocation = fleet.gpus_of(pod) if gpu else self._kubelet_cpu(pod, held, now)
        if allocation is None:
            return
        with self.lock:
            if key not in self.pods:  # deleted meanwhile: its checkpoint is already saved
                return
            trainer = self.trainers.get(key)
            if trainer is None:
                trainer = self._new_trainer(pod, key, now)
                self.trainers[key] = trainer
        curve = self.curves.get("gpu" if gpu else fleet.workload_of(pod))
        if curve is None:
            curve = next(c for c in self.curves.values() if c.mode == "cpu")
        with self.lock:
            trainer.instance = f"{(pod.get('status') or {}).get('podIP') or ''}:{METRICS_PORT}"
            trainer.advance(now, curve.steps_per_s(allocation), self.noise)
        if trainer.finished_s is not None and now >= trainer.finished_s + self.linger_s:
            exited_s = trainer.finished_s + self.linger_s
            patch = fleet.completed_patch(
                pod, rfc3339(exited_s), trainer.whole_steps, trainer.steps_planned
            )
            self._patch(pod, patch)
            self.finished.add(key)

    def _new_trainer(self, pod: Mapping[str, Any], key: tuple[str, str], now: float) -> Any:
        planned, per_epoch = fleet.planned_steps(pod)
        resumed = self.checkpoints.get(_job_uid(pod), 0.0)
        rng = random.Random(f"{self.seed}/{key[0]}/{key[1]}")
        return fleet.SimTrainer(
            namespace=key[0],
            pod=key[1],
            steps_planned=max(1, planned),
            steps_per_epoch=per_epoch,
            steps_done=resumed,
            ready_s=now + self.startup_s,
            last_tick_s=now,
            rng=rng,
        )

    def _kubelet_cpu(self, pod: dict[str, Any], held: dict[str, float], now: float) -> float | None:
        """The simulated kubelet's part: the CPU applied to the trainer after answering any
        resize (``held``: cores admitted per node, kept current as resizes land)."""
        desired = fleet.desired_cpu_cores(pod)
        applied = fleet.applied_cpu_cores(pod)
        if applied is None:  # first sight: report what the container started with
            self._patch(pod, fleet.applied_patch(pod))
            return desired
        if abs(desired - applied) < 1e-6:
            return applied
        node = str(pod["spec"]["nodeName"])
        node_cores, _ = self.nodes[node]
        others = held.get(node, 0.0) - applied  # everything on the node but this trainer
        verdict = fleet.resize_verdict(desired, applied, node_cores, others)
        if verdict == fleet.VERDICT_APPLY:
            self._patch(pod, fleet.applied_patch(pod))
            held[node] = others + desired
            return desired
        message = (
            f"Node didn't have enough capacity: cpu, requested: {round(desired * 1000)}m, "
            f"capacity: {round(node_cores * 1000)}m (SIMULATED kubelet)"
        )
        if fleet.resize_condition(pod) != (verdict, message):
            self._patch(pod, fleet.pending_patch(pod, verdict, message, rfc3339(now)))
        return applied

    def _patch(self, pod: dict[str, Any], body: dict[str, Any]) -> None:
        meta = pod["metadata"]
        response = self.core.patch_namespaced_pod_status(
            meta["name"],
            meta["namespace"],
            body,
            _content_type=MERGE_PATCH,
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT_S,
        )
        updated = json.loads(response.data)
        self.patches += 1
        self.put_pod(updated)  # act on what was written even before the watch delivers it

    def metrics_text(self) -> str:
        with self.lock:
            return fleet.exposition(list(self.trainers.values()))


def _job_uid(pod: Mapping[str, Any]) -> str:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or [{}]
    return str(owners[0].get("uid") or (pod.get("metadata") or {}).get("labels", {}))


# ---------------------------------------------------------------------------------------------
# I/O: watches and the /metrics endpoint


def watch_pods(sim: Fleet, core: Any, stopped: threading.Event) -> None:
    from kubernetes import watch

    selector = vocabulary.LABEL_JOB
    while not stopped.is_set():
        try:
            listed = core.list_pod_for_all_namespaces(
                label_selector=selector, _preload_content=False, _request_timeout=60
            )
            body = json.loads(listed.data)
            sim.replace_pods(list(body.get("items") or []))
            version = body["metadata"]["resourceVersion"]
            while not stopped.is_set():
                stream = watch.Watch().stream(
                    core.list_pod_for_all_namespaces,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=WATCH_TIMEOUT_S,
                    allow_watch_bookmarks=True,
                    _request_timeout=WATCH_TIMEOUT_S + 30,
                )
                for event in stream:
                    raw = event.get("raw_object") or {}
                    if event.get("type") == "ERROR":
                        raise RuntimeError(raw.get("message"))
                    version = (raw.get("metadata") or {}).get("resourceVersion", version)
                    if event.get("type") != "BOOKMARK":
                        sim.put_pod(raw, deleted=event.get("type") == "DELETED")
        except Exception as exc:  # noqa: BLE001 - keep watching
            log.warning("pod watch: %s; listing again in %gs", exc, RETRY_S)
            stopped.wait(RETRY_S)


def list_nodes(core: Any) -> dict[str, tuple[float, float]]:
    body = json.loads(core.list_node(_preload_content=False, _request_timeout=60).data)
    return {n["metadata"]["name"]: fleet.node_capacity(n) for n in body.get("items") or []}


def serve_metrics(sim: Fleet, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            data = sim.metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=args.kubeconfig)
    core = client.CoreV1Api(api_client)
    profiles = json.loads(Path(args.profiles).read_text())["profiles"]
    curves = fleet.curves_from_profiles(profiles)
    sim = Fleet(
        core,
        curves,
        startup_s=args.startup_s,
        noise=args.noise,
        seed=args.seed,
        linger_s=args.linger_s,
    )
    sim.nodes = list_nodes(core)
    stopped = threading.Event()
    threading.Thread(target=watch_pods, args=(sim, core, stopped), daemon=True).start()
    server = serve_metrics(sim, args.port)
    log.info(
        "SIMULATED trainer fleet: %d nodes, curves %s, /metrics on 127.0.0.1:%d",
        len(sim.nodes),
        ", ".join(sorted(curves)),
        args.port,
    )
    last_nodes_s = time.monotonic()
    try:
        while True:
            started = time.monotonic()
            sim.tick()
            if started - last_nodes_s > NODE_RELIST_S:
                sim.nodes = list_nodes(core)
                last_nodes_s = started
            time.sleep(max(0.0, args.tick_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return 0
    finally:
        stopped.set()
        server.shutdown()


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench.scale.simulator``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale.simulator", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, required=True, help="port of /metrics on 127.0.0.1")
    parser.add_argument(
        "--profiles",
        default=str(Path(__file__).resolve().parents[2] / "docs/benchmarks/results.json"),
        help="the benchmark's results.json whose measured profiles give the speed curves",
    )
    parser.add_argument("--tick-s", type=float, default=DEFAULT_TICK_S)
    parser.add_argument("--startup-s", type=float, default=DEFAULT_STARTUP_S)
    parser.add_argument("--noise", type=float, default=fleet.DEFAULT_NOISE)
    parser.add_argument(
        "--linger-s",
        type=float,
        default=0.0,
        help="seconds a trainer keeps serving metrics after its last step before it exits "
        "(decor_trainer's --metrics-linger-s; default 0 like it)",
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser


if __name__ == "__main__":
    sys.exit(main())
