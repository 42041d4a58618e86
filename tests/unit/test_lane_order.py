"""The e2e lanes' dealing order (tests/support/lane_order.py): longest first, groups whole."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from support.lane_order import format_seconds, longest_first, read_seconds, without_group


def ids(tests, order):
    return [tests[k][0] for k in order]


def test_tests_are_dealt_longest_first_and_ties_keep_their_collection_order():
    tests = [("a", None), ("b", None), ("c", None), ("d", None)]
    seconds = {"a": 10, "b": 190, "c": 10, "d": 95}
    assert ids(tests, longest_first(tests, seconds)) == ["b", "d", "a", "c"]


def test_a_group_is_one_unit_of_its_tests_summed_seconds_dealt_whole():
    tests = [("a", None), ("g1", "grp"), ("b", None), ("g2", "grp")]
    seconds = {"a": 100, "g1": 60, "b": 50, "g2": 60}
    # the group's 120 s beat a's 100 s; its tests stay together in collection order
    assert ids(tests, longest_first(tests, seconds)) == ["g1", "g2", "a", "b"]


def test_a_test_with_no_recorded_seconds_is_dealt_before_all_others():
    tests = [("old", None), ("new", None), ("g1", "grp"), ("g2", "grp")]
    seconds = {"old": 500, "g1": 1}
    assert ids(tests, longest_first(tests, seconds)) == ["new", "g1", "g2", "old"]


def test_every_test_is_dealt_exactly_once():
    tests = [(f"t{k}", "g" if k % 7 == 0 else None) for k in range(50)]
    seconds = {f"t{k}": (k * 37) % 11 for k in range(0, 50, 2)}
    assert sorted(longest_first(tests, seconds)) == list(range(50))


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


def test_an_xdist_group_runs_on_one_lane(tmp_path):
    """The e2e lanes rely on ``--dist loadgroup`` keeping an ``xdist_group``'s tests on one
    worker (tests that share a cluster-wide object); some pytest and pytest-xdist releases
    together silently spread them (pyproject.toml). A real two-worker run of a tiny suite."""
    (tmp_path / "test_grouped.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.xdist_group('shared')\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_in_group(i):\n"
        "    with open('lanes.txt', 'a') as out:\n"
        "        out.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_alone(i):\n"
        "    pass\n"
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "test_grouped.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lanes = (tmp_path / "lanes.txt").read_text().split()
    assert len(lanes) == 6 and len(set(lanes)) == 1, lanes
