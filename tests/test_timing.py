"""The fast loop's guard (tests/timing.py): which tests it fails, and how it counts time.

The runs here use fake clocks that the inner tests move on (`spend`), so that a test "sleeps
6 s" or "waits 20 s for a CPU" in no time at all."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.timing import TICKS, Sample, duration, read_clocks

FAKE_CLOCKS = '''
"""Fake clocks for tests.timing: the inner tests move them on with the `spend` fixture."""
import pytest
import tests.timing as timing

NOW = {"wall": 0.0, "cpu": 0.0, "delay": 0.0, "children": 0.0}
_patch = pytest.MonkeyPatch()


def _spend(wall, cpu=0.0, delay=0.0, children=0.0):
    """`wall` seconds pass, of which the thread ran `cpu` and waited for a CPU `delay`;
    the children it waited for ran `children` seconds of CPU."""
    for name, seconds in dict(wall=wall, cpu=cpu, delay=delay, children=children).items():
        NOW[name] += seconds


@pytest.fixture
def spend():
    return _spend


def pytest_configure(config):
    _patch.setattr(timing, "read_clocks", lambda: timing.Sample(**NOW))


def pytest_unconfigure(config):
    _patch.undo()
'''

TESTS = """
import pytest


def test_sleeps_6_s(spend):
    spend(wall=6.0)


def test_runs_6_s(spend):
    spend(wall=6.0, cpu=6.0)


@pytest.mark.slow
def test_marked_slow_sleeps_6_s(spend):
    spend(wall=6.0)


def test_waits_20_s_for_a_cpu(spend):
    spend(wall=21.0, cpu=1.0, delay=20.0)


def test_waits_30_s_for_a_child_of_2_s(spend):
    spend(wall=30.0, cpu=0.5, children=2.0)


def test_waits_for_a_child_of_7_s(spend):
    spend(wall=30.0, children=7.0)


@pytest.fixture
def sets_up_3_s(spend):
    spend(wall=3.0)
    yield
    spend(wall=1.0, cpu=1.0)


def test_3_s_in_its_fixture_and_2_s_itself(sets_up_3_s, spend):
    spend(wall=2.0, cpu=2.0)
"""

OVER = [  # the longest first, then by name
    ("test_waits_for_a_child_of_7_s", "7.00"),
    ("test_3_s_in_its_fixture_and_2_s_itself", "6.00"),
    ("test_runs_6_s", "6.00"),
    ("test_sleeps_6_s", "6.00"),
]
UNDER = ["test_marked_slow_sleeps_6_s", "test_waits_20_s_for_a_cpu", "test_waits_30_s_for_a_child"]


@pytest.fixture
def fake(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(FAKE_CLOCKS)
    pytester.makeini("[pytest]\nmarkers =\n    slow: seconds or more alone\n")
    return pytester


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_test_over_5_s_not_marked_slow_fails_the_run_named_with_its_duration(
    fake: pytest.Pytester, workers: list[str]
) -> None:
    fake.makepyfile(test_times=TESTS)
    result = fake.runpytest("-p", "tests.timing", *workers)
    result.assert_outcomes(passed=7)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*tests over 5 s not marked slow*"]
        + [f"*{seconds} s  test_times.py::{name}" for name, seconds in OVER]
        + ["FAILED: 4 test(s) over 5 s without @pytest.mark.slow*"]
    )
    summary = result.stdout.str().split("tests over 5 s not marked slow")[1]
    assert not any(name in summary for name in UNDER)


def test_a_run_of_fast_tests_passes_and_slowest_lists_them(fake: pytest.Pytester) -> None:
    fake.makepyfile(
        test_fast="""
        import pytest

        def test_one_second(spend):
            spend(wall=1.0, cpu=1.0)

        @pytest.mark.slow
        def test_marked_slow_9_s(spend):
            spend(wall=9.0, cpu=9.0)
        """
    )
    result = fake.runpytest("-p", "tests.timing", "--slowest=5")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*5 longest tests, without the wait for a CPU*",
            "*9.00 s  test_fast.py::test_marked_slow_9_s  (slow)",
            "*1.00 s  test_fast.py::test_one_second",
            "*10.0 s  in all, 2 tests",
        ]
    )
    result.stdout.no_fnmatch_line("*not marked slow*")


def test_the_duration_is_the_wall_time_where_the_thread_clocks_are_missing() -> None:
    assert duration(Sample(10.0), Sample(17.5, children=3.0)) == 7.5


def test_the_duration_leaves_out_the_wait_for_a_cpu_and_for_children_beyond_their_cpu() -> None:
    start = Sample(wall=100.0, cpu=1.0, delay=2.0, children=0.5)
    assert duration(start, Sample(wall=110.0, cpu=2.0, delay=8.0, children=0.5)) == 4.0
    assert duration(start, Sample(wall=110.0, cpu=2.0, delay=2.0, children=2.5)) == 3.0


@pytest.mark.skipif(not TICKS, reason="needs Linux's /proc")
def test_a_running_child_counts_by_its_cpu_time() -> None:
    # As a browser does for the tests that drive one: it runs on while the test waits.
    busy = (
        "import time\nwhile time.process_time() < 0.3: pass\n"
        "print('busy', flush=True)\ntime.sleep(60)"
    )
    start = read_clocks()
    child = subprocess.Popen([sys.executable, "-c", busy], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "busy\n"
        assert read_clocks().children - start.children >= 0.3 - 2 / TICKS
    finally:
        child.kill()
        child.wait()
