"""`module_graph`: which module call feeds which, found through autograd, level by level.

One forward pass of the model with temporary hooks records every module call (the tensors
going in and coming out, and their autograd nodes at that moment). For each call `P` with
submodule calls, the graph of `P`'s level has a node per child call plus `P`'s input and
output placeholders, and an edge `A -> B` when an input of `B` is an output of `A`, or is
computed from one by functional code in `P` (additions, in-place ops, reshapes): found by
walking the autograd graph back from `B`'s input until the first output of a sibling call,
or the first node autograd made while a sibling call ran (a cache it filled without
returning it), or an input of `P`. Tensors without autograd (integer ids, masks) are
recognised by their memory, views of them included. Floating-point inputs that no walk
reaches (made under `torch.no_grad()`, detached) are reported as disconnected.

A level with more than `MAX_NODES` child calls (a `Sequential` of 500 layers) is drawn
with consecutive calls gathered into group nodes (kind `"group"`), each expandable like a
call: its level holds an input placeholder, the grouped calls wired as in the parent level,
and an output placeholder; `graph.notes` says which levels were grouped.

A pure-Python layered layout (`_graph_layout`: longest-path layers, points on the layers a
long edge passes, barycentre ordering, boxes as wide as their labels) gives each node of
each level a box and each edge a route, once, so the graph draws alike without Graphviz or
a browser library: as SVG (`to_svg`), DOT text (`to_dot`), a matplotlib figure
(`tensor_tracker.plot.module_graph`), or in `tensor_tracker.report(..., graph=...)`.

The work is split as the data flows: `_graph_record` runs the pass with the hooks,
`_graph_edges` works out each level's edges and groups, `_graph_layout` lays a level out
once, `_graph_format` writes it as SVG or DOT; this module holds the `ModuleGraph` they
make and `module_graph`, which runs them in turn.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from torch import nn

from .._validate import check_int, check_type
from ..errors import ArgumentValueError
from ._graph_edges import bound_levels, connect
from ._graph_format import NODE_COLOURS, level_dot, level_svg
from ._graph_layout import NODE_HEIGHT, NODE_WIDTH, Layout, box_label, layout, module_layout
from ._graph_nodes import GraphEdge, GraphNode, node_label
from ._graph_record import parse_extra_repr, record_calls

__all__ = [
    "MAX_NODES",
    "NODE_COLOURS",
    "NODE_HEIGHT",
    "NODE_WIDTH",
    "GraphEdge",
    "GraphNode",
    "Layout",
    "ModuleGraph",
    "box_label",
    "layout",
    "module_graph",
    "module_layout",
    "node_label",
    "parse_extra_repr",
    "record_calls",
]


MAX_NODES = 100
"""The most child calls `module_graph` draws in one level; above, consecutive calls are
grouped. 100 keeps the layer stacks of real models in one level (BERT's 12 to 24 layers,
GPT-3's 96, an 80-layer Llama with its embedding and norm) while a level stays an image a
browser draws at once (100 boxes in a chain: about 7,500 pixels tall)."""


class ModuleGraph:
    """The module graph of one forward pass, at every level (see the module docstring).

    Attributes:
        nodes: every node by id (calls of every depth, the placeholders and the groups).
        root: the id of the model's call.
        edges: each level's edges, by the id of the level's call (or group).
        disconnected: `(node id, input index)` of inputs no walk reached.
        notes: what the reader should know, e.g. which levels had too many calls to draw
            as they are and were grouped (also shown by `repr(graph)`).

    Use `level(id)` for one level's nodes, edges and layout, `to_svg`, `to_dot`, `to_dict`;
    `tensor_tracker.plot.module_graph(graph)` for a matplotlib figure (PNG, PDF).

    Example:
        >>> graph = tensor_tracker.module_graph(model, x)
        >>> graph
        ModuleGraph(4 module calls, 1 levels, root '<model>#0')
        >>> graph.nodes["0#0"].inputs, graph.nodes["0#0"].outputs
        (['[8, 16] float32'], ['[8, 8] float32'])
        >>> graph.to_svg().startswith("<svg")   # or show `graph` itself in a notebook
        True
    """

    def __init__(self, nodes: dict[str, GraphNode], root: str) -> None:
        self.nodes = nodes
        self.root = root
        self.edges: dict[str, list[GraphEdge]] = {}
        self.disconnected: list[tuple[str, int]] = []
        self.notes: list[str] = []

    def __repr__(self) -> str:
        calls = sum(n.kind == "module" for n in self.nodes.values())
        levels = sum(n.children for n in self.nodes.values())
        lines = [f"ModuleGraph({calls} module calls, {levels} levels, root {self.root!r})"]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def children(self, parent: str) -> list[GraphNode]:
        """The nodes of `parent`'s level: its input placeholder, its child calls in the
        order they ran, its output placeholder."""
        return [n for n in self.nodes.values() if n.parent == parent]

    def level(self, parent: str | None = None) -> dict[str, Any]:
        """`{"nodes": [...], "edges": [...], "positions": {id: (x, y)}, "layout": Layout}`
        for the level of `parent` (default: the model's), with a layered layout (inputs on
        top): `layout` has each box and each edge's route, as the SVG, the figure and the
        page draw them; `positions` is `layout.positions`."""
        if parent is None:
            parent = self.root
        check_type(parent, str, "parent", "a call id such as '0#0' (see graph.nodes) or None")
        if parent not in self.nodes:
            raise ArgumentValueError(
                f"module_graph: no call {parent!r}; calls: {list(self.nodes)[:8]}"
            )
        nodes = self.children(parent)
        edges = self.edges.get(parent, [])
        drawn = module_layout(nodes, edges)
        return {"nodes": nodes, "edges": edges, "positions": drawn.positions, "layout": drawn}

    def to_dict(self) -> dict[str, Any]:
        """Every node and every level's edges and layout (each box, each edge's route, as
        `level(id)["layout"]` has them), as plain data: what the report embeds and draws."""
        # One pass over the nodes rather than one per level: models have thousands of calls.
        members: dict[str | None, list[GraphNode]] = {}
        for node in self.nodes.values():
            members.setdefault(node.parent, []).append(node)
        levels = {}
        for parent in [self.root, *(n.id for n in self.nodes.values() if n.children)]:
            nodes, edges = members.get(parent, []), self.edges.get(parent, [])
            drawn = module_layout(nodes, edges)
            levels[parent] = {
                "nodes": [n.id for n in nodes],
                "edges": [dataclasses.asdict(e) for e in edges],
                "positions": drawn.positions,
                "layout": {
                    "boxes": drawn.boxes,
                    "routes": drawn.routes,
                    "width": drawn.width,
                    "narrow_width": drawn.narrow_width,
                    "skip_left": drawn.skip_left,
                    "height": drawn.height,
                    "skipped": drawn.skipped,
                },
            }
        return {
            "root": self.root,
            "nodes": {k: dataclasses.asdict(v) for k, v in self.nodes.items()},
            "levels": levels,
            "disconnected": self.disconnected,
            "notes": self.notes,
        }

    def to_json(self) -> str:
        """`to_dict()` as JSON."""
        return json.dumps(self.to_dict())

    def to_dot(self, parent: str | None = None) -> str:
        """The level of `parent` as Graphviz DOT text."""
        level = self.level(parent)
        return level_dot(level["nodes"], level["edges"])

    def _repr_svg_(self) -> str:
        # Notebooks show the top level as an image, also when rendered without a kernel.
        return self.to_svg()

    def to_svg(self, parent: str | None = None) -> str:
        """The level of `parent` as a standalone SVG image (hover a box for its shapes,
        parameters and `extra_repr` fields)."""
        level = self.level(parent)
        return level_svg(level["nodes"], level["edges"], level["layout"])


def module_graph(
    model: nn.Module, *inputs: Any, max_nodes: int | None = MAX_NODES, **kwargs: Any
) -> ModuleGraph:
    """Run `model(*inputs, **kwargs)` once (with autograd recording) and return its module
    graph at every level (see the module docstring). The hooks are removed afterwards.
    Modules are named as `track()` names them; a compiled model runs eagerly for the pass,
    as the Python it was compiled from (autograd sees its modules' operations there).

    Args:
        model: the model.
        *inputs, **kwargs: what to call it with.
        max_nodes: the most child calls one level shows; a level with more shows groups of
            consecutive calls instead (`"0 … 99 (Linear \u00d7100)"`), each opened with
            `graph.level(group_id)` or in the report, and split again while too large
            (`graph.notes` lists them). `None`: never group. (Being `module_graph`'s own
            argument, a model keyword argument of that name cannot be passed through.)

    Returns:
        A `ModuleGraph`: `graph.level()` for the top level, `graph.level("encoder#0")` one
        level down, `to_svg()`, `to_dot()`, or `tensor_tracker.report(t, path, graph=graph)`.

    Raises:
        TypeError: `model` is not an `nn.Module`, or `max_nodes` not an int or None.
        ValueError: `max_nodes` is below 2.
        Exception: what the model raised (the hooks are removed).

    Example:
        >>> graph = tensor_tracker.module_graph(model, x)
        >>> [n.id for n in graph.level()["nodes"]]
        ['<model>#0/input', '0#0', '1#0', '2#0', '<model>#0/output']
        >>> [(e.source, e.target) for e in graph.level()["edges"]][:2]
        [('<model>#0/input', '0#0'), ('0#0', '1#0')]
    """
    if (
        max_nodes is not None
        and check_int(max_nodes, "module_graph: max_nodes", "an int or None") < 2
    ):
        raise ArgumentValueError(f"module_graph: max_nodes must be at least 2, got {max_nodes}")
    calls, _ = record_calls(model, inputs, kwargs)
    nodes = {c.node.id: c.node for c in calls}
    root = calls[0].node.id
    graph = ModuleGraph(nodes, root)
    for call in calls:
        if call.children:
            connect(graph, call)
    if max_nodes is not None:
        bound_levels(graph, max_nodes)
    for node in graph.nodes.values():
        node.label = node_label(node)
    return graph
