"""The operator's stack sampler for the scale benchmark (bench/scale/profile_operator.py)."""

from __future__ import annotations

import threading

from decor.adapter import scrape

from bench.scale import profile_operator


def test_sampler_counts_where_each_thread_waits() -> None:
    release = threading.Event()
    # A thread blocked inside operator code (decor/adapter/scrape.py) and below it in the stdlib.
    scraper = scrape.Scraper(max_workers=1, wait_s=30)
    worker = threading.Thread(
        target=scraper.read,
        args=({("ns", "p"): lambda: str(release.wait(30) and "")},),
        name="loop",
    )
    worker.start()
    sampler = profile_operator.Sampler(interval_s=0.005)
    runner = threading.Thread(target=sampler.run, name="sampler")
    runner.start()
    deadline = threading.Event()
    for _ in range(400):  # poll until enough samples (at most 2 s)
        if sampler.samples >= 20:
            break
        deadline.wait(0.005)
    sampler.stopped.set()
    runner.join()
    release.set()
    worker.join()
    scraper.close()
    summary = sampler.summary()
    assert summary["samples"] >= 20
    own = {(e["thread"], e["frame"]) for e in summary["innermost_operator_frame"]}
    assert ("decor-scrape_0", "scrape.py:_read_one") in own  # the worker, in operator code
    assert any(t == "loop" and f.startswith("scrape.py:") for t, f in own)
    inner = {e["frame"] for e in summary["innermost"] if e["thread"] == "decor-scrape_0"}
    assert any(f.startswith("threading.py:") for f in inner)
    assert all(0 < e["share"] <= 1 for e in summary["innermost"])
