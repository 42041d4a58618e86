"""``decor``: run a job locally, move its deadline, validate a manifest, run the operator.

decor run JOB.yaml [JOB2.yaml ...] [--local] [--policy decor|decor-nn] [--out DIR]
          [--max-cores N] [--planner POLICY] [--stagger SECONDS]
decor deadline NAME (--deadline RFC3339 | --duration 90s)
decor validate JOB.yaml
decor operator [--namespace NS] [--prometheus-url URL]
"""

from __future__ import annotations

import argparse
import math
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from decor.api.model import JobSpec, ManifestError, parse_duration_s, parse_job
from decor.core.planner import POLICIES, POLICY_DECOR

LOG_EVERY_S = 5.0  # off a terminal, progress lines at most this often


GENERATED_SUFFIX = "x" * 5
"""What stands for the 5 random characters the API server appends to ``metadata.generateName``
when ``decor validate`` checks a manifest that has no name of its own."""


def load_job(path: str) -> JobSpec:
    """Read and validate a manifest file (raises ManifestError or OSError)."""
    return parse_job(load_manifest(path))


def load_manifest(path: str) -> Any:
    """The one YAML document of a manifest file, unvalidated (raises ManifestError)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ManifestError(path, f"cannot read: {exc.strerror}") from exc
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(path, f"not valid YAML: {exc}".replace("\n", " ")) from exc
    if len(documents) != 1:
        raise ManifestError(
            path, f"expected one DeadlineTrainingJob document, found {len(documents)}"
        )
    return documents[0]


def _print_live(line: str, final: bool) -> None:
    if sys.stdout.isatty():
        sys.stdout.write("\r\033[K" + line + ("\n" if final else ""))
        sys.stdout.flush()
    elif final or _print_live.due():  # type: ignore[attr-defined]
        print(line, flush=True)


class _Every:
    """True at most once per ``period_s`` (progress lines in a log, not a flood)."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.last = -math.inf  # the first call is always due

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.last >= self.period_s:
            self.last = now
            return True
        return False


_print_live.due = _Every(LOG_EVERY_S)  # type: ignore[attr-defined]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class LiveBoard:
    """Several jobs' live view: one line per job, redrawn in place on a terminal; on a pipe
    or file, the block is printed at most once per ``period_s`` (a log, not a flood)."""

    def __init__(self, tty: bool, period_s: float = LOG_EVERY_S) -> None:
        self.tty = tty
        self.due = _Every(period_s)
        self.drawn = 0  # lines of the board now on the terminal
        self.lines: list[str] = []

    def show(self, lines: list[str]) -> None:
        self.lines = list(lines)
        if self.tty:
            self._erase()
            self._draw()
        elif self.due():
            print("\n".join(self.lines), flush=True)

    def note(self, line: str, final: bool) -> None:
        """A message above the board (a job queued, a deadline moved, a warning)."""
        if not final:  # a progress line: the board shows those
            return
        if self.tty:
            self._erase()
            sys.stdout.write(line + "\n")
            self._draw()
        else:
            print(line, flush=True)

    def close(self) -> None:
        """Leave the last board on screen and move below it."""
        if self.tty and self.drawn:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.drawn = 0

    def _erase(self) -> None:
        if self.drawn:
            up = f"\033[{self.drawn - 1}A" if self.drawn > 1 else ""
            sys.stdout.write("\r" + up + "\033[J")
            self.drawn = 0

    def _draw(self) -> None:
        if self.lines:
            sys.stdout.write("\n".join(line[: _columns()] for line in self.lines))
            self.drawn = len(self.lines)
        sys.stdout.flush()


def _columns() -> int:
    return shutil.get_terminal_size().columns - 1  # a full-width line would wrap the cursor


def _stagger_s(text: str | None) -> float:
    return parse_duration_s(text, "--stagger") if text else 0.0


def cmd_run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # stop the trainers and keep the traces
    if len(args.job) > 1:
        return _run_several(args)
    if args.stagger:
        raise ValueError("--stagger needs more than one job")
    from decor.local.runtime import LocalOptions, run_local

    job = load_job(args.job[0])
    out = (
        Path(args.out)
        if args.out
        else Path("decor-runs") / f"{job.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    summary = run_local(
        job,
        LocalOptions(
            out_dir=out, policy=args.policy, max_cores=args.max_cores, display=_print_live
        ),
    )
    if sys.stdout.isatty():
        print()
    print(format_summary(summary.to_dict()))
    return summary.exit_code if summary.error is None else max(1, summary.exit_code)


