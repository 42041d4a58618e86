"""The CI smoke check of the scale harness: the run produced a complete record in which the
operator did its work (jobs ran, finished and were measured) and, with several replicas, one
led the whole window and the standby was measured and sent no write. It asserts no
performance."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.scale import measure


def problems(record: dict) -> list[str]:
    """What is missing from a smoke record (empty: the harness works)."""
    found = [f"missing field {k}" for k in measure.RESULT_FIELDS if k not in record]
    if not record.get("running_at_window_start"):
        found.append("no job was Running when the window started")
    if not record.get("api_requests_per_s"):
        found.append("no operator request in the audit log")
    if not record.get("periods_in_window"):
        found.append("the operator ran no control period in the window")
    if record.get("operator_cores_mean") is None:
        found.append("operator CPU not measured")
    if not record.get("jobs_finished"):
        found.append("no job reported an outcome")
    if (record.get("operator_replicas") or 1) > 1:
        if not record.get("leader"):
            found.append("no replica led the whole window (the Lease and the gauges disagree)")
        for key in ("standby_cores_mean", "standby_rss_mib_max"):
            if record.get(key) is None:
                found.append(f"{key} not measured")
        for replica in record.get("replicas") or []:
            if replica.get("role") == "standby" and replica.get("writes_per_s"):
                found.append(f"the standby {replica['identity']} sent writes")
    return found


def main(argv: list[str]) -> int:
    records = json.loads(Path(argv[0]).read_text())["records"]
    found = [p for r in records for p in problems(r)] if records else ["no record"]
    for p in found:
        print(f"bench-scale-smoke: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
