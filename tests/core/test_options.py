"""`Options`: every option of `track` and `Tracker`, declared, documented and checked once,
before anything touches the model; `track`'s and `Tracker`'s signatures and docs follow the
declarations; `Recorder` takes it whole; the memory budget on its own."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tensor_tracker import Tracker, load, track
from tensor_tracker._core.budget import MemoryBudget, value_nbytes
from tensor_tracker._core.columns import Columns
from tensor_tracker._core.options import Options, option_fields
from tensor_tracker._core.tracker import Recorder
from tensor_tracker.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    MemoryBudgetError,
    NonFiniteError,
)
from tests.helpers import hook_count, mlp


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
    assert options.stash is None and callable(options.stash_fn)  # the default StashFn
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
    # track() and Tracker() check through the same object, before any hook is attached.
    model = nn.Linear(2, 2)
    with pytest.raises(error, match=re.escape(named)):
        track(model, **kwargs)
    assert not model._forward_hooks and not model._forward_pre_hooks
    if not {"grad", "include", "exclude"} & set(kwargs):
        with pytest.raises(error, match=re.escape(named)):
            Tracker(**kwargs)


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


def test_tracker_takes_options_or_keywords_not_both() -> None:
    options = Options(capture="params")
    assert Tracker(options=options).options is options
    assert Recorder(options).options is options
    assert Tracker(capture="params").options.capture == frozenset({"params"})
    with pytest.raises(ArgumentValueError, match="options="):
        Tracker(options=options, capture="inputs")
    with pytest.raises(ArgumentTypeError, match="options="):
        Tracker(options={"capture": "params"})  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="options="):
        Recorder({"capture": "params"})  # type: ignore[arg-type]


def _params(function: Any, skip: tuple[str, ...]) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(function).parameters.values() if p.name not in skip]


def test_track_and_tracker_take_the_declared_options() -> None:
    """Same names, order, defaults and types as the declarations: an option added to
    `Options` but not to `track` or `Tracker` (or the other way round) fails here."""
    declared = option_fields()
    # Tracker(stash) first, as the contract has it; then the declaration order.
    on_tracker = sorted(option_fields("tracker"), key=lambda f: f.name != "stash")
    signatures = [
        (_params(track, ("module",)), declared),
        (_params(Tracker.__init__, ("self", "options")), on_tracker),
    ]
    for params, fields in signatures:
        assert [p.name for p in params] == [f.name for f in fields]
        for param, field in zip(params, fields, strict=True):
            assert (param.default, param.annotation) == (field.default, field.type), param.name
    # The contract's positional parameters, and register_all's, which take the rest.
    positional = (inspect.Parameter.POSITIONAL_OR_KEYWORD,)
    assert [p.name for p in _params(track, ()) if p.kind in positional] == [
        "module", "grad", "include", "exclude", "stash_value", "stash",
    ]  # fmt: skip
    assert [p.name for p in _params(Tracker.__init__, ("self",)) if p.kind in positional] == [
        "stash"
    ]
    registration = option_fields("registration")
    params = _params(Tracker.register_all, ("self", "module"))
    assert [(p.name, p.default) for p in params] == [(f.name, f.default) for f in registration]


def _documented(doc: str, section: str) -> dict[str, str]:
    """The `name: text` entries of a docstring section, the text on one line."""
    entries: dict[str, str] = {}
    name = ""
    lines = inspect.cleandoc(doc).splitlines()
    start = lines.index(f"{section}:")
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        if line.startswith("        "):
            entries[name] += " " + line.strip()
        else:
            name, _, text = line.strip().partition(": ")
            entries[name] = text
    return entries


def test_each_option_is_documented_as_declared() -> None:
    docs = {f.name: " ".join(f.metadata["doc"].split()) for f in option_fields()}
    tracker_docs = {f.name: docs[f.name] for f in option_fields("tracker")}
    assert _documented(track.__doc__ or "", "Args") == {
        "module": "the model (any `torch.nn.Module`).",
        **docs,
    }
    assert _documented(Tracker.__doc__ or "", "Args") == {
        "options": "all the options at once, as an `Options` (as `track` passes them; then "
        "pass no other).",
        **tracker_docs,
    }
    assert _documented(Options.__doc__ or "", "Attributes") == docs


# A value other than the default for each option, with what it needs beside it.
NOT_DEFAULT: dict[str, dict[str, Any]] = {
    "grad": {"grad": False},
    "include": {"include": "0"},
    "exclude": {"exclude": "1"},
    "stash_value": {"stash_value": torch.Tensor.sum},
    "stash": {"stash": lambda event: None},
    "stats": {"stats": True},
    "ops": {"ops": "softmax"},
    "capture": {"capture": "params"},
    "every": {"every": 2},
    "train_only": {"train_only": True},
    "max_bytes": {"max_bytes": 10},
    "keep_steps": {"keep_steps": 2},
    "device": {"device": None},
    "dtype": {"dtype": torch.bfloat16},
    "sample": {"sample": 3},
    "seed": {"seed": 1},
    "non_blocking": {"non_blocking": True},
    "on_nonfinite": {"on_nonfinite": "warn", "stats": True},
}


@pytest.mark.parametrize("name", [f.name for f in option_fields()])
def test_each_option_reaches_the_tracker(name: str, tmp_path: Path) -> None:
    model = mlp()
    kwargs = {**NOT_DEFAULT.get(name, {name: None}), "stream_to": tmp_path / "run"}
    if name == "optimizer":
        kwargs[name] = torch.optim.SGD(model.parameters(), lr=0.1)
    if name == "on_disk_full":
        kwargs[name] = "warn"
    default = Options()
    with track(model, **kwargs) as t:
        pass
    assert getattr(t.options, name) != getattr(default, name)
    if name not in ("grad", "include", "exclude"):
        with Tracker(**{**kwargs, "stream_to": tmp_path / "manual"}) as manual:
            pass
        assert getattr(manual.options, name) != getattr(default, name)


def test_a_manual_tracker_records_what_track_records() -> None:
    model, x = mlp(), torch.randn(3, 4)
    with track(model, stats=["rms", "sum"], capture=("outputs", "params")) as t:
        model(x).sum().backward()
    manual = Tracker(stats=["rms", "sum"], capture=("outputs", "params"))
    manual.register_all(model)
    model.zero_grad()  # the parameters' gradients as track() saw them
    with manual:
        model(x).sum().backward()
    assert hook_count(model) == 0
    columns = ["name", "kind", "attr", "grad", "rms", "sum"]
    assert manual.to_frame()[columns].equals(t.to_frame()[columns])


def test_a_manual_tracker_streams_and_trips(tmp_path: Path) -> None:
    model, x = mlp(), torch.randn(3, 4)
    manual = Tracker(stats=True, stream_to=tmp_path / "run")
    manual.register(model[0], "first")
    with manual:
        for _ in range(2):
            model(x).sum().backward()
            manual.step()
    assert len(manual) == 0  # on disk, not in memory
    assert sorted(set(load(tmp_path / "run").to_frame()["step"])) == [0, 1]
    model[0].bias.data[0] = float("nan")
    tripwire = Tracker(stats=["sum"], on_nonfinite="raise")
    tripwire.register(model[0], "first")
    with pytest.raises(NonFiniteError, match="'first'"), tripwire:
        model(x).sum().backward()
    assert hook_count(model) == 0


def test_options_that_act_later_are_checked_before_anything_is_made(tmp_path: Path) -> None:
    model = mlp()
    for kwargs in ({"include": "("}, {"on_nonfinite": "raise"}, {"on_disk_full": "ignore"}):
        with pytest.raises(ArgumentValueError):
            track(model, stream_to=tmp_path / "run", **kwargs)
        assert hook_count(model) == 0 and not (tmp_path / "run").exists()


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
