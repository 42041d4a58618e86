"""Run the DECOR benchmark grid on this machine: ``python -m bench.harness --grid quick``.

For each reference workload: profile it (a short all-cores probe sizes the job so that an
all-cores run takes the grid's T; one full all-cores run measures T; short runs at fractions
of MAX give the speed curve), then run every (scenario, policy, repetition) of the grid
through the local runtime (``decor.local.runtime.run_local``, the same controller and cgroup
actuator as ``decor run --local``). Policies of one setting run back to back, their order
balanced over the repetitions (``benchlib.plan_runs``). Deadline moves are sent with
``decor.local.runtime.request_deadline`` from a thread; the disturbance is CPU-bound Python
processes in the harness's own cgroup (not the job's).

Every finished run is appended to ``OUT/results.json`` at once (``--resume`` skips runs
already there), its compact trace to ``OUT/traces.json``. Then :mod:`bench.report` writes
``OUT/README.md`` and the plots.

Measurement hygiene (this is a shared 2-core machine): before the grid the harness waits
until the 1-minute load is below ``--max-load`` and no build or test process runs; before
every run it waits until processes outside the benchmark use almost no CPU; during every run
it measures how much CPU those processes took (``others_cores``) and how much the hypervisor
gave to other guests (``steal_cores``, the steal time in /proc/stat: a virtual machine whose
host is busy runs every process slower, the profile's no longer matches), and repeats a run
that was disturbed (kept in ``discarded`` for the record; ``benchlib.disturbance``).
``--no-wait`` skips the waiting (smoke).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from decor.api import vocabulary
from decor.api.model import parse_job
from decor.local.runtime import LocalOptions, RunSummary, request_deadline, run_local
from decor.local.trace import read_trace

from bench import benchlib as bl

ROOT = Path(__file__).resolve().parents[1]
JOB_NAME = "decor-bench"
EPOCHS = 4
BUSY_PATTERNS = (
    re.compile(r"\bgo (build|test|install|vet)\b"),
    re.compile(r"/go-build\d*/"),
    re.compile(r"\bdebootstrap\b"),
    re.compile(r"\bpytest\b"),
    re.compile(r"\bapt-get (install|upgrade|dist-upgrade)\b"),
    re.compile(r"^/usr/bin/dpkg\b"),
)
QUIET_POLL_S = 60.0
QUIET_TIMEOUT_S = 40 * 60.0
BETWEEN_RUNS_SAMPLE_S = 2.0
BETWEEN_RUNS_MAX_WAIT_S = 10 * 60.0
MAX_RETRIES_NOISY = 2  # a grid run disturbed by others is repeated at most this often
PROFILE_RETRIES_NOISY = 8  # the profile decides every deadline and oracle: be stricter
PROBE_MIN_S = 8.0  # the all-cores probe must show this many seconds of steady training
PROBE_ATTEMPTS = 4
SIZING_ATTEMPTS = 3  # all-cores runs to get T within the grid's sizing tolerance
RUN_OVERHEAD_S = 3.0  # harness time per run besides the job (plot, cgroup, sampling)
STATIC = ("static-max", "static-oracle")
BUSY_LOOP = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\nwhile True:\n    pass\n"


def log(message: str) -> None:
    print(f"[bench {datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------------------------------
# Machine and quietness


def code_hash() -> str:
    """Hash of what a run executes: the controller, the local runtime and the trainer.

    Every record carries it; the grid stops if it changes under a running grid (the trainer
    is started fresh per run, so a mid-grid edit would mix versions of the code measured).
    """
    digest = hashlib.sha256()
    for folder in (ROOT / "operator" / "decor", ROOT / "trainer_image" / "decor_trainer"):
        for path in sorted(folder.glob("*.py")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def foreign_modules() -> list[str]:
    """Modules a run executes that this checkout does not hold.

    The project's venv is shared by checkouts (it is keyed by content) and its editable
    install points at the last checkout that ran ``hack/venv.sh``; the trainer the runs
    start imports from there. A grid must measure the code whose hash it records.
    """
    import decor
    import decor_trainer

    found = []
    for module in (decor, decor_trainer):
        path = Path(module.__file__ or "").resolve()
        if ROOT not in path.parents:
            found.append(f"{module.__name__} from {path.parent}")
    return found


def git_head() -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        return proc.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_cores() -> int:
    return len(os.sched_getaffinity(0))


def machine_info() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": machine_cores(),
        "model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "hostname": platform.node(),
    }


def load_1m() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def busy_processes() -> list[str]:
    """Build or test processes of other people (go build, debootstrap, pytest, apt)."""
    mine = {os.getpid(), os.getppid()}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            cmd = (
                (entry / "cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
                .strip()
            )
        except OSError:
            continue
        if cmd and any(p.search(cmd) for p in BUSY_PATTERNS):
            found.append(f"{entry.name}: {cmd[:100]}")
    return found


class CpuSample(NamedTuple):
    busy_s: float
    """CPU seconds this machine's processes ran: user, nice, system, irq, softirq (not idle
    or iowait, and not steal, which no process here can cause)."""
    own_s: float
    """CPU seconds of this process and its children."""
    steal_s: float
    """Seconds the hypervisor ran other guests while this machine had work to run."""


def cpu_sample() -> CpuSample:
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    tick_s = os.sysconf("SC_CLK_TCK")
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return CpuSample(
        busy_s=(ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]) / tick_s,
        own_s=own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
        steal_s=ticks[7] / tick_s,
    )


def others_cores(before: CpuSample, after: CpuSample, wall_s: float) -> float:
    """Mean cores used by processes outside the benchmark between two samples.

    Children count once they are waited for, so sample after every child of the interval
    has exited (the trainer and the disturbance are children of this process).
    """
    if wall_s <= 0:
        return 0.0
    return max(0.0, ((after.busy_s - before.busy_s) - (after.own_s - before.own_s)) / wall_s)


def steal_cores(before: CpuSample, after: CpuSample, wall_s: float) -> float:
    """Mean cores the hypervisor gave to other guests between two samples."""
    return max(0.0, (after.steal_s - before.steal_s) / wall_s) if wall_s > 0 else 0.0


def wait_for_quiet(max_load: float, timeout_s: float) -> bool:
    """Poll until the 1-minute load is below ``max_load`` and no build/test process runs."""
    deadline = time.monotonic() + timeout_s
    while True:
        load, busy = load_1m(), busy_processes()
        if load < max_load and not busy:
            log(f"machine quiet: load {load:.2f}")
            return True
        if time.monotonic() >= deadline:
            log(
                f"machine never got quiet within {timeout_s / 60:.0f} min (load {load:.2f}; {len(busy)} busy processes)"
            )
            return False
        what = "; ".join(busy[:3])
        log(f"waiting for a quiet machine: load {load:.2f}{'; busy: ' + what if busy else ''}")
        time.sleep(QUIET_POLL_S)


def others_now(sample_s: float = BETWEEN_RUNS_SAMPLE_S) -> tuple[float, float]:
    """(cores other processes use, cores the hypervisor steals) right now, sampled while no
    job of ours runs."""
    before, t0 = cpu_sample(), time.monotonic()
    time.sleep(sample_s)
    after, wall = cpu_sample(), time.monotonic() - t0
    return others_cores(before, after, wall), steal_cores(before, after, wall)


def wait_between_runs(enabled: bool) -> tuple[float, float]:
    """Wait (bounded) until neither other processes nor the hypervisor disturb the machine
    (:func:`benchlib.disturbance`); return (others' cores, stolen cores) when it stopped."""
    others, steal = others_now()
    if not enabled:
        return others, steal
    cores = machine_cores()
    waited_until = time.monotonic() + BETWEEN_RUNS_MAX_WAIT_S
    while (why := bl.disturbance(others, steal, cores)) and time.monotonic() < waited_until:
        log(f"{why}; waiting")
        time.sleep(15.0)
        others, steal = others_now()
    return others, steal


def disturbed(notes: dict[str, Any]) -> str | None:
    """Why a run (its notes from :func:`run_once`) was disturbed, or None."""
    return bl.disturbance(notes["others_cores"], notes["steal_cores"], machine_cores())


# ---------------------------------------------------------------------------------------
# One run


def whole_epochs(steps: int) -> int:
    """``steps`` rounded up to whole epochs (the manifest gives epochs x steps per epoch)."""
    return -(-steps // EPOCHS) * EPOCHS


def manifest(
    size: bl.WorkloadSize,
    steps: int,
    deadline_s: float,
    lo: float,
    hi: float,
    initial: float | None,
    policy: str,
    estimate: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The DeadlineTrainingJob of one run (self-contained: independent of examples/).

    ``initial`` None leaves the start allocation to the spec's default. ``estimate``:
    (seconds per step, at cores) for ``spec.estimate``, what a user who ran the job before
    knows (the harness gives the profile's T / steps at MAX)."""
    resources = {"mode": "cpu", "min": f"{round(lo * 1000)}m", "max": f"{round(hi * 1000)}m"}
    if initial is not None:
        resources["initial"] = f"{round(initial * 1000)}m"
    doc: dict[str, Any] = {
        "apiVersion": f"{vocabulary.API_GROUP}/{vocabulary.API_VERSION}",
        "kind": vocabulary.KIND,
        "metadata": {"name": JOB_NAME},
        "spec": {
            "duration": f"{deadline_s:.3f}s",
            "epochs": EPOCHS,
            "stepsPerEpoch": steps // EPOCHS,
            "resources": resources,
            "control": {"policy": policy, "periodSeconds": 1},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "command": size.command(),
                            "args": size.trainer_args(),
                        }
                    ]
                }
            },
            "metrics": {"port": 9100, "path": "/metrics"},
        },
    }
    if estimate is not None:
        step_s, cores = estimate
        doc["spec"]["estimate"] = {
            "stepSeconds": round(step_s, 6),
            "allocation": f"{round(cores * 1000)}m",
        }
    return doc


