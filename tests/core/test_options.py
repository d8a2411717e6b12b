"""`Options`: every option of `track` about what to record, checked once, before anything
touches the model; `Recorder` takes it whole; the memory budget on its own."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from torch import nn

from tensor_tracker import Tracker, track
from tensor_tracker.core.budget import MemoryBudget, value_nbytes
from tensor_tracker.core.columns import Columns
from tensor_tracker.core.options import Options
from tensor_tracker.core.tracker import Recorder
from tensor_tracker.errors import ArgumentTypeError, ArgumentValueError, MemoryBudgetError


def test_options_are_normalised_once() -> None:
    options = Options(include=r"^0", capture=("outputs", "inputs"), every={"default": 1, "eval": 3})
    assert isinstance(options.include, re.Pattern) and options.include.pattern == "^0"
    assert options.exclude is None
    assert options.capture == frozenset({"outputs", "inputs"})
    assert (options.every_of("eval"), options.every_of("default"), options.every_of("x")) == (
        3,
        1,
        1,
    )
    assert callable(options.stash)  # the default StashFn, filled in
    with pytest.raises(
        dataclasses.FrozenInstanceError
    ):  # frozen: nothing changes it after the checks
        options.grad = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"grad": 1}, ArgumentTypeError, "grad="),
        ({"include": "("}, ArgumentValueError, "include="),
        ({"exclude": 3}, ArgumentTypeError, "exclude="),
        ({"capture": "weights"}, ArgumentValueError, "capture="),
        ({"every": 0}, ArgumentValueError, "every="),
        ({"every": {"eval": 0}}, ArgumentValueError, "every['eval']"),
        ({"every": {"eval": 3}}, ArgumentValueError, "no 'default' entry"),
        ({"train_only": "yes"}, ArgumentTypeError, "train_only="),
        ({"max_bytes": -1}, ArgumentValueError, "max_bytes="),
        ({"keep_steps": 0}, ArgumentValueError, "keep_steps="),
        ({"optimizer": "adam"}, ArgumentTypeError, "optimizer="),
        ({"stash": 3}, ArgumentTypeError, "stash="),
    ],
)
def test_each_option_is_checked_and_named(kwargs: dict, error: type, named: str) -> None:
    with pytest.raises(error, match=re.escape(named)):
        Options(**kwargs)
    # track() checks through the same object, before any hook is attached.
    model = nn.Linear(2, 2)
    if "stash" not in kwargs:
        with pytest.raises(error, match=re.escape(named)):
            track(model, **kwargs)
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_track_builds_one_options_object_the_tracker_keeps() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    t = track(model, grad=False, exclude="1", optimizer=optimizer, every=2, max_bytes=10**6)
    assert isinstance(t.options, Options)
    assert t.options.grad is False and t.options.exclude.pattern == "1"
    assert t.options.optimizer is optimizer and t.options.every == 2
    with t:
        model(torch.randn(3, 2)).sum()
    assert [(s.name, s.grad) for s in t] == [("0", False), ("", False)]


def test_recorder_takes_options_or_keywords_not_both() -> None:
    options = Options(capture="params")
    assert Tracker(options=options).options is options
    assert Recorder(capture="params").options.capture == frozenset({"params"})
    with pytest.raises(ArgumentValueError, match="options="):
        Recorder(options=options, capture="inputs")
    with pytest.raises(ArgumentTypeError, match="options="):
        Recorder(options={"capture": "params"})  # type: ignore[arg-type]


def test_memory_budget_counts_and_stops_before_the_limit() -> None:
    columns = Columns()
    site = columns.site_id("layer", nn.Linear, "output", "")
    stopped: list[bool] = []
    budget = MemoryBudget(100, lambda: stopped.append(True))
    budget.count(columns, site, 0, 60)
    budget.count(columns, site, 0, 40)  # exactly at the limit is allowed
    assert budget.held == 100 and not stopped
    with pytest.raises(MemoryBudgetError, match=r"'layer' \(1 bytes\) would exceed max_bytes=100"):
        budget.count(columns, site, 0, 1)
    assert stopped == [True] and budget.held == 100
    budget.clear()
    assert budget.held == 0


def test_value_nbytes_counts_a_shared_tensor_once() -> None:
    x = torch.zeros(10)
    seen: set[int] = set()
    assert value_nbytes((x, [x, torch.zeros(2, dtype=torch.float64)]), seen) == 40 + 16
    assert value_nbytes(x, seen) == 0  # counted already
    assert value_nbytes((x, x)) == 80  # without `seen`, every leaf
