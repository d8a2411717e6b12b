"""Trackers of a small transformer that several test modules read (never modify), and how
the tests are shared among pytest-xdist workers."""

from __future__ import annotations

import pytest

from tensor_tracker import Tracker, stats, track
from tests.helpers import tiny_model, train


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep the tests of a module that share a module-scoped fixture (a browser, a JupyterLab
    server, spawned ranks, a real-size model) on one pytest-xdist worker (`--dist loadgroup`,
    as `./dev test` runs them), so that the fixture is built once; other tests go to
    whichever worker is free. Session fixtures (below) are built once per worker."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures is None:  # not a Python test function (e.g. a doctest)
            continue
        if any(defs[-1].scope == "module" for defs in fixtures.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session")
def full() -> Tracker:
    """Full copies of one training step."""
    model = tiny_model()
    return train(model, track(model))


@pytest.fixture(scope="session")
def full_steps() -> Tracker:
    """Full copies of three training steps."""
    model = tiny_model()
    return train(model, track(model), steps=3)


@pytest.fixture(scope="session")
def with_stats() -> Tracker:
    """The default statistics of one training step."""
    model = tiny_model()
    return train(model, track(model, stats=True))


@pytest.fixture(scope="session")
def with_stats_steps() -> Tracker:
    """The default statistics of two training steps."""
    model = tiny_model()
    return train(model, track(model, stats=True), steps=2)


@pytest.fixture(scope="session")
def hist_steps() -> Tracker:
    """rms, abs_max and the default histogram over three training steps."""
    model = tiny_model()
    return train(model, track(model, stats=["rms", "abs_max", stats.histogram()]), steps=3)
