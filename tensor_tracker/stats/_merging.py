"""Statistics of several tensors combined into those of their concatenation, from the raw
vectors alone: the per-rank statistics of one logical tensor (a data-parallel activation,
an FSDP parameter's shards) become the global ones without moving any tensor.

What combines exactly (up to float64 rounding):

- `numel`, `sum`, `abs_mean`, `nonfinite`, `zero_frac` and the format fractions: sums of
  counts and sums;
- `mean`, `std`, `rms`: element-weighted means and the parallel variance formula
  (Chan et al.), from each part's mean and spread;
- `kurtosis`: likewise from each part's mean and second to fourth central moments
  (Pébay's pairwise formulas, summed over the parts);
- `min`, `max`, `abs_max`: the extremes of the extremes (NaN if any part holds NaN);
- the block-format statistics: their squared errors, sums of squares and counts add up
  and `block_dynamic_range` is the largest of the parts', exact when each part holds
  whole blocks (as the row shards of a weight do, with blocks along the last dimension),
  except for NVFP4, whose per-tensor scale is each part's own;
- histograms: bin counts add up, exactly, unless `sample_n` is set (then the counts are
  each part's own sample, added) or `reject_sigma` is (each part rejected values by its
  own mean and spread, not the global ones).

What cannot be combined: custom statistics (`("name", fn)`, `Statistic`): a function of
the whole tensor cannot be rebuilt from its parts' values (a median of medians is not the
median); they come out NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .._validate import check_type
from ..errors import ArgumentValueError
from ._blocking import block_items, block_rules
from ._builtin import raw_plan
from ._kernels import F64, NAN
from ._layout import Layout
from ._spec import BLOCK_NAMES, CustomName, Histogram
from ._table import check_stats
from ._values import Stats

__all__ = ["combine", "combine_table", "inexact_names"]

_SUMS = ("abs_sum", "nonfinite", "nonzero", "sum")


def _rules(layout: Layout) -> list[str]:
    """How each slot of `layout`'s raw vector combines: `"sum"`, `"min"`, `"max"`,
    `"mean"`, `"std0"` or `"nan"` (not combinable)."""
    spec = layout.spec
    names = {item for item in spec if isinstance(item, str) and item not in BLOCK_NAMES}
    groups, _, keys = raw_plan(names)
    rules: list[str] = []
    for group in groups:
        for slot in group.slots:
            rules.append("sum" if slot in _SUMS else slot)
    if keys:
        rules += ["sum"] * (len(keys) + 1)
    for item in spec:
        if isinstance(item, CustomName):
            rules.append("nan")
    for item in spec:
        if isinstance(item, Histogram):
            rules += ["sum"] * (item.bins + 5)
    for config in block_items(spec):
        rules += block_rules(config)
    if len(rules) != layout.width:  # a layout made some other way: say so, never guess
        raise ArgumentValueError(f"cannot combine statistics of {layout!r}")
    return rules


def inexact_names(layout: Layout) -> tuple[str, ...]:
    """The statistics of `layout` that `combine` cannot give exactly: custom statistics
    (NaN), the counts of histograms that sample or reject values, and the NVFP4
    statistics (each part was quantized with its own per-tensor scale).

    Example:
        >>> inexact_names(parse(["rms", ("median", torch.median)]).layout)
        ('median',)
    """
    check_type(layout, Layout, "inexact_names(layout)", "a Layout (e.g. parse(...).layout)")
    out: list[str] = []
    for config in block_items(layout.spec):
        out.extend(n + config.suffix for n in config.stats if n.startswith("nvfp4_"))
    for item in layout.spec:
        if isinstance(item, CustomName):
            out.append(item.name)
        elif isinstance(item, Histogram) and (
            item.sample_n is not None or item.reject_sigma is not None
        ):
            out.extend(item.names)
    return tuple(out)


def combine_table(
    layout: Layout, raw: Tensor, numel: Tensor, group: Tensor, groups: int
) -> tuple[Tensor, Tensor]:
    """Combine the raw vectors of the rows of each group (see the module docstring).

    Args:
        layout: the `Layout` of the raw vectors.
        raw: float64 `[N, width]`, one raw vector per row.
        numel: float64 `[N]`, each row's element count.
        group: int64 `[N]`, the group of each row, in `range(groups)`.
        groups: the number of groups.

    Returns:
        `(raw [groups, width], numel [groups])`, what `Layout.derive` reads.

    Example:
        >>> fn = parse(["mean", "max"])
        >>> a, b = fn(torch.tensor([1.0, 2.0])), fn(torch.tensor([6.0]))
        >>> raw, n = combine_table(fn.layout, torch.stack([a.raw, b.raw]),
        ...     torch.tensor([2.0, 1.0], dtype=torch.float64), torch.tensor([0, 0]), 1)
        >>> fn.layout.derive(raw, n)
        {'mean': tensor([3.], dtype=torch.float64), 'max': tensor([6.], dtype=torch.float64)}
    """
    rules = _rules(layout)
    raw = raw.to(F64)
    numel = numel.to(F64)
    n = torch.zeros(groups, dtype=F64).index_add_(0, group, numel)
    out = torch.full((groups, len(rules)), NAN, dtype=F64)
    # Empty parts carry NaN moments and extremes: leave them out of those.
    present = (numel > 0)[:, None]
    for slot, rule in enumerate(rules):
        column = raw[:, slot]
        if rule == "sum":
            out[:, slot] = torch.zeros(groups, dtype=F64).index_add_(0, group, column)
        elif rule in ("min", "max"):
            fill = torch.inf if rule == "min" else -torch.inf
            kept = torch.where(present[:, 0], column, fill)
            reduced = torch.full((groups,), fill, dtype=F64)
            reduced = reduced.scatter_reduce(0, group, kept, "a" + rule)
            out[:, slot] = torch.where(n > 0, reduced, NAN)
    if "mean" in rules:
        m, s = rules.index("mean"), rules.index("std0")
        weight = torch.where(present[:, 0], numel, 0.0)
        means = torch.where(present[:, 0], raw[:, m], 0.0)
        mean = torch.zeros(groups, dtype=F64).index_add_(0, group, weight * means) / n
        spread = torch.where(present[:, 0], raw[:, s], 0.0)
        # Each part's sum of squared deviations from the global mean.
        m2 = weight * (spread.square() + (means - mean[group]).square())
        std0 = (torch.zeros(groups, dtype=F64).index_add_(0, group, m2) / n).sqrt()
        # A non-finite part makes its spread NaN, which the deriver reports; keep it so.
        bad = torch.zeros(groups, dtype=F64).index_add_(0, group, spread * 0)
        out[:, m] = mean + bad
        out[:, s] = std0 + bad
        if "m4" in rules:
            _combine_m3_m4(out, rules, raw, weight, means - mean[group], group, n, bad)
    return out, n


def _combine_m3_m4(
    out: Tensor,
    rules: list[str],
    raw: Tensor,
    weight: Tensor,
    delta: Tensor,
    group: Tensor,
    n: Tensor,
    bad: Tensor,
) -> None:
    """Fill `out`'s third and fourth central moments (per element) of each group from its
    parts': each part's sums of powers of deviations from its own mean, shifted by `delta`
    (its mean minus the group's) with the binomial expansion (Pébay, 2008); the first
    power's sum is 0 about a part's own mean, so its terms drop out."""
    present = weight > 0
    m2, m3, m4 = (
        torch.where(present, raw[:, rules.index(slot)], 0.0) for slot in ("std0", "m3", "m4")
    )
    m2 = m2.square()
    d2 = delta.square()
    parts = {
        "m3": weight * (m3 + 3 * delta * m2 + delta * d2),
        "m4": weight * (m4 + 4 * delta * m3 + 6 * d2 * m2 + d2.square()),
    }
    for slot, part in parts.items():
        total = torch.zeros(n.shape[0], dtype=F64).index_add_(0, group, part)
        out[:, rules.index(slot)] = total / n + bad


def combine(stats: Sequence[Stats]) -> Stats:
    """The statistics of the concatenation of the tensors `stats` describe, from their
    statistics alone (e.g. the shards of a parameter on each rank); see the module
    docstring for what combines exactly (custom statistics come out NaN).

    Args:
        stats: `Stats` of one layout (made by the same `StatsFn`), at least one.

    Raises:
        ValueError: no stats, or stats of different layouts.

    Example:
        >>> fn = parse(["mean", "std", "max"])
        >>> a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 10.0, -1.0])
        >>> {k: round(v, 4) for k, v in combine([fn(a), fn(b)]).to_dict().items()}
        {'mean': 3.0, 'std': 4.1833, 'max': 10.0}
    """
    check_stats(stats, "combine(stats)")
    if not stats:
        raise ArgumentValueError("combine(stats): give at least one Stats")
    layout = stats[0].layout
    if any(s.layout is not layout for s in stats):
        raise ArgumentValueError("combine(stats): the Stats come from different StatsFn")
    raw = torch.stack([s.raw.detach().to("cpu", F64) for s in stats])
    numel = torch.tensor([float(s.numel) for s in stats], dtype=F64)
    out, n = combine_table(layout, raw, numel, torch.zeros(len(stats), dtype=torch.int64), 1)
    return Stats(layout, out[0], int(n[0]))
