"""`umap_viewer`: token trajectories with a choice of layers."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import plot
from ..data.select import (
    display_name,
    first_stashes,
    recorded_steps,
    select,
    stash_tensor,
)
from ..errors import ArgumentValueError

if TYPE_CHECKING:
    import ipywidgets
    from matplotlib.figure import Figure
from ._base import (
    EMPTY,
    Panel,
    Quiet,
    empty_viewer,
    ipywidgets_module,
    make_viewer,
    module_options,
    observe,
)

__all__ = ["umap_viewer"]


def umap_viewer(tracker: Any, token_labels: Sequence[Any] | None = None) -> ipywidgets.VBox:
    """Tokens' paths through the layers (`plot.umap_plot`), with layers and tokens to pick.

    Controls (keys of `viewer.controls`):

    - `"shape"` (Dropdown, shown when outputs come in several shapes): tokens x features
      of the layers offered; only layers of one shape can be drawn together.
    - `"layers"` (SelectMultiple): the modules of that shape (with a feature dimension);
      default `plot.default_layers` (e.g. every `blocks.N`). Pick 2 or more. The list is
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
    # One stash per module for the options; umap_plot reads the chosen step's stashes.
    stashes = first_stashes(tracker, "tracker")
    if not stashes:
        return empty_viewer(w, EMPTY)
    outputs = select(stashes, kind="output")
    candidates: dict[str, tuple[int, int]] = {}  # module -> (tokens, features)
    for s in outputs:
        value = stash_tensor(s)
        if not s.grad and value is not None and value.dim() >= 2:
            features = value.shape[-1]
            candidates.setdefault(s.name, (value.numel() // max(features, 1), features))
    if len(candidates) < 2:  # before grouping by shape: the message that helps most
        return empty_viewer(
            w,
            "umap_viewer needs full tensors (track without stats=) of at least 2 modules "
            f"whose outputs have a feature dimension; found {len(candidates)}.",
        )
    # Layers of one shape can be drawn together: offer one shape at a time, and only
    # shapes that at least 2 layers share.
    by_shape: dict[tuple[int, int], list[str]] = {}
    for name, shape in candidates.items():
        by_shape.setdefault(shape, []).append(name)
    by_shape = {shape: names for shape, names in by_shape.items() if len(names) >= 2}
    if not by_shape:
        return empty_viewer(
            w,
            "umap_viewer draws paths through layers of one output shape; no 2 modules "
            f"share one ({len(candidates)} modules, each of its own shape).",
        )
    default = [n for n in plot.default_layers(outputs) if candidates[n] in by_shape] or next(
        iter(by_shape.values())
    )[:2]
    shape = candidates[default[0]]
    rows_of = shape[0]
    steps = recorded_steps(tracker, "tracker", "output")
    c: dict[str, Any] = {
        "shape": w.Dropdown(
            options=[
                (f"{t} tokens x {f} features ({len(names)} layers)", (t, f))
                for (t, f), names in by_shape.items()
            ],
            value=shape,
            description="shape",
        ),
        "layers": w.SelectMultiple(
            options=module_options(by_shape[shape]),
            value=[n for n in default if candidates[n] == shape],
            description="layers",
            rows=min(len(by_shape[shape]), 16),
        ),
        "tokens": w.IntRangeSlider(
            value=(0, min(rows_of, plot.MAX_TOKENS) - 1),
            min=0,
            max=max(rows_of - 1, 0),
            description="tokens",
            continuous_update=False,
        ),
        "method": w.ToggleButtons(options=["pca", "umap"], value="pca"),
        "grad": w.ToggleButtons(
            options=[("activations", False), ("gradients", True), ("both", "both")], value=False
        ),
        "step": w.Dropdown(options=steps, value=steps[-1], description="step"),
    }
    if len(by_shape) == 1:
        c["shape"].layout.display = "none"
    selection = w.HTML()
    panel = Panel(w)
    quiet = Quiet()

    def draw() -> Figure:
        layers = list(c["layers"].value)
        if len(layers) < 2:
            raise ArgumentValueError(
                "Select at least 2 layers (ctrl/shift-click) to draw token paths."
            )
        lo, hi = c["tokens"].value
        return plot.umap_plot(
            tracker,
            layers=layers,
            grad=c["grad"].value,
            method=c["method"].value,
            tokens=range(lo, hi + 1),
            token_labels=token_labels,
            step=c["step"].value,
        )

    def redraw() -> None:
        if not quiet.active:
            panel.show(draw)
            box.figure = panel.figure

    def show_selection() -> None:
        layers = [display_name(n) for n in c["layers"].value]
        shown = ", ".join(layers if len(layers) <= 6 else [*layers[:3], "…", *layers[-2:]])
        selection.value = f"<small>{len(layers)} selected: {html.escape(shown)}</small>"

    def on_shape() -> None:
        names = by_shape[c["shape"].value]
        # One state message for options and value: apart, the page may get an index
        # into options it does not have yet.
        with quiet, c["layers"].hold_sync():
            c["layers"].options = module_options(names)
            c["layers"].rows = min(len(names), 16)
            numbered = [n for n in default if n in names]
            c["layers"].value = numbered if len(numbered) >= 2 else names[: min(len(names), 8)]
        on_layers()

    def on_layers() -> None:
        show_selection()
        layers = list(c["layers"].value)
        if layers:
            with quiet:
                n = candidates[layers[0]][0]
                slider = c["tokens"]
                lo, hi = slider.value
                if slider.max != max(n - 1, 0):
                    slider.max = max(n - 1, 0)
                    slider.value = (min(lo, n - 1), min(hi, n - 1))
        redraw()

    c["layers"].observe(lambda _change: on_layers(), names="value")
    c["shape"].observe(lambda _change: on_shape(), names="value")
    observe([c["tokens"], c["method"], c["grad"], c["step"]], redraw)
    rows = [
        w.HBox(
            [
                w.VBox([c["shape"], c["layers"], selection]),
                w.VBox([c["tokens"], c["method"], c["grad"], c["step"]]),
            ]
        ),
    ]
    box = make_viewer(w, c, rows, panel, redraw)
    box.selection = selection
    show_selection()
    box.redraw()
    return box
