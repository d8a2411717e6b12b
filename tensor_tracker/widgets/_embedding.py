"""`umap_viewer`: token trajectories with a choice of layers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .._data._umap_view import (
    UmapSource,
    UmapState,
    layer_rows,
    layers_of_shape,
    selection_text,
    shape_choice,
    token_range,
    umap_drawing,
    umap_source,
)
from .._data._views import Note
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
    from matplotlib.figure import Figure

__all__ = ["umap_viewer"]


def umap_viewer(tracker: Any, token_labels: Sequence[Any] | None = None) -> ipywidgets.VBox:
    """Tokens' paths through the layers (`plot.umap_plot`), with layers and tokens to pick.

    Controls (keys of `viewer.controls`):

    - `"shape"` (Dropdown, shown when outputs come in several shapes): tokens x features
      of the layers offered; only layers of one shape can be drawn together.
    - `"layers"` (SelectMultiple): the modules of that shape (with a feature dimension),
      and the op and tap records inside them (`track(..., ops=...)`, `tap`) as children
      of their module (`"blocks.0.add#0"`); default `plot.default_layers` (e.g. every `blocks.N`). Pick 2 or more. The list is
      as tall as it is long (up to 16 rows), and `viewer.selection` (an HTML line under it)
      names what is selected, so the selection is seen without scrolling.
    - `"tokens"` (IntRangeSlider): the rows (tokens after flattening) to draw, inclusive;
      default the first 64.
    - `"method"` (ToggleButtons): `"pca"` (the default here: instant) or `"umap"` (a few
      seconds per change; the first use compiles numba code).
    - `"grad"` (ToggleButtons): activations (`False`), gradients (`True`), or `"both"`.
    - `"step"` (Dropdown): which step.

    Args:
        tracker: a `Tracker` or a list of `Stash` holding full tensors.
        token_labels: optional text per row (e.g. the decoded tokens), passed to `umap_plot`.

    Returns:
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image`, `selection`
        and `redraw()`.

    Raises:
        TypeError: `tracker` is not a tracker or a list of stashes.

    Example:
        >>> with tensor_tracker.track(lm, include=r"blocks\\.\\d+$") as t:
        ...     lm(tokens).sum().backward()
        >>> v = widgets.umap_viewer(t)
        >>> v.controls["tokens"].value = (0, 15)
        >>> v.controls["method"].value = "pca"
    """
    w = ipywidgets_module()
    source = umap_source(tracker)
    if isinstance(source, Note):
        return empty_viewer(w, source)
    return _UmapViewer(w, tracker, source, token_labels).box


class _UmapViewer:
    """The widgets of one `umap_viewer`: what each control offers and what is drawn is
    decided in `_data._umap_view`; this class sets the controls and draws."""

    def __init__(
        self, w: Any, tracker: Any, source: UmapSource, token_labels: Sequence[Any] | None
    ) -> None:
        self.source, self.token_labels = source, token_labels
        start, shape = source.start, shape_choice(source)
        layers = layers_of_shape(source, shape.value)
        self.controls: dict[str, Any] = {
            "shape": w.Dropdown(options=shape.options, value=shape.value, description="shape"),
            "layers": w.SelectMultiple(
                options=layers.options,
                value=start.layers,
                description="layers",
                rows=layer_rows(layers),
            ),
            "tokens": w.IntRangeSlider(
                value=start.tokens,
                min=0,
                max=max(shape.value[0] - 1, 0),
                description="tokens",
                continuous_update=False,
            ),
            "method": w.ToggleButtons(options=["pca", "umap"], value=start.method),
            "grad": w.ToggleButtons(
                options=[("activations", False), ("gradients", True), ("both", "both")],
                value=start.grad,
            ),
            "step": w.Dropdown(options=source.steps, value=start.step, description="step"),
        }
        c = self.controls
        if not shape.shown:
            c["shape"].layout.display = "none"
        self.selection = w.HTML()
        self.panel, self.quiet = Panel(w), Quiet()
        observe([c["layers"]], self.on_layers)
        observe([c["shape"]], self.on_shape)
        observe([c["tokens"], c["method"], c["grad"], c["step"]], self.redraw)
        rows = [
            w.HBox(
                [
                    w.VBox([c["shape"], c["layers"], self.selection]),
                    w.VBox([c["tokens"], c["method"], c["grad"], c["step"]]),
                ]
            ),
        ]
        self.box = make_viewer(w, c, rows, self.panel, self.redraw, tracker)
        self.box.selection = self.selection
        self.selection.value = selection_text(c["layers"].value)
        self.box.redraw()

    def state(self) -> UmapState:
        return UmapState(**{f.name: self.controls[f.name].value for f in fields(UmapState)})

    def redraw(self) -> None:
        if not self.quiet.active:
            self.panel.show(self.draw)
            self.box.figure = self.panel.figure

    def draw(self) -> Figure:
        return render(umap_drawing(self.source, self.state(), self.token_labels))

    def on_shape(self) -> None:
        layers = layers_of_shape(self.source, self.controls["shape"].value)
        control = self.controls["layers"]
        # One state message for options and value: apart, the page may get an index
        # into options it does not have yet.
        with self.quiet, control.hold_sync():
            control.options = layers.options
            control.rows = layer_rows(layers)
            control.value = layers.value
        self.on_layers()

    def on_layers(self) -> None:
        self.selection.value = selection_text(self.controls["layers"].value)
        tokens = token_range(self.source, self.state())
        slider = self.controls["tokens"]
        if tokens is not None and slider.max != tokens[0]:
            with self.quiet:
                slider.max, slider.value = tokens
        self.redraw()
