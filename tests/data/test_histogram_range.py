"""A tracker says, once at the end of its `with` block, when a histogram's fixed range left
many values out (BERT's small gradients below 2^-32 were "not shown" and nothing said why)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from tensor_tracker import stats, track
from tensor_tracker._data.histogram_range import out_of_range


def _run(scale: float, spec: list[object]) -> list[str]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with track(model, stats=spec):
            (model(torch.randn(16, 8)) * scale).sum().backward()
    return [str(w.message) for w in caught if "stats.histogram" in str(w.message)]


def test_values_below_the_range_are_counted_and_a_wider_range_suggested() -> None:
    said = _run(1.0, ["rms", stats.histogram(bins=8, range=(4.0, 8.0))])
    assert len(said) == 1
    # By hand: every output and gradient value is below 2^4, none is zero: the two
    # Linears' and the Sequential's (the second Linear's again), forward and backward.
    model_values = 16 * 8 + 16 * 1 + 16 * 1
    assert f"left out {2 * model_values:,} of {2 * model_values:,} values (100%)" in said[0]
    assert "range=(-12, 8))" in said[0] and "0 above" in said[0]


def test_no_word_when_the_range_holds_the_values_or_there_is_no_histogram() -> None:
    assert _run(1.0, ["rms", stats.histogram()]) == []
    assert _run(1.0, ["rms"]) == []


def test_a_block_left_by_an_exception_says_nothing_and_reading_needs_no_tracker() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    with pytest.raises(ValueError), warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning on the way out
        with track(model, stats=[stats.histogram(range=(10.0, 12.0))]) as t:
            model(torch.ones(2, 4))
            raise ValueError("the training loop failed")
    assert out_of_range(t.stashes)[0].startswith("stats.histogram 'hist' left out 8 of 8")
