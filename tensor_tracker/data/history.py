"""Rows for history figures: a statistic per module and step, from a frame or stashes."""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.tracker import Recorder
from ..errors import ArgumentValueError
from .select import (
    ROOT_LABEL,
    as_stashes,
    display_name,
    module_order,
    name_filter,
    select,
)

if TYPE_CHECKING:
    import pandas
from .embedding import Names
from .frame import holds_copies
from .series import empty_error, log2_abs, mean_by, stat_values

__all__ = [
    "Curve",
    "curves",
    "first_nonfinite_step",
    "history_rows",
    "is_frame",
    "statistics_frame",
    "step_edges",
]


def is_frame(obj: Any) -> bool:
    """Whether `obj` is a pandas DataFrame (without importing pandas)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, pd.DataFrame)


def history_rows(
    source: Any, stat: str, names: Names, grad: bool, kind: str
) -> tuple[list[str], list[int], list[float], list[str]]:
    """(name, step, value) rows of the chosen modules, and the chosen module names.

    A tracker that recorded `stat` is read through its frame (vectorised columns, no
    `Stash` built per row) when pandas is installed; full-tensor stashes compute `stat`."""
    frame = source if is_frame(source) else statistics_frame(source, stat)
    if frame is not None:
        return _frame_rows(frame, stat, names, grad, kind)
    stashes = as_stashes(source, "tracker_or_frame")
    if not stashes:
        raise empty_error("history", "tracker_or_frame")
    chosen = select(stashes, grad=grad, kind=kind)
    values = stat_values(chosen, stat)
    order = module_order(stashes)
    modules = _chosen_modules(order, {s.name for s in chosen}, names, grad, kind)
    keep = set(modules)
    rows = [(s.name, s.step, v) for s, v in zip(chosen, values, strict=True) if s.name in keep]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], modules


def statistics_frame(source: Any, stat: str) -> pandas.DataFrame | None:
    """`source.to_frame()` when `source` is a tracker (or recording) of statistics that
    include `stat` and pandas is installed; otherwise None."""
    to_frame = getattr(source, "to_frame", None)
    if not callable(to_frame) or importlib.util.find_spec("pandas") is None:
        return None
    if not isinstance(source, Recorder) or not len(source) or holds_copies(list(source[:64])):
        return None
    frame: pandas.DataFrame = to_frame()
    return frame if stat in frame.columns else None


def _frame_rows(
    frame: pandas.DataFrame, stat: str, names: Names, grad: bool, kind: str
) -> tuple[list[str], list[int], list[float], list[str]]:
    missing = [c for c in ("name", "step", "grad") if c not in frame.columns]
    if missing:
        raise ArgumentValueError(
            f"history: the DataFrame lacks column(s) {missing}; pass tracker.to_frame()"
        )
    if stat not in frame.columns:
        numeric = [
            c
            for c in frame.columns
            if c not in ("name", "type", "grad", "call", "step", "kind", "attr", "training")
        ]
        raise ArgumentValueError(
            f"history: stat={stat!r} is not a column of the DataFrame; its statistics: "
            f"{numeric} (or pass the tracker to compute {stat!r} from its tensors)"
        )
    if not len(frame):
        raise empty_error("history", "tracker_or_frame")
    mask = frame["grad"].astype(bool) == grad
    if "kind" in frame.columns:
        mask &= frame["kind"] == kind
    rows = frame.loc[mask, ["name", "step", stat]]
    order = [str(n) for n in frame["name"].unique()]
    modules = _chosen_modules(order, set(rows["name"].unique()), names, grad, kind)
    rows = rows[rows["name"].isin(modules)]
    return (
        [str(n) for n in rows["name"].tolist()],
        [int(st) for st in rows["step"].tolist()],
        [float(v) for v in rows[stat].tolist()],
        modules,
    )


def _chosen_modules(
    order: list[str], present: set[str], names: Names, grad: bool, kind: str
) -> list[str]:
    """The modules to draw: those with rows that `names` selects, in execution order (or in
    the order of a list of names)."""
    if isinstance(names, Sequence) and not isinstance(names, str):  # the user's order
        name_filter(names, "names")  # checks the entries
        modules = [n for n in ("" if n == ROOT_LABEL else n for n in names) if n in present]
    else:
        keep = name_filter(names, "names")
        modules = [n for n in order if n in present and (keep is None or keep(n))]
    if not modules:
        what = f"{'gradient' if grad else 'forward'} {kind} stashes"
        shown = ", ".join(display_name(n) for n in order[:12])
        raise ArgumentValueError(
            f"history: no {what} match names={names!r}; recorded modules: {shown}"
        )
    return modules


@dataclass(frozen=True)
class Curve:
    """One module's statistic over steps, ready to draw: `x` the steps (bucket centres when
    downsampled), `y` log2|mean over calls| (NaN where not finite), and when downsampled
    `lo`/`hi` the smallest and largest value in each bucket (else equal to `y`)."""

    x: list[float]
    y: list[float]
    lo: list[float]
    hi: list[float]


def curves(
    names: Sequence[str], steps: Sequence[int], values: Sequence[float], max_points: int
) -> dict[str, Curve]:
    """Per module, log2|stat| over steps (mean over calls within a step), with at most
    `max_points` points: longer runs are averaged over buckets of consecutive recorded
    steps, keeping each bucket's extremes, so a spike still shows (for drawing only: the
    recording itself is untouched)."""
    means = mean_by(list(zip(names, steps, strict=True)), values)
    per_module: dict[str, list[tuple[int, float]]] = {}
    for (name, step), value in means.items():
        per_module.setdefault(name, []).append((step, value))
    all_steps = sorted(set(steps))
    size = max(1, math.ceil(len(all_steps) / max_points))
    bucket = {st: i // size for i, st in enumerate(all_steps)}
    out = {}
    for name, points in per_module.items():
        points.sort()
        xs = [float(st) for st, _ in points]
        ys = log2_abs([v for _, v in points])
        if size == 1:
            out[name] = Curve(xs, ys, ys, ys)
            continue
        groups: dict[int, list[tuple[float, float]]] = {}
        for x, y in zip(xs, ys, strict=True):
            groups.setdefault(bucket[int(x)], []).append((x, y))
        cx, cy, lo, hi = [], [], [], []
        for group in groups.values():
            finite = [y for _, y in group if not math.isnan(y)]
            cx.append(sum(x for x, _ in group) / len(group))
            cy.append(sum(finite) / len(finite) if finite else math.nan)
            lo.append(min(finite) if finite else math.nan)
            hi.append(max(finite) if finite else math.nan)
        out[name] = Curve(cx, cy, lo, hi)
    return out


def first_nonfinite_step(steps: Sequence[int], values: Sequence[float]) -> int | None:
    """The first step at which any value is NaN or infinite (`None` if none is)."""
    bad = [st for st, v in zip(steps, values, strict=True) if not math.isfinite(v)]
    return min(bad) if bad else None


def step_edges(steps: list[int]) -> list[float]:
    """The edges of one cell per step, for a heatmap whose steps may be unevenly spaced."""
    if len(steps) == 1:
        return [steps[0] - 0.5, steps[0] + 0.5]
    mids = [(a + b) / 2 for a, b in itertools.pairwise(steps)]
    return [steps[0] - (mids[0] - steps[0]), *mids, steps[-1] + (steps[-1] - mids[-1])]
