"""Rows for history figures: a statistic per module and step, from a frame or stashes."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
from .series import empty_error, stat_values

__all__ = ["history_rows", "is_frame", "step_edges"]


def is_frame(obj: Any) -> bool:
    """Whether `obj` is a pandas DataFrame (without importing pandas)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, pd.DataFrame)


def history_rows(
    source: Any, stat: str, names: Names, grad: bool, kind: str
) -> tuple[list[str], list[int], list[float], list[str]]:
    """(name, step, value) rows of the chosen modules, and all module names seen."""
    if is_frame(source):
        frame: pandas.DataFrame = source
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
        all_names = [str(n) for n in frame["name"].tolist()]
        keep_kind = frame["kind"].tolist() if "kind" in frame.columns else [kind] * len(frame)
        rows = [
            (n, int(st), float(v))
            for n, st, g, k, v in zip(
                all_names,
                frame["step"].tolist(),
                frame["grad"].tolist(),
                keep_kind,
                frame[stat].tolist(),
                strict=True,
            )
            if bool(g) == grad and k == kind
        ]
        order = list(dict.fromkeys(all_names))
    else:
        stashes = as_stashes(source, "tracker_or_frame")
        if not stashes:
            raise empty_error("history", "tracker_or_frame")
        chosen = select(stashes, grad=grad, kind=kind)
        values = stat_values(chosen, stat)
        rows = [(s.name, s.step, v) for s, v in zip(chosen, values, strict=True)]
        order = module_order(stashes)
        all_names = order
    if not all_names:
        raise empty_error("history", "tracker_or_frame")
    keep = name_filter(names, "names")
    present = dict.fromkeys(n for n, _, _ in rows)
    modules = [n for n in order if n in present and (keep is None or keep(n))]
    if isinstance(names, Sequence) and not isinstance(names, str):  # the user's order
        wanted = ["" if n == ROOT_LABEL else n for n in names]
        modules = [n for n in wanted if n in present]
    if not modules:
        what = f"{'gradient' if grad else 'forward'} {kind} stashes"
        shown = ", ".join(display_name(n) for n in list(dict.fromkeys(all_names))[:12])
        raise ArgumentValueError(
            f"history: no {what} match names={names!r}; recorded modules: {shown}"
        )
    chosen_rows = [r for r in rows if r[0] in set(modules)]
    return (
        [r[0] for r in chosen_rows],
        [r[1] for r in chosen_rows],
        [r[2] for r in chosen_rows],
        modules,
    )


def step_edges(steps: list[int]) -> list[float]:
    """The edges of one cell per step, for a heatmap whose steps may be unevenly spaced."""
    if len(steps) == 1:
        return [steps[0] - 0.5, steps[0] + 0.5]
    mids = [(a + b) / 2 for a, b in itertools.pairwise(steps)]
    return [steps[0] - (mids[0] - steps[0]), *mids, steps[-1] + (steps[-1] - mids[-1])]
