"""`to_frame`: stashes as a pandas DataFrame, one row per stash."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._optional import require
from ..core.records import Stash
from ..core.structure import iter_leaves
from ..errors import ArgumentTypeError, ArgumentValueError, NotRecordedError
from ..stats import NAMES, Stats, compute, stats_table

if TYPE_CHECKING:
    import pandas

__all__ = ["to_frame", "type_name"]

_TYPE_NAMES: dict[type, str] = {}


def type_name(cls: type) -> str:
    """`"<module>.<qualname>"` of a class, as in the `type` column."""
    name = _TYPE_NAMES.get(cls)
    if name is None:
        name = _TYPE_NAMES[cls] = f"{cls.__module__}.{cls.__qualname__}"
    return name


def _stat_fn(stat: Callable[[Tensor], Any] | str | None) -> Callable[[Tensor], Any]:
    if stat is None:
        return torch.std
    if isinstance(stat, str):
        if stat not in NAMES:
            raise ArgumentValueError(
                f"to_frame: stat={stat!r} is not a statistic; use one of {list(NAMES)} "
                "or a function of a tensor"
            )
        return lambda t: compute(t, (stat,))[stat]
    if not callable(stat):
        raise ArgumentTypeError(
            f"to_frame: stat must be a callable or a statistic name, got {stat!r}"
        )
    return stat


def _tensor_stats(fn: Callable[[Tensor], Any], values: Sequence[Any]) -> list[float]:
    """Apply `fn` to each tensor and read all results back with one transfer per device."""
    out = [math.nan] * len(values)
    pending: dict[torch.device, tuple[list[int], list[Tensor]]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. std of one element: NaN, as documented
        for i, value in enumerate(values):
            if not isinstance(value, Tensor) or value.numel() == 0:
                continue
            if value.layout != torch.strided:  # sparse: the dense tensor it stands for
                value = value.to_dense()
            try:
                result = fn(value)
            except (RuntimeError, TypeError, ValueError, KeyError):
                continue  # e.g. torch.std of an integer tensor: NaN, not a crash
            if isinstance(result, Tensor):
                if result.numel() == 1 and not result.is_complex():
                    rows, tensors = pending.setdefault(result.device, ([], []))
                    rows.append(i)
                    tensors.append(result.reshape(()).detach())
            elif isinstance(result, (int, float)):
                out[i] = float(result)
    for rows, tensors in pending.values():
        for i, v in zip(rows, torch.stack(tensors).to("cpu", torch.float64).tolist(), strict=True):
            out[i] = v
    return out


def _first_stats(value: Any) -> Stats | None:
    """The statistics of the first tensor in a stash's value (a tuple, dict, `ModelOutput`,
    ...), or None when it holds none."""
    if isinstance(value, Stats):
        return value
    for leaf in iter_leaves(value):
        if isinstance(leaf, Stats):
            return leaf
    return None


def to_frame(
    stashes: Sequence[Stash],
    stat: Callable[[Tensor], Any] | str | None = None,
    stat_name: str | None = None,
    stats_names: Sequence[str] = (),
) -> pandas.DataFrame:
    """Build the DataFrame of `Tracker.to_frame` (see there) from a list of stashes.

    Stashes holding statistics (`track(..., stats=...)`) fill one column per statistic, from
    the first tensor of their value; the others fill the `stat` column from their
    `first_value`. Both kinds can be mixed without one overwriting the other's values.

    Args:
        stashes: the stashes, one row each.
        stat: the statistic of the plain stashes (default `torch.std`), or a recorded
            statistic's name to keep only that column.
        stat_name: the name of that column.
        stats_names: statistic columns to include even when no stash holds them (a
            `stats=` tracker passes its statistics, so an empty frame has their columns).
    """
    pd = require("pandas", "pandas")
    n = len(stashes)
    columns: dict[str, Any] = {
        "name": [s.name for s in stashes],
        "type": [type_name(s.type) for s in stashes],
        "grad": [s.grad for s in stashes],
        "call": [s.call for s in stashes],
        "step": [s.step for s in stashes],
        "kind": [s.kind for s in stashes],
        "attr": [s.attr for s in stashes],
        "training": [s.training for s in stashes],
    }
    found = [_first_stats(s.value) for s in stashes]
    stats_rows = [i for i, v in enumerate(found) if v is not None]
    table = stats_table([v for v in found if v is not None])
    for name in stats_names:
        table.setdefault(name, [])
    if stat is not None and table:
        wanted = stat if isinstance(stat, str) else getattr(stat, "__name__", "")
        if wanted not in table:
            raise NotRecordedError(
                f"to_frame: stat={wanted!r} was not recorded; recorded statistics: {list(table)}"
            )
        table = {stat_name or wanted: table[wanted]}
    for column, values in table.items():
        full: list[Any] = [math.nan] * n
        for i, v in zip(stats_rows, values, strict=True):
            full[i] = v
        columns[column] = full
    firsts = [s.first_value for s in stashes]
    plain = [i for i, v in enumerate(found) if v is None]
    # A stats recording's rows without statistics (a module returning None) add no column;
    # plain stashes do, or an empty frame of a plain recording.
    if not table or any(isinstance(firsts[i], Tensor) for i in plain):
        fn = _stat_fn(stat)
        label = stat_name or (stat if isinstance(stat, str) else getattr(fn, "__name__", None))
        label = label or "value"
        values = _tensor_stats(fn, [firsts[i] for i in plain])
        # A plain column named like a statistic shares it: each row keeps its own value.
        shared = columns.get(label) if label in table else None
        full = shared if isinstance(shared, list) else [math.nan] * n
        for i, v in zip(plain, values, strict=True):
            full[i] = v
        columns[label] = full
    frame: pandas.DataFrame = pd.DataFrame(columns)
    return frame
