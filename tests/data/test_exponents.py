"""Format fractions read from the exponent histogram, against the recorded fractions."""

from __future__ import annotations

import math

import pytest
import torch

import tensor_tracker
from tensor_tracker._data.exponents import format_fractions
from tensor_tracker.errors import ArgumentValueError
from tensor_tracker.stats.formats import FORMATS

_FRACTIONS = [f"{f}_{k}" for f in FORMATS for k in ("overflow", "underflow", "subnormal")]


def _record(x: torch.Tensor) -> tensor_tracker.Tracker:
    m = torch.nn.Identity()
    with tensor_tracker.track(m, stats=["exp_hist", *_FRACTIONS]) as t:
        m(x)
    return t


def _values() -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.exp2(torch.empty(20000).uniform_(-150, 128)) * torch.randn(20000).sign()
    # Every format's limits, and values just beside them.
    limits = [v for f in FORMATS.values() for v in (f.max, f.min_normal, f.min_subnormal)]
    near = [v * s for v in limits for s in (1.0, 1.001, 0.999)]
    return torch.cat((x, torch.tensor(near), torch.zeros(5)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_derived_fractions_match_recorded_statistics(dtype: torch.dtype) -> None:
    t = _record(_values().to(dtype))
    frame = t.to_frame()
    got = format_fractions(frame)
    row = frame.index[0]
    for key in FORMATS:
        # Exact where the limit is a power of two (all but bf16's underflow, below float32).
        assert got.loc[row, f"{key}_subnormal"] == frame.loc[row, f"{key}_subnormal"]
        if key != "bf16":
            assert got.loc[row, f"{key}_underflow"] == frame.loc[row, f"{key}_underflow"]
        else:
            assert got.loc[row, "bf16_underflow"] >= frame.loc[row, "bf16_underflow"]
        # The maximum is not a power of two: a lower and an upper bound.
        exact = frame.loc[row, f"{key}_overflow"]
        assert got.loc[row, f"{key}_overflow"] <= exact <= got.loc[row, f"{key}_overflow_upper"]
        assert got.loc[row, f"{key}_overflow"] < got.loc[row, f"{key}_overflow_upper"]


def test_fp16_overflow_exact_away_from_the_maximum_binade() -> None:
    x = torch.tensor([1e5, 7e4, 1.0, 3e4, -2e5])  # nothing in (65504, 65536)
    t = _record(x)
    frame = t.to_frame()
    got = format_fractions(t)
    assert got["fp16_overflow"].iloc[0] == frame["fp16_overflow"].iloc[0] == 0.6


def test_infinities_are_left_to_nonfinite() -> None:
    t = _record(torch.tensor([math.inf, math.nan, 1e5, 1.0]))
    got = format_fractions(t)
    assert got["fp16_overflow"].iloc[0] == 0.25
    assert got["nonfinite"].iloc[0] == 2


def test_every_record_gets_fractions_and_no_histogram_is_an_error() -> None:
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    with tensor_tracker.track(m, stats=["exp_hist"]) as t:
        m(torch.randn(2, 3)).sum().backward()
    got = format_fractions(t, formats=("fp16",))
    assert list(got.columns) == [
        "fp16_overflow",
        "fp16_overflow_upper",
        "fp16_underflow",
        "fp16_subnormal",
        "nonfinite",
    ]
    assert got.notna().all().all()
    with tensor_tracker.track(m, stats=True) as plain:
        m(torch.randn(2, 3))
    with pytest.raises(ArgumentValueError, match=r'stats=.*"exp_hist"'):
        format_fractions(plain)
    with pytest.raises(ArgumentValueError, match="fp4"):
        format_fractions(t, formats=("fp4",))
