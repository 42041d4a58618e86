"""The local runtime: run a DeadlineTrainingJob's trainer on this machine, no cluster.

The trainer command of the job's first container runs as a child process inside its own CPU
cgroup (see cpulimit). Every control period the runtime scrapes the trainer's /metrics on
127.0.0.1, calls the same ``control.decide`` the operator uses, and writes the new CPU quota.
A deadline can be moved while the job runs with ``decor deadline NAME ...``, which drops a
request file into the job's state directory; the loop picks it up within one period.

Everything a run produces goes to its output directory: ``trace.json`` (summary + one row
per period, rewritten as the run goes so a crash keeps it), ``trace.png`` and
``trainer.log`` (the trainer's stdout and stderr).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from decor import control
from decor.cpulimit import CpuLimiter, make_limiter
from decor.metrics import MetricsError, observation_from_progress, scrape_progress
from decor.model import JobSpec, ManifestError, format_time, parse_duration_s, parse_time
from decor.trace import TraceRow, plot_trace, write_trace

METRICS_HOST = "127.0.0.1"
STOP_GRACE_S = 10.0
# The trainer keeps /metrics up this long after its last step (ended early by our SIGTERM),
# so that the finish time is the last step's own time stamp, not the process's exit.
METRICS_LINGER_S = 10.0  # how long a trainer gets to checkpoint after SIGTERM
DEADLINE_REQUEST = "deadline-request.json"
RUN_RECORD = "run.json"


def state_dir() -> Path:
    """Where running local jobs register (``DECOR_STATE_DIR`` overrides)."""
    base = os.environ.get("DECOR_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "decor", "local"
    )
    return Path(base)


@dataclass
class RunSummary:
    """How a local run ended. Times in seconds since the job started."""

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
    conditions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LocalOptions:
    out_dir: Path
    policy: str | None = None  # override spec.control.policy
    max_cores: float | None = None  # cap spec.resources.max (default: this machine's CPUs)
    display: Callable[[str, bool], None] | None = None  # (line, final) live progress sink
    extra_env: dict[str, str] = field(default_factory=dict)


def free_port(preferred: int) -> int:
    """``preferred`` if it is free on 127.0.0.1, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind((METRICS_HOST, port))
                return int(sock.getsockname()[1])
            except OSError:
                continue
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
            "DECOR_EPOCHS": str(job.epochs),
            "DECOR_METRICS_PORT": str(port),
            "DECOR_METRICS_ADDRESS": METRICS_HOST,
            "DECOR_METRICS_LINGER_S": str(METRICS_LINGER_S),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("DECOR_PROGRESS_FILE", None)  # locally the trainer serves /metrics itself
    # `python3` in the job's command means this environment's Python (it has the trainer).
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    if job.steps_per_epoch is not None:
        env["DECOR_STEPS_PER_EPOCH"] = str(job.steps_per_epoch)
    env["DECOR_CHECKPOINT_DIR"] = job.checkpoint.path or str(checkpoint_dir)
    env.update(extra)
    return env


