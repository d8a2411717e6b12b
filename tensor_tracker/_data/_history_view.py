"""The history viewer's logic: what it opens on, the modules a search or a role selects,
and the history and heatmap it draws (see `_views`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from .._core.records import Stash
from .._optional import require
from ..errors import ArgumentValueError
from ..stats import Stats
from ._views import (
    EMPTY,
    Choice,
    Drawing,
    Note,
    choose,
    default_stat,
    histogram_name,
    stat_options,
)
from .depth import Depth, depth_layout, informative_role, leaf_names
from .embedding import NUMBERED
from .history import as_children, child_name, statistics_frame
from .select import CHILD_KINDS, first_stashes, match_names, module_order, select, shown_value

__all__ = [
    "NO_HISTOGRAMS",
    "HistorySource",
    "HistoryState",
    "heatmap_drawing",
    "history_drawing",
    "history_source",
    "role_choice",
    "role_modules",
    "search_modules",
]

NO_HISTOGRAMS = Note(
    "The histogram heatmap below the history needs histograms over steps: track with "
    '<code>stats=[*tensor_tracker.stats.DEFAULT, "exp_hist"]</code> (or '
    "<code>stats.histogram()</code>), or without <code>stats=</code> to keep full tensors.",
    error=False,
    html=True,
)
"""What the viewer says in place of the heatmap when nothing can be binned."""


@dataclass(frozen=True)
class HistoryState:
    """The history viewer's controls' values (see `widgets.history_viewer`)."""

    stat: str | None = None
    modules: tuple[str, ...] = ()
    grad: bool = False
    limits: bool = False
    heatmap_module: str | None = None


class HistorySource:
    """What the viewer reads and opens on.

    Attributes:
        tracker: the recording.
        names: the modules offered, in execution order.
        depth: their repeated blocks and roles.
        stat: the statistics offered, opening on `rms`.
        role: the role it opens on (its modules in every block), or `None`.
        start: the controls' values it opens on.
        hidden: the controls with nothing to choose.
        heatmap_stat: the recorded histogram the heatmap shows.
        binnable: whether any stash can give a histogram (else no heatmap).
    """

    def __init__(self, tracker: Any, stashes: Sequence[Stash]) -> None:
        self.tracker = tracker
        options = stat_options(stashes)
        self.stat = choose(options, None, default_stat(options))
        # Ops and taps are series of their own, children of their module (`"0.attn.softmax#0"`).
        outputs = select(stashes, kind=("output", *CHILD_KINDS))
        self.names = module_order(outputs or stashes, key=child_name)
        self.depth: Depth = depth_layout(leaf_names(self.names))
        types = {s.name: getattr(s.type, "__name__", str(s.type)) for s in stashes}
        self.role = informative_role(self.depth, types)
        if self.role is not None:
            default = self.depth.members(self.role)
        else:
            default = [n for n in self.names if NUMBERED.search(n)] or self.names[:8]
        # Block outputs after a LayerNorm look alike, their gradients do not: a role opens
        # on gradients when they were recorded.
        grad = self.role is not None and any(s.grad for s in stashes if s.name in default)
        self.start = HistoryState(self.stat.value, tuple(default), grad, False, default[0])
        self.heatmap_stat = histogram_name(stashes)
        self.binnable = any(
            isinstance(value := shown_value(s), Tensor)
            or (isinstance(value, Stats) and bool(value.layout.histograms))
            for s in stashes
        )
        hidden = {"modules", "search", "heatmap_module"} if len(self.names) == 1 else set()
        if not self.binnable:
            hidden.add("heatmap_module")
        if not self.depth.grouped:
            hidden.add("role")
        self.hidden = frozenset(hidden)
        # Each statistic is read once as a frame with the rows of each module, so that a
        # redraw only takes the selected modules' rows: fast on hundreds of modules over
        # thousands of steps.
        self._frames: dict[str, tuple[Any, dict[str, Any]]] = {}

    def rows(self, stat: str, modules: Sequence[str]) -> Any:
        """The rows of `modules` for `stat`, as a frame (the tracker itself when it has no
        frame of statistics)."""
        if stat not in self._frames:
            frame = statistics_frame(self.tracker, stat)
            frame = None if frame is None else as_children(frame)
            groups = {} if frame is None else frame.groupby("name").indices
            self._frames[stat] = (frame, {str(name): rows for name, rows in groups.items()})
        frame, index = self._frames[stat]
        if frame is None:
            return self.tracker
        numpy = require("numpy", "widgets")
        taken = [index[m] for m in modules if m in index]
        return frame.iloc[numpy.sort(numpy.concatenate(taken)) if taken else []]


def history_source(tracker: Any) -> HistorySource | Note:
    """The viewer's data, or why it has nothing to show. Read from one stash per module
    and direction, without building every Stash of a run of hundreds of thousands of
    records."""
    stashes = first_stashes(tracker, "tracker")
    return HistorySource(tracker, stashes) if stashes else EMPTY


def search_modules(names: Sequence[str], pattern: str, selected: Sequence[str]) -> list[str]:
    """The modules a search for `pattern` lists: the matches and those `selected` (a
    search never drops the selection)."""
    shown = match_names(names, pattern)
    return [n for n in names if n in shown or n in selected]


def history_drawing(source: HistorySource, state: HistoryState) -> Drawing:
    """The history of `state`'s statistic for the selected modules.

    Raises:
        ArgumentValueError: no module selected, or no statistic available.
    """
    if not state.modules:
        raise ArgumentValueError("Select one or more modules (ctrl/shift-click).")
    if state.stat is None:
        raise ArgumentValueError("No statistic is available for these stashes.")
    options: dict[str, Any] = {"stat": state.stat, "names": list(state.modules), "grad": state.grad}
    if not state.limits:  # the y axis fits the data, so that trends show
        options["formats"] = ()
    return Drawing("history", source.rows(state.stat, state.modules), options, margins={})


def heatmap_drawing(source: HistorySource, state: HistoryState) -> Drawing | Note:
    """The histogram over steps of `state.heatmap_module`, or why there is none."""
    if not source.binnable:
        return NO_HISTOGRAMS
    return Drawing(
        "histogram_heatmap",
        source.tracker,
        {"name": state.heatmap_module, "grad": state.grad, "stat": source.heatmap_stat},
    )


def role_choice(source: HistorySource) -> Choice:
    """The `role` control: `(choose)` or a role inside the blocks."""
    return Choice((("(choose)", ""), *((r, r) for r in source.depth.roles)), source.role or "")


def role_modules(source: HistorySource, role: str) -> tuple[str, ...] | None:
    """The modules picking `role` selects: that role in every block (`None` for
    `(choose)`: the selection stays as it is)."""
    return tuple(source.depth.members(role)) if role else None