def profile_estimate(all_cores_s: float, steps: int, max_cores: float) -> tuple[float, float]:
    """``spec.estimate`` from a profile: its all-cores run time per step, start-up included
    (what a user who timed the job once knows), at MAX."""
    return all_cores_s / whole_epochs(steps), max_cores


class RunEvents:
    """Deadline move and disturbance of one run, timed from the job's registered start."""

    def __init__(self, scenario: bl.Scenario, deadline_s: float, disturb_processes: int) -> None:
        self.scenario = scenario
        self.deadline_s = deadline_s
        self.disturb_processes = disturb_processes
        self.done = threading.Event()
        self.notes: dict[str, Any] = {}
        self.busy: list[subprocess.Popen[bytes]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RunEvents:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
        self._stop_busy()

    def _start_time(self) -> float | None:
        record = Path(os.environ["DECOR_STATE_DIR"]) / JOB_NAME / "run.json"
        while not self.done.is_set():
            try:
                return float(json.loads(record.read_text())["start_s"])
            except (OSError, ValueError, KeyError):
                self.done.wait(0.02)  # the runtime registers the job right after it starts
        return None

    def _sleep_until(self, when_s: float) -> bool:
        return not self.done.wait(max(0.0, when_s - time.time()))

    def _run(self) -> None:
        sc = self.scenario
        events: list[tuple[float, str]] = []
        if sc.move_to is not None:
            events.append((sc.move_at_fraction * self.deadline_s, "move"))
        if sc.disturb_from is not None and sc.disturb_to is not None:
            events.append((sc.disturb_from * self.deadline_s, "disturb-on"))
            events.append((sc.disturb_to * self.deadline_s, "disturb-off"))
        if not events:
            return
        start = self._start_time()
        if start is None:
            return
        for at_s, what in sorted(events):
            if not self._sleep_until(start + at_s):
                return
            if what == "move":
                new_s = sc.move_to * self.deadline_s  # type: ignore[operator]
                try:
                    request_deadline(JOB_NAME, duration=f"{new_s:.3f}s")
                    self.notes["moved_at_s"] = round(time.time() - start, 3)
                except LookupError:
                    self.notes["moved_at_s"] = None  # the job had already finished
            elif what == "disturb-on":
                self.busy = [
                    subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
                    for _ in range(self.disturb_processes)
                ]
                self.notes["disturb_on_s"] = round(time.time() - start, 3)
            else:
                self._stop_busy()
                self.notes["disturb_off_s"] = round(time.time() - start, 3)

    def _stop_busy(self) -> None:
        for proc in self.busy:
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
        self.busy = []


def start_cores(policy: str, max_cores: float) -> float | None:
    """A controller's start allocation: decor-nn starts at MAX (its published law), decor at
    the spec's default (None)."""
    return max_cores if policy == "decor-nn" else None


def run_once(
    size: bl.WorkloadSize,
    steps: int,
    deadline_s: float,
    bounds: tuple[float, float, float | None],
    policy: str,
    out_dir: Path,
    scenario: bl.Scenario | None = None,
    disturb_processes: int = 1,
    estimate: tuple[float, float] | None = None,
) -> tuple[RunSummary, list[Any], dict[str, Any]]:
    """One job through the local runtime; (summary, trace rows, notes with others_cores,
    steal_cores and initial_cores). ``bounds``: (min, max, initial) cores, initial None for
    the spec's default; ``estimate``: the job's ``spec.estimate`` (:func:`manifest`)."""
    lo, hi, initial = bounds
    steps = whole_epochs(steps)
    doc = manifest(
        size,
        steps,
        deadline_s,
        lo,
        hi,
        initial,
        "decor-nn" if policy == "decor-nn" else "decor",
        estimate,
    )
    before, t0 = cpu_sample(), time.monotonic()
    events = RunEvents(scenario or bl.Scenario("static", 1.0), deadline_s, disturb_processes)
    job = parse_job(doc)
    with events:
        summary = run_local(job, LocalOptions(out_dir=out_dir))
    wall = time.monotonic() - t0
    if summary.error == "interrupted":  # SIGINT/SIGTERM: the runtime stopped the trainer
        raise KeyboardInterrupt
    notes = dict(events.notes)
    after = cpu_sample()
    notes["others_cores"] = round(others_cores(before, after, wall), 3)
    notes["steal_cores"] = round(steal_cores(before, after, wall), 3)
    notes["wall_s"] = round(wall, 2)
    notes["initial_cores"] = summary.start_cores
    try:
        _, rows = read_trace(out_dir / "trace.json")
    except (OSError, ValueError, KeyError):
        rows = []
    return summary, rows, notes


# ---------------------------------------------------------------------------------------
# Profile


def run_static_clean(
    size: bl.WorkloadSize, steps: int, cores: float, folder: Path, wait: bool
) -> tuple[RunSummary, list[Any], dict[str, Any]]:
    """A static run for the profile, repeated if other processes or the hypervisor disturbed it."""
    for attempt in range(PROFILE_RETRIES_NOISY + 1):
        wait_between_runs(wait)
        where = folder.with_name(f"{folder.name}-a{attempt}")
        summary, rows, notes = run_once(size, steps, 3600.0, (cores,) * 3, "static", where)
        why = disturbed(notes)
        if not wait or why is None or attempt == PROFILE_RETRIES_NOISY:
            if why is not None:
                log(f"  WARNING: profile run kept although disturbed ({why})")
            return summary, rows, notes
        log(f"  profile run disturbed ({why}); repeating it")
    raise AssertionError("unreachable")


def measure_static(
    size: bl.WorkloadSize, cores: float, steps: int, min_steady_s: float, folder: Path, wait: bool
) -> tuple[float, float]:
    """(steps/s, start-up s) at a static allocation, from a run with >= ``min_steady_s`` of steps.

    A run too short to show a rate (the trainer may even finish before the first scrape) is
    repeated with more steps.
    """
    steps = whole_epochs(steps)
    for attempt in range(PROBE_ATTEMPTS):
        summary, rows, _ = run_static_clean(
            size, steps, cores, folder / f"c{cores:g}-{attempt}", wait
        )
        rate = 0.0
        if summary.error is None or "never published progress" in summary.error:
            try:
                rate, startup = bl.rate_from_samples([(r.t_s, r.steps_done) for r in rows], steps)
                if steps / rate >= min_steady_s:
                    return rate, startup
            except ValueError:
                pass  # too short to see a rate
        elif summary.error:
            raise RuntimeError(f"{size.name} at {cores:g} cores failed: {summary.error}")
        grow = 4.0 if rate <= 0 else max(2.0, 1.5 * min_steady_s * rate / steps)
        steps = whole_epochs(int(steps * grow))
        log(f"profile {size.name}: {cores:g} cores too short to measure; again with {steps} steps")
    raise RuntimeError(f"could not measure {size.name} at {cores:g} cores")


def profile_workload(
    size: bl.WorkloadSize, grid: bl.Grid, max_cores: float, workdir: Path, wait: bool
) -> dict[str, Any]:
    """Size the job for the grid's T, measure T at MAX and the speed curve."""
    folder = workdir / "profile" / size.name
    log(f"profile {size.name}: probe at {max_cores:g} cores")
    rate, startup = measure_static(
        size, max_cores, size.probe_steps, PROBE_MIN_S, folder / "probe", wait
    )
    target_s = grid.all_cores_target_s
    for attempt in range(SIZING_ATTEMPTS):
        steps = bl.steps_for(target_s, rate, startup, EPOCHS)
        log(
            f"profile {size.name}: {rate:.2f} steps/s at MAX, start-up {startup:.1f}s -> {steps} steps"
        )
        full, rows, notes = run_static_clean(size, steps, max_cores, folder / f"max{attempt}", wait)
        if full.error or full.finished_s is None:
            raise RuntimeError(f"all-cores run of {size.name} failed: {full.error}")
        all_cores_s = full.finished_s
        try:
            rate, startup = bl.rate_from_samples([(r.t_s, r.steps_done) for r in rows], steps)
        except ValueError:  # keep the probe's rate; the start-up follows from the measured T
            startup = max(0.0, all_cores_s - steps / rate)
        if abs(all_cores_s - target_s) <= grid.sizing_tolerance * target_s:
            break
        log(f"profile {size.name}: T = {all_cores_s:.1f}s, not ~{target_s:g}s; resizing")
    points = [bl.time_point(max_cores, steps, all_cores_s, [(r.t_s, r.steps_done) for r in rows])]
    for fraction in grid.profile_fractions:
        # The whole job at each allocation: a short window's rate does not carry over to a
        # full run (warm-up, throttling pattern), and the oracle must predict full runs.
        cores = round(fraction * max_cores, 3)
        log(f"profile {size.name}: the whole job at {cores:g} cores")
        run, rows, _ = run_static_clean(size, steps, cores, folder / f"c{cores:g}", wait)
        if run.error or run.finished_s is None:
            raise RuntimeError(f"{size.name} at {cores:g} cores failed: {run.error}")
        points.append(
            bl.time_point(cores, steps, run.finished_s, [(r.t_s, r.steps_done) for r in rows])
        )
    points.sort(key=lambda p: p.cores)
    log(
        f"profile {size.name}: T = {all_cores_s:.1f}s; curve "
        + ", ".join(f"{p.cores:g}c {p.steps_per_s:.2f}/s" for p in points)
    )
    return {
        "workload": size.name,
        "size": asdict(size),
        "steps": steps,
        "all_cores_s": all_cores_s,
        "all_cores_others_cores": notes["others_cores"],
        "all_cores_steal_cores": notes["steal_cores"],
        "curve": [asdict(p) for p in points],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------------------------------
# Results file


class Results:
    """``results.json`` (records, profiles, overhead, machine) and ``traces.json``, saved atomically."""

    def __init__(
        self, out: Path, grid: bl.Grid, sizes: str, resume: bool, runtime: str = "local"
    ) -> None:
        self.path, self.traces_path = out / "results.json", out / "traces.json"
        out.mkdir(parents=True, exist_ok=True)
        fresh: dict[str, Any] = {
            "grid": grid.name, "sizes": sizes, "machine": machine_info(), "profiles": {},
            "code_hash": code_hash(), "git_head": git_head(),
            "overhead": None, "records": [], "discarded": [], "started": _now(), "wall_s": {},
        }  # fmt: skip
        self.data, self.traces = fresh, {}
        if runtime == "k8s":
            self._open_k8s(fresh, resume)
        elif self.path.exists():
            old = json.loads(self.path.read_text())
            same = (
                old.get("grid") == grid.name
                and old.get("sizes", "small") == sizes
                and old.get("code_hash") == fresh["code_hash"]
            )
            if resume and same:
                self.data = {**fresh, **old}
                if self.traces_path.exists():
                    self.traces = json.loads(self.traces_path.read_text())
                log(f"resuming: {len(self.data['records'])} runs already in {self.path}")
            elif old.get("records"):
                backup = self.path.with_name("results.prev.json")
                self.path.replace(backup)
                log(f"previous results ({old.get('grid')} grid) moved to {backup}")
                if resume:
                    log(
                        "--resume: the previous results are of another grid or code; starting afresh"
                    )
                self._keep_cluster_runs(old)

    def _keep_cluster_runs(self, old: dict[str, Any]) -> None:
        """A fresh local grid keeps the file's cluster runs (``make bench-k8s``): they carry
        their own commit, machine and code hash, and the report names them apart."""
        cluster = [r for r in old.get("records") or [] if r.get("runtime") == "k8s"]
        if not cluster or not old.get("k8s"):
            return
        self.data["records"] = cluster
        self.data["k8s"] = old["k8s"]
        self.data["wall_s"] = {
            k: v for k, v in (old.get("wall_s") or {}).items() if k.startswith("k8s")
        }
        if self.traces_path.exists():
            traces = json.loads(self.traces_path.read_text())
            self.traces = {k: v for k, v in traces.items() if k.startswith("k8s:")}
        log(f"kept the {len(cluster)} cluster runs of git {old['k8s'].get('git_head')}")

    def _open_k8s(self, fresh: dict[str, Any], resume: bool) -> None:
        """Cluster runs join the results file as they find it (the local grid's records,
        profiles and code hash stay). Without --resume the earlier k8s runs are dropped; with
        it those of the current code are kept and skipped."""
        current = fresh["code_hash"]
        dropped: list[dict[str, Any]] = []
        if self.path.exists():
            self.data = {**fresh, **json.loads(self.path.read_text())}
            if self.traces_path.exists():
                self.traces = json.loads(self.traces_path.read_text())

            def keep(r: dict[str, Any]) -> bool:
                return r.get("runtime") != "k8s" or (resume and r.get("code_hash") == current)

            dropped = [r for r in self.data["records"] if not keep(r)]
            self.data["records"] = [r for r in self.data["records"] if keep(r)]
            for r in dropped:
                self.traces.pop(bl.record_key(r), None)
        k8s = self.data.get("k8s") or {}
        if not resume or k8s.get("code_hash") != current:
            k8s = {}
        # The machine of the cluster runs (the file's own "machine" is the local grid's).
        self.data["k8s"] = {
            **k8s,
            "code_hash": current,
            "git_head": fresh["git_head"],
            "machine": fresh["machine"],
        }
        kept = sum(1 for r in self.data["records"] if r.get("runtime") == "k8s")
        log(f"k8s runs join {self.path}: {kept} kept, {len(dropped)} earlier ones dropped")

    def done_keys(self) -> set[str]:
        return {bl.record_key(r) for r in self.data["records"]}

    def add(self, record: dict[str, Any], trace: dict[str, Any] | None) -> None:
        self.data["records"].append(record)
        if trace is not None:
            self.traces[bl.record_key(record)] = trace
        self.save()

    def save(self) -> None:
        self.data["updated"] = _now()
        _atomic_write(self.path, json.dumps(self.data, indent=1))
        _atomic_write(self.traces_path, json.dumps(self.traces, separators=(",", ":")))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def compact_trace(rows: list[Any], moved_at_s: float | None) -> dict[str, Any]:
    """What the report plots: time, progress, set point, deadline and cores, rounded."""
    return {
        "t_s": [round(r.t_s, 2) for r in rows],
        "progress": [None if r.progress != r.progress else round(r.progress, 4) for r in rows],
        "set_point": [round(r.set_point, 4) for r in rows],
        "deadline_s": [round(r.deadline_s, 2) for r in rows],
        "cores": [round(r.allocation, 3) for r in rows],
        "moved_at_s": moved_at_s,
    }


# ---------------------------------------------------------------------------------------
# Reporter overhead


def measure_overhead(profiles: dict[str, Any]) -> dict[str, Any]:
    """The reporter's cost per step (decor_trainer.overhead) against each workload's step time."""
    proc = subprocess.run(
        [sys.executable, "-m", "decor_trainer.overhead", "--calls", "20000", "--steps", "30"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-500:]}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    tool = json.loads(lines[-1])
    per_call_s = float(tool["in_process_step_done_us"]) * 1e-6
    per_workload = {}
    for name, prof in profiles.items():
        at_max = max(prof["curve"], key=lambda p: p["cores"])
        step_s = 1.0 / at_max["steps_per_s"]
        per_workload[name] = {"step_s": step_s, "ratio": per_call_s / step_s}
    worst = max((w["ratio"] for w in per_workload.values()), default=None)
    return {"tool": tool, "per_workload": per_workload, "worst_ratio": worst, "date": _now()}


# ---------------------------------------------------------------------------------------
# The grid


def narrowed(grid: bl.Grid, args: argparse.Namespace) -> bl.Grid:
    """The grid as the command line narrows it (--all-cores-s, --workloads, --scenarios,
    --policies, --reps)."""
    if args.all_cores_s:
        grid = replace(grid, all_cores_target_s=args.all_cores_s)

    def names(text: str | None) -> list[str]:
        return [n for n in (text or "").split(",") if n]

    try:
        return bl.narrow_grid(
            grid,
            workloads=names(args.workloads),
            scenarios=names(args.scenarios),
            policies=names(args.policies),
            reps=args.reps,
        )
    except ValueError as exc:
        raise SystemExit(f"bench.harness: {exc}") from None


def run_grid(args: argparse.Namespace) -> int:
    if args.runtime == "k8s":
        return run_grid_k8s(args)
    grid = narrowed(bl.make_grid(args.grid, sizes=args.sizes), args)
    out = Path(
        args.out
        or (
            Path(tempfile.gettempdir()) / "decor-bench-smoke"
            if grid.name == "smoke"
            else ROOT / "docs" / "benchmarks"
        )
    )
    workdir = Path(args.workdir or Path(tempfile.gettempdir()) / f"decor-bench-{grid.name}")
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["DECOR_STATE_DIR"] = str(workdir / "state")
    os.environ.pop("DECOR_CHECKPOINT_DIR", None)
    max_cores = float(machine_cores())
    results = Results(out, grid, args.sizes, args.resume)
    wait = not args.no_wait
    if wait and not wait_for_quiet(args.max_load, args.quiet_timeout_s):
        log("not measuring on a busy machine; nothing was run (use --no-wait to force)")
        return 3
    grid_started = time.monotonic()
    for size in grid.workloads:
        if size.name not in results.data["profiles"]:
            started = time.monotonic()
            results.data["profiles"][size.name] = profile_workload(
                size, grid, max_cores, workdir, wait
            )
            results.data["wall_s"][f"profile-{size.name}"] = round(time.monotonic() - started, 1)
            results.save()
    if results.data.get("overhead") is None:
        log("reporter overhead")
        results.data["overhead"] = measure_overhead(results.data["profiles"])
        results.save()
    plan = [
        r
        for r in bl.plan_runs(grid, seed=args.seed)
        if f"local:{r.run_id}" not in results.done_keys()
    ]
    sizes = {w.name: w for w in grid.workloads}
    expected = [
        bl.expected_run_s(
            r.policy, bl.SCENARIOS[r.scenario], results.data["profiles"][r.workload]["all_cores_s"]
        )
        + RUN_OVERHEAD_S
        for r in plan
    ]
    log(f"{len(plan)} runs to do, about {sum(expected) / 60:.0f} min")
    runs_started, spent_s, expected_done_s = time.monotonic(), 0.0, 0.0
    for index, (run, expect_s) in enumerate(zip(plan, expected, strict=True)):
        if code_hash() != results.data["code_hash"]:
            log("the controller, runtime or trainer code changed under the grid; stopping so that")
            log("the results measure one version (run again; --resume keeps runs of the same code)")
            return 4
        remaining = sum(expected[index:])
        pace = spent_s / expected_done_s if expected_done_s > 0 else 1.0
        log(
            f"run {index + 1}/{len(plan)}: {run.run_id}  (grid ETA {remaining * pace / 60:.0f} min)"
        )
        t0 = time.monotonic()
        record = execute(run, sizes[run.workload], grid, results, workdir, max_cores, wait)
        spent_s += time.monotonic() - t0
        expected_done_s += expect_s
        dev = record.get("deviation_pct")
        log(
            f"  -> finished {record.get('finished_s') or float('nan'):.1f}s of {record['deadline_s']:.1f}s "
            f"({'n/a' if dev is None else f'{dev:+.2f}%'}), {record['core_seconds']:.1f} core-s "
            f"(oracle {record['oracle_core_seconds']:.1f}), others {record['others_cores']:.2f} cores, "
            f"steal {record['steal_cores']:.2f} cores"
        )
    results.data["wall_s"]["runs"] = round(time.monotonic() - runs_started, 1) + results.data[
        "wall_s"
    ].get("runs", 0.0)
    results.data["wall_s"]["grid_this_invocation"] = round(time.monotonic() - grid_started, 1)
    results.data["finished"] = _now()
    results.save()
    log(f"done: {len(results.data['records'])} runs in {results.path}")
    return 0


def execute(
    run: bl.PlannedRun,
    size: bl.WorkloadSize,
    grid: bl.Grid,
    results: Results,
    workdir: Path,
    max_cores: float,
    wait: bool,
) -> dict[str, Any]:
    """Run one planned run (repeating it if foreign load disturbed it) and store its record."""
    prof = results.data["profiles"][run.workload]
    curve = [bl.SpeedPoint(**p) for p in prof["curve"]]
    steps, all_cores_s = int(prof["steps"]), float(prof["all_cores_s"])
    scenario = bl.SCENARIOS[run.scenario]
    deadline_s = scenario.factor * all_cores_s
    final_deadline_s = scenario.final_factor * all_cores_s
    staircase = size.threads_follow_limit
    oracle_cores = bl.oracle_allocation(
        curve, steps, final_deadline_s, grid.min_cores, max_cores, staircase
    )
    oracle_cs = oracle_cores * min(
        final_deadline_s, bl.predicted_time_s(curve, steps, oracle_cores, staircase)
    )
    bounds: tuple[float, float, float | None]
    if run.policy == "static-max":
        bounds = (max_cores, max_cores, max_cores)
    elif run.policy == "static-oracle":
        bounds = (oracle_cores, oracle_cores, oracle_cores)
    else:
        bounds = (grid.min_cores, max_cores, start_cores(run.policy, max_cores))
    # Controlled runs know the job's speed as a user who timed it once does (spec.estimate).
    estimate = None if run.policy in STATIC else profile_estimate(all_cores_s, steps, max_cores)
    record: dict[str, Any] = {}
    for attempt in range(MAX_RETRIES_NOISY + 1):
        before_others, before_steal = wait_between_runs(wait)
        load = load_1m()
        out_dir = workdir / "runs" / run.run_id / f"a{attempt}"
        summary, rows, notes = run_once(
            size,
            steps,
            deadline_s,
            bounds,
            run.policy,
            out_dir,
            scenario,
            grid.disturb_processes,
            estimate,
        )
        finished = summary.finished_s if summary.complete else None
        cs_finish = None
        if finished is not None:
            cs_finish = bl.core_seconds_to_finish(
                [(r.t_s, r.allocation, r.requested) for r in rows], notes["initial_cores"], finished
            )
        record = {
            "workload": run.workload,
            "policy": run.policy,
            "runtime": "local",
            "scenario": run.scenario,
            "deadline_factor": round(scenario.final_factor, 4),
            "initial_deadline_factor": scenario.factor,
            "repetition": run.repetition,
            "deadline_s": round(summary.deadline_s, 3),
            "finished_s": None if finished is None else round(finished, 3),
            "deviation_pct": None
            if summary.deviation_pct is None
            else round(summary.deviation_pct, 4),
            "late": bool(summary.deviation_pct is not None and summary.deviation_pct > 0),
            "core_seconds": round(summary.core_seconds, 3),
            "core_seconds_to_finish": None if cs_finish is None else round(cs_finish, 3),
            "oracle_core_seconds": round(oracle_cs, 3),
            "oracle_cores": oracle_cores,
            "spec_estimate": None if estimate is None else [round(estimate[0], 6), estimate[1]],
            "actuations": summary.actuations,
            "cores_min": bounds[0],
            "cores_max": bounds[1],
            "steps": steps,
            "all_cores_s": round(all_cores_s, 3),
            "machine_cores": results.data["machine"]["cores"],
            "machine_model": results.data["machine"]["model"],
            "limiter": summary.limiter,
            "date": _now(),
            "load_1m": load,
            "others_cores_before": round(before_others, 3),
            "steal_cores_before": round(before_steal, 3),
            "attempt": attempt,
            "grid": grid.name,
            "code_hash": results.data["code_hash"],
            "error": summary.error,
            **notes,
        }
        why = record["disturbed_by"] = disturbed(notes)
        if why is None or not wait or attempt == MAX_RETRIES_NOISY:
            record["noisy"] = why is not None
            break
        log(f"  run disturbed ({why}); repeating it")
        results.data["discarded"].append(record)
    trace = compact_trace(rows, record.get("moved_at_s")) if rows else None
    results.add(record, trace)
    return record


# ---------------------------------------------------------------------------------------
# The cluster subset (--runtime k8s; bench/k8s_bench.py)


def run_grid_k8s(args: argparse.Namespace) -> int:
    """The k8s subset on the cluster in $KUBECONFIG, through the checkout's operator."""
    from bench import k8s_bench as kb

    grid = narrowed(kb.k8s_grid(bl.make_grid("quick", sizes=args.sizes)), args)
    out = Path(args.out or ROOT / "docs" / "benchmarks")
    workdir = Path(args.workdir or Path(tempfile.gettempdir()) / "decor-bench-k8s")
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = kb.Cluster()
    max_cores = kb.pod_max_cores(
        cluster.node_cpu(), cluster.other_requests(), machine_info()["cores"]
    )
    results = Results(out, grid, args.sizes, args.resume, runtime="k8s")
    meta = results.data["k8s"]
    meta.update(grid=grid.name, max_cores=max_cores, kubeconfig=cluster.kubeconfig)
    meta.setdefault("profiles", {})
    if not args.no_wait and not wait_for_quiet(args.max_load, args.quiet_timeout_s):
        log("not measuring on a busy machine; nothing was run (use --no-wait to force)")
        return 3
    cluster.apply_crd()
    started = time.monotonic()
    with kb.OperatorProcess(workdir / "operator.log"):
        log(f"operator (this checkout, out of cluster) started; log {workdir / 'operator.log'}")
        for size in grid.workloads:
            if size.name not in meta["profiles"]:
                t0 = time.monotonic()
                meta["profiles"][size.name] = profile_k8s(cluster, size, grid, max_cores)
                results.data["wall_s"][f"k8s-profile-{size.name}"] = round(time.monotonic() - t0, 1)
                results.save()
        done = results.done_keys()
        plan = [r for r in bl.plan_runs(grid, seed=args.seed) if f"k8s:{r.run_id}" not in done]
        log(f"{len(plan)} k8s runs to do")
        for index, run in enumerate(plan):
            if code_hash() != meta["code_hash"]:
                log("the controller, runtime or trainer code changed under the grid; stopping")
                return 4
            log(f"k8s run {index + 1}/{len(plan)}: {run.run_id}")
            size = next(w for w in grid.workloads if w.name == run.workload)
            record = execute_k8s(run, size, grid, results, cluster, max_cores)
            dev = record.get("deviation_pct")
            log(
                f"  -> finished {record.get('finished_s') or float('nan'):.1f}s of "
                f"{record['deadline_s']:.1f}s ({'n/a' if dev is None else f'{dev:+.2f}%'}), "
                f"{record['core_seconds']:.1f} core-s, {record['actuations']} resizes"
                + (f"; ERROR {record['error']}" if record.get("error") else "")
            )
    results.data["wall_s"]["k8s_this_invocation"] = round(time.monotonic() - started, 1)
    results.save()
    log(
        f"done: {sum(1 for r in results.data['records'] if r.get('runtime') == 'k8s')} k8s runs in {results.path}"
    )
    return 0


def profile_k8s(
    cluster: Any, size: bl.WorkloadSize, grid: bl.Grid, max_cores: float
) -> dict[str, Any]:
    """T on the cluster path: static-MAX jobs there size the job for the grid's T, as the
    local profile does (a probe long enough to show a rate, then up to SIZING_ATTEMPTS
    all-cores jobs until one takes T within the grid's tolerance); pod start-up included.

    Not the local profile's size: a pod on the test bed's 2-core node gets at most 1.99 cores
    (the sidecar requests 10m), so its trainer runs one thread where the local runtime's runs
    two, and the same steps take longer."""
    rate, startup = _probe_k8s(cluster, size, max_cores)
    target_s = grid.all_cores_target_s
    for attempt in range(SIZING_ATTEMPTS):
        steps = bl.steps_for(target_s, rate, startup, EPOCHS)
        log(
            f"k8s profile {size.name}: {rate:.2f} steps/s at {max_cores:g} cores, start-up "
            f"{startup:.1f}s -> {steps} steps"
        )
        kr = _static_k8s(cluster, size, steps, max_cores, f"max{attempt}")
        all_cores_s = kr.outcome.finished_s
        try:
            rate, startup = bl.rate_from_samples(kr.progress, whole_epochs(steps))
        except ValueError:  # keep the probe's rate; the start-up follows from the measured T
            startup = max(0.0, all_cores_s - steps / rate)
        if abs(all_cores_s - target_s) <= grid.sizing_tolerance * target_s:
            break
        log(f"k8s profile {size.name}: T = {all_cores_s:.1f}s, not ~{target_s:g}s; resizing")
    log(f"k8s profile {size.name}: T = {all_cores_s:.1f}s on the cluster")
    return {
        "workload": size.name, "size": asdict(size), "steps": steps, "steps_source": "cluster probe",
        "all_cores_s": all_cores_s, "max_cores": max_cores, "steps_per_s": rate,
        "start_lag_s": kr.notes.get("start_lag_s"), "date": _now(),
    }  # fmt: skip


def _probe_k8s(cluster: Any, size: bl.WorkloadSize, max_cores: float) -> tuple[float, float]:
    """(steps/s, start-up s) at MAX on the cluster, from a job with >= PROBE_MIN_S of steps."""
    steps = whole_epochs(size.probe_steps)
    for attempt in range(PROBE_ATTEMPTS):
        log(f"k8s profile {size.name}: probe at {max_cores:g} cores, {steps} steps")
        kr = _static_k8s(cluster, size, steps, max_cores, f"probe{attempt}")
        rate = 0.0
        try:
            rate, startup = bl.rate_from_samples(kr.progress, steps)
            if steps / rate >= PROBE_MIN_S:
                return rate, startup
        except ValueError:
            pass  # too short to see a rate
        grow = 4.0 if rate <= 0 else max(2.0, 1.5 * PROBE_MIN_S * rate / steps)
        steps = whole_epochs(int(steps * grow))
    raise RuntimeError(f"could not measure {size.name} on the cluster")


def _static_k8s(cluster: Any, size: bl.WorkloadSize, steps: int, cores: float, hint: str) -> Any:
    from bench import k8s_bench as kb

    doc = manifest(size, whole_epochs(steps), 3600.0, cores, cores, cores, "decor")
    kr = kb.run_job(cluster, doc, bl.Scenario("static", 1.0), 3600.0, cores, f"profile-{hint}")
    if kr.error or kr.outcome is None or kr.outcome.finished_s is None:
        raise RuntimeError(f"static run of {size.name} on the cluster failed: {kr.error}")
    return kr


def execute_k8s(
    run: bl.PlannedRun,
    size: bl.WorkloadSize,
    grid: bl.Grid,
    results: Results,
    cluster: Any,
    max_cores: float,
) -> dict[str, Any]:
    """One planned run as a DeadlineTrainingJob on the cluster; its record (runtime k8s)."""
    from bench import k8s_bench as kb

    prof = results.data["k8s"]["profiles"][run.workload]
    steps, all_cores_s = int(prof["steps"]), float(prof["all_cores_s"])
    scenario = bl.SCENARIOS[run.scenario]
    deadline_s = scenario.factor * all_cores_s
    lo, hi = grid.min_cores, max_cores
    doc = manifest(
        size, whole_epochs(steps), deadline_s, lo, hi, start_cores(run.policy, hi), run.policy
    )
    initial = parse_job(doc).resources.initial
    load = load_1m()
    kr = kb.run_job(cluster, doc, scenario, deadline_s, initial, run.run_id, grid.disturb_processes)
    o = kr.outcome
    finished = o.finished_s if o is not None and not kr.error else None
    cs_finish = kr.core_seconds_to_finish(initial)
    record: dict[str, Any] = {
        "workload": run.workload,
        "policy": run.policy,
        "runtime": "k8s",
        "scenario": run.scenario,
        "deadline_factor": round(scenario.final_factor, 4),
        "initial_deadline_factor": scenario.factor,
        "repetition": run.repetition,
        "deadline_s": round(kr.deadline_s, 3),
        "finished_s": None if finished is None else round(finished, 3),
        "deviation_pct": None
        if o is None or o.deviation_pct is None
        else round(o.deviation_pct, 4),
        "late": bool(o is not None and o.deviation_pct is not None and o.deviation_pct > 0),
        "core_seconds": round(kr.core_seconds(initial), 3),
        "core_seconds_to_finish": None if cs_finish is None else round(cs_finish, 3),
        # No oracle: the local speed curve (two threads at MAX) does not hold on the node.
        "oracle_core_seconds": None,
        "oracle_cores": None,
        "actuations": o.resizes if o is not None else 0,
        "allocation_changes_seen": kb.count_changes(kr.samples),
        "cores_min": lo,
        "cores_max": hi,
        "initial_cores": initial,
        "steps": steps,
        "all_cores_s": round(all_cores_s, 3),
        "machine_cores": results.data["k8s"]["machine"]["cores"],
        "machine_model": results.data["k8s"]["machine"]["model"],
        "limiter": "kubernetes in-place resize (operator out of cluster)",
        "date": _now(),
        "load_1m": load,
        "grid": grid.name,
        "code_hash": results.data["k8s"]["code_hash"],
        "namespace": kr.namespace,
        "error": kr.error,
        **kr.notes,
    }
    results.add(record, _k8s_trace(kr, steps, deadline_s) if o is not None else None)
    return record


def _k8s_trace(kr: Any, steps: int, deadline_s: float) -> dict[str, Any]:
    """The compact trace (as compact_trace) from the cluster samples, 0.5 s apart."""
    start = kr.outcome.start_s
    moved = kr.notes.get("moved_at_s")
    rows = [(t - start, c) for t, c in kr.samples if t >= start]
    progress = dict(kr.progress)
    t_s = [round(t, 2) for t, _ in rows]
    in_force = [kr.deadline_s if moved is not None and t >= moved else deadline_s for t in t_s]
    return {
        "t_s": t_s,
        "progress": [
            None if t not in progress else round(progress[t] / steps, 4)
            for t in (t for t, _ in rows)
        ],
        "set_point": [
            round(t / d, 4) if d > 0 else 1.0 for t, d in zip(t_s, in_force, strict=True)
        ],
        "deadline_s": [round(d, 2) for d in in_force],
        "cores": [None if c is None else round(c, 3) for _, c in rows],
        "moved_at_s": moved,
    }


def _interrupt(signum: int, frame: object) -> None:
    log(f"received {signal.Signals(signum).name}")
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.grid == "smoke" and args.sizes == "paper" and args.runtime == "local":
        parser.error("the smoke grid has one tiny size")
    foreign = foreign_modules()
    if foreign:
        log(f"this Python imports {', '.join(foreign)}, not this checkout ({ROOT});")
        log("run `bash hack/venv.sh` here first (make bench-* does)")
        return 2
    random.seed(args.seed)
    for signum in (
        signal.SIGTERM,
        signal.SIGINT,
    ):  # stop like Ctrl-C: trainer stopped, cgroup removed
        signal.signal(signum, _interrupt)
    try:
        code = run_grid(args)
    except KeyboardInterrupt:
        log("interrupted; the finished runs are saved (--resume continues)")
        return 130
    if code == 0 and args.report:
        from bench import report

        out = Path(
            args.out
            or (
                Path(tempfile.gettempdir()) / "decor-bench-smoke"
                if args.grid == "smoke" and args.runtime == "local"
                else ROOT / "docs" / "benchmarks"
            )
        )
        report.write_report(out)
    return code


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench.harness``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--grid", choices=("smoke", "quick", "full"), default="smoke")
    parser.add_argument(
        "--sizes",
        choices=("small", "paper"),
        default="small",
        help="workload sizes (paper: the papers' models; hours)",
    )
    parser.add_argument(
        "--all-cores-s", type=float, help="override the grid's all-cores run time T (s)"
    )
    parser.add_argument("--workloads", help=f"comma-separated subset of {','.join(bl.WORKLOADS)}")
    parser.add_argument(
        "--out", help="results folder (default: docs/benchmarks; smoke: $TMPDIR/decor-bench-smoke)"
    )
    parser.add_argument(
        "--workdir", help="run folders and state (default: $TMPDIR/decor-bench-GRID)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs already in results.json and do the rest",
    )
    _add_quiet_machine_flags(parser)
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the policy order per setting (balanced over repetitions)",
    )
    parser.add_argument("--report", action="store_true", help="write README.md and plots when done")
    parser.add_argument(
        "--runtime",
        choices=("local", "k8s"),
        default="local",
        help="local: the grid through decor.local.runtime; k8s: the cluster subset (resnet, vgg, "
        "lstm; d1.5, d1.8, d2.5, move-0.8, disturb; decor and decor-nn; 2 repetitions) on "
        "$KUBECONFIG through the checkout's operator, appended to OUT/results.json (--grid "
        "is ignored)",
    )
    parser.add_argument("--scenarios", help="comma-separated subset of the grid's scenarios")
    parser.add_argument("--policies", help="comma-separated subset of the grid's policies")
    parser.add_argument(
        "--reps", type=int, help="repetitions of every policy (default: the grid's)"
    )
    return parser


def _add_quiet_machine_flags(parser: argparse.ArgumentParser) -> None:
    """Whether and how long to wait for a quiet machine before each run."""
    parser.add_argument(
        "--no-wait", action="store_true", help="do not wait for a quiet machine (smoke, CI)"
    )
    parser.add_argument(
        "--max-load",
        type=float,
        default=1.0,
        help="1-minute load under which the machine counts as quiet",
    )
    parser.add_argument("--quiet-timeout-s", type=float, default=QUIET_TIMEOUT_S)


if __name__ == "__main__":
    sys.exit(main())
