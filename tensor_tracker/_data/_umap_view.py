"""The embedding viewer's logic: the layers it can draw together (one output shape at a
time), the tokens it offers, and the token paths it draws (see `_views`)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentValueError
from ._views import EMPTY, Choice, Drawing, Note, module_options
from .embedding import MAX_TOKENS, default_layers, with_children
from .select import display_name, first_stashes, recorded_steps, stash_tensor

__all__ = [
    "LIST_ROWS",
    "UmapSource",
    "UmapState",
    "layer_rows",
    "layers_of_shape",
    "selection_text",
    "shape_choice",
    "token_range",
    "umap_drawing",
    "umap_source",
]

Shape = tuple[int, int]  # (tokens, features)
# The tallest the layers list grows before it scrolls.
LIST_ROWS = 16


@dataclass(frozen=True)
class UmapState:
    """The embedding viewer's controls' values (see `widgets.umap_viewer`)."""

    shape: Shape | None = None
    layers: tuple[str, ...] = ()
    tokens: tuple[int, int] = (0, MAX_TOKENS - 1)
    method: str = "pca"
    grad: bool | str = False
    step: int | None = None


@dataclass(frozen=True)
class UmapSource:
    """What the viewer reads and opens on.

    Attributes:
        tracker: the recording.
        shapes: each output shape that 2 layers or more share -> those layers.
        rows: each layer's number of rows (tokens, after flattening).
        default: the layers it opens on (`default_layers`, e.g. every `blocks.N`).
        start: the controls' values it opens on.
        steps: the recorded steps.
    """

    tracker: Any
    shapes: dict[Shape, list[str]]
    rows: dict[str, int]
    default: list[str]
    start: UmapState
    steps: list[int]


def umap_source(tracker: Any) -> UmapSource | Note:
    """The viewer's data (from one stash per module), or why it has nothing to show."""
    stashes = first_stashes(tracker, "tracker")
    if not stashes:
        return EMPTY
    outputs = with_children(stashes)
    candidates: dict[str, Shape] = {}
    for s in outputs:
        value = stash_tensor(s)
        if not s.grad and value is not None and value.dim() >= 2:
            features = value.shape[-1]
            candidates.setdefault(s.name, (value.numel() // max(features, 1), features))
    if len(candidates) < 2:  # before grouping by shape: the message that helps most
        return Note(
            "umap_viewer needs full tensors (track without stats=) of at least 2 modules "
            f"whose outputs have a feature dimension; found {len(candidates)}."
        )
    # Layers of one shape can be drawn together: offer one shape at a time, and only
    # shapes that at least 2 layers share.
    by_shape: dict[Shape, list[str]] = {}
    for name, shape in candidates.items():
        by_shape.setdefault(shape, []).append(name)
    by_shape = {shape: names for shape, names in by_shape.items() if len(names) >= 2}
    if not by_shape:
        return Note(
            "umap_viewer draws paths through layers of one output shape; no 2 modules "
            f"share one ({len(candidates)} modules, each of its own shape)."
        )
    default = [n for n in default_layers(outputs) if candidates[n] in by_shape]
    default = default or next(iter(by_shape.values()))[:2]
    shape = candidates[default[0]]
    steps = recorded_steps(tracker, "tracker", "output")
    start = UmapState(
        shape=shape,
        layers=tuple(n for n in default if candidates[n] == shape),
        tokens=(0, min(shape[0], MAX_TOKENS) - 1),
        step=steps[-1],
    )
    rows = {name: shape[0] for name, shape in candidates.items()}
    return UmapSource(tracker, by_shape, rows, default, start, steps)


def shape_choice(source: UmapSource) -> Choice:
    """The `shape` control: shown when outputs come in several shapes."""
    options = tuple(
        (f"{t} tokens x {f} features ({len(names)} layers)", (t, f))
        for (t, f), names in source.shapes.items()
    )
    return Choice(options, source.start.shape, len(options) > 1)


def layers_of_shape(source: UmapSource, shape: Shape) -> Choice:
    """The `layers` control for `shape`: its layers, opening on the default ones of that
    shape when 2 or more, else on its first 8."""
    names = source.shapes[shape]
    numbered = [n for n in source.default if n in names]
    value = numbered if len(numbered) >= 2 else names[:8]
    return Choice(tuple(module_options(names)), tuple(value))


def layer_rows(layers: Choice) -> int:
    """The height of the `layers` list: as tall as it is long, up to `LIST_ROWS` rows."""
    return min(len(layers.options), LIST_ROWS)


def token_range(source: UmapSource, state: UmapState) -> tuple[int, tuple[int, int]] | None:
    """The tokens slider's largest value and its value, for the first selected layer
    (`None` when none is selected)."""
    if not state.layers:
        return None
    last = source.rows[state.layers[0]] - 1
    lo, hi = state.tokens
    return max(last, 0), (min(lo, last), min(hi, last))


def selection_text(layers: Sequence[str]) -> str:
    """The HTML line under the layers that names what is selected, so the selection is
    seen without scrolling."""
    shown = [display_name(n) for n in layers]
    if len(shown) > 6:
        shown = [*shown[:3], "…", *shown[-2:]]
    return f"<small>{len(layers)} selected: {html.escape(', '.join(shown))}</small>"


def umap_drawing(
    source: UmapSource, state: UmapState, token_labels: Sequence[Any] | None = None
) -> Drawing:
    """The token paths through the selected layers.

    Raises:
        ArgumentValueError: fewer than 2 layers selected.
    """
    if len(state.layers) < 2:
        raise ArgumentValueError("Select at least 2 layers (ctrl/shift-click) to draw token paths.")
    lo, hi = state.tokens
    return Drawing(
        "umap_plot",
        source.tracker,
        {
            "layers": list(state.layers),
            "grad": state.grad,
            "method": state.method,
            "tokens": range(lo, hi + 1),
            "token_labels": token_labels,
            "step": state.step,
        },
    )
