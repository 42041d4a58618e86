"""The control loop's pure per-period work at scale, in-process: no cluster, no API server.

The scale bed's fleet (:func:`bench.scale.measure.plan_jobs` at the 1,000-job size: 10 % GPU
jobs, deadlines of 780-960 s, kwok-sized nodes of 64 cores and 8 GPUs from
:func:`~bench.scale.measure.nodes_for`) runs under the operator's own
:class:`decor.service.loop.ControlLoop`, against the unit tests' fake cluster
(``tests/support``: :class:`RecordingKube`, whose calls cost next to nothing here, and
:class:`FakeTrainers`, trainers that follow the simulator's speed curves). The clock moves
``--advance-s`` per period, as the bed's loop runs about two periods a second, each
:data:`~decor.service.loop.PERIOD_JOBS` due jobs. After ``--warmup`` periods (every trainer
created, started and measured) it times ``--periods`` periods, in milliseconds:

* ``plan``: :func:`decor.core.planner.plan` alone (``decor_operator_plan_duration_seconds``);
* ``plan_step``: the loop's step 4 whole (the planner's nodes and quotas, then the plan);
* ``commit``: step 5 (every due job's commit, one after another), and ``commit_per_job``;
* ``period``: ``run_period`` whole (snapshot, prepare, the capacity views, plan, commit).

The fake's calls and the feeding of its objects into the view are outside every time but
``commit`` and ``period``, which include the fake's few in-memory calls.

Run: ``python -m bench.scale.period_cost [--jobs 1000] [--profile out.pstats]`` from the
repository root (it puts ``tests/`` on the path for the fakes); prints one JSON record.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import json
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from decor.api.model import format_time  # noqa: E402
from decor.core import planner  # noqa: E402
from decor.core.capacity import pod_charge  # noqa: E402
from decor.core.views import ClusterView, Key  # noqa: E402
from decor.service.config import OperatorConfig  # noqa: E402
from decor.service.loop import ControlLoop  # noqa: E402
from decor.service.operator_metrics import OperatorMetrics  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from support.fake_kube import RecordingKube, node_body  # noqa: E402
from support.fake_trainers import FakeTrainer, FakeTrainers  # noqa: E402

from bench.scale import fleet, measure  # noqa: E402

START_S = 1_800_000_000.0
NODE_CPU_CORES = 64.0
NODE_GPUS = 8
"""The bed's kwok nodes (``cluster/scale/lib.sh``)."""
PERIOD_S = 10
"""Each job's ``spec.control.periodSeconds``, as on the bed."""


class SpreadingKube(RecordingKube):
    """The fake cluster, quiet (calls are not recorded) and with a scheduler that spreads
    pods as the kube-scheduler's default scoring does: each on the node with the most room
    for it (the fake's own places each on the first node that fits)."""

    def _call(self, method: str, **arguments: Any) -> None:
        return None

    def _schedule(self, pod: dict[str, Any]) -> None:
        cpu, gpus = pod_charge(pod)
        room = {name: [cores, float(count)] for name, (cores, count) in self.nodes.items()}
        for other in self.pods.values():
            node = other["spec"].get("nodeName")
            if node in room:
                held_cpu, held_gpus = pod_charge(other)
                room[node][0] -= held_cpu
                room[node][1] -= held_gpus
        fits = [n for n, (c, g) in room.items() if cpu <= c + 1e-9 and gpus <= g + 1e-9]
        if not fits:
            return  # stays Pending; the operator's unschedulable wait reads no condition here
        node = max(sorted(fits), key=lambda n: (room[n][1] if gpus else -room[n][1], room[n][0]))
        self._pods_placed += 1
        pod["spec"]["nodeName"] = node
        pod["status"].update(
            podIP=f"10.244.{self._pods_placed // 250}.{self._pods_placed % 250}",
            conditions=[{"type": "PodScheduled", "status": "True"}],
        )


