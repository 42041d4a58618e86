"""Run the operator (``decor.cli operator``) with a stack sampler beside it: where its threads
spend their time, for the scale benchmark's ``--profile`` (py-spy is not available here).

Every ``--interval-s`` the sampler reads every other thread's Python stack
(``sys._current_frames``) and counts, per thread name, the innermost frame in operator code
(``decor/``) and the innermost frame of all (where the thread actually is: a socket read, a
JSON parse). The counts are wall-clock samples: a thread waiting on the API server is counted
as much as one computing. On SIGTERM the summary is written as JSON to ``--out``.

Run: ``python -m bench.scale.profile_operator --out prof.json`` (the operator's environment as
for ``python -m decor.cli operator``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

OWN_CODE = "/decor/"
TOP_N = 40


def where(frame: FrameType | None) -> tuple[str, str]:
    """(innermost frame, innermost operator-code frame) as ``file:function``."""
    inner = own = ""
    while frame is not None:
        code = frame.f_code
        name = f"{Path(code.co_filename).name}:{code.co_name}"
        if not inner:
            inner = name
        if not own and OWN_CODE in code.co_filename:
            own = name
        if inner and own:
            break
        frame = frame.f_back
    return inner, own or "(no operator frame)"


class Sampler:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.inner: Counter[tuple[str, str]] = Counter()
        self.own: Counter[tuple[str, str]] = Counter()
        self.samples = 0
        self.stopped = threading.Event()
        self.started_s = time.time()

    def run(self) -> None:
        me = threading.get_ident()
        while not self.stopped.wait(self.interval_s):
            names = {t.ident: t.name for t in threading.enumerate()}
            self.samples += 1
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                thread = names.get(ident, str(ident))
                thread = thread.split("_")[0] if thread.startswith("ThreadPoolExecutor") else thread
                inner, own = where(frame)
                self.inner[(thread, inner)] += 1
                self.own[(thread, own)] += 1

    def summary(self) -> dict[str, Any]:
        def top(counter: Counter[tuple[str, str]]) -> list[dict[str, Any]]:
            return [
                {"thread": t, "frame": f, "share": round(n / max(1, self.samples), 4)}
                for (t, f), n in counter.most_common(TOP_N)
            ]

        return {
            "interval_s": self.interval_s,
            "samples": self.samples,
            "seconds": round(time.time() - self.started_s, 1),
            "innermost": top(self.inner),
            "innermost_operator_frame": top(self.own),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale.profile_operator", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--interval-s", type=float, default=0.01)
    args = parser.parse_args(argv)
    sampler = Sampler(args.interval_s)
    threading.Thread(target=sampler.run, name="sampler", daemon=True).start()

    def write(*_: Any) -> None:
        sampler.stopped.set()
        args.out.write_text(json.dumps(sampler.summary(), indent=1) + "\n")

    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        write()
        if callable(previous):
            previous(signum, frame)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    from decor.cli import main as decor_main

    try:
        return decor_main(["operator"])
    finally:
        if not sampler.stopped.is_set():
            write()


if __name__ == "__main__":
    sys.exit(main())
