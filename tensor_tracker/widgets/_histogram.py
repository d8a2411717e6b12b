"""`histogram_viewer`: browse the distributions of recorded tensors."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .._data._histogram_view import (
    BIN_CHOICES,
    NO_HISTOGRAM,
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
    names = source.names
    c: dict[str, Any] = {
        "filter": w.Text(
            value="",
            description="filter",
            placeholder="substring or regex",
            continuous_update=False,
        ),
        "module": w.Dropdown(options=module_options(names), description="module"),
        "what": w.Dropdown(description="value"),
        "grad": w.ToggleButtons(options=[("forward", False), ("gradient", True)], value=False),
        "step": w.Dropdown(description="step"),
        "call": w.Dropdown(description="call"),
        "log2": w.ToggleButtons(options=[("linear", False), ("log2", True)], value=False),
        "bins": w.ToggleButtons(options=BIN_CHOICES, value=64, description="bins"),
    }
    for key in ("grad", "log2"):
        c[key].style.button_width = "80px"
    c["bins"].style.button_width = "52px"  # "256" with the buttons' padding
    panel = Panel(w)
    quiet = Quiet()
    chosen = [names[0]]  # the module the user chose last, kept across filters

    def state() -> HistogramState:
        return HistogramState(**{f.name: c[f.name].value for f in fields(HistogramState)})

    def refresh_choices() -> None:
        with quiet:
            choices = histogram_choices(source.stashes(c["module"].value), state())
            for key, choice in choices.items():  # in order: each depends on the one before
                set_options(c[key], choice)

    def on_filter() -> None:
        with quiet:
            choice, chosen[0] = filter_modules(names, c["filter"].value, chosen[0])
            set_options(c["module"], choice)
        refresh_choices()
        redraw()

    def draw() -> Figure:
        drawing = histogram_drawing(source, state())
        for key in ("log2", "bins"):
            c[key].layout.display = "none" if key in drawing.hidden else ""
        return render(drawing)

    def redraw() -> None:
        if not quiet.active:
            panel.show(draw)
            box.figure = panel.figure

    def on_choice() -> None:
        if not quiet.active:
            if c["module"].value is not None:
                chosen[0] = c["module"].value
            refresh_choices()
            redraw()

    observe([c["filter"]], on_filter)
    observe([c["module"], c["what"], c["grad"], c["step"]], on_choice)
    observe([c["call"], c["log2"], c["bins"]], redraw)
    rows = [
        w.HBox([c["filter"], c["module"], c["what"]]),
        w.HBox([c["grad"], c["step"], c["call"]]),
        w.HBox([c["log2"], c["bins"]]),
    ]
    box = make_viewer(w, c, rows, panel, redraw, tracker)
    refresh_choices()
    box.redraw()
    return box