def controller_settings(
    job: JobSpec, start_s: float, max_cores: float, policy: str
) -> control.Settings:
    spec = job.control
    settings = control.Settings(
        mode=job.resources.mode,
        min_allocation=min(job.resources.min, max_cores),
        max_allocation=max_cores,
        start_s=start_s,
        deadline_s=job.deadline_s(start_s),
        policy=policy,
        period_s=spec.period_s,
        safety_margin_s=spec.safety_margin_s,
    )
    if spec.k is not None:
        settings = replace(settings, k=spec.k)
    if spec.ti_s is not None:
        settings = replace(settings, ti_s=spec.ti_s)
    return settings


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
    """Run ``job`` to completion (or failure) on this machine and summarise it."""
    if job.resources.mode != "cpu":
        raise ManifestError(
            "spec.resources.mode", "the local runtime actuates CPU only; use gpu mode on Kubernetes"
        )
    policy = options.policy or job.control.policy
    if policy not in ("decor", "decor-nn"):
        raise ManifestError("spec.control.policy", f"must be decor or decor-nn, got {policy!r}")
    cpus = float(len(os.sched_getaffinity(0)))
    max_cores = min(job.resources.max, options.max_cores or cpus, cpus)
    out = options.out_dir
    out.mkdir(parents=True, exist_ok=True)
    if not job.checkpoint.path:  # the run's own checkpoint: a new run starts from step 0
        shutil.rmtree(out / "checkpoint", ignore_errors=True)
    registry = state_dir() / job.name
    registry.mkdir(parents=True, exist_ok=True)
    (registry / DEADLINE_REQUEST).unlink(missing_ok=True)
    port = free_port(job.metrics.port)
    url = f"http://{METRICS_HOST}:{port}{job.metrics.path}"
    command = trainer_command(job)
    limiter: CpuLimiter = make_limiter(f"decor-{job.name}")
    display = options.display or (lambda line, final: None)
    display(limiter.note, True)

    start_s = time.time()
    settings = controller_settings(job, start_s, max_cores, policy)
    initial = min(job.resources.initial, max_cores)
    state = control.initial_state(settings, initial)
    applied = limiter.apply(state.allocation)
    log_path = out / "trainer.log"
    with open(log_path, "wb") as log:
        child = subprocess.Popen(
            command,
            env=trainer_env(job, port, options.extra_env, out / "checkpoint"),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=limiter.preexec,  # noqa: PLW1509 (join the cgroup before any thread starts)
            start_new_session=True,
        )
    limiter.attach(child.pid)
    applied = limiter.apply(state.allocation)
    (registry / RUN_RECORD).write_text(
        json.dumps(
            {"pid": os.getpid(), "child": child.pid, "start_s": start_s, "out_dir": str(out)}
        )
    )
    rows: list[TraceRow] = []
    conditions: set[str] = set()
    actuations = 0
    core_seconds = 0.0
    last_tick = start_s
    last_progress = None
    metrics_warned = False
    exit_code: int | None = None
    error: str | None = None
    trace_path, plot_path = out / "trace.json", out / "trace.png"

    def summary(finished_s: float | None, code: int, err: str | None) -> RunSummary:
        deadline_rel = settings.deadline_s - start_s
        deviation = None
        if finished_s is not None and deadline_rel > 0:
            deviation = 100.0 * (finished_s - deadline_rel) / deadline_rel
        return RunSummary(
            name=job.name,
            policy=policy,
            exit_code=code,
            complete=finished_s is not None,
            deadline_s=deadline_rel,
            finished_s=finished_s,
            deviation_pct=deviation,
            core_seconds=core_seconds,
            actuations=actuations,
            min_cores=settings.min_allocation,
            max_cores=settings.max_allocation,
            limiter=limiter.kind,
            out_dir=str(out),
            error=err,
            conditions=sorted(conditions),
        )

    try:
        next_tick = start_s
        while True:
            next_tick += settings.period_s
            _wait_until(next_tick, child)
            now = time.time()
            core_seconds += min(applied, cpus) * (now - last_tick)
            last_tick = now
            exit_code = child.poll()
            moved = _take_deadline_request(registry)
            if moved is not None:
                settings = replace(settings, deadline_s=moved)
                display(
                    f"deadline moved to {format_time(moved)} ({moved - start_s:.0f}s after start)",
                    True,
                )
            try:
                progress = scrape_progress(url)
                last_progress = progress
                obs: control.Observation | None = observation_from_progress(progress, now, applied)
                metrics_warned = False
            except MetricsError as exc:
                obs = None
                exit_code = child.poll()  # a trainer that just finished closes its endpoint
                if (
                    exit_code is None
                    and not metrics_warned
                    and now - start_s > 10 * settings.period_s
                ):
                    display(f"warning: {exc}; holding {applied:g} cores", True)
                    metrics_warned = True
            if exit_code is not None:
                break
            decision = control.decide(state, obs, settings, now)
            state = decision.state
            conditions.add(decision.condition)
            rows.append(_row(now, start_s, settings, obs, applied, decision))
            if abs(decision.allocation - applied) > 1e-9:
                applied = limiter.apply(decision.allocation)
                actuations += 1
            display(_status_line(rows[-1], settings, start_s), False)
            if len(rows) % 10 == 0:
                write_trace(rows, summary(None, -1, None).to_dict(), trace_path)
            if obs is not None and obs.complete:
                os.killpg(child.pid, signal.SIGTERM)  # ends the trainer's metrics linger
                exit_code = child.wait(timeout=60)
                break
    except KeyboardInterrupt:
        error = "interrupted"
        _stop(child)
        exit_code = child.returncode if child.returncode is not None else 130
    finally:
        if child.poll() is None:
            _stop(child)
        limiter.close()
        (registry / RUN_RECORD).unlink(missing_ok=True)

    assert exit_code is not None
    finished_s = None
    if last_progress is not None and last_progress.steps_done >= last_progress.steps_planned:
        finished_s = (last_progress.last_step_time_s or last_tick) - start_s
    if error is None and exit_code != 0:
        error = f"trainer exited with code {exit_code}: {_tail(log_path)}"
    elif error is None and last_progress is None:
        error = f"the trainer never published progress at {url}"
    elif finished_s is None:
        # The trainer exits 0 only once every step is done; it may exit between two scrapes.
        # The loop wakes as soon as it exits, so the last tick is its exit time.
        finished_s = last_tick - start_s
    result = summary(finished_s, exit_code if error is None else (exit_code or 1), error)
    write_trace(rows, result.to_dict(), trace_path)
    if rows:
        try:
            plot_trace(rows, plot_path, f"{job.name} ({policy})")
        except Exception as exc:  # noqa: BLE001 - a plot failure must not lose the run
            display(f"warning: could not draw {plot_path}: {exc}", True)
    return result


def _wait_until(when_s: float, child: subprocess.Popen[bytes]) -> None:
    """Sleep until ``when_s``, returning early if the trainer exits."""
    remaining = when_s - time.time()
    if remaining > 0:
        try:
            child.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            pass


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the trainer checkpoints), then SIGKILL after a grace period."""
    try:
        os.killpg(child.pid, signal.SIGTERM)
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
    settings: control.Settings,
    obs: control.Observation | None,
    applied: float,
    decision: control.Decision,
) -> TraceRow:
    duration = settings.deadline_s - start_s
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
