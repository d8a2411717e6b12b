"""`history_viewer`: statistics over steps, per module, or a histogram heatmap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor

from .. import plot
from .._optional import require
from ..data.depth import depth_layout, informative_role, leaf_names
from ..data.history import statistics_frame
from ..data.select import (
    first_stashes,
    match_names,
    module_order,
    select,
    shown_value,
)
from ..errors import ArgumentValueError
from ..plot._figure import DEFAULT_FORMATS, fixed_margins
from ..stats import Stats

if TYPE_CHECKING:
    import ipywidgets
    from matplotlib.figure import Figure
from ..data.embedding import NUMBERED
from ._base import (
    EMPTY,
    Panel,
    Quiet,
    default_stat,
    empty_viewer,
    histogram_name,
    ipywidgets_module,
    make_viewer,
    module_options,
    observe,
    stat_options,
)

__all__ = ["history_viewer"]

NO_HISTOGRAMS = (
    "The histogram heatmap below the history needs histograms over steps: track with "
    '<code>stats=[*tensor_tracker.stats.DEFAULT, "exp_hist"]</code> (or '
    "<code>stats.histogram()</code>), or without <code>stats=</code> to keep full tensors."
)


def history_viewer(tracker: Any) -> ipywidgets.VBox:
    """A statistic over training steps (`plot.history`), plus one module's histogram over
    steps (`plot.histogram_heatmap`).

    Controls (keys of `viewer.controls`):

    - `"stat"` (Dropdown): the statistic (default `"rms"`).
    - `"modules"` (SelectMultiple): the modules drawn as lines. For a model of repeated
      blocks it opens on one role across the blocks (the first learned projection, e.g.
      `attention.self.query` in every layer of a BERT), showing gradients when they were
      recorded: block outputs after a LayerNorm look alike, their gradients and
      projections do not. Otherwise the numbered layers (names ending in a number), else
      the first 8 modules. Hidden when there is only one module.
    - `"search"` (Text): a substring or regex that narrows the `"modules"` list (the
      selection is kept).
    - `"role"` (Dropdown, for models with repeated blocks such as `encoder.layer.0` …
      `encoder.layer.11`): pick a role inside the blocks (e.g. `attention.output.dense`) to
      select that module in every block.
    - `"grad"` (ToggleButtons): forward values (`False`) or gradients (`True`); applies to
      both figures.
    - `"limits"` (Checkbox, off): draw the fp16/bf16/fp8 limit lines. Off, the y axis fits
      the data, so that trends show; on, it spans the formats' limits too.
    - `"heatmap_module"` (Dropdown): the module of the heatmap. Its histograms come from
      `stats=[..., tensor_tracker.stats.histogram()]` or are binned from full tensors;
      without either, it is hidden and a note says so in place of the heatmap.

    Args:
        tracker: a `Tracker` (use `tracker.step()` between training steps) or a list of
            `Stash`.

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure` (the history), `message`, `image`,
        `redraw()`, and for the heatmap `heatmap_figure`, `heatmap_message`,
        `heatmap_image`.

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.

    Example:
        >>> with tensor_tracker.track(lm, stats=["rms", stats.histogram()]) as t:
        ...     for _ in range(3):
        ...         lm(tokens).logsumexp(-1).mean().backward(); t.step()
        >>> v = widgets.history_viewer(t)
        >>> v.controls["modules"].value = ("blocks.0",)
        >>> v.controls["heatmap_module"].value = "blocks.0"
    """
    w = ipywidgets_module()
    # One stash per module and direction: the options, without building every Stash of a
    # run of hundreds of thousands of records.
    stashes = first_stashes(tracker, "tracker")
    if not stashes:
        viewer = empty_viewer(w, EMPTY)
        viewer.heatmap_figure = None
        viewer.heatmap_message = viewer.message
        viewer.heatmap_image = viewer.image
        return viewer
    options = stat_options(stashes)
    outputs = select(stashes, kind="output")
    names = module_order(outputs or stashes)
    depth = depth_layout(leaf_names(names))
    types = {s.name: getattr(s.type, "__name__", str(s.type)) for s in stashes}
    role = informative_role(depth, types)
    if role is not None:
        default = [n for n, (_, r) in depth.place.items() if r == role]
    else:
        default = [n for n in names if NUMBERED.search(n)] or names[:8]
    has_grads = any(s.grad for s in stashes if s.name in default)
    hist_stat = histogram_name(stashes)
    c: dict[str, Any] = {
        "stat": w.Dropdown(options=options, value=default_stat(options), description="statistic"),
        "modules": w.SelectMultiple(
            options=module_options(names), value=default, description="modules", rows=8
        ),
        "search": w.Text(value="", placeholder="filter modules (regex)", description="search"),
        "role": w.Dropdown(
            options=[("(choose)", "")] + [(r, r) for r in depth.roles],
            value=role or "",
            description="role",
        ),
        "grad": w.ToggleButtons(
            options=[("forward", False), ("gradient", True)], value=role is not None and has_grads
        ),
        "limits": w.Checkbox(value=False, description="format limits", indent=False),
        "heatmap_module": w.Dropdown(
            options=module_options(names), value=default[0], description="heatmap"
        ),
    }
    if len(names) == 1:
        for key in ("modules", "search", "heatmap_module"):
            c[key].layout.display = "none"
    # Statistics without a histogram cannot make a heatmap: say what it needs, once, in
    # place of a picker that would only lead to an error.
    binnable = any(
        isinstance(value := shown_value(s), Tensor)
        or (isinstance(value, Stats) and value.layout.histograms)
        for s in stashes
    )
    if not binnable:
        c["heatmap_module"].layout.display = "none"
    if not depth.grouped:
        c["role"].layout.display = "none"
    panel = Panel(w)
    heat = Panel(w)
    # Each statistic is read once as a frame (columns, not one Stash per row) with the rows
    # of each module, so that a redraw only takes the selected modules' rows: fast on
    # hundreds of modules over thousands of steps.
    source: dict[str, tuple[Any, dict[str, Any]]] = {}

    def draw_history() -> Figure:
        modules = list(c["modules"].value)
        if not modules:
            raise ArgumentValueError("Select one or more modules (ctrl/shift-click).")
        stat = c["stat"].value
        if stat is None:
            raise ArgumentValueError("No statistic is available for these stashes.")
        if stat not in source:
            frame = statistics_frame(tracker, stat)
            groups = {} if frame is None else frame.groupby("name").indices
            source[stat] = (frame, {str(name): rows for name, rows in groups.items()})
        frame, index = source[stat]
        if frame is not None:
            numpy = require("numpy", "widgets")
            taken = [index[m] for m in modules if m in index]
            rows = numpy.sort(numpy.concatenate(taken)) if taken else []
            chosen = frame.iloc[rows]
        else:
            chosen = tracker
        with fixed_margins():
            formats = DEFAULT_FORMATS if c["limits"].value else ()
            return plot.history(
                chosen, stat=stat, names=modules, grad=c["grad"].value, formats=formats
            )

    def search() -> None:
        shown = match_names(names, c["search"].value)
        selected = c["modules"].value
        kept = [n for n in names if n in shown or n in selected]
        # The selection stays as it was (nothing to redraw); options and value go to the
        # page in one message.
        with quiet, c["modules"].hold_sync():
            c["modules"].options = module_options(kept)
            c["modules"].value = selected

    def pick_role() -> None:
        role = c["role"].value
        if role:
            chosen = [n for n, (_, r) in depth.place.items() if r == role]
            c["modules"].value = tuple(chosen)

    def draw_heatmap() -> Figure:
        return plot.histogram_heatmap(
            tracker, c["heatmap_module"].value, grad=c["grad"].value, stat=hist_stat
        )

    def redraw_history() -> None:
        panel.show(draw_history)
        box.figure = panel.figure

    def redraw_heatmap() -> None:
        if binnable:
            heat.show(draw_heatmap)
        else:
            heat.note(NO_HISTOGRAMS)
        box.heatmap_figure = heat.figure

    def redraw() -> None:
        redraw_history()
        redraw_heatmap()

    quiet = Quiet()
    observe(
        [c["stat"], c["modules"], c["limits"]], lambda: None if quiet.active else redraw_history()
    )
    observe([c["search"]], search)
    observe([c["role"]], pick_role)
    observe([c["heatmap_module"]], redraw_heatmap)
    observe([c["grad"]], redraw)
    rows = [
        w.HBox([w.VBox([c["stat"], c["grad"], c["role"], c["search"], c["limits"]]), c["modules"]])
    ]
    box = make_viewer(w, c, rows, panel, redraw)
    box.children = (*box.children, c["heatmap_module"], heat.box)
    box.heatmap_message = heat.message
    box.heatmap_image = heat.image
    box.heatmap_figure = None
    box.redraw()
    box.heatmap_figure = heat.figure
    return box
