"""Issue #15: the statistics of several tensors combined into those of their
concatenation (`stats.combine`), as `Tracker.combined` does across ranks."""

from __future__ import annotations

import math

import pytest
import torch

from tensor_tracker import stats
from tensor_tracker.errors import ArgumentValueError

# Block statistics depend on where the blocks fall, which concatenating 1-D parts moves;
# tests/stats/test_blocking.py combines them from row shards.
EVERY_BUILTIN = [
    *(n for n in stats.NAMES if n not in stats.BLOCK_NAMES),
    stats.histogram(bins=6, range=(-4.0, 2.0)),
]


def _parts() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(300, generator=g) * 3 + 1,
        torch.randn(7, generator=g).to(torch.bfloat16).float() * 1e-6,
        torch.zeros(0),
        torch.tensor([0.0, 70000.0, -1e-30, 2.0**-20]),
    ]


def _assert_close(a: dict[str, object], b: dict[str, object]) -> None:
    assert a.keys() == b.keys()
    for name, value in a.items():
        if isinstance(value, list):
            assert value == b[name], name  # counts: exact
        else:
            assert value == pytest.approx(b[name], rel=1e-6, abs=1e-9, nan_ok=True), name


def test_every_builtin_statistic_and_histogram_combines_exactly() -> None:
    fn = stats.parse(EVERY_BUILTIN)
    parts = _parts()
    combined = stats.combine([fn(p) for p in parts]).to_dict()
    _assert_close(combined, fn(torch.cat(parts)).to_dict())
    assert stats.inexact_names(fn.layout) == ()


def test_non_finite_parts_combine_like_the_whole() -> None:
    fn = stats.parse(["mean", "std", "min", "max", "nonfinite", "sum"])
    parts = [torch.tensor([1.0, math.nan]), torch.tensor([math.inf, -2.0]), torch.ones(3)]
    _assert_close(stats.combine([fn(p) for p in parts]).to_dict(), fn(torch.cat(parts)).to_dict())


def test_custom_statistics_cannot_combine_and_say_so() -> None:
    fn = stats.parse(["max", ("median", torch.median)])
    combined = stats.combine([fn(torch.arange(3.0)), fn(torch.arange(5.0))]).to_dict()
    assert combined["max"] == 4.0 and math.isnan(combined["median"])
    assert stats.inexact_names(fn.layout) == ("median",)
    sampled = stats.parse([stats.histogram(sample_n=8)])
    assert stats.inexact_names(sampled.layout) == sampled.layout.names


def test_combining_nothing_or_different_statistics_is_refused() -> None:
    with pytest.raises(ArgumentValueError, match="at least one"):
        stats.combine([])
    a, b = stats.parse(["max"]), stats.parse(["min"])
    with pytest.raises(ArgumentValueError, match="different StatsFn"):
        stats.combine([a(torch.ones(2)), b(torch.ones(2))])
