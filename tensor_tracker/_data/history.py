"""Rows for history figures: a statistic per module and step, from a frame or stashes."""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .._core.tracker import Recorder
from ..errors import ArgumentValueError, NotRecordedError
from .select import (
    CHILD_KINDS,
    ROOT_LABEL,
    as_stashes,
    display_name,
    module_order,
    name_filter,
    select,
    select_from,
)

if TYPE_CHECKING:
    import pandas
from .embedding import Names
from .frame import holds_copies
from .series import empty_error, stat_values, tensor_label

__all__ = [
    "Curve",
    "as_children",
    "child_name",
    "child_records",
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


Rows = tuple[list[str], list[str], list[int], list[float], list[str]]
"""(name, attr, step, value) rows as four columns, and the chosen module names."""


def history_rows(source: Any, stat: str, names: Names, grad: bool, kind: str) -> Rows:
    """(name, attr, step, value) rows of the chosen modules, and the chosen module names
    (`attr` tells a module's tensors of one kind apart: `"weight"`, `"bias"`; `""` for
    outputs).

    A tracker that recorded `stat` is read through its frame (vectorised columns, no
    `Stash` built per row) when pandas is installed; full-tensor stashes compute `stat`."""
    frame = source if is_frame(source) else statistics_frame(source, stat)
    if frame is not None:
        return _frame_rows(
            as_children(frame) if kind == "output" else frame, stat, names, grad, kind
        )
    stashes = as_stashes(source, "tracker_or_frame")
    if not stashes:
        raise empty_error("history", "tracker_or_frame")
    kinds = (kind, *CHILD_KINDS) if kind == "output" else kind
    chosen = select(stashes, grad=grad, kind=kinds)
    values = stat_values(chosen, stat)
    order = module_order(stashes, key=child_name)
    modules = _chosen_modules(order, {child_name(s) for s in chosen}, names, grad, kind)
    keep = set(modules)
    rows = [(s, v) for s, v in zip(chosen, values, strict=True) if child_name(s) in keep]
    return (
        [child_name(s) for s, _ in rows],
        ["" if s.kind in CHILD_KINDS and kind == "output" else s.attr for s, _ in rows],
        [s.step for s, _ in rows],
        [v for _, v in rows],
        modules,
    )


def child_name(stash: Any) -> str:
    """A record's name as a series of module outputs: an op or tap as a child of its
    module (`"0.attn.softmax#0"`), anything else by its module's name."""
    return tensor_label(stash.name, stash.attr) if stash.kind in CHILD_KINDS else stash.name


def as_children(frame: pandas.DataFrame) -> pandas.DataFrame:
    """`frame` with its op and tap rows (`track(..., ops=...)`, `tap`) named as children of
    their module (`name` `"0.attn.softmax#0"`, `attr` `""`, `kind` `"output"`), so that
    figures of module outputs show each as a series of its own, selected by that name;
    `frame` itself when it has none."""
    if "kind" not in frame.columns or "attr" not in frame.columns:
        return frame
    inside = frame["kind"].isin(CHILD_KINDS).to_numpy()
    if not inside.any():
        return frame
    frame = frame.copy()
    pairs = zip(frame["name"].to_numpy()[inside], frame["attr"].to_numpy()[inside], strict=True)
    frame.loc[inside, "name"] = [tensor_label(str(n), str(a)) for n, a in pairs]
    frame.loc[inside, "attr"] = ""
    frame.loc[inside, "kind"] = "output"
    return frame


def child_records(source: Any, name: str, grad: bool) -> list[Any]:
    """The op and tap records (`grad` ones or forward ones) whose `child_name` is `name`
    (`"0.attn.softmax#0"`): what a figure of one module's outputs shows for a child that
    `as_children` named."""
    found = select_from(source, "tracker", grad=grad, kind=CHILD_KINDS)
    return [s for s in found if child_name(s) == name]


def statistics_frame(source: Any, stat: str) -> pandas.DataFrame | None:
    """`source.to_frame(stat)` (the meta columns and `stat` alone) when `source` is a
    tracker (or recording) of statistics that include `stat` and pandas is installed;
    otherwise None."""
    to_frame = getattr(source, "to_frame", None)
    if not callable(to_frame) or importlib.util.find_spec("pandas") is None:
        return None
    if not isinstance(source, Recorder) or not len(source) or holds_copies(list(source[:64])):
        return None
    try:
        frame: pandas.DataFrame = to_frame(stat)
    except NotRecordedError:
        return None
    return frame if stat in frame.columns else None


def _frame_rows(frame: pandas.DataFrame, stat: str, names: Names, grad: bool, kind: str) -> Rows:
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
    rows = frame.loc[mask, [c for c in ("name", "attr", "step", stat) if c in frame.columns]]
    order = [str(n) for n in frame["name"].unique()]
    modules = _chosen_modules(order, set(rows["name"].unique()), names, grad, kind)
    rows = rows[rows["name"].isin(modules)]
    return (
        [str(n) for n in rows["name"].tolist()],
        [str(a) for a in rows["attr"].tolist()] if "attr" in rows.columns else [""] * len(rows),
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
    index: dict[str, int] = {}
    module = torch.tensor([index.setdefault(n, len(index)) for n in names], dtype=torch.long)
    all_steps, column = torch.unique(
        torch.tensor(list(steps), dtype=torch.long), return_inverse=True
    )
    value = torch.tensor(list(values), dtype=torch.float64)
    m, s = len(index), len(all_steps)
    size = max(1, math.ceil(s / max_points))
    width = math.ceil(s / size) * size  # whole buckets; the padding is never present
    cell = module * width + column
    counted = ~value.isnan()
    # Mean over a module's calls within a step, leaving out NaN (a step of NaN alone is NaN).
    total = torch.zeros(m * width, dtype=torch.float64).index_add_(
        0, cell, torch.where(counted, value, 0.0)
    )
    count = torch.zeros(m * width, dtype=torch.float64).index_add_(0, cell, counted.double())
    present = torch.zeros(m * width, dtype=torch.bool)
    present[cell] = True
    magnitude = (total / count).abs()
    y = torch.where((magnitude > 0) & magnitude.isfinite(), magnitude.log2(), math.nan)
    x = torch.nn.functional.pad(all_steps.double(), (0, width - s)).repeat(m)
    shape = (m, width // size, size)
    present, x, y = present.view(shape), x.view(shape), y.view(shape)
    finite = present & ~y.isnan()
    # Per bucket: the mean step, the mean of the finite values, and their extremes.
    cx = torch.where(present, x, 0.0).sum(-1) / present.sum(-1)
    n = finite.sum(-1)
    cy = torch.where(finite, y, 0.0).sum(-1) / n
    lo = torch.where(finite, y, math.inf).amin(-1)
    hi = torch.where(finite, y, -math.inf).amax(-1)
    cy, lo, hi = (torch.where(n > 0, v, math.nan) for v in (cy, lo, hi))
    kept = present.any(-1)
    out = {}
    for name, i in index.items():
        keep = kept[i]
        ys = cy[i][keep].tolist()
        if size == 1:
            out[name] = Curve(cx[i][keep].tolist(), ys, ys, ys)
        else:
            out[name] = Curve(cx[i][keep].tolist(), ys, lo[i][keep].tolist(), hi[i][keep].tolist())
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
