"""A pytest plugin that keeps the fast loop fast: a test not marked `slow` that takes over
`LIMIT` seconds fails the run, named with its duration in a summary at the end of the session
(under pytest-xdist too: each worker measures its tests and the duration travels to the
controller on the test's reports).

The duration is what the test would take on a quiet machine, not its wall time, so that
it does not depend on the load (CI runs the tests, lint, mypy, the demo and pdoc at once on
two cores; other people run tests on the same machine). On Linux, for the thread that runs
the test (setup, call and teardown together):

    duration = cpu + (min(blocked, children) if children else blocked)

where `cpu` is the thread's CPU time and `blocked` the time it neither ran nor waited for a
CPU (sleeping, reading files, waiting for its other threads or for child processes), that is
the wall time less `cpu` less the thread's run-queue delay (both from
/proc/thread-self/schedstat); `children` is the CPU time its child processes and theirs
spent meanwhile: those that ended (`getrusage(RUSAGE_CHILDREN)`) and those still running,
such as a browser (/proc/<pid>/stat). A child's own wait for a CPU cannot be read once it has
exited, so while a test has children their CPU time stands in for the time it blocked (a
test that sleeps beside an idle child counts short: the rule errs towards passing, not
towards a failure that depends on the load). Where /proc is missing the duration is the wall
time.

`--slowest=N` lists the N longest tests by this duration, marked slow or not.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

LIMIT = 5.0
"""Seconds a test not marked slow may take (see the module's docstring for how they count)."""

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and Path("/proc").is_dir() else 0
"""Clock ticks per second in /proc/<pid>/stat (0: no /proc)."""

ATTRIBUTE = "load_free_duration"
"""The report attribute that carries a phase's duration and whether the test is marked slow,
as a dict (plain data, so it travels from a pytest-xdist worker with the report)."""


@dataclass(frozen=True)
class Sample:
    """The clocks at one instant: wall time, and where Linux tells them, the calling thread's
    CPU time and run-queue delay and the CPU time of the children waited for (seconds)."""

    wall: float
    cpu: float | None = None
    delay: float | None = None
    children: float = 0.0


def _running_descendants_ticks(pid: int) -> int:
    """CPU time of `pid`'s running descendants, each with its own ended children's."""
    ticks = 0
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            pids = children.read_text().split()
        except OSError:  # the thread ended meanwhile
            continue
        for child in pids:
            try:
                stat = Path(f"/proc/{child}/stat").read_text()
            except OSError:  # the child ended meanwhile
                continue
            # After the command's name in parentheses: utime, stime, cutime, cstime are the
            # 12th to the 15th fields.
            ticks += sum(int(f) for f in stat.rpartition(")")[2].split()[11:15])
            ticks += _running_descendants_ticks(int(child))
    return ticks


def read_clocks() -> Sample:
    """The clocks now, for the calling thread."""
    wall = time.perf_counter()
    children = 0.0
    if resource is not None:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        children = usage.ru_utime + usage.ru_stime
    if TICKS:
        children += _running_descendants_ticks(os.getpid()) / TICKS
    try:
        cpu_ns, delay_ns = Path("/proc/thread-self/schedstat").read_text().split()[:2]
    except (OSError, ValueError):
        return Sample(wall, children=children)
    return Sample(wall, int(cpu_ns) / 1e9, int(delay_ns) / 1e9, children)


def duration(start: Sample, end: Sample) -> float:
    """Seconds from `start` to `end` with the time spent waiting for a CPU taken out (the
    rule in the module's docstring)."""
    wall = end.wall - start.wall
    if start.cpu is None or end.cpu is None or start.delay is None or end.delay is None:
        return wall
    cpu = end.cpu - start.cpu
    blocked = max(0.0, wall - cpu - (end.delay - start.delay))
    children = end.children - start.children
    return cpu + (min(blocked, children) if children > 0 else blocked)


PHASES = pytest.StashKey[dict[str, float]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slowest",
        type=int,
        default=0,
        metavar="N",
        help="list the N longest tests by their duration without the wait for a CPU "
        "(tests/timing.py)",
    )


def _measure(item: pytest.Item, when: str) -> Generator[None, object, object]:
    start = read_clocks()
    try:
        return (yield)
    finally:
        item.stash.setdefault(PHASES, {})[when] = duration(start, read_clocks())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _measure(item, "setup"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _measure(item, "call"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _measure(item, "teardown"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    seconds = item.stash.get(PHASES, {}).get(call.when, 0.0)
    setattr(report, ATTRIBUTE, {"seconds": seconds, "slow": bool(item.get_closest_marker("slow"))})
    return report


class Durations:
    """Each test's duration (its phases added up) and whether it is marked slow, gathered
    from the reports where the terminal shows them (the controller under xdist)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.slow: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        measured = getattr(report, ATTRIBUTE, None)
        if measured is None:
            return
        seconds = self.seconds.get(report.nodeid, 0.0)
        self.seconds[report.nodeid] = seconds + measured["seconds"]
        if measured["slow"]:
            self.slow.add(report.nodeid)

    def over_limit(self) -> list[tuple[str, float]]:
        return [(n, s) for n, s in self.longest() if s > LIMIT and n not in self.slow]

    def longest(self) -> list[tuple[str, float]]:
        # by name among equals: xdist's workers report in no fixed order
        return sorted(self.seconds.items(), key=lambda item: (-item[1], item[0]))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.over_limit() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, config: pytest.Config
    ) -> None:
        write = terminalreporter.write_line
        slowest = config.getoption("slowest")
        if slowest:
            terminalreporter.section(f"{slowest} longest tests, without the wait for a CPU")
            for nodeid, seconds in self.longest()[:slowest]:
                mark = "  (slow)" if nodeid in self.slow else ""
                write(f"{seconds:7.2f} s  {nodeid}{mark}")
            write(f"{sum(self.seconds.values()):7.1f} s  in all, {len(self.seconds)} tests")
        over = self.over_limit()
        if over:
            terminalreporter.section(f"tests over {LIMIT:g} s not marked slow", red=True)
            for nodeid, seconds in over:
                write(f"{seconds:7.2f} s  {nodeid}", red=True)
            write(
                f"FAILED: {len(over)} test(s) over {LIMIT:g} s without @pytest.mark.slow: "
                "make them faster or mark them slow (the duration leaves out the time spent "
                "waiting for a CPU; tests/timing.py)",
                red=True,
            )


def pytest_configure(config: pytest.Config) -> None:
    # Workers measure (the hooks above); the process that reports gathers and judges.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Durations(), "timing-durations")
