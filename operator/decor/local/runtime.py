"""The local runtime: run DeadlineTrainingJobs' trainers on this machine, no cluster.

The trainer command of each job's first container runs as a child process inside its own CPU
cgroup (see cpulimit). Every control period the runtime scrapes each trainer's /metrics on
127.0.0.1, calls the same ``control.decide`` the operator uses, and writes the new CPU quota.
The job's period is the operator's: its law's settings and start, the best-effort rule and
its demand are built by ``decor.core.jobperiod``, as the operator builds them.

One job (``run_local``) is controlled by its law alone, as it always was. Several jobs
(``run_local_many``) share the machine the way jobs share a cluster: every period each job's
law says what it needs, the operator's pure planner (``planner.plan``) decides who gets what
on one node (this machine's cores, or ``max_cores``), each cgroup quota is set to its grant,
and the law's state follows what was granted (``control.follow_grant``). A job the planner
queues does not start its trainer until it is admitted; one it displaces (``Preempted``) is
paused (SIGSTOP) until it is admitted again.

A deadline can be moved while a job runs (or waits) with ``decor deadline NAME ...``, which
drops a request file into the job's state directory; the loop picks it up within one period.

Each job keeps the operator's ``status.conditions``, built by the same pure functions
(``decor.core.build``, ``jobperiod.conditions_for_verdict``) at the same moments: arrival,
a moved deadline, each decision, a stall, each verdict, the end. The summary gives them as
``status_conditions``, beside ``conditions``, the names the job reached.

Everything a job produces goes to its output directory: ``trace.json`` (summary + one row
per period, rewritten as the run goes so a crash keeps it), ``trace.png`` and
``trainer.log`` (the trainer's stdout and stderr).
"""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from decor_trainer import contract

from decor.adapter.scrape import scrape_progress
from decor.api import vocabulary
from decor.api.model import JobSpec, ManifestError, format_time, parse_duration_s, parse_time
from decor.core import build, capacity, control, jobperiod, planner
from decor.core.progress import MetricsError, observation_from_progress
from decor.local.cpulimit import CpuLimiter, make_limiter
from decor.local.trace import TraceRow, plot_trace, write_trace

METRICS_HOST = "127.0.0.1"
STOP_GRACE_S = 10.0  # how long a trainer gets to checkpoint after SIGTERM
# The trainer keeps /metrics up after its last step until it has served it once (at most this
# long), so that the finish time is the last step's own time stamp, not the process's exit.
METRICS_LINGER_S = 10.0
# After its last planned step a trainer may still save its model: it gets this long to exit
# by itself before it is stopped.
AFTER_LAST_STEP_GRACE_S = 120.0
DEADLINE_REQUEST = "deadline-request.json"
RUN_RECORD = "run.json"
LOCAL_NODE = "local"  # the planner's name for this machine
ALLOCATION_EPSILON = 1e-9  # cores: smaller differences are no change
WAIT_SLICE_S = 0.05  # without pidfds, how often the loop looks for a trainer that exited
TRACE_WRITE_EVERY = 10  # periods between rewrites of trace.json while a job runs
METRICS_GRACE_PERIODS = 10  # periods without metrics before the runtime warns
PORT_ATTEMPTS = 20  # tries at a free port not promised to another trainer of the run

PlanFn = Callable[
    [Sequence[planner.Demand], Sequence[capacity.Node], float, planner.PlannerSettings],
    planner.Plan,
]
"""The planner's signature (``planner.plan``); tests may inject another."""


def state_dir() -> Path:
    """Where running local jobs register (``DECOR_STATE_DIR`` overrides)."""
    base = os.environ.get("DECOR_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "decor", "local"
    )
    return Path(base)


@dataclass
class RunSummary:
    """How a local run ended. Times in seconds since the job started (arrived)."""

    name: str
    policy: str
    exit_code: int
    complete: bool
    deadline_s: float
    finished_s: float | None
    deviation_pct: float | None  # signed, % of the (final) deadline duration; + = late
    core_seconds: float
    actuations: int
    min_cores: float
    max_cores: float
    limiter: str
    out_dir: str
    error: str | None = None
    # Every name the job reached: each condition the law's decisions named (Starting for a
    # law still measuring), each verdict of the planner, and Stalled (sorted, once each).
    conditions: list[str] = field(default_factory=list)
    planner: str | None = None  # the planner's policy when several jobs shared the machine
    queued_s: float = 0.0  # seconds between arrival and the trainer's start (planner's queue)
    start_cores: float = 0.0  # the allocation the law started the job at
    # The job's conditions at the end, as the operator writes status.conditions: dicts of
    # type, status, reason, message and lastTransitionTime (RFC 3339).
    status_conditions: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LocalOptions:
    out_dir: Path  # one job: its folder; several: one subfolder per job name
    policy: str | None = None  # override spec.control.policy
    max_cores: float | None = None  # cap spec.resources.max and the machine (default: all CPUs)
    display: Callable[[str, bool], None] | None = None  # (line, final) live progress sink
    extra_env: dict[str, str] = field(default_factory=dict)
    # Several jobs: the live view, one line per job, redrawn every period (None: each line
    # goes to ``display`` as a progress line).
    board: Callable[[list[str]], None] | None = None
    planner_policy: str = planner.POLICY_DECOR


