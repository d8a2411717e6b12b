"""Choosing stashes: from a tracker, only the stashes asked for are built, and they are the
ones `select` finds in the whole list."""

from __future__ import annotations

import pytest
import torch

import tensor_tracker
from tensor_tracker._data.select import (
    first_stashes,
    recorded_steps,
    select,
    select_from,
    short_labels,
    stash_label,
)
from tests.helpers import mlp


@pytest.fixture
def tracker() -> tensor_tracker.Tracker:
    model = mlp()
    with tensor_tracker.track(model, stats=True, capture=["outputs", "params"]) as t:
        for _ in range(3):
            model(torch.randn(2, model[0].in_features)).sum().backward()
            t.step()
    return t


@pytest.mark.parametrize(
    "criteria",
    [
        {},
        {"names": "0"},
        {"names": ["", "2"], "grad": True},
        {"grad": False, "kind": None},
        {"kind": "param", "grad": True},
        {"names": r"^\d$", "kind": "output", "grad": False},
        {"kind": ("output", "param"), "step": 1},  # several kinds: outputs with their ops
    ],
)
def test_select_from_a_tracker_finds_what_select_finds(
    tracker: tensor_tracker.Tracker, criteria: dict[str, object]
) -> None:
    everything = list(tracker)
    fast = select_from(tracker, "tracker", **criteria)  # type: ignore[arg-type]
    assert fast and fast == select(everything, **criteria)  # type: ignore[arg-type]
    assert select_from(everything, "tracker", **criteria) == fast  # type: ignore[arg-type]


def test_first_stashes_has_each_module_direction_and_kind_once(
    tracker: tensor_tracker.Tracker,
) -> None:
    everything = list(tracker)
    firsts = first_stashes(tracker, "tracker")
    keys = [(s.name, s.kind, s.attr, s.grad) for s in firsts]
    assert (
        len(set(keys)) == len(keys) == len({(s.name, s.kind, s.attr, s.grad) for s in everything})
    )
    assert all(s.step == 0 for s in firsts)
    assert firsts == first_stashes(everything, "tracker")
    with pytest.raises(TypeError, match="tracker must be"):
        first_stashes(42, "tracker")


def test_recorded_steps_of_a_kind(tracker: tensor_tracker.Tracker) -> None:
    assert recorded_steps(tracker, "tracker", "output") == [0, 1, 2]
    assert recorded_steps(list(tracker), "tracker", "param") == [0, 1, 2]
    assert recorded_steps(tracker, "tracker", "optimizer") == []


def test_short_labels_keep_whole_names_that_would_read_the_same() -> None:
    names = [
        "encoder.layer.0.attention.output.dense",  # 38 characters: both lose their first
        "decoder.layer.0.attention.output.dense",  # component, and would read the same
        "encoder.layer.11.attention.output.LayerNorm",
        "head",
    ]
    assert short_labels(names) == [
        names[0],
        names[1],
        "\u2026layer.11.attention.output.LayerNorm",
        "head",
    ]


def test_an_op_record_is_labelled_as_what_it_is_inside_its_module() -> None:
    from tests.core.test_ops import _gpt, _input

    model = _gpt()
    with tensor_tracker.track(model, ops="softmax", stats=True) as t:
        model(_input()).sum().backward()
    ops = select(t, kind="op")
    assert [stash_label(s) for s in ops] == [
        "softmax#0 of 0.attn (fwd)",
        "softmax#0 of 1.attn (fwd)",
        "softmax#0 of 1.attn (grad)",
        "softmax#0 of 0.attn (grad)",
    ]