class TimedLoop(ControlLoop):
    """The operator's loop, its steps timed (milliseconds, one entry per period)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.times: dict[str, list[float]] = {}
        self.commits: list[int] = []

    def timed(self, name: str, started_s: float) -> None:
        self.times.setdefault(name, []).append((time.perf_counter() - started_s) * 1000.0)

    def run_period(self) -> float:
        started = time.perf_counter()
        wait_s = super().run_period()
        self.timed("period", started)
        return wait_s

    def _plan(self, *args: Any, **kwargs: Any) -> Mapping[str, planner.Grant] | None:
        started = time.perf_counter()
        grants = super()._plan(*args, **kwargs)
        self.timed("plan_step", started)
        return grants

    def _commit_all(self, due: list[Key], *args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        super()._commit_all(due, *args, **kwargs)
        self.timed("commit", started)
        self.commits.append(len(due))


def timed_plan(loop: TimedLoop) -> Callable[..., planner.Plan]:
    """:func:`planner.plan`, its time kept in ``loop.times['plan']``."""
    plan = planner.plan

    def timed(*args: Any, **kwargs: Any) -> planner.Plan:
        started = time.perf_counter()
        result = plan(*args, **kwargs)
        loop.timed("plan", started)
        return result

    return timed


class Fleet:
    """The fake cluster, its trainers, the view fed from it and the operator's loop."""

    def __init__(self, jobs: int, namespaces: int, seed: int, advance_s: float) -> None:
        self.now = START_S
        self.advance_s = advance_s
        profiles = json.loads((REPO / "docs/benchmarks/results.json").read_text())["profiles"]
        curves = fleet.curves_from_profiles(profiles)
        rates = {name: curve.steps_per_s for name, curve in curves.items()}
        plans = measure.plan_jobs(jobs, gpu_share=0.1, duration_s=(780.0, 960.0),
                                  target_allocation=(1.2, 3.0), rates=rates, startup_s=5.0,
                                  seed=seed)  # fmt: skip
        cpu_nodes, gpu_nodes = measure.nodes_for(plans, NODE_CPU_CORES, NODE_GPUS)
        nodes = {f"kwok-cpu-{i:03d}": (NODE_CPU_CORES, 0) for i in range(cpu_nodes)}
        nodes |= {f"kwok-gpu-{i:03d}": (NODE_CPU_CORES, NODE_GPUS) for i in range(gpu_nodes)}
        self.kube = SpreadingKube(lambda: self.now, nodes)
        self.trainers = FakeTrainers(self.kube, lambda: self.now)
        for index, p in enumerate(plans):
            body = measure.job_manifest(p, f"scale-{index % namespaces}", PERIOD_S)
            body["metadata"].update(uid=f"uid-{p.name}", generation=1,
                                    creationTimestamp=format_time(START_S))  # fmt: skip
            self.kube.add_job(body)
            trainer = FakeTrainer(p.epochs * p.steps_per_epoch, p.steps_per_epoch,
                                  curves[p.workload].steps_per_s, mode=p.mode)  # fmt: skip
            self.trainers.add(p.name, trainer)
        self.view = ClusterView()
        self.view.replace_nodes([node_body(n, *c) for n, c in sorted(nodes.items())])
        self.view.replace_pods([])
        self._fed: dict[Key, dict[str, Any]] = {}
        self._fed_jobs: dict[Key, dict[str, Any]] = {}
        config = OperatorConfig(
            instance="decor-operator-0",
            commit_workers=1,  # one after another: the pure work, not the threads' overlap
            min_period_s=1.0,
            template_policy=OperatorConfig.from_env(
                {"DECOR_ALLOWED_TOLERATION_KEYS": measure.KWOK_TOLERATION["key"]}
            ).template_policy,
        )
        self.loop = TimedLoop(self.view, kube=self.kube, config=config,  # type: ignore[arg-type]
                              operator_metrics=OperatorMetrics(CollectorRegistry()),
                              clock=lambda: self.now, read_progress=self.trainers.read)  # fmt: skip

    def period(self) -> None:
        """The clock moves, the trainers train, the view hears what changed (as the
        watches tell it), one period of the loop runs, then the fake's kubelet acts."""
        self.now += self.advance_s
        self.trainers.advance()
        _feed(self.kube.jobs, self._fed_jobs, self.view.put_job)
        _feed(self.kube.pods, self._fed, self.view.put_pod)
        self.loop.run_period()
        self.kube.tick()


def _feed(
    live: Mapping[Key, dict[str, Any]], fed: dict[Key, dict[str, Any]], put: Callable[..., None]
) -> None:
    """Put into the view each object of ``live`` that changed since it was last fed."""
    for key in [k for k in fed if k not in live]:
        put(fed.pop(key), deleted=True)
    for key, body in live.items():
        if fed.get(key) != body:
            fed[key] = copy.deepcopy(body)
            put(fed[key])


@contextmanager
def profiled(out: Path | None) -> Iterator[None]:
    """cProfile around the block when ``out`` is given: the stats written there, the top
    functions by own time printed to stderr."""
    if out is None:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(str(out))
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(30)


def percentiles(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 3), "p99": round(p99, 3)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    bed = Fleet(args.jobs, args.namespaces, args.seed, args.advance_s)
    with mock.patch.object(planner, "plan", timed_plan(bed.loop)):
        for _ in range(args.warmup):
            bed.period()
        bed.loop.times.clear()
        bed.loop.commits.clear()
        with profiled(args.profile):
            for _ in range(args.periods):
                bed.period()
    times, commits = bed.loop.times, bed.loop.commits
    per_job = [ms / n for ms, n in zip(times["commit"], commits, strict=True) if n]
    phases = Counter(str(c.status.get("phase")) for c in bed.loop.controllers.values())
    return {
        "jobs": args.jobs,
        "namespaces": args.namespaces,
        "periods": args.periods,
        "phases": dict(sorted(phases.items())),
        "commits_per_period": round(statistics.mean(commits), 1),
        **{f"{name}_ms": percentiles(ms) for name, ms in sorted(times.items())},
        "commit_per_job_ms": percentiles(per_job),
    }


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale.period_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--advance-s", type=float, default=0.5)
    parser.add_argument("--warmup", type=int, default=400, help="periods before the timed ones")
    parser.add_argument("--periods", type=int, default=60)
    parser.add_argument("--profile", type=Path, help="write cProfile stats of the timed periods")
    return parser


def main(argv: list[str] | None = None) -> int:
    print(json.dumps(run(parser().parse_args(argv)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
