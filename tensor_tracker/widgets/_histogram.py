"""`histogram_viewer`: browse the distributions of recorded tensors."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .._data._histogram_view import (
    BIN_CHOICES,
    NO_HISTOGRAM,
    HistogramSource,
    HistogramState,
    filter_modules,
    histogram_choices,
    histogram_drawing,
    histogram_source,
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
    set_options,
)

if TYPE_CHECKING:
    import ipywidgets
    from matplotlib.figure import Figure

__all__ = ["BIN_CHOICES", "NO_HISTOGRAM", "histogram_viewer"]


def histogram_viewer(tracker: Any) -> ipywidgets.VBox:
    """Browse the histogram of any stashed tensor.

    Controls (keys of `viewer.controls`):

    - `"filter"` (Text): substring or regular expression of module names; the module list
      shows the matches (`"<model>"` is the root). The chosen module is kept when the
      filter hides it and comes back when the filter is cleared.
    - `"module"` (Dropdown): the module.
    - `"what"` (Dropdown): `output`, or an input/parameter/optimizer entry when recorded.
    - `"grad"` (ToggleButtons): forward value (`False`) or gradient (`True`).
    - `"step"`, `"call"` (Dropdowns): which step and which call of the module.
    - `"log2"` (ToggleButtons): linear values (`False`) or log2|x| (`True`).
    - `"bins"` (ToggleButtons): number of bins, one of `BIN_CHOICES` (8 to 256, doubling:
      each choice a click, where a slider over 1..256 jumps dozens of bins per pixel).

    Stashes recorded with `stats=[..., "exp_hist"]` or `stats=[...,
    tensor_tracker.stats.histogram()]` show their recorded bins (`log2` and `bins`, fixed
    by the recording, are then hidden). Statistics without a histogram (`stats=True`) can
    show none: the viewer says in one line how to record one, and shows no controls.

    Args:
        tracker: a `Tracker` or a list of `Stash`.

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image` and `redraw()`
        (see the module docstring).

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.

    Example:
        >>> with tensor_tracker.track(lm) as t:
        ...     lm(tokens).sum().backward()
        >>> v = widgets.histogram_viewer(t)
        >>> v.controls["filter"].value = "blocks.0"
        >>> v.controls["log2"].value = True
        >>> v.figure.axes[0].get_xlabel()
        'log2|value|'
    """
    w = ipywidgets_module()
    source = histogram_source(tracker)
    if isinstance(source, Note):
        return empty_viewer(w, source)
    return _HistogramViewer(w, tracker, source).box


class _HistogramViewer:
    """The widgets of one `histogram_viewer`, and the module the user chose last (kept
    across filters, see `filter_modules`): what each control offers and what is drawn is
    decided in `_data._histogram_view`; this class sets the controls and draws."""

    def __init__(self, w: Any, tracker: Any, source: HistogramSource) -> None:
        self.source = source
        self.chosen = source.names[0]
        self.controls: dict[str, Any] = {
            "filter": w.Text(
                value="",
                description="filter",
                placeholder="substring or regex",
                continuous_update=False,
            ),
            "module": w.Dropdown(options=module_options(source.names), description="module"),
            "what": w.Dropdown(description="value"),
            "grad": w.ToggleButtons(options=[("forward", False), ("gradient", True)], value=False),
            "step": w.Dropdown(description="step"),
            "call": w.Dropdown(description="call"),
            "log2": w.ToggleButtons(options=[("linear", False), ("log2", True)], value=False),
            "bins": w.ToggleButtons(options=BIN_CHOICES, value=64, description="bins"),
        }
        c = self.controls
        for key in ("grad", "log2"):
            c[key].style.button_width = "80px"
        c["bins"].style.button_width = "52px"  # "256" with the buttons' padding
        self.panel, self.quiet = Panel(w), Quiet()
        observe([c["filter"]], self.on_filter)
        observe([c["module"], c["what"], c["grad"], c["step"]], self.on_choice)
        observe([c["call"], c["log2"], c["bins"]], self.redraw)
        rows = [
            w.HBox([c["filter"], c["module"], c["what"]]),
            w.HBox([c["grad"], c["step"], c["call"]]),
            w.HBox([c["log2"], c["bins"]]),
        ]
        self.box = make_viewer(w, c, rows, self.panel, self.redraw, tracker)
        self.refresh_choices()
        self.box.redraw()

    def state(self) -> HistogramState:
        return HistogramState(
            **{f.name: self.controls[f.name].value for f in fields(HistogramState)}
        )

    def refresh_choices(self) -> None:
        with self.quiet:
            stashes = self.source.stashes(self.controls["module"].value)
            # In order: each depends on the one before.
            for key, choice in histogram_choices(stashes, self.state()).items():
                set_options(self.controls[key], choice)

    def on_filter(self) -> None:
        with self.quiet:
            pattern = self.controls["filter"].value
            choice, self.chosen = filter_modules(self.source.names, pattern, self.chosen)
            set_options(self.controls["module"], choice)
        self.refresh_choices()
        self.redraw()

    def draw(self) -> Figure:
        drawing = histogram_drawing(self.source, self.state())
        for key in ("log2", "bins"):
            self.controls[key].layout.display = "none" if key in drawing.hidden else ""
        return render(drawing)

    def redraw(self) -> None:
        if not self.quiet.active:
            self.panel.show(self.draw)
            self.box.figure = self.panel.figure

    def on_choice(self) -> None:
        if not self.quiet.active:
            if self.controls["module"].value is not None:
                self.chosen = self.controls["module"].value
            self.refresh_choices()
            self.redraw()
