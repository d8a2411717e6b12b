"""What every `>>>` example in the package's docstrings can use (`pytest --doctest-modules`).

The examples are written for a notebook user who has a model and a batch: here `model` is a
small `nn.Sequential`, `x` a batch for it, `tracker` a tracker that recorded one forward and
backward pass of it, `event` one hook `Event`, and `loader`, `opt`, `loss_fn` a tiny
training set-up; `lm` is a small transformer (blocks `blocks.0`, `blocks.1`) and `tokens`
a batch of token ids for it.

For every test it also registers the fast loop's guard (tests/timing.py), marks slow the
docstring examples that take seconds, and gives each pytest-xdist worker one torch thread.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
import tensor_tracker._core.tracker
from examples.tiny_transformer import TinyTransformer

# The fast loop's guard (a test not marked slow that takes over 5 s fails the run) and
# pytester, which its tests use.
pytest_plugins = ["tests.timing", "pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist runs a worker per core: one torch thread each, or their thread pools
    # oversubscribe the cores and spin (here a quarter more CPU for the same tests).
    if hasattr(config, "workerinput") and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"  # and for the processes the tests start
        torch.set_num_threads(1)


SPREAD = ("tests/tools/test_notebooks.py::test_notebook_runs[",)
"""Tests whose cases `--dist loadfile` (./dev test) hands out one by one, not with their file:
each executes a notebook for 10-40 s on its own, with no fixture to share, and together
they kept one worker busy for two minutes at the end of CI's run."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None  # pytest-xdist's own scheduler for the mode asked for
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class Scheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(SPREAD):
                return nodeid
            scope: str = super()._split_scope(nodeid)
            return scope

    return Scheduling(config, log)


SLOW_DOCTESTS = {
    "tensor_tracker._api.compare_models": "compiles a model with TorchInductor, ~8 s of CPU",
    "tensor_tracker.integrations.lightning.lightning_callback": "imports Lightning, 2-4 s",
    "tensor_tracker.integrations.hf.hf_trainer_callback": "imports transformers, 1-2 s",
}
"""Docstring examples that take seconds: marked slow here, since a docstring has no marks."""


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.DoctestItem) and item.name in SLOW_DOCTESTS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _doctest_namespace(request: pytest.FixtureRequest, doctest_namespace: dict[str, Any]) -> None:
    # Every test starts from the same random state, whichever tests ran before it on its
    # worker (a model a fixture builds must not depend on the order).
    torch.manual_seed(0)
    if not isinstance(request.node, pytest.DoctestItem):
        return  # a test under tests/: the names cost ~5 ms per test, ~10 s in a whole run
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
    x = torch.randn(8, 16)
    with tensor_tracker.track(model) as tracker:
        model(x).sum().backward()
    model.zero_grad()
    event = tensor_tracker.Event("0", nn.Linear, False, torch.ones(2), (), {})
    loader = [torch.randn(8, 16) for _ in range(3)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lm = TinyTransformer(vocab=16, d_model=16, n_layers=2)
    tokens = torch.randint(0, 16, (2, 16))
    doctest_namespace.update(
        plot=tensor_tracker.plot,
        widgets=tensor_tracker.widgets,
        stats=tensor_tracker.stats,
        lm=lm,
        tokens=tokens,
        torch=torch,
        nn=nn,
        tensor_tracker=tensor_tracker,
        track=tensor_tracker.track,
        Tracker=tensor_tracker.Tracker,
        model=model,
        x=x,
        tracker=tracker,
        t=tracker,
        event=event,
        loader=loader,
        opt=opt,
        loss_fn=lambda out: out.pow(2).mean(),
        Recorder=tensor_tracker._core.tracker.Recorder,
        first_nonfinite=tensor_tracker.first_nonfinite,
        summary=tensor_tracker.summary,
        **{name: getattr(tensor_tracker.stats, name) for name in tensor_tracker.stats.__all__},
    )
