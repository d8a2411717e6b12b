"""Whether a recording's `stats.histogram()` bins held its values: the warning a tracker
gives when many fell outside their fixed range (the figures and the report leave those out,
saying "not shown")."""

from __future__ import annotations

import torch

from .._core.columns import OBJECT, REFS, STASH, Columns
from ..stats._store import StatsStore

__all__ = ["LIMIT", "out_of_range"]

LIMIT = 0.01
"""The fraction of values outside a histogram's range above which `out_of_range` speaks."""


def out_of_range(columns: Columns) -> list[str]:
    """For each histogram statistic of `columns` (a tracker's records) that left more than
    `LIMIT` of the values it saw outside its range, a sentence saying how many, on which
    side, and what `range=` to pass instead; `[]` when none did (or there is none).

    Reads every row of statistics once (one transfer per device): for the end of a `with`
    block, not for a hook.

    Example:
        >>> from tensor_tracker import stats
        >>> with tensor_tracker.track(model, stats=[stats.histogram(range=(-4.0, 4.0))]) as t:
        ...     model(x * 1e-6).sum().backward()
        >>> print(out_of_range(t.stashes)[0][:64])
        stats.histogram 'hist' left out 40 of 288 values (14%): 40 below
    """
    store = columns.store
    if not isinstance(store, StatsStore) or not store.layout.histograms:
        return []
    rows = [i for i in range(len(columns)) if not columns.flags[i] & (OBJECT | REFS | STASH)]
    if not rows:
        return []
    raw, numel = store.table(torch.tensor([columns.ref[i] for i in rows], dtype=torch.int64))
    values = store.layout.derive(raw, numel)
    said = []
    for name, spec in store.layout.histograms.items():
        below = float(values[f"{name}_below"].nansum())
        above = float(values[f"{name}_above"].nansum())
        seen = float(values[name].nansum()) + below + above
        if not seen or (below + above) / seen <= LIMIT:
            continue
        lo, hi = spec.range
        wider = (lo - 16 if below else lo, hi + 16 if above else hi)
        unit = "log2|x|" if spec.log2 else "x"
        said.append(
            f"stats.histogram {name!r} left out {below + above:,.0f} of {seen:,.0f} values "
            f"({(below + above) / seen:.0%}): {below:,.0f} below and {above:,.0f} above its "
            f"range {unit} in [{lo:g}, {hi:g}); they are counted apart ({name}_below, "
            f"{name}_above) and the figures leave them out. Pass "
            f"stats.histogram(range=({wider[0]:g}, {wider[1]:g})) or wider."
        )
    return said
