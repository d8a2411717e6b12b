"""`history_viewer`: statistics over steps, per module, or a histogram heatmap."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .._data._history_view import (
    HistorySource,
    HistoryState,
    heatmap_drawing,
    history_drawing,
    history_source,
    role_choice,
    role_modules,
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
    return _HistoryViewer(w, tracker, source).box


class _HistoryViewer:
    """The widgets of one `history_viewer`: what each control offers and what is drawn
    is decided in `_data._history_view`; this class sets the controls and draws."""

    def __init__(self, w: Any, tracker: Any, source: HistorySource) -> None:
        self.source = source
        start, names, role = source.start, module_options(source.names), role_choice(source)
        self.controls: dict[str, Any] = {
            "stat": w.Dropdown(
                options=source.stat.options, value=start.stat, description="statistic"
            ),
            "modules": w.SelectMultiple(
                options=names, value=start.modules, description="modules", rows=8
            ),
            "search": w.Text(value="", placeholder="filter modules (regex)", description="search"),
            "role": w.Dropdown(options=role.options, value=role.value, description="role"),
            "grad": w.ToggleButtons(
                options=[("forward", False), ("gradient", True)], value=start.grad
            ),
            "limits": w.Checkbox(value=start.limits, description="format limits", indent=False),
            "heatmap_module": w.Dropdown(
                options=names, value=start.heatmap_module, description="heatmap"
            ),
        }
        c = self.controls
        for key in source.hidden:
            c[key].layout.display = "none"
        self.panel, self.heat, self.quiet = Panel(w), Panel(w), Quiet()
        observe([c["stat"], c["modules"], c["limits"]], self.redraw_history)
        observe([c["search"]], self.search)
        observe([c["role"]], self.pick_role)
        observe([c["heatmap_module"]], self.redraw_heatmap)
        observe([c["grad"]], self.redraw)
        column = w.VBox([c["stat"], c["grad"], c["role"], c["search"], c["limits"]])
        box = make_viewer(w, c, [w.HBox([column, c["modules"]])], self.panel, self.redraw, tracker)
        box.children = (*box.children, c["heatmap_module"], self.heat.box)
        box.heatmap_message = self.heat.message
        box.heatmap_image = self.heat.image
        box.heatmap_figure = None
        self.box = box
        box.redraw()

    def state(self) -> HistoryState:
        return HistoryState(**{f.name: self.controls[f.name].value for f in fields(HistoryState)})

    def redraw_history(self) -> None:
        if not self.quiet.active:
            self.panel.show(lambda: render(history_drawing(self.source, self.state())))
            self.box.figure = self.panel.figure

    def redraw_heatmap(self) -> None:
        drawing = heatmap_drawing(self.source, self.state())
        if isinstance(drawing, Note):
            self.heat.say(drawing)
        else:
            self.heat.show(lambda: render(drawing))
        self.box.heatmap_figure = self.heat.figure

    def redraw(self) -> None:
        self.redraw_history()
        self.redraw_heatmap()

    def search(self) -> None:
        modules = self.controls["modules"]
        selected = modules.value
        kept = search_modules(self.source.names, self.controls["search"].value, selected)
        # The selection stays as it was (nothing to redraw); options and value go to the
        # page in one message.
        with self.quiet, modules.hold_sync():
            modules.options = module_options(kept)
            modules.value = selected

    def pick_role(self) -> None:
        chosen = role_modules(self.source, self.controls["role"].value)
        if chosen is not None:
            self.controls["modules"].value = chosen
