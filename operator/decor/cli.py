"""``decor``: run a job locally, move its deadline, validate a manifest, run the operator.

decor run JOB.yaml [--local] [--policy decor|decor-nn] [--out DIR]
decor deadline NAME (--deadline RFC3339 | --duration 90s)
decor validate JOB.yaml
decor operator [--namespace NS] [--prometheus-url URL]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from decor.model import JobSpec, ManifestError, parse_job


def load_job(path: str) -> JobSpec:
    """Read and validate a manifest file (raises ManifestError or OSError)."""
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
    return parse_job(documents[0])


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
        self.last = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.last >= self.period_s:
            self.last = now
            return True
        return False


_print_live.due = _Every(5.0)  # type: ignore[attr-defined]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_run(args: argparse.Namespace) -> int:
    from decor.local import LocalOptions, run_local

    job = load_job(args.job)
    signal.signal(signal.SIGTERM, _interrupt)  # stop the trainer and keep the trace
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
    if s["error"]:
        lines.append(f"  FAILED: {s['error']}")
    lines.append(f"  core-seconds {s['core_seconds']:.1f}; actuations {s['actuations']}")
    lines.append(
        f"  trace {s['out_dir']}/trace.json, plot {s['out_dir']}/trace.png, log {s['out_dir']}/trainer.log"
    )
    return "\n".join(lines)


def cmd_deadline(args: argparse.Namespace) -> int:
    from decor.local import request_deadline

    record = request_deadline(args.name, deadline=args.deadline, duration=args.duration)
    print(f"asked local job {args.name} (pid {record['pid']}) to move its deadline")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    when = job.deadline.isoformat() if job.deadline else f"{job.duration_s:g}s after start"
    r = job.resources
    print(
        f"{args.job}: valid — {job.name}, {job.epochs} epochs, deadline {when}, {r.mode} {r.min:g}-{r.max:g}"
    )
    return 0


def cmd_operator(args: argparse.Namespace) -> int:
    from decor.handlers import run_operator

    run_operator(namespace=args.namespace, prometheus_url=args.prometheus_url)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decor", description="Training jobs that finish at their deadline."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a DeadlineTrainingJob on this machine")
    run.add_argument("job", help="the job's YAML manifest")
    run.add_argument(
        "--local", action="store_true", help="run here without a cluster (the default)"
    )
    run.add_argument("--policy", choices=["decor", "decor-nn"], help="override spec.control.policy")
    run.add_argument("--out", help="output folder (default decor-runs/NAME-TIME)")
    run.add_argument("--max-cores", type=float, help="cap spec.resources.max")
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
    op.add_argument("--namespace", help="watch one namespace (default: all)")
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