def _run_several(args: argparse.Namespace) -> int:
    """Several manifests: one run under the planner; DIR/NAME/ per job."""
    from decor.local.runtime import LocalOptions, run_local_many

    jobs = [load_job(path) for path in args.job]
    out = (
        Path(args.out) if args.out else Path("decor-runs") / f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    stagger_s = _stagger_s(args.stagger)
    board = LiveBoard(sys.stdout.isatty())
    try:
        summaries = run_local_many(
            jobs,
            LocalOptions(
                out_dir=out,
                policy=args.policy,
                max_cores=args.max_cores,
                display=board.note,
                board=board.show,
                planner_policy=args.planner,
            ),
            arrivals_s=[i * stagger_s for i in range(len(jobs))],
        )
    finally:
        board.close()
    print()
    print("\n\n".join(format_summary(s.to_dict()) for s in summaries))
    codes = [s.exit_code if s.error is None else max(1, s.exit_code) for s in summaries]
    return max(codes, default=0)


def format_summary(s: dict[str, Any]) -> str:
    lines = [
        f"job {s['name']} ({s['policy']}, CPU via {s['limiter']}, {s['min_cores']:g}-{s['max_cores']:g} cores)"
    ]
    if s["finished_s"] is not None and s["deviation_pct"] is not None:
        verdict = "late" if s["deviation_pct"] > 0 else "on time"
        lines.append(
            f"  finished {s['finished_s']:.1f}s after start; deadline {s['deadline_s']:.1f}s; "
            f"deviation {s['deviation_pct']:+.2f}% ({verdict})"
        )
    elif s["finished_s"] is not None:  # a best-effort job: no deadline to deviate from
        lines.append(f"  finished {s['finished_s']:.1f}s after start (best effort)")
    if s["error"]:
        lines.append(f"  FAILED: {s['error']}")
    if s.get("queued_s"):
        lines.append(f"  waited {s['queued_s']:.1f}s for the planner before starting")
    lines.append(f"  core-seconds {s['core_seconds']:.1f}; actuations {s['actuations']}")
    lines.append(
        f"  trace {s['out_dir']}/trace.json, plot {s['out_dir']}/trace.png, log {s['out_dir']}/trainer.log"
    )
    return "\n".join(lines)


def cmd_deadline(args: argparse.Namespace) -> int:
    from decor.local.runtime import request_deadline

    record = request_deadline(args.name, deadline=args.deadline, duration=args.duration)
    print(f"asked local job {args.name} (pid {record['pid']}) to move its deadline")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.job)
    metadata = manifest.get("metadata") if isinstance(manifest, dict) else None
    generate = metadata.get("generateName") if isinstance(metadata, dict) else None
    shown: str | None = None
    if isinstance(metadata, dict) and not metadata.get("name") and isinstance(generate, str):
        # the API server names it (`kubectl create`): check the name it would make
        manifest = {**manifest, "metadata": {**metadata, "name": generate + GENERATED_SUFFIX}}
        shown = f"{generate}<generated>"
    job = parse_job(manifest)
    if job.best_effort:
        when = "none (best-effort)"
    elif job.deadline is not None:
        when = job.deadline.isoformat()
    else:
        when = f"{job.duration_s:g}s after start"
    r = job.resources
    print(
        f"{args.job}: valid — {shown or job.name}, {job.epochs} epochs, deadline {when}, {r.mode} {r.min:g}-{r.max:g}"
    )
    return 0


def cmd_operator(args: argparse.Namespace) -> int:
    from decor.service.handlers import run_operator

    run_operator(namespaces=args.namespace, prometheus_url=args.prometheus_url)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decor", description="Training jobs that finish at their deadline."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run DeadlineTrainingJobs on this machine")
    run.add_argument(
        "job", nargs="+", help="the job's YAML manifest; several share the machine via the planner"
    )
    run.add_argument(
        "--local", action="store_true", help="run here without a cluster (the default)"
    )
    run.add_argument("--policy", choices=["decor", "decor-nn"], help="override spec.control.policy")
    run.add_argument("--out", help="output folder (default decor-runs/NAME-TIME)")
    run.add_argument(
        "--max-cores",
        type=float,
        help="cap spec.resources.max (several jobs: the cores they share)",
    )
    run.add_argument(
        "--planner",
        choices=list(POLICIES),
        default=POLICY_DECOR,
        help="several jobs: how the planner shares the cores (default decor)",
    )
    run.add_argument(
        "--stagger",
        help="several jobs: each manifest arrives this long after the one before (e.g. 10s)",
    )
    run.set_defaults(func=cmd_run)
    dl = sub.add_parser("deadline", help="move the deadline of a running local job")
    dl.add_argument("name")
    group = dl.add_mutually_exclusive_group(required=True)
    group.add_argument("--deadline", help="new deadline, RFC 3339 (2026-11-22T12:00:00Z)")
    group.add_argument("--duration", help="new deadline relative to the job's start (e.g. 75s)")
    dl.set_defaults(func=cmd_deadline)
    val = sub.add_parser("validate", help="check a manifest and exit")
    val.add_argument("job")
    val.set_defaults(func=cmd_validate)
    op = sub.add_parser("operator", help="run the Kubernetes operator")
    op.add_argument(
        "--namespace",
        action="append",
        help="serve this namespace; repeat for several (default: $DECOR_WATCH_NAMESPACES, "
        "comma-separated, or all namespaces)",
    )
    op.add_argument(
        "--prometheus-url", help="read progress from this Prometheus (default: scrape pods)"
    )
    op.set_defaults(func=cmd_operator)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ManifestError as exc:
        print(f"decor: invalid manifest: {exc}", file=sys.stderr)
        return 2
    except (LookupError, ValueError) as exc:
        print(f"decor: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
