"""The one layout of a graph level, computed once and drawn as it is by the SVG
(`_graph_format`), the matplotlib figure (`plot/_graph.py`), the HTML page (`report`,
`graph_view`: its data carries the boxes and routes) and the autograd graph's SVG: where
each box goes and which path each edge takes, in layout pixels (1/96 inch).

A layered layout in pure Python (no Graphviz, no browser), in the steps dagre and Graphviz
take: each node on the layer after its deepest predecessor; an edge that spans layers gets
a point on each layer it passes (so it runs between the boxes there, not through them);
the nodes and points of each layer ordered by the mean position of their neighbours,
sweeping down and up and keeping the order with the fewest crossings; then each one placed
as near the mean of its neighbours' centres as the order and the gaps allow (a chain of
blocks stays in one column). A box is as wide as its label at the page's font
(`text_width`). The edges `skip_edges` finds (a cache or a mask every repeated block reads)
take no part in this: bundled by source, they run down lanes in a column either side of
the drawing, and the page shows them only when asked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Protocol

from ._graph_nodes import node_label

if TYPE_CHECKING:
    from ._graph_nodes import GraphEdge, GraphNode

__all__ = [
    "MARGIN",
    "MAX_BOX_WIDTH",
    "NODE_HEIGHT",
    "NODE_WIDTH",
    "Layout",
    "box_label",
    "box_width",
    "fit_label",
    "layout",
    "module_layout",
    "skip_edges",
    "text_width",
]

NODE_WIDTH, NODE_HEIGHT = 150, 30
"""A box with no width given (an autograd graph's operation), and every box's height."""
MAX_BOX_WIDTH = 280
"""The widest box: a longer label loses its dotted prefix, then its start (`fit_label`)."""
FONT_PX = 12
"""The labels' font size, in pixels (the page draws `12px system-ui, sans-serif`)."""
MARGIN = 10
"""Around the drawing, in layout pixels."""
_NODE_SEP, _EDGE_SEP, _RANK_SEP = 18, 10, 26
_LANE_SEP = 10  # between the lanes of the skip column
_CORNER = 6  # the radius of a skip edge's bends
_SWEEPS = 40  # at most, of the placement of each layer (fewer once it settles)

Point = tuple[float, float]

# Advance widths of DejaVu Sans (what system-ui is on Linux) in thousandths of the font
# size: the widest of the faces the page meets (SF, Segoe UI and Arial are 5-15% narrower),
# so that a box sized by them holds its label in any of them.
# fmt: off
_WIDTHS = (
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337,
    636, 636, 636, 636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531,
    1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656, 557, 863, 748, 787,
    603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500,
    500, 613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,
    635, 635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838, 1000,
    838,
)
# fmt: on
_ADVANCE = dict(
    zip(
        " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`"
        "abcdefghijklmnopqrstuvwxyz{|}~\u2026\u00d7",
        _WIDTHS,
        strict=True,
    )
)


def text_width(text: str, px: float = FONT_PX) -> float:
    """The width of `text` at `px` pixels in DejaVu Sans, the widest of the system fonts
    the page draws labels in (a little wide for the others).

    Example:
        >>> round(text_width("attn #0 (GPT2Attention)"), 1)
        146.1
    """
    return sum(_ADVANCE.get(c, 1000 if ord(c) > 0x2000 else 640) for c in text) * px / 1000


def fit_label(text: str, px: float) -> str:
    """`text` if it fits in `px` pixels, else what the page draws instead: its dotted
    prefix dropped part by part (`…h.3.mlp`), then its start cut (`…mlp`).

    Example:
        >>> fit_label("transformer.h.11.mlp.c_proj (Conv1D)", 120)
        '…c_proj (Conv1D)'
    """
    if text_width(text) <= px:
        return text
    parts = text.split(".")
    for k in range(1, len(parts)):
        shorter = "\u2026" + ".".join(parts[k:])
        if text_width(shorter) <= px:
            return shorter
    tail = parts[-1]
    while len(tail) > 1 and text_width("\u2026" + tail) > px:
        tail = tail[1:]
    return "\u2026" + tail


def box_width(label: str, expandable: bool) -> float:
    """The width of a box holding `label` (already `fit_label`-ed to `MAX_BOX_WIDTH`),
    with room for the `+` of a node that opens a level of its own.

    Example:
        >>> box_width("drop (Dropout)", False), box_width("h.0 (GPT2Block)", True)
        (108.0, 127.0)
    """
    return float(int(text_width(label)) + 1 + (30 if expandable else 18))


def box_label(node: GraphNode) -> str:
    """The text in a module graph node's box: its `node_label`, cut to `MAX_BOX_WIDTH`.

    Example:
        >>> from tensor_tracker._probe.graph import GraphNode
        >>> box_label(GraphNode("a.b.c#0", "a.b.c", 0, "Linear"))
        'c (Linear)'
    """
    return fit_label(node_label(node), MAX_BOX_WIDTH - (30 if node.children else 18))


def module_layout(nodes: Sequence[GraphNode], edges: Sequence[GraphEdge]) -> Layout:
    """A module graph level's `layout`: each box as wide as its `box_label`, the
    `skip_edges` in the skip column."""
    widths = {n.id: box_width(box_label(n), n.children) for n in nodes}
    return layout(nodes, edges, widths, skip_edges(nodes, edges))


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
        positions: each box's top left corner less the margin, `{id: (x, y)}`: what
            `ModuleGraph.level()["positions"]` gives (nodes of one layer share their y).
        boxes: each node's box, `{id: (x, y, width, height)}`.
        routes: each edge's path, in the order of the edges given: two points for a
            straight line, else a start and three points per cubic Bézier segment (two
            control points, an end).
        width, height: the drawing's size, the skip columns included.
        skipped: the indices of the edges routed in the skip columns (see `skip_edges`).
        narrow_width: the drawing's width without the skip columns (the page's, while
            those edges are hidden).
        skip_left: the left skip column's width: where the drawing without the skip
            columns starts.
    """

    positions: dict[str, Point]
    boxes: dict[str, tuple[float, float, float, float]]
    routes: list[tuple[Point, ...]]
    width: float
    height: float
    skipped: tuple[int, ...] = ()
    narrow_width: float = 0.0
    skip_left: float = 0.0


def skip_edges(nodes: Sequence[GraphNode], edges: Sequence[GraphEdge]) -> set[int]:
    """The indices of the edges that skip over a repeated block: their source also reaches
    their target through a node with a level of its own whose type appears more than once
    at this level (a KV cache every later block reads, a mask given to every layer). They
    say nothing the chain of blocks does not, and cross it many times; a residual inside a
    block skips no repeated block and stays.

    Example:
        >>> from tensor_tracker._probe.graph import GraphEdge, GraphNode
        >>> nodes = [GraphNode(i, i, 0, "Block", "module", children=True) for i in "abc"]
        >>> sorted(skip_edges(nodes, [GraphEdge(*p) for p in ["ab", "bc", "ac"]]))
        [2]
    """
    counts: dict[str, int] = {}
    for n in nodes:
        if n.kind == "module" and n.children:
            counts[n.type] = counts.get(n.type, 0) + 1
    blocks = [n.id for n in nodes if n.kind == "module" and n.children and counts[n.type] > 1]
    if not blocks:
        return set()
    succs: dict[str, list[str]] = {}
    for e in edges:
        succs.setdefault(e.source, []).append(e.target)

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in succs.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reaches = {n.id: reach(n.id) for n in nodes}
    return {
        k
        for k, e in enumerate(edges)
        if any(
            w not in (e.source, e.target) and w in reaches[e.source] and e.target in reaches[w]
            for w in blocks
        )
    }


def layout(
    nodes: Sequence[Node],
    edges: Sequence[Edge],
    widths: Mapping[str, float] | None = None,
    skipped: Collection[int] = (),
) -> Layout:
    """The layout of a level (see the module's docstring): boxes `widths[id]` wide
    (default `NODE_WIDTH`) and `NODE_HEIGHT` high, an edge from the bottom middle of its
    source to the top middle of its target, the edges numbered in `skipped` down the skip
    column, from the right side of their source to that of their target.

    Example:
        >>> from tensor_tracker._probe.graph import GraphEdge, GraphNode
        >>> nodes = [GraphNode(i, i, 0, "", kind) for i, kind in [("a", "input"), ("b", "module")]]
        >>> drawn = layout(nodes, [GraphEdge("a", "b")])
        >>> drawn.boxes["b"], drawn.routes
        ((10.0, 66.0, 150.0, 30.0), [((85.0, 40.0), (85.0, 66.0))])
    """
    widths = widths or {}
    width_of = {n.id: float(widths.get(n.id, NODE_WIDTH)) for n in nodes}
    skipped = tuple(sorted(set(skipped)))
    drawable = [
        k
        for k, e in enumerate(edges)
        if e.source != e.target and e.source in width_of and e.target in width_of
    ]
    drawn = [k for k in drawable if k not in skipped]
    layer = _layers([n.id for n in nodes], [edges[k] for k in drawn], nodes)
    # Each edge spanning layers: a point on each layer between its ends.
    chains: dict[int, list[str]] = {}
    for k in drawn:
        e = edges[k]
        chain = [e.source]
        for depth in range(layer[e.source] + 1, layer[e.target]):
            point = f"\0{k}:{depth}"
            layer[point], width_of[point] = depth, 0.0
            chain.append(point)
        chains[k] = [*chain, e.target]
    links = [(a, b) for chain in chains.values() for a, b in pairwise(chain)]
    rows = _order(layer, links, [n.id for n in nodes])
    centre = _place(rows, links, width_of)
    top = {i: float(d * (NODE_HEIGHT + _RANK_SEP) + MARGIN) for i, d in layer.items()}
    lanes = _lanes({k: edges[k] for k in drawable if k in skipped}, top)
    # The drawing's left edge at the left column's outermost lane, or at the margin.
    shift = max((-lane for lane in lanes.values()), default=0.0)
    shift = max(shift, 0.0)
    left = min((centre[i] - width_of[i] / 2 for i in centre), default=0.0) - MARGIN - shift
    boxes: dict[str, tuple[float, float, float, float]] = {}
    positions: dict[str, Point] = {}
    for n in nodes:
        x = round(centre[n.id] - width_of[n.id] / 2 - left, 1)
        positions[n.id] = (x - MARGIN, top[n.id] - MARGIN)
        boxes[n.id] = (x, top[n.id], width_of[n.id], float(NODE_HEIGHT))
    right = max((x + w for x, _, w, _ in boxes.values()), default=0.0)
    routes: list[tuple[Point, ...]] = []
    for k, e in enumerate(edges):
        if k in chains:
            points = [_bottom(boxes[e.source])]
            for point in chains[k][1:-1]:
                x = round(centre[point] - left, 1)
                points += [(x, top[point]), (x, top[point] + NODE_HEIGHT)]
            points.append(_top(boxes[e.target]))
            routes.append(_smooth(points))
        elif k in lanes:
            lane = right + lanes[k] if lanes[k] > 0 else MARGIN + shift + lanes[k]
            routes.append(_side_route(boxes[e.source], boxes[e.target], lane))
        else:  # a self-loop, or an end outside the level: nowhere to draw it
            routes.append(())
    narrow = right - shift + MARGIN
    width = max([right + MARGIN, *(right + lane + MARGIN for lane in lanes.values())])
    height = max((y + h for _, y, _, h in boxes.values()), default=0.0) + MARGIN
    return Layout(positions, boxes, routes, width, height, skipped, narrow, shift)


def _layers(ids: list[str], edges: Sequence[Edge], nodes: Sequence[Node]) -> dict[str, int]:
    """Each node's layer: one below its deepest predecessor (longest path from the top); a
    node no edge reaches sits just above its first successor, the output placeholder at the
    bottom."""
    preds: dict[str, list[str]] = {i: [] for i in ids}
    succs: dict[str, list[str]] = {i: [] for i in ids}
    for e in edges:
        preds[e.target].append(e.source)
        succs[e.source].append(e.target)
    # Kahn's topological order; nodes on a cycle, which autograd does not make, go last.
    waiting = {i: len(preds[i]) for i in ids}
    ready = [i for i in reversed(ids) if not waiting[i]]
    order: list[str] = []
    while ready:
        i = ready.pop()
        order.append(i)
        for j in succs[i]:
            waiting[j] -= 1
            if not waiting[j]:
                ready.append(j)
    order += [i for i in ids if waiting[i]]
    layer: dict[str, int] = {}
    for i in order:
        layer[i] = 1 + max((layer.get(p, 0) for p in preds[i]), default=-1)
    kinds = {n.id: n.kind for n in nodes}
    for i in reversed(order):
        if not preds[i] and succs[i] and kinds[i] != "input":
            layer[i] = min(layer[s] for s in succs[i]) - 1
    for i in ids:  # the output placeholder at the bottom
        if kinds[i] == "output":
            layer[i] = 1 + max((v for k, v in layer.items() if k != i), default=-1)
    for e in edges:  # a cycle's back edge: its target below its source all the same
        layer[e.target] = max(layer[e.target], layer[e.source] + 1)
    return layer


def _order(layer: dict[str, int], links: list[tuple[str, str]], ids: list[str]) -> list[list[str]]:
    """The nodes of each layer, left to right: by the mean place of their neighbours on
    the layer above (sweeping down) or below (sweeping up), the order with the fewest
    crossings kept."""
    depth = max(layer.values(), default=-1) + 1
    rows: list[list[str]] = [[] for _ in range(depth)]
    first = {i: k for k, i in enumerate(ids)}
    for i in sorted(layer, key=lambda i: (first.get(i, len(ids)), i)):
        rows[layer[i]].append(i)
    up: dict[str, list[str]] = {i: [] for i in layer}
    down: dict[str, list[str]] = {i: [] for i in layer}
    for a, b in links:
        down[a].append(b)
        up[b].append(a)

    def sweep(rows: list[list[str]], forward: bool) -> list[list[str]]:
        rows = [list(r) for r in rows]
        steps = range(1, depth) if forward else range(depth - 2, -1, -1)
        for d in steps:
            before = {i: k for k, i in enumerate(rows[d - 1 if forward else d + 1])}
            near = up if forward else down
            # A node with no neighbour there (-1) keeps its place among the others.
            keyed = []
            for k, i in enumerate(rows[d]):
                places = [before[j] for j in near[i]]
                keyed.append((sum(places) / len(places) if places else -1.0, k, i))
            placed = sorted((v for v in keyed if v[0] >= 0), key=lambda v: (v[0], v[1]))
            free = {k: i for v, k, i in keyed if v < 0}
            it = iter(i for _, _, i in placed)
            rows[d] = [free[k] if k in free else next(it) for k in range(len(rows[d]))]
        return rows

    best, fewest = rows, _crossings(rows, links)
    for turn in range(8):
        rows = sweep(rows, turn % 2 == 0)
        count = _crossings(rows, links)
        if count < fewest:
            best, fewest = rows, count
    return best


def _crossings(rows: list[list[str]], links: list[tuple[str, str]]) -> int:
    """How many pairs of links between adjacent layers cross."""
    place = {i: k for row in rows for k, i in enumerate(row)}
    by_layer: dict[int, list[tuple[int, int]]] = {}
    depth = {i: d for d, row in enumerate(rows) for i in row}
    for a, b in links:
        by_layer.setdefault(depth[a], []).append((place[a], place[b]))
    count = 0
    for pairs in by_layer.values():
        for k, (a1, b1) in enumerate(pairs):
            count += sum((a1 - a2) * (b1 - b2) < 0 for a2, b2 in pairs[k + 1 :])
    return count


def _place(
    rows: list[list[str]], links: list[tuple[str, str]], width: dict[str, float]
) -> dict[str, float]:
    """Each node's centre: as near the weighted mean of its neighbours' centres as its
    layer's order and gaps allow, sweeping down, up and both ways. A link between two
    points of one long edge weighs most, and so does a link in a chain (its source with no
    other successor, its target with no other predecessor), so that both run straight; a
    link between boxes outweighs one from a box to a long edge's point, so that the boxes
    line up and the long edge goes round them."""
    neighbours: dict[str, list[tuple[str, float, bool]]] = {i: [] for row in rows for i in row}
    outs: dict[str, int] = {}
    ins: dict[str, int] = {}
    for a, b in links:
        outs[a], ins[b] = outs.get(a, 0) + 1, ins.get(b, 0) + 1
    for a, b in links:
        points = (width[a] == 0) + (width[b] == 0)
        weight = 8.0 if points == 2 or (outs[a] == 1 and ins[b] == 1) else 2.0 - points
        neighbours[a].append((b, weight, False))  # b is below a
        neighbours[b].append((a, weight, True))
    centre: dict[str, float] = {}
    for row in rows:
        x = 0.0
        for i in row:
            centre[i] = x + width[i] / 2
            x += width[i] + _NODE_SEP
    order = list(range(len(rows)))
    # Two sweeps from one side each, then sweeps towards both sides: each layer placed
    # exactly given the others, which converges to the least weighted sum of squared
    # horizontal lengths of the links (a chain of nodes straight, long edges straight).
    gaps = {
        d: [
            (width[a] + width[b]) / 2 + (_NODE_SEP if width[a] and width[b] else _EDGE_SEP)
            for a, b in pairwise(row)
        ]
        for d, row in enumerate(rows)
    }
    # A level with thousands of points (a hundred long edges) gets fewer sweeps: seconds else.
    for turn in range(min(_SWEEPS, max(6, 40_000 // len(centre)) if centre else 0)):
        above, below = turn != 1, turn != 0
        moved = 0.0
        for d in order if turn % 2 == 0 else reversed(order):
            row = rows[d]
            wanted: list[tuple[float, float]] = []
            for i in row:
                total = pull = 0.0
                for j, w, up in neighbours[i]:
                    if (up and above) or (not up and below):
                        total += w
                        pull += centre[j] * w
                wanted.append((pull / total, total) if total else (centre[i], 0.01))
            for i, x in zip(row, _packed(wanted, gaps[d]), strict=True):
                moved = max(moved, abs(x - centre[i]))
                centre[i] = x
        if turn > 1 and moved < 0.1:  # settled
            break
    return centre


def _packed(wanted: list[tuple[float, float]], gaps: list[float]) -> list[float]:
    """Positions in order, each `gaps[k]` or more after the one before, nearest (in the
    weighted least squares sense) to `wanted` (position, weight): pool adjacent violators
    on the positions less their cumulative gaps."""
    offsets = [0.0]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    # Blocks of [mean, weight, count], merged while a block's mean is left of the one before.
    blocks: list[list[float]] = []
    for (x, w), offset in zip(wanted, offsets, strict=True):
        blocks.append([x - offset, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks[-1]
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
    out: list[float] = []
    for mean, _, count in blocks:
        out += [mean] * int(count)
    return [x + offset for x, offset in zip(out, offsets, strict=True)]


def _lanes(edges: Mapping[int, Edge], top: Mapping[str, float]) -> dict[int, float]:
    """Each skipped edge's lane, as its distance right of the drawing (left of it when
    negative). The edges from one source share a lane (one line branching into each
    target, as a bundle). Sources in the order of their bundle's span, the shortest first,
    go to the right and the left column in turn (an edge crosses only those on its side),
    each to the innermost lane free over its span there (so that a span inside another
    runs inside it, and spans one after the other share a lane)."""
    spans: dict[str, tuple[float, float]] = {}
    for e in edges.values():
        start, end = spans.get(e.source, (top[e.source], top[e.source]))
        spans[e.source] = (start, max(end, top[e.target]))
    taken: dict[int, list[list[tuple[float, float]]]] = {1: [], -1: []}
    lane_of: dict[str, float] = {}
    for turn, source in enumerate(
        sorted(spans, key=lambda i: (spans[i][1] - spans[i][0], spans[i][0]))
    ):
        side = 1 if turn % 2 == 0 else -1
        start, end = spans[source]
        lanes = taken[side]
        lane = next(
            (n for n, used in enumerate(lanes) if all(b < start or end < t for t, b in used)),
            len(lanes),
        )
        if lane == len(lanes):
            lanes.append([])
        lanes[lane].append((start, end))
        lane_of[source] = side * (2 * _LANE_SEP + lane * _LANE_SEP)
    return {k: lane_of[e.source] for k, e in edges.items()}


def _bottom(box: tuple[float, float, float, float]) -> Point:
    x, y, w, h = box
    return (round(x + w / 2, 1), y + h)


def _top(box: tuple[float, float, float, float]) -> Point:
    x, y, w, _ = box
    return (round(x + w / 2, 1), y)


def _smooth(points: list[Point]) -> tuple[Point, ...]:
    """A line for two points; else a smooth curve through them: one cubic segment between
    each two (Catmull-Rom's tangents), given as its control points and end."""
    if len(points) == 2:
        return tuple(points)
    out = [points[0]]
    last = len(points) - 1
    for k in range(last):
        (ax, ay), (bx, by) = points[max(k - 1, 0)], points[k]
        (cx, cy), (ex, ey) = points[k + 1], points[min(k + 2, last)]
        out += [
            (round(bx + (cx - ax) / 6, 1), round(by + (cy - ay) / 6, 1)),
            (round(cx - (ex - bx) / 6, 1), round(cy - (ey - by) / 6, 1)),
            (cx, cy),
        ]
    return tuple(out)


def _side_route(
    source: tuple[float, float, float, float],
    target: tuple[float, float, float, float],
    lane: float,
) -> tuple[Point, ...]:
    """From the side of `source` facing the lane at x `lane` out to it, down it, and into
    the same side of `target`: straight runs joined by rounded corners (cubic segments; a
    straight run's control points are its ends)."""
    right = lane > source[0]
    sx, sy = source[0] + (source[2] if right else 0), source[1] + source[3] / 2
    tx, ty = target[0] + (target[2] if right else 0), target[1] + target[3] / 2
    x, r = lane, (_CORNER if right else -_CORNER)
    return (
        *((sx, sy), (sx, sy), (x - r, sy), (x - r, sy)),
        *((x, sy), (x, sy), (x, sy + abs(r))),
        *((x, sy + abs(r)), (x, ty - abs(r)), (x, ty - abs(r))),
        *((x, ty), (x, ty), (x - r, ty)),
        *((x - r, ty), (tx, ty), (tx, ty)),
    )
