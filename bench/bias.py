"""Where a controlled run's deviation comes from: ``python -m bench.bias [RUNS_DIR]``.

Reads every ``trace.json`` of the ``decor`` runs under RUNS_DIR (default: the quick grid's
work directory, ``$TMPDIR/decor-bench-quick/runs``) and splits each run's signed deviation
(finish - deadline, % of the deadline's span D) into three parts that add up to it:

* ``plan``: where the law's predicted finish (``eta_s``) stood when the end game began
  (``endgame_ratio`` x D before the target), against the deadline: the lead or lag the law
  carried into its last stretch, the safety margin included;
* ``end game``: how far the predicted finish moved during the end game (towards the
  deadline when the law spends a lead, away from it when it cannot);
* ``prediction``: the actual finish against the last prediction before it (the speed model's
  error over the last period, and the finish stamp).

``decompose`` is pure (tested in tests/unit/test_bench_bias.py); the rest reads files.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from decor.core.control import Settings

# The law's default (what the runs used unless a spec overrides it).
ENDGAME_RATIO = Settings.endgame_ratio


@dataclass(frozen=True)
class Split:
    """A run's signed deviation in parts, each in % of D (they add up to ``deviation``)."""

    deviation: float
    plan: float
    end_game: float
    prediction: float
    margin: float  # the safety margin the plan aims inside the deadline (part of ``plan``)


def decompose(
    rows: Sequence[Mapping[str, Any]], finished_s: float, margin_s: float = 0.0
) -> Split | None:
    """Split one run (its trace rows, times from its start) or None when it has too few rows
    with a prediction (a run shorter than its end game). ``margin_s``: the safety margin the
    run aimed inside its deadline (none by default; runs of git 3a921d2 and before aimed
    max(0.05 s, 0.1 % of D) early)."""
    rows = [r for r in rows if r.get("eta_s") is not None and r.get("deadline_s")]
    if not rows:
        return None
    deadline_s = float(rows[-1]["deadline_s"])  # the final one (a moved deadline included)
    if deadline_s <= 0:
        return None
    endgame_s = deadline_s - margin_s - ENDGAME_RATIO * deadline_s
    running = [r for r in rows if float(r.get("progress") or 0.0) < 1.0]
    before = [r for r in running if float(r["t_s"]) <= endgame_s]
    if not before or not running:
        return None
    eta_endgame = float(before[-1]["eta_s"])
    eta_last = float(running[-1]["eta_s"])

    def pct(seconds: float) -> float:
        return 100.0 * seconds / deadline_s

    return Split(
        deviation=pct(finished_s - deadline_s),
        plan=pct(eta_endgame - deadline_s),
        end_game=pct(eta_last - eta_endgame),
        prediction=pct(finished_s - eta_last),
        margin=-pct(margin_s),
    )


def render(splits: Mapping[str, Split]) -> str:
    """A markdown table: one row per workload and one for all runs, means in %."""
    groups: dict[str, list[Split]] = {}
    for run, split in sorted(splits.items()):
        groups.setdefault(run.split("/")[0], []).append(split)
    groups["all"] = list(splits.values())
    lines = [
        "| runs | n | deviation | plan at the end game | of which margin | end game | prediction |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, items in groups.items():
        cells = [
            mean(getattr(s, part) for s in items)
            for part in ("deviation", "plan", "margin", "end_game", "prediction")
        ]
        lines.append(f"| {name} | {len(items)} | " + " | ".join(f"{c:+.2f}" for c in cells) + " |")
    return "\n".join(lines)


def read_runs(runs_dir: Path, scenarios: Sequence[str], margin_s: float = 0.0) -> dict[str, Split]:
    """Every decor run's split (its last attempt), keyed ``workload/scenario/rN``."""
    splits: dict[str, Split] = {}
    for workload in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        for scenario in scenarios:
            for rep in sorted((workload / scenario / "decor").glob("r*")):
                attempts = sorted(rep.glob("a*/trace.json"))
                if not attempts:
                    continue
                trace = json.loads(attempts[-1].read_text())
                finished = (trace.get("summary") or {}).get("finished_s")
                if finished is None:
                    continue
                split = decompose(trace.get("rows") or [], float(finished), margin_s)
                if split is not None:
                    splits[f"{workload.name}/{scenario}/{rep.name}"] = split
    return splits


FEASIBLE = ("d1.5", "d1.8", "d2.5", "move-0.8", "move-1.3", "disturb")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bias", description=__doc__.split("\n\n")[0]
    )
    default = Path(tempfile.gettempdir()) / "decor-bench-quick" / "runs"
    parser.add_argument("runs_dir", nargs="?", type=Path, default=default)
    parser.add_argument(
        "--margin-s",
        type=float,
        default=0.0,
        help="the safety margin the runs aimed inside their deadlines (default: none, the "
        "law's default; 0.05 for the grids of git 3a921d2 and before)",
    )
    args = parser.parse_args(argv)
    if args.margin_s < 0:
        parser.error("--margin-s must be >= 0")
    if not args.runs_dir.is_dir():
        print(f"no runs under {args.runs_dir} (run `make bench-quick` first)", file=sys.stderr)
        return 2
    splits = read_runs(args.runs_dir, FEASIBLE, args.margin_s)
    if not splits:
        print(f"no decor run traces under {args.runs_dir}", file=sys.stderr)
        return 2
    print(render(splits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
