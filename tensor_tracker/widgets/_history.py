"""`history_viewer`: statistics over steps, per module, or a histogram heatmap."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .._data._history_view import (
    HistoryState,
    heatmap_drawing,
    history_drawing,
    history_source,
    role_choice,
    search_modules,
)
from .._data._views import Note, module_options
from ._base import (
    Panel,
    Quiet,
    empty_viewer,
    ipywidgets_module,
    make_viewer,
    observe,
    render,
)

if TYPE_CHECKING:
    import ipywidgets

__all__ = ["history_viewer"]


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
    source = history_source(tracker)
    if isinstance(source, Note):
        viewer = empty_viewer(w, source)
        viewer.heatmap_figure = None
        viewer.heatmap_message = viewer.message
        viewer.heatmap_image = viewer.image
        return viewer
    start, names, role = source.start, module_options(source.names), role_choice(source)
    c: dict[str, Any] = {
        "stat": w.Dropdown(options=source.stat.options, value=start.stat, description="statistic"),
        "modules": w.SelectMultiple(
            options=names, value=start.modules, description="modules", rows=8
        ),
        "search": w.Text(value="", placeholder="filter modules (regex)", description="search"),
        "role": w.Dropdown(options=role.options, value=role.value, description="role"),
        "grad": w.ToggleButtons(options=[("forward", False), ("gradient", True)], value=start.grad),
        "limits": w.Checkbox(value=start.limits, description="format limits", indent=False),
        "heatmap_module": w.Dropdown(
            options=names, value=start.heatmap_module, description="heatmap"
        ),
    }
    for key in source.hidden:
        c[key].layout.display = "none"
    panel = Panel(w)
    heat = Panel(w)
    quiet = Quiet()

    def state() -> HistoryState:
        return HistoryState(**{f.name: c[f.name].value for f in fields(HistoryState)})

    def redraw_history() -> None:
        panel.show(lambda: render(history_drawing(source, state())))
        box.figure = panel.figure

    def redraw_heatmap() -> None:
        drawing = heatmap_drawing(source, state())
        if isinstance(drawing, Note):
            heat.say(drawing)
        else:
            heat.show(lambda: render(drawing))
        box.heatmap_figure = heat.figure

    def redraw() -> None:
        redraw_history()
        redraw_heatmap()

    def search() -> None:
        selected = c["modules"].value
        kept = search_modules(source.names, c["search"].value, selected)
        # The selection stays as it was (nothing to redraw); options and value go to the
        # page in one message.
        with quiet, c["modules"].hold_sync():
            c["modules"].options = module_options(kept)
            c["modules"].value = selected

    def pick_role() -> None:
        if c["role"].value:
            c["modules"].value = tuple(source.depth.members(c["role"].value))

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
    box = make_viewer(w, c, rows, panel, redraw, tracker)
    box.children = (*box.children, c["heatmap_module"], heat.box)
    box.heatmap_message = heat.message
    box.heatmap_image = heat.image
    box.heatmap_figure = None
    box.redraw()
    box.heatmap_figure = heat.figure
    return box
