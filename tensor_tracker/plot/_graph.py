"""`module_graph` and `autograd_graph` figures: the probe layer's `Layout` of a level (its
boxes and edge routes, the ones the SVG draws) drawn with matplotlib, so that a graph saves
as PNG or PDF without Graphviz or a browser."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._optional import require
from .._probe.autograd_graph import MAX_DRAWN, AutogradGraph
from .._probe.graph import NODE_COLOURS, GraphEdge, Layout, ModuleGraph, box_label
from ..errors import ArgumentTypeError
from ._figure import MAX_WIDTH, fixed_margins, new_figure, root_figure, themed

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["MAX_HEIGHT", "autograd_graph", "module_graph"]

MAX_HEIGHT = 40.0
"""The tallest graph figure, in inches: a level of 100 calls in a chain is shrunk to it (its
text too); draw a group or a sub-level for readable boxes."""

# The layout's unit is the SVG pixel, 1/96 inch; a module box's label at the page's 12
# pixels (9 points: the box is as wide as that), an operation's at 10 pixels.
_PX = 1 / 96
_FONT, _OP_FONT = 9.0, 7.5
# A line of an operation's box holds this many characters at full size (longer ones are cut
# in the middle).
_CHARS = 24

_OP_COLOURS = {"op": "#eef3ff", "param": "#fde2e2", "input": "#e2ecfd", "output": "#eeeeee"}


@dataclasses.dataclass
class _Box:
    """One box to draw: its id (for the patch's `gid`), text, fill, and outline; a module
    graph's box holds its text on one line (the layout sized it so), and leaves room on
    its right for the page's `+` when it opens a level."""

    id: str
    text: str
    fill: str
    dashed: bool = False
    round: bool = True
    module: bool = False
    expandable: bool = False


@themed
def module_graph(
    graph: ModuleGraph, parent: str | None = None, *, ax: Axes | None = None
) -> Figure:
    """One level of a `tensor_tracker.module_graph` as a matplotlib figure: the same layered
    layout as `graph.to_svg()`, module calls as blue boxes, groups of calls dashed,
    the level's input and output grey, edges that skip layers running between the boxes. Save it as an
    image with `fig.savefig("graph.png", dpi=150)` (or `.pdf`, `.svg`): no Graphviz needed.

    The figure is at most 14 inches wide and `MAX_HEIGHT` (40) tall; a larger level is
    shrunk, text included (save such a figure with `dpi=200` to keep its text legible).
    Levels hold at most `max_nodes` calls (see `tensor_tracker.module_graph`), so a figure
    never holds more than about 100 boxes.

    Args:
        graph: the graph `tensor_tracker.module_graph(model, x)` returned.
        parent: the call (or group) whose level to draw, e.g. `"encoder#0"`; default: the
            model's top level.
        ax: draw into this matplotlib axes instead of a new figure (the drawing keeps its
            proportions and is centred in it).

    Returns:
        The matplotlib `Figure`; each node is a patch with `gid` `"node:<id>"` in
        `ax.patches`, each edge one with `gid` `"edge:<source>-><target>"`, each label a
        text with `gid` `"label:<id>"`.

    Raises:
        TypeError: `graph` is not a `ModuleGraph`.
        ValueError: no call `parent` in the graph.

    Example:
        >>> graph = tensor_tracker.module_graph(model, x)
        >>> fig = plot.module_graph(graph)
        >>> len([p for p in fig.axes[0].patches if p.get_gid().startswith("node:")])
        5
        >>> fig.savefig("graph.png")  # doctest: +SKIP
    """
    if not isinstance(graph, ModuleGraph):
        raise ArgumentTypeError(
            f"module_graph: graph must be what tensor_tracker.module_graph returns, got "
            f"{type(graph).__name__}"
        )
    level = graph.level(parent)
    boxes = [
        _Box(
            n.id,
            box_label(n),
            NODE_COLOURS.get(n.kind, "#f3f3f3"),
            dashed=n.kind == "group",
            module=True,
            expandable=n.children,
        )
        for n in level["nodes"]
    ]
    return _draw(boxes, level["edges"], level["layout"], ax)


@themed
def autograd_graph(
    graph: AutogradGraph,
    module: str | None = None,
    *,
    max_nodes: int = MAX_DRAWN,
    ax: Axes | None = None,
) -> Figure:
    """A `tensor_tracker.autograd_graph` (or one module call's operations) as a matplotlib
    figure, laid out as `graph.to_svg()` draws it: operations as boxes, parameters red,
    inputs blue. Save it with `fig.savefig("ops.png")` (or `.pdf`).

    Args:
        graph: what `tensor_tracker.autograd_graph(model, x)` returned.
        module: draw the operations of this module call only, e.g. `"encoder.layer.0#0"`.
        max_nodes: refuse to draw more operations than this (a whole model's graph of
            thousands of operations is no picture; pick a `module`).
        ax: draw into this matplotlib axes instead of a new figure.

    Returns:
        The matplotlib `Figure` (patches and texts with `gid`s as in `module_graph`).

    Raises:
        TypeError: `graph` is not an `AutogradGraph`.
        ValueError: more than `max_nodes` operations, or no operation of `module`.

    Example:
        >>> ops = tensor_tracker.autograd_graph(model, x)
        >>> fig = plot.autograd_graph(ops)
        >>> fig.savefig("ops.png")  # doctest: +SKIP
    """
    if not isinstance(graph, AutogradGraph):
        raise ArgumentTypeError(
            f"autograd_graph: graph must be what tensor_tracker.autograd_graph returns, got "
            f"{type(graph).__name__}"
        )
    nodes, edges, drawn = graph.laid_out(module, max_nodes)
    boxes = [_Box(n.id, n.label, _OP_COLOURS[n.kind], round=n.kind != "op") for n in nodes]
    return _draw(boxes, edges, drawn, ax)


def _draw(
    boxes: Sequence[_Box], edges: Sequence[GraphEdge], drawn: Layout, ax: Axes | None
) -> Figure:
    """Draw `boxes` and the `edges` between them where `drawn` puts them, in a figure sized
    to the layout."""
    patches = require("matplotlib.patches", "plot")
    path_class = require("matplotlib.path", "plot").Path
    right, bottom = drawn.width, drawn.height
    if ax is None:
        width_in, height_in = right * _PX, bottom * _PX
        scale = min(1.0, MAX_WIDTH / width_in, MAX_HEIGHT / height_in)
        with fixed_margins(0, 0, 0, 0):
            fig = new_figure((width_in * scale, height_in * scale))
        ax = fig.add_subplot()
    else:
        fig = root_figure(ax)
        box = ax.get_window_extent()
        scale = min(box.width / fig.dpi / (right * _PX), box.height / fig.dpi / (bottom * _PX))
    ax.set_axis_off()
    ax.set_xlim(0, right)
    ax.set_ylim(bottom, 0)  # the layout's y grows downwards
    ax.set_aspect("equal", adjustable="box")
    for e, route in zip(edges, drawn.routes, strict=True):
        if not route:
            continue
        # Two points: a line; more: cubic Bézier segments, as the SVG's path draws them.
        codes = [
            path_class.MOVETO,
            *[path_class.LINETO if len(route) == 2 else path_class.CURVE4] * (len(route) - 1),
        ]
        ax.add_patch(
            patches.FancyArrowPatch(
                path=path_class(route, codes),
                arrowstyle="-|>",
                mutation_scale=8 * scale,
                color="#888888",
                linewidth=0.8 * scale,
                gid=f"edge:{e.source}->{e.target}",
            )
        )
    for b in boxes:
        x, y, width, height = drawn.boxes[b.id]
        ax.add_patch(
            patches.FancyBboxPatch(
                (x, y),
                width,
                height,
                boxstyle=f"round,pad=0,rounding_size={6 if b.round else 2}",
                facecolor=b.fill,
                edgecolor="#555577",
                linestyle="--" if b.dashed else "-",
                linewidth=0.8 * scale,
                gid=f"node:{b.id}",
            )
        )
        ax.text(
            x + (width - 12 if b.expandable else width) / 2,
            y + height / 2,
            b.text if b.module else _fit(b.text),
            ha="center",
            va="center",
            fontsize=(_FONT if b.module else _OP_FONT) * scale,
            linespacing=1.1,
            color="black",  # on the box's light fill, whatever the notebook's theme
            gid=f"label:{b.id}",
        )
    return fig


def _fit(text: str) -> str:
    """`text` on at most two lines of `_CHARS` characters: `name (Type)` breaks before the
    type; a line still too long loses its middle."""
    lines = [text]
    if len(text) > _CHARS and " (" in text:
        head, _, tail = text.partition(" (")
        lines = [head, "(" + tail]
    return "\n".join(_cut(line) for line in lines)


def _cut(line: str) -> str:
    if len(line) <= _CHARS:
        return line
    head = math.ceil((_CHARS - 1) / 2)
    return line[:head] + "\u2026" + line[len(line) - (_CHARS - 1 - head) :]
