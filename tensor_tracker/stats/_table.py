"""`stats_table`: many `Stats` read to the host at once, as columns."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from .._validate import check_type
from ..errors import ArgumentTypeError
from ._kernels import F64, NAN
from ._layout import Layout
from ._values import Stats

__all__ = ["check_stats", "stats_table"]


def check_stats(stats: object, argument: str) -> None:
    """`stats` must be a sequence of `Stats`."""
    check_type(stats, Sequence, argument, "a list of Stats")
    bad = next((s for s in stats if not isinstance(s, Stats)), None)  # type: ignore[attr-defined]
    if bad is not None:
        raise ArgumentTypeError(f"{argument} must hold Stats, found a {type(bad).__name__}")


def stats_table(stats: Sequence[Stats]) -> dict[str, list[Any]]:
    """Read many `Stats` to the host at once, as columns.

    Groups the inputs by layout, stacks the raw vectors, copies each device's values to the
    host in one transfer and derives every column vectorised, so it stays fast for hundreds
    of thousands of `Stats` (use it rather than `to_dict` in a loop).

    Args:
        stats: `Stats` from any number of `StatsFn`s and devices.

    Returns:
        `{name: [value per input, in order]}`: Python floats (NaN where that `Stats` lacks the
        column); a histogram's counts column holds a list of floats per row. Columns are in
        the order of the first layout's names, then new names of later layouts.

    Example:
        >>> a = compute(torch.ones(3), ["mean", "max"])
        >>> b = compute(torch.zeros(2), ["max", "numel"])
        >>> stats_table([a, b])
        {'mean': [1.0, nan], 'max': [1.0, 0.0], 'numel': [nan, 2.0]}
    """
    check_stats(stats, "stats_table(stats)")
    total = len(stats)
    if total == 0:
        return {}
    groups: dict[tuple[Layout, torch.device], list[int]] = {}
    for i, s in enumerate(stats):
        key = (s.layout, s.device)
        rows = groups.get(key)
        if rows is None:
            rows = groups[key] = []
        rows.append(i)

    by_device: dict[torch.device, list[tuple[Layout, list[int]]]] = {}
    columns: dict[str, None] = {}
    for (layout, device), rows in groups.items():
        by_device.setdefault(device, []).append((layout, rows))
        columns.update(dict.fromkeys(layout.names))

    whole = len(groups) == 1
    scalar: dict[str, Tensor] = {}
    listed: dict[str, list[Any]] = {}
    for (layout, _), rows in groups.items():
        for k, name in enumerate(layout.vectors):
            col = listed.get(name)
            if col is None:
                col = listed[name] = [NAN] * total
            for i in rows:
                col[i] = stats[i].vectors[k].tolist()
            columns[name] = None
    for device, blocks in by_device.items():
        if device.type == "cpu":  # host floats: no tensor per Stats
            floats = array("d")
            for _, rows in blocks:
                for i in rows:
                    floats.extend(stats[i]._host_values())
            host = torch.frombuffer(floats, dtype=F64) if floats else torch.empty(0, dtype=F64)
        else:
            host = torch.cat([stats[i].raw for _, rows in blocks for i in rows]).to("cpu", F64)
        start = 0
        for layout, rows in blocks:
            stop = start + len(rows) * layout.width
            raw = host[start:stop].view(len(rows), layout.width)
            start = stop
            numel = torch.tensor([stats[i].numel for i in rows], dtype=F64)
            index = None if whole else torch.tensor(rows)
            for name, values in layout.derive(raw, numel).items():
                if values.dim() == 2:
                    col = listed.get(name)
                    if col is None:
                        col = listed[name] = [NAN] * total
                    for r, v in zip(rows, values.tolist(), strict=True):
                        col[r] = v
                elif index is None:
                    scalar[name] = values
                else:
                    if name not in scalar:
                        scalar[name] = torch.full((total,), NAN, dtype=F64)
                    scalar[name][index] = values
    return {n: listed[n] if n in listed else scalar[n].tolist() for n in columns}
