"""The e2e lanes' dealing order (tests/support/lane_order.py): longest first, groups whole."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from support.lane_order import SOON_S, format_seconds, next_unit, read_seconds, without_group


def test_a_lane_about_to_start_its_next_test_gets_the_longest_waiting():
    assert next_unit([5.0, 190.0, 0.5, 190.0], queued_s=0.0) == 1  # ties: the first
    assert next_unit([5.0, 190.0, 0.5], queued_s=SOON_S) == 1


def test_a_lane_busy_with_a_long_test_gets_the_shortest_to_hold_its_place():
    assert next_unit([5.0, 190.0, 0.5, 0.5], queued_s=93.0) == 2
    assert next_unit([5.0, 190.0], queued_s=SOON_S + 0.1) == 0


def test_a_test_of_unknown_seconds_counts_as_the_longest():
    assert next_unit([188.0, math.inf, 1.0], queued_s=0.0) == 1
    assert next_unit([188.0, 1.0], queued_s=math.inf) == 1


def test_no_waiting_unit_is_an_error():
    with pytest.raises(ValueError):
        next_unit([], queued_s=0.0)


def test_the_xdist_group_suffix_is_dropped_but_not_an_at_sign_in_a_parameter():
    assert (
        without_group("tests/e2e/test_x.py::test_y@admin-allowances")
        == "tests/e2e/test_x.py::test_y"
    )
    assert without_group("tests/e2e/test_x.py::test_y[a@b]") == "tests/e2e/test_x.py::test_y[a@b]"
    assert (
        without_group("tests/e2e/test_x.py::test_y[a@b]@grp") == "tests/e2e/test_x.py::test_y[a@b]"
    )


def test_the_file_reads_back_what_was_written_to_the_second():
    seconds = {"tests/e2e/test_b.py::test_z": 12.4, "tests/e2e/test_a.py::test_y[p]": 187.6}
    text = format_seconds(seconds)
    assert text.index("test_a.py") < text.index("test_b.py")
    assert read_seconds(text) == {
        "tests/e2e/test_b.py::test_z": 12.0,
        "tests/e2e/test_a.py::test_y[p]": 188.0,
    }


@pytest.mark.parametrize(
    "line", ["12 tests/e2e/x.py::t", "-3\tx", "nan\tx", "inf\tx", "abc\tx", "5\t"]
)
def test_a_malformed_line_is_an_error_naming_its_number(line):
    with pytest.raises(ValueError, match="line 2: expected 'seconds<TAB>test id'"):
        read_seconds("# header\n" + line + "\n")


def test_the_recorded_file_parses_and_names_only_e2e_tests():
    from support.lane_order import SECONDS_FILE

    seconds = read_seconds(SECONDS_FILE.read_text())
    assert seconds and all(t.startswith("tests/e2e/test_") and "::" in t for t in seconds)
    assert all(math.isfinite(s) for s in seconds.values())


TESTS_DIR = Path(__file__).resolve().parents[1]


def test_the_lanes_scheduler_starts_the_longest_and_keeps_a_group_on_one_lane(tmp_path):
    """A real two-worker run of a tiny suite under the lanes' scheduler: each lane's first
    test is one of the two longest recorded, and an ``xdist_group``'s tests run on one lane
    (the e2e lanes rely on it for tests that share a cluster-wide object; some pytest and
    pytest-xdist releases together silently spread them: pyproject.toml)."""
    seconds = {f"test_suite.py::test_long[{s}]": s for s in (100, 200, 300, 400)}
    seconds |= {f"test_suite.py::test_short[{k}]": 1 for k in range(6)}
    seconds |= {f"test_suite.py::test_in_group[{k}]": 2 for k in range(4)}
    (tmp_path / "conftest.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(TESTS_DIR)!r})\n"
        "from support.lane_order import ShortAheadScheduling\n"
        "def pytest_xdist_make_scheduler(config, log):\n"
        f"    return ShortAheadScheduling(config, log, {seconds!r})\n"
    )
    (tmp_path / "test_suite.py").write_text(
        "import os, pytest\n"
        "def ran(name):\n"
        "    with open('ran.txt', 'a') as out:\n"
        "        out.write(os.environ['PYTEST_XDIST_WORKER'] + ' ' + name + '\\n')\n"
        "@pytest.mark.parametrize('k', range(6))\n"
        "def test_short(k):\n"
        "    ran(f'short{k}')\n"
        "@pytest.mark.xdist_group('shared')\n"
        "@pytest.mark.parametrize('k', range(4))\n"
        "def test_in_group(k):\n"
        "    ran(f'group{k}')\n"
        "@pytest.mark.parametrize('s', (100, 200, 300, 400))\n"
        "def test_long(s):\n"
        "    ran(f'long{s}')\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "test_suite.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    ran = [line.split() for line in (tmp_path / "ran.txt").read_text().splitlines()]
    assert len(ran) == 14, ran
    first = {lane: name for lane, name in reversed(ran)}  # each lane's first test
    assert sorted(first.values()) == ["long300", "long400"], ran
    assert len({lane for lane, name in ran if name.startswith("group")}) == 1, ran
