"""`umap_viewer`: token trajectories with a choice of layers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor

from .. import plot
from ..data.select import (
    select,
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
    stashes_of,
)

__all__ = ["umap_viewer"]


def umap_viewer(tracker: Any, token_labels: Sequence[Any] | None = None) -> ipywidgets.VBox:
    """Tokens' paths through the layers (`plot.umap_plot`), with layers and tokens to pick.

    Controls (keys of `viewer.controls`):

    - `"layers"` (SelectMultiple): modules whose outputs have a feature dimension; default
      `plot.default_layers` (e.g. every `blocks.N`). Pick 2 or more with the same shape.
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
        An `ipywidgets.VBox` with `controls`, `figure`, `message`, `image` and `redraw()`.

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
    stashes = stashes_of(tracker)
    if not stashes:
        return empty_viewer(w, EMPTY)
    outputs = select(stashes, kind="output")
    candidates: dict[str, int] = {}  # module -> rows
    for s in outputs:
        value = s.first_value
        if not s.grad and isinstance(value, Tensor) and value.dim() >= 2:
            candidates.setdefault(s.name, value.numel() // max(value.shape[-1], 1))
    if len(candidates) < 2:
        return empty_viewer(
            w,
            "umap_viewer needs full tensors (track without stats=) of at least 2 modules "
            f"whose outputs have a feature dimension; found {len(candidates)}.",
        )
    default = plot.default_layers(outputs) or list(candidates)[:2]
    rows_of = candidates[default[0]]
    steps = sorted({s.step for s in outputs})
    c: dict[str, Any] = {
        "layers": w.SelectMultiple(
            options=module_options(list(candidates)), value=default, description="layers", rows=8
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
            stashes,
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

    def on_layers() -> None:
        layers = list(c["layers"].value)
        if layers:
            with quiet:
                n = candidates[layers[0]]
                slider = c["tokens"]
                lo, hi = slider.value
                if slider.max != max(n - 1, 0):
                    slider.max = max(n - 1, 0)
                    slider.value = (min(lo, n - 1), min(hi, n - 1))
        redraw()

    c["layers"].observe(lambda _change: on_layers(), names="value")
    observe([c["tokens"], c["method"], c["grad"], c["step"]], redraw)
    rows = [
        w.HBox([c["layers"], w.VBox([c["tokens"], c["method"], c["grad"], c["step"]])]),
    ]
    box = make_viewer(w, c, rows, panel, redraw)
    box.redraw()
    return box
