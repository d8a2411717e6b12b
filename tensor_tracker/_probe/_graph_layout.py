"""The one layout of a graph level, computed once and drawn as it is by the SVG
(`_graph_format`), the matplotlib figure (`plot/_graph.py`) and, for the autograd graph,
its SVG: where each box goes and which path each edge takes, in layout pixels (1/96 inch).

A layered layout in pure Python (no Graphviz, no browser): each node on the layer after
its deepest predecessor, the nodes of a layer ordered by the mean position of their
predecessors; an edge to the next layer is a straight line, one that skips layers (a
residual) a curve bending to the right of the boxes' centres. The HTML page lays levels
out with dagre instead (see ARCHITECTURE.md: it routes edges around boxes and sizes boxes
to their text, which this layout does not).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "MARGIN",
    "NODE_HEIGHT",
    "NODE_WIDTH",
    "Layout",
    "edge_route",
    "layered_layout",
    "layout",
]

NODE_WIDTH, NODE_HEIGHT = 150, 34
"""A module graph's box, in layout pixels (an autograd graph's boxes are 30 high)."""
_GAP_X, _GAP_Y = 30, 40
MARGIN = 10
"""Around the drawing, in layout pixels."""
_BEND_ROOM = 130
"""Right of the widest layer: room for the bends of edges that skip layers."""

Point = tuple[float, float]


class Node(Protocol):
    """What the layout reads of a node: its id, and its kind (an `"output"` goes last)."""

    id: str
    kind: str


class Edge(Protocol):
    """What the layout reads of an edge: the ids of its ends."""

    source: str
    target: str


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a level's boxes go and how its edges run, in drawing pixels (margins included).

    Attributes:
        positions: each node's place on the layered grid, `{id: (x, y)}` (its box's top left
            corner less the margin): what `ModuleGraph.level()["positions"]` gives.
        boxes: each node's box, `{id: (x, y, width, height)}`.
        routes: each edge's path, in the order of the edges given: two points for a
            straight line, four for a cubic Bézier curve (start, two control points, end).
        width, height: the drawing's size.
    """

    positions: dict[str, Point]
    boxes: dict[str, tuple[float, float, float, float]]
    routes: list[tuple[Point, ...]]
    width: float
    height: float


def layout(nodes: Sequence[Node], edges: Sequence[Edge], box_height: float = NODE_HEIGHT) -> Layout:
    """The layout of a level: `layered_layout`'s positions, boxes `NODE_WIDTH` by
    `box_height`, and an `edge_route` from the bottom middle of each edge's source to the
    top middle of its target.

    Example:
        >>> from tensor_tracker._probe.graph import GraphEdge, GraphNode
        >>> nodes = [GraphNode(i, i, 0, "", kind) for i, kind in [("a", "input"), ("b", "module")]]
        >>> drawn = layout(nodes, [GraphEdge("a", "b")])
        >>> drawn.boxes["b"], drawn.routes
        ((10.0, 84.0, 150.0, 34.0), [((85.0, 44.0), (85.0, 84.0))])
    """
    positions = layered_layout(nodes, edges)
    boxes = {
        i: (x + MARGIN, y + MARGIN, float(NODE_WIDTH), float(box_height))
        for i, (x, y) in positions.items()
    }
    routes = []
    for e in edges:
        (x1, y1, _, _), (x2, y2, _, _) = boxes[e.source], boxes[e.target]
        middle = NODE_WIDTH / 2
        routes.append(edge_route((x1 + middle, y1 + box_height), (x2 + middle, y2), box_height))
    width = (
        max((x for x, _ in positions.values()), default=0) + NODE_WIDTH + _BEND_ROOM + 2 * MARGIN
    )
    height = max((y for _, y in positions.values()), default=0) + box_height + 2 * MARGIN
    return Layout(positions, boxes, routes, width, height)


def edge_route(start: Point, end: Point, box_height: float) -> tuple[Point, ...]:
    """The path of an edge from `start` down to `end`: straight to the next layer; a curve
    bending to the right for an edge that skips layers (a residual), so that it does not
    hide behind the boxes it passes.

    Example:
        >>> edge_route((0, 0), (0, 300), 34)
        ((0, 0), (77.5, 30), (77.5, 270), (0, 300))
    """
    (x1, y1), (x2, y2) = start, end
    if y2 - y1 > box_height + 60:
        bend = min(40 + (y2 - y1) / 8, 120)
        return (x1, y1), (x1 + bend, y1 + 30), (x2 + bend, y2 - 30), (x2, y2)
    return (x1, y1), (x2, y2)


def layered_layout(nodes: Sequence[Node], edges: Sequence[Edge]) -> dict[str, tuple[float, float]]:
    """Layered layout: each node on the layer after its deepest predecessor (the input
    placeholder on top, the output at the bottom), then the nodes of each layer ordered by
    the mean position of their predecessors."""
    ids = [n.id for n in nodes]
    preds: dict[str, list[str]] = {i: [] for i in ids}
    for e in edges:
        if e.source in preds and e.target in preds and e.source != e.target:
            preds[e.target].append(e.source)
    # Longest path from the sources, in a topological order (Kahn's algorithm; nodes on a
    # cycle, which autograd does not make, go last).
    succs: dict[str, list[str]] = {i: [] for i in ids}
    waiting = {i: len(preds[i]) for i in ids}
    for i in ids:
        for p in preds[i]:
            succs[p].append(i)
    ready = [i for i in ids if not waiting[i]]
    order_topo: list[str] = []
    while ready:
        i = ready.pop()
        order_topo.append(i)
        for j in succs[i]:
            waiting[j] -= 1
            if not waiting[j]:
                ready.append(j)
    order_topo += [i for i in ids if waiting[i]]
    layer: dict[str, int] = {}
    for i in order_topo:
        layer[i] = 1 + max((layer.get(p, 0) for p in preds[i]), default=-1)
    for n in nodes:  # the output placeholder at the bottom
        if n.kind == "output":
            layer[n.id] = 1 + max((v for k, v in layer.items() if k != n.id), default=-1)
    rows: dict[int, list[str]] = {}
    for i in ids:
        rows.setdefault(layer[i], []).append(i)
    order: dict[str, float] = {}
    for depth in sorted(rows):
        row = rows[depth]
        row.sort(key=lambda i: sum(order[p] for p in preds[i]) / len(preds[i]) if preds[i] else 0.0)
        for k, i in enumerate(row):
            order[i] = k
    widest = max((len(r) for r in rows.values()), default=1)
    positions: dict[str, tuple[float, float]] = {}
    for depth, row in rows.items():
        offset = (widest - len(row)) * (NODE_WIDTH + _GAP_X) / 2
        for k, i in enumerate(row):
            positions[i] = (
                offset + k * (NODE_WIDTH + _GAP_X),
                float(depth * (NODE_HEIGHT + _GAP_Y)),
            )
    return positions
