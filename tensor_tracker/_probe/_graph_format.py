"""A module graph's level as text: an SVG image drawn from the level's `Layout`, and
Graphviz DOT text. The figure (`plot/_graph.py`) draws from the same `Layout`."""

from __future__ import annotations

import html
from collections.abc import Sequence

from ._graph_layout import FONT_PX, Layout, Point, box_label
from ._graph_nodes import GraphEdge, GraphNode, node_label

__all__ = ["ARROW_MARKER", "NODE_COLOURS", "level_dot", "level_svg", "route_svg"]

NODE_COLOURS = {"module": "#eef3ff", "group": "#fff4dc", "input": "#f3f3f3", "output": "#f3f3f3"}
"""Box fill of each kind of node (SVG, report and matplotlib draw alike)."""

ARROW_MARKER = (
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
    'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>'
)
"""The arrowhead `route_svg` draws with."""


def route_svg(route: Sequence[Point]) -> str:
    """An SVG arrow along a `Layout` route (two points: a line; more: cubic segments).

    Example:
        >>> route_svg([(0, 0), (0, 40)])
        '<path d="M0,0 L0,40" fill="none" stroke="#888" marker-end="url(#arrow)"/>'
    """
    (x, y), *rest = route
    if len(rest) == 1:
        path = f"M{x},{y} L{rest[0][0]},{rest[0][1]}"
    else:
        path = f"M{x},{y} C" + " ".join(f"{px},{py}" for px, py in rest)
    return f'<path d="{path}" fill="none" stroke="#888" marker-end="url(#arrow)"/>'


def _tooltip(node: GraphNode) -> str:
    lines = [node.name or "<model>", node.type]
    if node.kind == "group":
        lines.append(f"expand it: graph.level({node.id!r})")
    lines += [f"in: {s}" for s in node.inputs] + [f"out: {s}" for s in node.outputs]
    if node.params:
        lines.append(f"params: {node.params:,}")
    lines += [f"{k}={v}" for k, v in node.extra.items()]
    return "\n".join(lines)


def level_svg(nodes: Sequence[GraphNode], edges: Sequence[GraphEdge], drawn: Layout) -> str:
    """A level as a standalone SVG image, drawn where `drawn` puts it (hover a box for its
    shapes, parameters and `extra_repr` fields)."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{drawn.width}" '
        f'height="{drawn.height}" font-family="system-ui, sans-serif" font-size="{FONT_PX}">',
        ARROW_MARKER,
        *(route_svg(route) for route in drawn.routes if route),
    ]
    for n in nodes:
        x, y, width, height = drawn.boxes[n.id]
        dash = ' stroke-dasharray="5 3"' if n.kind == "group" else ""
        # A box that opens a level keeps room on its right for the page's "+".
        middle = x + (width - 12 if n.children else width) / 2
        out.append(
            f'<g><title>{html.escape(_tooltip(n))}</title><rect x="{x}" y="{y}" '
            f'width="{width}" height="{height}" rx="6" fill="{NODE_COLOURS[n.kind]}" '
            f'stroke="#557"{dash}/><text x="{middle}" y="{y + height / 2 + 4}" '
            f'text-anchor="middle">{html.escape(box_label(n))}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)


def level_dot(nodes: Sequence[GraphNode], edges: Sequence[GraphEdge]) -> str:
    """A level as Graphviz DOT text."""
    lines = ["digraph modules {", "  rankdir=TB; node [shape=box, fontsize=10];"]
    shapes = {"module": "box", "group": "box, style=dashed"}
    for n in nodes:
        label = node_label(n).replace('"', '\\"')
        lines.append(f'  "{n.id}" [label="{label}", shape={shapes.get(n.kind, "ellipse")}];')
    for e in edges:
        lines.append(f'  "{e.source}" -> "{e.target}" [label="{e.shape}", fontsize=8];')
    lines.append("}")
    return "\n".join(lines)
