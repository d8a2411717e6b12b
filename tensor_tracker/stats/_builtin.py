"""The built-in statistics: which raw numbers each one reads and how it is derived.

This table is the single source of truth for the built-in names: `NAMES`, the kernels a
`StatsFn` runs (`kernels.GROUPS`), where each number sits in the raw vector, and how each
statistic is derived from it all follow from `BUILTINS` (plus the number-format fractions,
which read counts between thresholds, `range_keys`). Adding a statistic is one entry, e.g.
the L2 norm, from the moments that `mean` and `std` use::

    "l2_norm": Builtin(
        "moments",
        lambda s: lambda r, n: torch.hypot(r[:, s["mean"]], r[:, s["std0"]]) * n.sqrt(),
    ),

(a statistic needing a new raw number also adds a `RawGroup` to `kernels.GROUPS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from ._kernels import GROUPS, INF, Core, RawGroup, Thresholds
from ._layout import Derive, column
from .formats import FORMATS

__all__ = ["BUILTINS", "FORMAT_NAMES", "Builtin", "plan", "raw_plan"]

Slots = Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class Builtin:
    """A built-in statistic.

    Attributes:
        group: the `kernels.GROUPS` entry whose slots it reads (`None`: it needs nothing
            from the tensor's values).
        derive: given the raw vector's slot positions, the function computing the statistic
            from a batch of raw vectors `[N, width]` and element counts `[N]`.
    """

    group: str | None
    derive: Callable[[Slots], Derive]


def _nan_if_spread_nan(
    value: Callable[[Tensor, Tensor, Slots], Tensor],
) -> Callable[[Slots], Derive]:
    # GPU Welford and the CPU moments both give a NaN spread as soon as one value is
    # non-finite, but the mean can come out ±inf or NaN depending on the order of
    # accumulation; report NaN consistently.
    def derive(s: Slots) -> Derive:
        spread = s["std0"]
        return lambda r, n: torch.where(r[:, spread].isnan(), r[:, spread], value(r, n, s))

    return derive


BUILTINS: dict[str, Builtin] = {
    "mean": Builtin("moments", _nan_if_spread_nan(lambda r, n, s: r[:, s["mean"]])),
    "std": Builtin("moments", lambda s: lambda r, n: r[:, s["std0"]] * torch.sqrt(n / (n - 1))),
    "rms": Builtin(
        "moments",
        _nan_if_spread_nan(lambda r, n, s: torch.hypot(r[:, s["mean"]], r[:, s["std0"]])),
    ),
    "abs_mean": Builtin("abs_sum", lambda s: lambda r, n: r[:, s["abs_sum"]] / n),
    # `+ 0.0` turns the -0.0 of an all-zero tensor (-min is -0.0, max(-0.0, 0.0) may give
    # either) into 0.0; derived when read, so the hooks do no extra work for it.
    "abs_max": Builtin(
        "minmax", lambda s: lambda r, n: torch.maximum(-r[:, s["min"]], r[:, s["max"]]) + 0.0
    ),
    "min": Builtin("minmax", lambda s: column(s["min"])),
    "max": Builtin("minmax", lambda s: column(s["max"])),
    "numel": Builtin(None, lambda s: lambda r, n: n),
    "nonfinite": Builtin("nonfinite", lambda s: column(s["nonfinite"])),
    "zero_frac": Builtin("nonzero", lambda s: lambda r, n: (n - r[:, s["nonzero"]]) / n),
    "sum": Builtin("sum", lambda s: column(s["sum"])),
    # m4 / m2**2; NaN when the variance is 0 (a constant or one-element tensor): 0 / 0.
    "kurtosis": Builtin("moments4", lambda s: lambda r, n: r[:, s["m4"]] / r[:, s["std0"]] ** 4),
}
"""Every built-in statistic except the number-format fractions, in `NAMES` order."""

_FORMAT_KINDS = ("overflow", "underflow", "subnormal")
FORMAT_NAMES: tuple[str, ...] = tuple(f"{f}_{k}" for f in FORMATS for k in _FORMAT_KINDS)
"""`F_overflow`, `F_underflow`, `F_subnormal` for each format `F` in `FORMATS`."""


def plan(names: set[str]) -> tuple[Core | None, dict[str, Derive], list[float]]:
    """What computes the built-in statistics `names`: the `Core` to run (None when nothing
    needs the tensor's values), the derivers, and the raw vector of an empty tensor."""
    groups, from_range, keys = raw_plan(names)
    slots: dict[str, int] = {}
    empty: list[float] = []
    for group in groups:
        for slot in group.slots:
            slots[slot] = len(empty)
            empty.append(group.empty)
    derivers = {
        n: BUILTINS[n].derive(slots) for n in BUILTINS if n in names and n not in from_range
    }
    thresholds = None
    if keys:
        add_range_derivers(derivers, names, keys, offset=len(empty))
        thresholds = Thresholds(keys)
        empty.extend([0.0] * (len(keys) + 1))
    core = Core(groups, thresholds) if empty else None
    return core, derivers, empty


def raw_plan(
    names: set[str],
) -> tuple[list[RawGroup], set[str], list[tuple[float, bool]]]:
    """What the raw vector of the built-in statistics `names` holds, in order: the
    `GROUPS` computed, then (when `keys` is not empty) one count per range bucket, `len(keys)
    + 1` of them; `from_range` are the names read from those counts instead of a group."""
    from_range: set[str] = set()
    keys: list[tuple[float, bool]] = []
    if names & set(FORMAT_NAMES):
        # Format counts need one bucketing pass, which then also yields the zero and
        # non-finite counts for free; without it each of those is a cheaper pass of its own.
        from_range = names & {"zero_frac", "nonfinite"}
        keys = range_keys(names)
    wanted = {BUILTINS[n].group for n in names if n in BUILTINS and n not in from_range}
    if "moments4" in wanted:
        wanted.discard("moments")  # its slots, mean and std0, are moments4's first two
    return [group for key, group in GROUPS.items() if key in wanted], from_range, keys


_ZERO = (0.0, False)
_FINITE = (INF, True)
_NOT_NAN = (INF, False)


def range_keys(names: set[str]) -> list[tuple[float, bool]]:
    """The `|x| <= v` (or `< v` when strict) thresholds the range counts of `names` need."""
    keys: set[tuple[float, bool]] = set()
    if "zero_frac" in names:
        keys.add(_ZERO)
    if "nonfinite" in names:
        keys.add(_FINITE)
    for key, f in FORMATS.items():
        if f"{key}_overflow" in names:
            keys.update(((f.max, False), _NOT_NAN))
        if f"{key}_underflow" in names:
            keys.update(((f.min_subnormal, True), _ZERO))
        if f"{key}_subnormal" in names:
            keys.update(((f.min_normal, True), _ZERO))
    # For equal values "< v" sits below "<= v".
    return sorted(keys, key=lambda k: (k[0], not k[1]))


def add_range_derivers(
    derivers: dict[str, Derive], names: set[str], keys: list[tuple[float, bool]], offset: int
) -> None:
    """Add the derivers of the statistics of `names` read from range counts at `offset`."""
    pos = {k: i for i, k in enumerate(keys)}

    def upto(key: tuple[float, bool]) -> Callable[[Tensor], Tensor]:
        # How many values satisfy |x| <= v (or < v): the buckets up to this boundary.
        end = offset + pos[key] + 1
        return lambda r: r[:, offset:end].sum(1)

    def between(lo: tuple[float, bool], hi: tuple[float, bool]) -> Derive:
        below, above = upto(lo), upto(hi)
        return lambda r, n: (above(r) - below(r)) / n

    if "zero_frac" in names:
        zeros = upto(_ZERO)
        derivers["zero_frac"] = lambda r, n: zeros(r) / n
    if "nonfinite" in names:
        finite = upto(_FINITE)
        derivers["nonfinite"] = lambda r, n: n - finite(r)
    for key, f in FORMATS.items():
        if f"{key}_overflow" in names:
            derivers[f"{key}_overflow"] = between((f.max, False), _NOT_NAN)
        if f"{key}_underflow" in names:
            derivers[f"{key}_underflow"] = between(_ZERO, (f.min_subnormal, True))
        if f"{key}_subnormal" in names:
            derivers[f"{key}_subnormal"] = between(_ZERO, (f.min_normal, True))
