"""Issue #15: the statistics of several tensors combined into those of their
concatenation (`stats.combine`), as `Tracker.combined` does across ranks."""

from __future__ import annotations

import math

import pytest
import torch

from tensor_tracker import stats
from tensor_tracker.errors import ArgumentValueError
from tensor_tracker.stats._merging import combine_table

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


def test_kurtosis_combines_exactly_across_parts_of_different_means_and_spreads() -> None:
    # Issue 39: steps, calls and ranks of one tensor merge from their raw moments alone.
    g = torch.Generator().manual_seed(1)
    parts = [
        1e4 + 1e-2 * torch.randn(1000, generator=g),
        1e4 + 0.05 + 3e-2 * torch.randn(70_000, generator=g),
        torch.zeros(0),
        1e4 + 0.1 * torch.rand(5, generator=g),
        torch.tensor([1e4 + 0.5]),
    ]
    fn = stats.parse(["mean", "std", "kurtosis"])
    whole = torch.cat(parts).double()
    d = whole - whole.mean()
    want = ((d**4).mean() / (d**2).mean() ** 2).item()
    combined = stats.combine([fn(p) for p in parts]).to_dict()
    assert combined["kurtosis"] == pytest.approx(want, rel=1e-9)
    assert combined["std"] == pytest.approx(whole.std().item(), rel=1e-9)
    # Several groups at once, as `Tracker.combined` merges them (rows in any order).
    raw = torch.stack([fn(p).raw for p in parts + parts[:2]])
    numel = torch.tensor([float(p.numel()) for p in parts + parts[:2]], dtype=torch.float64)
    group = torch.tensor([0, 0, 0, 0, 0, 1, 1])
    out, n = combine_table(fn.layout, raw, numel, group, 2)
    derived = fn.layout.derive(out, n)["kurtosis"]
    pair = torch.cat(parts[:2]).double()
    d = pair - pair.mean()
    assert derived[0].item() == pytest.approx(want, rel=1e-9)
    assert derived[1].item() == pytest.approx(((d**4).mean() / (d**2).mean() ** 2).item(), rel=1e-9)


def test_non_finite_parts_combine_like_the_whole() -> None:
    fn = stats.parse(["mean", "std", "min", "max", "nonfinite", "sum", "kurtosis"])
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