def free_port(preferred: int, taken: Collection[int] = ()) -> int:
    """``preferred`` if it is free on 127.0.0.1 and not in ``taken`` (ports promised to other
    trainers of this run), else any other free port."""
    for port in [preferred] + [0] * PORT_ATTEMPTS:
        if port in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind((METRICS_HOST, port))
                found = int(sock.getsockname()[1])
            except OSError:
                continue
        if found not in taken:
            return found
    raise RuntimeError("no free TCP port on 127.0.0.1")


def trainer_command(job: JobSpec) -> list[str]:
    container = job.trainer_container
    command = list(container.get("command") or []) + list(container.get("args") or [])
    if not command:
        raise ManifestError(
            "spec.template.spec.containers[0].command",
            "the local runtime needs a command (it does not run images)",
        )
    return command


def trainer_env(
    job: JobSpec, port: int, extra: dict[str, str], checkpoint_dir: Path
) -> dict[str, str]:
    """The trainer's environment; without spec.checkpoint.path it checkpoints into the run's folder."""
    env = dict(os.environ)
    for item in job.trainer_container.get("env") or []:
        if isinstance(item, dict) and "name" in item and "value" in item:
            env[str(item["name"])] = str(item["value"])
    env.update(
        {
            contract.ENV_EPOCHS: str(job.epochs),
            contract.ENV_METRICS_PORT: str(port),
            contract.ENV_METRICS_ADDRESS: METRICS_HOST,
            contract.ENV_METRICS_LINGER_S: str(METRICS_LINGER_S),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop(contract.ENV_PROGRESS_FILE, None)  # locally the trainer serves /metrics itself
    # `python3` in the job's command means this environment's Python (it has the trainer).
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    if job.steps_per_epoch is not None:
        env[contract.ENV_STEPS_PER_EPOCH] = str(job.steps_per_epoch)
    env[contract.ENV_CHECKPOINT_DIR] = job.checkpoint.path or str(checkpoint_dir)
    env.update(extra)
    return env


def request_deadline(
    name: str, *, deadline: str | None = None, duration: str | None = None
) -> dict[str, Any]:
    """Ask the running local job ``name`` to move its deadline (used by ``decor deadline``).

    ``deadline`` is an RFC 3339 time; ``duration`` is relative to the job's start (like
    spec.duration). Returns the run record of the job. Raises LookupError if none runs.
    """
    folder = state_dir() / name
    record_path = folder / RUN_RECORD
    if not record_path.exists():
        raise LookupError(f"no local job named {name!r} is running (looked in {folder})")
    record = json.loads(record_path.read_text())
    if not _alive(int(record["pid"])):
        raise LookupError(f"local job {name!r} is not running any more (pid {record['pid']})")
    if (deadline is None) == (duration is None):
        raise ValueError("give exactly one of a deadline time or a duration")
    if deadline is not None:
        deadline_s = parse_time(deadline, "--deadline").timestamp()
    else:
        deadline_s = float(record["start_s"]) + parse_duration_s(duration, "--duration")
    tmp = folder / (DEADLINE_REQUEST + ".tmp")
    tmp.write_text(json.dumps({"deadline_s": deadline_s}))
    tmp.replace(folder / DEADLINE_REQUEST)
    return record


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _take_deadline_request(folder: Path) -> float | None:
    path = folder / DEADLINE_REQUEST
    try:
        value = float(json.loads(path.read_text())["deadline_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    path.unlink(missing_ok=True)
    return value


def run_local(job: JobSpec, options: LocalOptions) -> RunSummary:
    """Run ``job`` to completion (or failure) on this machine and summarise it.

    The job's law alone decides its CPU (no planner: nothing else shares the machine);
    its files go to ``options.out_dir``.
    """
    runtime = _Runtime([_LocalJob(job, options, options.out_dir, 0.0, multi=False)], options)
    return runtime.run(plan_fn=None)[0]


def run_local_many(
    jobs: Sequence[JobSpec],
    options: LocalOptions,
    *,
    arrivals_s: Sequence[float] | None = None,
    plan_fn: PlanFn | None = None,
) -> list[RunSummary]:
    """Run several jobs at once on this machine under the planner; one summary per job.

    ``arrivals_s``: seconds after the call at which each job arrives (default: all at once);
    a job's ``spec.duration`` counts from its arrival. Job ``NAME`` writes to
    ``options.out_dir / NAME``. ``plan_fn`` defaults to ``planner.plan``.
    """
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"two jobs share a name ({', '.join(sorted(names))}): names must differ")
    delays = list(arrivals_s) if arrivals_s is not None else [0.0] * len(jobs)
    if len(delays) != len(jobs) or any(d < 0 for d in delays):
        raise ValueError("give one arrival time (seconds, >= 0) per job")
    ports: set[int] = set()
    members = [
        _LocalJob(job, options, options.out_dir / job.name, delay, multi=True, ports=ports)
        for job, delay in zip(jobs, delays, strict=True)
    ]
    return _Runtime(members, options).run(plan_fn=plan_fn or _default_plan)


def _default_plan(
    demands: Sequence[planner.Demand],
    nodes: Sequence[capacity.Node],
    now_s: float,
    settings: planner.PlannerSettings,
) -> planner.Plan:
    return planner.plan(demands, nodes, now_s, settings)


def machine_cores() -> float:
    """CPUs this process may run on."""
    return float(len(os.sched_getaffinity(0)))


class _LocalJob:
    """One job of a local run: its trainer, cgroup, law and trace."""

    def __init__(
        self,
        job: JobSpec,
        options: LocalOptions,
        out: Path,
        arrival_s: float,
        *,
        multi: bool,
        ports: set[int] | None = None,
    ) -> None:
        policy = _local_policy(job, options)
        self.job, self.options, self.out, self.multi = job, options, out, multi
        self.arrival_delay_s = arrival_s
        self.policy = policy
        self.cpus = machine_cores()
        self.max_cores = min(job.resources.max, options.max_cores or self.cpus, self.cpus)
        self.registry = state_dir() / job.name
        self.ports = ports if ports is not None else set()  # the run's trainers' ports
        self.port = 0  # chosen when the trainer starts (a queued job holds none)
        self.url = ""
        self.command = trainer_command(job)
        self.display = options.display or (lambda line, final: None)
        self.limiter: CpuLimiter | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.arrived = False
        self.done = False
        self.paused = False
        self.start_s = 0.0
        self.next_tick_s = math.inf
        self.trainer_started_s: float | None = None
        self.settings: control.Settings | None = None
        self.state: control.State | None = None
        self.applied = 0.0
        self.start_cores = 0.0
        self.rows: list[TraceRow] = []
        self.conditions: set[str] = set()  # the names the summary lists (RunSummary)
        self.status_conditions: list[dict[str, Any]] = []  # the operator's status.conditions
        self.metrics_reason: str | None = None  # why the last scrape read no progress
        self.actuations = 0
        self.core_seconds = 0.0
        self.last_tick = 0.0
        self.last_progress: Any = None
        self.metrics_warned = False
        self.steps = jobperiod.StepWatch()  # when the trainer's steps last moved
        self.exit_code: int | None = None
        self.last_step_seen_s: float | None = None  # when progress first showed every step
        self.error: str | None = None
        self.verdict: str | None = None
        self.grant: planner.Grant | None = None
        self.obs: control.Observation | None = None
        self.decision: control.Decision | None = None
        self.base_state: control.State | None = None
        self.demand: planner.Demand | None = None
        self.line = f"arrives {arrival_s:.0f}s after the run starts"
        self.result: RunSummary | None = None

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def key(self) -> str:
        return self.job.name

    def say(self, message: str) -> None:
        """A line above the live view (prefixed with the job's name when several run)."""
        self.display(f"{self.job.name}: {message}" if self.multi else message, True)

    def prepare_folders(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        if not self.job.checkpoint.path:  # the run's own checkpoint: a new run starts at 0
            shutil.rmtree(self.out / "checkpoint", ignore_errors=True)
        self.registry.mkdir(parents=True, exist_ok=True)
        (self.registry / DEADLINE_REQUEST).unlink(missing_ok=True)
        self.limiter = make_limiter(f"decor-{self.job.name}")
        self.say(self.limiter.note)

    def arrive(self, now: float) -> None:
        """The job exists from ``now``: its deadline clock starts; it may still wait."""
        self.arrived = True
        self.start_s = now
        self.settings = jobperiod.law_settings(
            self.job, now, max_allocation=self.max_cores, policy=self.policy
        )
        self.state = jobperiod.law_start(self.job, self.settings, now)
        self.start_cores = self.state.allocation
        self.status_conditions = build.conditions_at_admission(
            jobperiod.deadline_passed(self.job, self.settings, now), now_s=now
        )
        self._write_record()

    def start_trainer(self, now: float, allocation: float | None = None) -> None:
        """Start the trainer inside its cgroup at ``allocation`` (default: the law's)."""
        assert self.state is not None and self.limiter is not None
        if allocation is not None and abs(allocation - self.state.allocation) > ALLOCATION_EPSILON:
            self.state = replace(self.state, allocation=allocation)
        self.applied = self.limiter.apply(self.state.allocation)
        self.port = free_port(self.job.metrics.port, self.ports)
        self.ports.add(self.port)
        self.url = f"http://{METRICS_HOST}:{self.port}{self.job.metrics.path}"
        with open(self.out / "trainer.log", "wb") as log:
            self.child = subprocess.Popen(
                self.command,
                env=trainer_env(
                    self.job, self.port, self.options.extra_env, self.out / "checkpoint"
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=self.limiter.preexec,  # noqa: PLW1509 (join the cgroup before any thread starts)
                start_new_session=True,
            )
        self.limiter.attach(self.child.pid)
        self.applied = self.limiter.apply(self.state.allocation)
        self.trainer_started_s = now
        self.last_tick = now
        self.line = f"starting the trainer at {self.applied:g} cores"
        self._write_record()

    def _write_record(self) -> None:
        child = self.child.pid if self.child is not None else None
        record = {
            "pid": os.getpid(),
            "child": child,
            "start_s": self.start_s,
            "out_dir": str(self.out),
        }
        (self.registry / RUN_RECORD).write_text(json.dumps(record))

    # --- one period, before the planner ---------------------------------------------------

    def prepare(self, now: float) -> planner.Demand | None:
        """Read progress and let the law decide; the job's demand (None: it has ended)."""
        assert self.settings is not None and self.state is not None
        self.obs, self.decision, self.base_state = None, None, self.state
        running = self.child is not None and not self.paused
        if running:
            self.core_seconds += min(self.applied, self.cpus) * (now - self.last_tick)
        self.last_tick = now
        moved = _take_deadline_request(self.registry)
        if moved is not None:
            self._move_deadline(moved, now)
        if not running:
            return self._demand(now, need=None, current=0.0)
        assert self.child is not None
        self.exit_code = self.child.poll()
        try:
            progress = scrape_progress(self.url)
            self.last_progress = progress
            self.obs = observation_from_progress(progress, now, self.applied)
            self.metrics_warned = False
            self.metrics_reason = None
            self._watch_steps(self.obs.steps_done, now)
        except MetricsError as exc:
            self.exit_code = self.child.poll()  # a trainer that just finished closes its endpoint
            self.metrics_reason = str(exc)
            started_s = self.trainer_started_s or self.start_s
            if (
                self.exit_code is None
                and not self.metrics_warned
                and now - started_s > METRICS_GRACE_PERIODS * self.settings.period_s
            ):
                self.say(f"warning: {exc}; holding {self.applied:g} cores")
                self.metrics_warned = True
        if self.exit_code is not None:
            self.finish(now)
            return None
        decision = control.decide(self.state, self.obs, self.settings, now)
        if self.job.best_effort:
            decision = jobperiod.best_effort_decision(decision, self.settings, self.obs is not None)
        self.decision = decision
        return self._demand(now, need=decision.allocation, current=self.applied)

    def _move_deadline(self, deadline_s: float, now: float) -> None:
        """``decor deadline``: the law aims at ``deadline_s`` (Unix s) from now on, and the
        conditions say whether it had already passed (``build.conditions_for_deadline``)."""
        assert self.settings is not None
        self.settings = replace(self.settings, deadline_s=deadline_s)
        self.say(
            f"deadline moved to {format_time(deadline_s)} "
            f"({deadline_s - self.start_s:.0f}s after start)"
        )
        self.status_conditions = build.conditions_for_deadline(
            self.status_conditions, self.deadline_s <= now, now_s=now
        )

    def _watch_steps(self, steps_done: float, now: float) -> None:
        """Stalled, as on Kubernetes: the trainer runs but its steps have not moved for
        ``jobperiod.STALL_TIMEOUT_S`` (``build.conditions_for_stall``; a warning line when it
        turns so)."""
        self.steps = self.steps.seen(steps_done, now)
        still_s = self.steps.still_for_s(now)
        before = self.status_conditions
        self.status_conditions = build.conditions_for_stall(
            before, still_s, jobperiod.STALL_TIMEOUT_S, now_s=now
        )
        if build.became_true(before, self.status_conditions, vocabulary.CONDITION_STALLED):
            self.say(f"warning: {jobperiod.stalled_message(still_s)}")
            self.conditions.add(vocabulary.CONDITION_STALLED)

    @property
    def stalled(self) -> bool:
        """Whether the job's Stalled condition is True."""
        return build.condition_is_true(self.status_conditions, vocabulary.CONDITION_STALLED)

    def _demand(self, now: float, *, need: float | None, current: float) -> planner.Demand:
        """What the planner sees of this job: the operator's demand (``jobperiod.job_demand``)
        on this machine's one node. ``need`` None: the trainer does not run (the law's
        allocation, or what its speed curve or ``spec.estimate`` needs by the deadline)."""
        assert self.settings is not None and self.state is not None
        state = self.decision.state if self.decision is not None else self.state
        starting = self.child is None or self.paused
        self.demand = jobperiod.job_demand(
            self.job,
            self.settings,
            state,
            now,
            key=self.key,
            need=need,
            starting=starting,
            remaining=self.steps_remaining(),
            current=current,
            arrival_s=self.start_s,
            admitted=jobperiod.admitted(starting, self.verdict),
            node=LOCAL_NODE if self.child is not None else None,
        )
        return self.demand

    def steps_remaining(self) -> float:
        """Mini-batches left: from the latest sample, else the manifest's plan when it has one."""
        last = self.last_progress
        if last is not None:
            return jobperiod.steps_remaining(self.obs, last.steps_done, last.steps_planned)
        return jobperiod.steps_remaining(self.obs, 0.0, self.job.planned_steps)

    @property
    def deadline_s(self) -> float:
        """The job's deadline (Unix s; moved or not); infinite for a best-effort job (its law
        plans over a horizon instead: ``jobperiod.law_deadline_s``)."""
        assert self.settings is not None
        return math.inf if self.job.best_effort else self.settings.deadline_s

    # --- one period, after the planner ----------------------------------------------------

    def commit(self, grant: planner.Grant | None, now: float) -> None:
        """Act on the planner's grant (None: no planner, the law's need is granted)."""
        assert self.settings is not None and self.state is not None
        self._note_verdict(grant, now)
        if self.child is None or self.paused:
            if grant is None or (
                grant.verdict in jobperiod.RUNNING_VERDICTS and grant.allocation > 0
            ):
                allocation = None if grant is None else grant.allocation
                if self.child is None:
                    self.start_trainer(now, allocation)
                else:
                    self._resume(allocation)
            else:
                self.rows.append(
                    _waiting_row(now, self.start_s, self.deadline_s, self.state, grant)
                )
                self.line = self._waiting_line()
            self._maybe_write_trace()
            return
        assert self.decision is not None and self.base_state is not None
        if grant is not None and grant.verdict == vocabulary.VERDICT_PREEMPTED:
            self._pause(now)
            self.rows.append(_waiting_row(now, self.start_s, self.deadline_s, self.state, grant))
            self.line = self._waiting_line()
            self._maybe_write_trace()
            return
        decision = self.decision
        if grant is not None:
            decision = control.follow_grant(
                decision, grant.allocation, self.base_state, self.settings, now
            )
            if self.job.best_effort:
                decision = jobperiod.best_effort_followed(
                    decision, self.decision, decision.allocation, self.settings.max_allocation
                )
        self.state = decision.state
        self._note_decision(decision, now)
        row = _row(now, self.start_s, self.deadline_s, self.obs, self.applied, self.decision)
        if grant is not None:
            row = replace(row, granted=decision.allocation, verdict=grant.verdict)
        self.rows.append(row)
        if abs(decision.allocation - self.applied) > ALLOCATION_EPSILON:
            assert self.limiter is not None
            self.applied = self.limiter.apply(decision.allocation)
            self.actuations += 1
        self.line = _status_line(row, self.settings, self.start_s)
        if not self.multi:
            self.display(self.line, False)
        self._maybe_write_trace()
        if self.obs is not None and self.obs.complete:
            self._end_after_last_step(now)

    def _end_after_last_step(self, now: float) -> None:
        """Every planned step is done. What the trainer does after its last step (save its
        model, serve its final progress once) runs to its end: the job ends when the trainer
        exits, or it is stopped after ``AFTER_LAST_STEP_GRACE_S``. (Stopping it at once
        killed a user's loop in the middle of saving its model.)"""
        assert self.child is not None
        if self.last_step_seen_s is None:
            self.last_step_seen_s = now
        self.exit_code = self.child.poll()
        if self.exit_code is None and now - self.last_step_seen_s < AFTER_LAST_STEP_GRACE_S:
            self.line = f"all steps done; waiting for the trainer to exit ({self.line})"
            return
        self.finish(now)

    def enforce(self, grant: planner.Grant | None, now: float) -> None:
        """Between its own periods, a running job gives back at once what the planner moved
        to a job that was due (the machine is never promised twice)."""
        if grant is None or self.child is None or self.paused or self.state is None:
            return
        assert self.settings is not None and self.limiter is not None
        if grant.verdict == vocabulary.VERDICT_PREEMPTED:
            self._note_verdict(grant, now)
            self._pause(now)
            self.line = self._waiting_line()
        elif grant.allocation < self.applied - ALLOCATION_EPSILON:
            granted = control.clamp(grant.allocation, self.settings)
            self.state = replace(self.state, allocation=granted, last_change_s=now)
            self.applied = self.limiter.apply(granted)
            self.actuations += 1

    def _note_decision(self, decision: control.Decision, now: float) -> None:
        """The conditions after the law's decision (followed to the grant), as the operator
        sets them: ``build.conditions_for_decision``, and DeadlineMissed once the deadline
        passes with no progress read. A sample that shows every step done is the
        completion's (:meth:`finish`), as on Kubernetes, where no decision follows it."""
        self.conditions.add(decision.condition)
        if self.obs is not None and self.obs.complete:
            return
        message = decision.message
        if self.obs is None:
            message = jobperiod.no_progress_message(self.metrics_reason, decision.allocation)
        conditions = build.conditions_for_decision(
            self.status_conditions,
            decision.condition,
            message,
            now_s=now,
            deadline_was_past=build.deadline_was_past(self.status_conditions),
        )
        if self.obs is None:
            conditions = build.conditions_for_unread_progress(
                conditions, self.deadline_s, best_effort=self.job.best_effort, now_s=now
            )
        self.status_conditions = conditions

    def _note_verdict(self, grant: planner.Grant | None, now: float) -> None:
        if grant is None:
            return
        before, self.verdict, self.grant = self.verdict, grant.verdict, grant
        self.conditions.add(grant.verdict)
        self.status_conditions = jobperiod.conditions_for_verdict(
            self.status_conditions, grant, now_s=now
        )
        line = _verdict_line(before, grant, now, self.start_s)
        if line is not None:
            self.say(line)

    def _reason(self, grant: planner.Grant) -> str:
        return jobperiod.verdict_message(grant, self.start_s)

    def _waiting_line(self) -> str:
        grant = self.grant
        word = "PAUSED" if self.paused else "QUEUED"
        return f"{word}: {self._reason(grant)}" if grant is not None else word

    def _pause(self, now: float) -> None:
        """Displaced: stop the trainer's processes where they are (SIGSTOP) until admitted."""
        assert self.child is not None and self.state is not None and self.settings is not None
        try:
            os.killpg(self.child.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        self.paused = True

    def _resume(self, allocation: float | None) -> None:
        assert self.child is not None and self.state is not None and self.limiter is not None
        if allocation is not None:
            self.state = replace(self.state, allocation=allocation)
        self.applied = self.limiter.apply(self.state.allocation)
        self.actuations += 1
        try:
            os.killpg(self.child.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.paused = False
        self.steps = jobperiod.StepWatch()  # the time it was paused is no stall
        self.line = f"resumed at {self.applied:g} cores"

    def _maybe_write_trace(self) -> None:
        if self.rows and len(self.rows) % TRACE_WRITE_EVERY == 0:
            write_trace(self.rows, self.summary(None, -1, None).to_dict(), self.out / "trace.json")

    # --- the end --------------------------------------------------------------------------

    def interrupt(self) -> None:
        self.error = "interrupted"
        if self.child is not None:
            _stop(self.child, paused=self.paused)
            self.exit_code = self.child.returncode if self.child.returncode is not None else 130
        else:
            self.exit_code = 130

    def _note_end(self, finished_s: float | None, error: str | None, now: float) -> None:
        """The conditions of a job that ended (``finished_s``: seconds after its start, None
        if it did not finish every step): complete once every step is done, as on
        Kubernetes, where the sample showing them done completes the job whatever the
        trainer does after it (``build.conditions_for_completion``); else given up on
        (``build.conditions_for_failure``, with the error's first line)."""
        if finished_s is not None:
            self.status_conditions = build.conditions_for_completion(
                self.status_conditions, self.start_s + finished_s, self.deadline_s, now_s=now
            )
        elif self.settings is not None:  # a job that never arrived has no conditions
            why = (error or "failed").splitlines()[0]
            self.status_conditions = build.conditions_for_failure(
                self.status_conditions, why, now_s=now
            )

    def summary(self, finished_s: float | None, code: int, err: str | None) -> RunSummary:
        settings = self.settings
        deadline_rel = (self.deadline_s - self.start_s) if settings is not None else 0.0
        deviation = None
        if finished_s is not None and 0 < deadline_rel < math.inf:
            deviation = 100.0 * (finished_s - deadline_rel) / deadline_rel
        started = self.trainer_started_s
        return RunSummary(
            name=self.job.name,
            policy=self.policy,
            exit_code=code,
            complete=finished_s is not None,
            deadline_s=deadline_rel,
            finished_s=finished_s,
            deviation_pct=deviation,
            core_seconds=self.core_seconds,
            actuations=self.actuations,
            min_cores=settings.min_allocation
            if settings
            else min(self.job.resources.min, self.max_cores),
            max_cores=settings.max_allocation if settings else self.max_cores,
            limiter=self.limiter.kind if self.limiter is not None else "none",
            out_dir=str(self.out),
            error=err,
            conditions=sorted(self.conditions),
            planner=self.options.planner_policy if self.multi else None,
            queued_s=0.0 if started is None or not self.multi else started - self.start_s,
            start_cores=self.start_cores,
            status_conditions=[dict(c) for c in self.status_conditions],
        )

    def finish(self, now: float | None = None) -> RunSummary:
        """Stop what still runs, release the cgroup, write the trace and plot; the summary.
        ``now``: when the job ended (Unix s; default: the clock)."""
        if self.result is not None:
            return self.result
        now = time.time() if now is None else now
        self.done = True
        if self.child is not None and self.child.poll() is None:
            _stop(self.child, paused=self.paused)
        if self.limiter is not None:
            self.limiter.close()
        (self.registry / RUN_RECORD).unlink(missing_ok=True)
        if self.exit_code is None:
            self.exit_code = self.child.returncode if self.child is not None else 130
        if self.error is None and self.child is None:
            self.error = "never started: " + (self._waiting_line() if self.grant else "no grant")
        finished_s, code, error = _outcome(
            self.last_progress,
            self.last_tick,
            self.start_s,
            self.exit_code,
            self.error,
            f"the trainer never published progress at {self.url}",
            self.out / "trainer.log",
        )
        self._note_end(finished_s, error, now)
        self.result = self.summary(finished_s, code, error)
        write_trace(self.rows, self.result.to_dict(), self.out / "trace.json")
        if self.rows:
            plot_path = self.out / "trace.png"
            try:
                plot_trace(self.rows, plot_path, f"{self.job.name} ({self.policy})")
            except Exception as exc:  # noqa: BLE001 - a plot failure must not lose the run
                self.say(f"warning: could not draw {plot_path}: {exc}")
        self.line = _final_line(self.result)
        return self.result


def _local_policy(job: JobSpec, options: LocalOptions) -> str:
    """The law a local job runs (the run's ``--policy``, else the job's); raises
    ManifestError for a job the local runtime cannot run (GPU mode, another policy)."""
    if job.resources.mode != "cpu":
        raise ManifestError(
            "spec.resources.mode",
            "the local runtime actuates CPU only; use gpu mode on Kubernetes",
        )
    policy = options.policy or job.control.policy
    if policy not in ("decor", "decor-nn"):
        raise ManifestError("spec.control.policy", f"must be decor or decor-nn, got {policy!r}")
    return policy


def _verdict_line(
    before: str | None, grant: planner.Grant, now: float, start_s: float
) -> str | None:
    """The line a new planner verdict is told with (None: nothing to tell): queued or
    preempted (with the earliest deadline it could meet), shorted, or admitted after
    waiting (seconds since the job's start ``start_s``)."""
    if before == grant.verdict:
        return None
    if grant.verdict in (vocabulary.VERDICT_QUEUED, vocabulary.VERDICT_PREEMPTED):
        return f"{grant.verdict.lower()}: {jobperiod.verdict_message(grant, start_s)}"
    if grant.verdict == vocabulary.VERDICT_SHORTED:
        return f"shorted: {grant.reason}"
    if before in (vocabulary.VERDICT_QUEUED, vocabulary.VERDICT_PREEMPTED):
        return f"admitted after {now - start_s:.0f}s: {grant.reason}"
    return None


def _outcome(
    last: Any,
    last_tick: float,
    start_s: float,
    exit_code: int,
    error: str | None,
    silent_error: str,
    log_path: Path,
) -> tuple[float | None, int, str | None]:
    """(when the run finished, in seconds after its start, or None; its exit code; its
    error): ``last`` is the last progress sampled (None: none), ``last_tick`` the last tick
    and ``start_s`` the start (clock seconds), ``error`` what went wrong so far,
    ``silent_error`` the error when the trainer never published progress; a non-zero exit
    quotes the log's tail."""
    finished_s = None
    if last is not None and last.steps_done >= last.steps_planned:
        finished_s = (last.last_step_time_s or last_tick) - start_s
    if error is None and exit_code != 0:
        error = f"trainer exited with code {exit_code}: {_tail(log_path)}"
    elif error is None and last is None:
        error = silent_error
    elif finished_s is None and error is None:
        # The trainer exits 0 only once every step is done; it may exit between two
        # scrapes. The loop wakes as soon as it exits, so the last tick is its exit time.
        finished_s = last_tick - start_s
    code = exit_code if error is None else (exit_code or 1)
    return finished_s, code, error


class _Runtime:
    """The loop over every job of a local run: arrive, read and decide, plan, act."""

    def __init__(self, jobs: list[_LocalJob], options: LocalOptions) -> None:
        self.jobs = jobs
        self.options = options
        self.cpus = machine_cores()
        self.node = capacity.Node(
            name=LOCAL_NODE, cpu_cores=min(options.max_cores or self.cpus, self.cpus)
        )

    def run(self, plan_fn: PlanFn | None) -> list[RunSummary]:
        for job in self.jobs:
            job.prepare_folders()
        settings = planner.PlannerSettings(
            policy=self.options.planner_policy,
            period_s=min(job.job.control.period_s for job in self.jobs),
        )
        begin_s = time.time()
        try:
            while not all(job.done for job in self.jobs):
                self._period(begin_s, plan_fn, settings)
        except KeyboardInterrupt:
            for job in self.jobs:
                if not job.done:
                    job.interrupt()
        finally:
            for job in self.jobs:
                job.finish()
            self._show()
        return [job.finish() for job in self.jobs]

    def _period(
        self, begin_s: float, plan_fn: PlanFn | None, settings: planner.PlannerSettings
    ) -> None:
        """Wait for the next arrival, due job or trainer exit, then run one period."""
        waiting = [j for j in self.jobs if not j.arrived]
        active = [j for j in self.jobs if j.arrived and not j.done]
        next_s = min(
            [begin_s + j.arrival_delay_s for j in waiting] + [j.next_tick_s for j in active],
            default=time.time(),
        )
        _wait_any(next_s, [j.child for j in active if j.child is not None and not j.paused])
        now = time.time()
        due: list[_LocalJob] = []
        for job in waiting:
            if begin_s + job.arrival_delay_s <= now:
                job.arrive(now)
                if plan_fn is None:  # alone: it starts at once, its first period one period on
                    job.start_trainer(now)
                    job.next_tick_s = now + job.job.control.period_s
                else:  # the planner admits it (or not) in this very period
                    job.next_tick_s = now
        for job in self.jobs:
            if not job.arrived or job.done:
                continue
            exited = job.child is not None and job.child.poll() is not None
            if job.next_tick_s <= now or exited:
                due.append(job)
                job.next_tick_s += job.job.control.period_s
        if not due:
            return
        # Nothing ran when this period began (a trainer that exits in it, after its last
        # step, ran: the queue may move next period).
        idle = not any(
            j.child is not None and not j.paused for j in self.jobs if j.arrived and not j.done
        )
        for job in due:
            job.prepare(now)
        grants: dict[str, planner.Grant] = {}
        live = [j for j in self.jobs if j.arrived and not j.done and j.demand is not None]
        if plan_fn is not None and live:
            demands = [_current_demand(j) for j in live]
            grants = dict(plan_fn(demands, [self.node], now, settings).grants)
        for job in due:
            if not job.done:
                job.commit(grants.get(job.key) if plan_fn is not None else None, now)
        for job in live:
            if job not in due and not job.done:
                job.enforce(grants.get(job.key), now)
        if plan_fn is not None and idle:
            self._give_up_on_a_stuck_queue()
        self._show()

    def _give_up_on_a_stuck_queue(self) -> None:
        """Nothing ran when the planner queued every job, and nothing else will arrive: no
        later period can change its mind, so the waiting jobs end, saying why."""
        if any(not j.arrived for j in self.jobs):
            return
        left = [j for j in self.jobs if not j.done]
        if not left or any(j.child is not None and not j.paused for j in left):
            return
        if any(j.verdict in jobperiod.RUNNING_VERDICTS or j.verdict is None for j in left):
            return
        for job in left:
            job.error = f"never admitted: {job._waiting_line()}"
            job.finish()

    def _show(self) -> None:
        if not any(job.multi for job in self.jobs):
            return
        width = max(len(job.job.name) for job in self.jobs)
        lines = [f"{job.job.name:<{width}}  {job.line}" for job in self.jobs]
        if self.options.board is not None:
            self.options.board(lines)
        elif self.options.display is not None:
            for line in lines:
                self.options.display(line, False)


def _current_demand(job: _LocalJob) -> planner.Demand:
    """A job's latest demand with what is in effect now (it may not have been due)."""
    assert job.demand is not None
    running = job.child is not None and not job.paused
    return replace(job.demand, current=job.applied if running else 0.0)


def _wait_any(when_s: float, children: list[subprocess.Popen[bytes]]) -> None:
    """Sleep until ``when_s``, returning early if one of the trainers exits."""
    remaining = when_s - time.time()
    if remaining <= 0:
        return
    running = [c for c in children if c.poll() is None]
    if len(running) != len(children):
        return  # one has exited already: its job is due now
    if len(running) == 1:
        try:
            running[0].wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            pass
        return
    if not running:
        time.sleep(remaining)
        return
    try:
        fds = [os.pidfd_open(c.pid) for c in running]
    except (AttributeError, OSError):  # no pidfds here: look every slice
        while time.time() < when_s and all(c.poll() is None for c in running):
            time.sleep(min(WAIT_SLICE_S, max(0.0, when_s - time.time())))
        return
    try:
        select.select(fds, [], [], remaining)
    finally:
        for fd in fds:
            os.close(fd)


def _stop(child: subprocess.Popen[bytes], *, paused: bool = False) -> None:
    """SIGTERM (the trainer checkpoints), then SIGKILL after a grace period."""
    try:
        os.killpg(child.pid, signal.SIGTERM)
        if paused:
            os.killpg(child.pid, signal.SIGCONT)  # a stopped process handles SIGTERM on resume
        child.wait(timeout=STOP_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no trainer log)"
    return "\n".join(text[-lines:]) if text else "(trainer printed nothing)"


def _row(
    now: float,
    start_s: float,
    deadline_s: float,
    obs: control.Observation | None,
    applied: float,
    decision: control.Decision,
) -> TraceRow:
    """A period in which the trainer ran (times in Unix s; ``deadline_s`` the job's)."""
    duration = deadline_s - start_s
    return TraceRow(
        t_s=now - start_s,
        steps_done=obs.steps_done if obs else float("nan"),
        steps_total=obs.steps_total if obs else float("nan"),
        progress=obs.progress if obs else float("nan"),
        set_point=(now - start_s) / duration if duration > 0 else 1.0,
        deadline_s=duration,
        allocation=applied,
        requested=decision.allocation,
        condition=decision.condition,
        eta_s=None if decision.eta_s is None else decision.eta_s - start_s,
    )


def _waiting_row(
    now: float,
    start_s: float,
    deadline_s: float,
    state: control.State,
    grant: planner.Grant | None,
) -> TraceRow:
    """A period in which the job waited for the planner: nothing runs (times in Unix s;
    ``deadline_s`` the job's)."""
    duration = deadline_s - start_s
    verdict = grant.verdict if grant is not None else vocabulary.VERDICT_QUEUED
    return TraceRow(
        t_s=now - start_s,
        steps_done=float("nan"),
        steps_total=float("nan"),
        progress=float("nan"),
        set_point=(now - start_s) / duration if duration > 0 else 1.0,
        deadline_s=duration,
        allocation=0.0,
        requested=state.allocation,
        condition=verdict,
        eta_s=None,
        granted=0.0,
        verdict=verdict,
    )


def _status_line(row: TraceRow, settings: control.Settings, start_s: float) -> str:
    width = 24
    progress = 0.0 if row.progress != row.progress else row.progress  # NaN when no metrics
    filled = int(progress * width)
    bar = "#" * filled + "." * (width - filled)
    eta = "?" if row.eta_s is None else f"{row.eta_s:.0f}s"
    steps = (
        "" if row.steps_done != row.steps_done else f" {row.steps_done:.0f}/{row.steps_total:.0f}"
    )
    return (
        f"[{bar}] {progress:6.1%}{steps}  t={row.t_s:.0f}s  ETA {eta} / deadline {row.deadline_s:.0f}s"
        f"  cores {row.allocation:.2f}  {row.condition}"
    )


def _final_line(result: RunSummary) -> str:
    if result.error:
        return f"FAILED: {result.error.splitlines()[0]}"
    if result.finished_s is not None and result.deviation_pct is not None:
        return (
            f"done at {result.finished_s:.0f}s / deadline {result.deadline_s:.0f}s"
            f" ({result.deviation_pct:+.1f}%)"
        )
    return "done"
