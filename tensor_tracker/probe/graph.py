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

A pure-Python layered layout (longest-path layers, barycentre ordering) gives each node of
each level a position, so the graph draws without Graphviz or a browser library: as SVG
(`to_svg`), DOT text (`to_dot`), or in `tensor_tracker.report(..., graph=...)`.
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from .._torch_compat import gradient_node
from .._validate import check_int, check_type
from ..core.calls import CallHooks, eager_calls
from ..core.structure import iter_tensors, rmap_tensor
from ..errors import ArgumentValueError

__all__ = [
    "MAX_NODES",
    "NODE_COLOURS",
    "GraphEdge",
    "GraphNode",
    "ModuleGraph",
    "edge_svg",
    "module_graph",
    "parse_extra_repr",
    "record_calls",
]


MAX_NODES = 100
"""The most child calls `module_graph` draws in one level; above, consecutive calls are
grouped. 100 keeps the layer stacks of real models in one level (BERT's 12 to 24 layers,
GPT-3's 96, an 80-layer Llama with its embedding and norm) while a level stays an image a
browser draws at once (100 boxes in a chain: about 7,500 pixels tall)."""


@dataclasses.dataclass
class GraphNode:
    """A module call, an input/output placeholder of the call whose level is drawn, or a
    group of consecutive calls of a level that had too many (see `MAX_NODES`).

    Attributes:
        id: unique: `"<name>#<call>"`, `"<parent id>/input"`, `"<parent id>/output"`,
            `"<parent id>/group<k>"`.
        name: the module's name as `track()` names it (`""` for the model); `call`: which
            call of it. A group's name is the range of calls it holds, `"layers.0 …
            layers.99"`.
        type: the class name (a group's: `"Linear \u00d7100"`, or the count and the types);
            `kind`: `"module"`, `"input"`, `"output"` or `"group"`.
        parent: the id of the enclosing call, or of the group that holds the call (`None`
            for the model's).
        inputs, outputs: shape and dtype strings of each tensor going in and out (a
            group's: those of its first call in, of its last call out).
        params: parameters of the module and its submodules (each once).
        extra: the module's `extra_repr()` as fields, e.g. `{"in_features": "3"}`.
        children: whether the node has a level of its own (it can be expanded).
        label: what its box shows, e.g. `"query (Linear)"`, `"0 … 99 (Linear \u00d7100)"`.
    """

    id: str
    name: str
    call: int
    type: str
    kind: str = "module"
    parent: str | None = None
    inputs: list[str] = dataclasses.field(default_factory=list)
    outputs: list[str] = dataclasses.field(default_factory=list)
    params: int = 0
    extra: dict[str, str] = dataclasses.field(default_factory=dict)
    children: bool = False
    label: str = ""


@dataclasses.dataclass
class GraphEdge:
    """Data flowing from `source` to `target` (node ids) at one level; `shape` of the tensor
    (of the first one when several flow)."""

    source: str
    target: str
    shape: str = ""


def parse_extra_repr(text: str) -> dict[str, str]:
    """`extra_repr()` text as fields, splitting at top-level commas; a part without `=`
    becomes `arg<i>`.

    Example:
        >>> parse_extra_repr("3, 8, kernel_size=(7, 7), stride=(2, 2), bias=False")
        {'arg0': '3', 'arg1': '8', 'kernel_size': '(7, 7)', 'stride': '(2, 2)', 'bias': 'False'}
    """
    parts, depth, current = [], 0, ""
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    fields: dict[str, str] = {}
    for i, part in enumerate(parts):
        key, sep, value = part.partition("=")
        if sep and key.strip().isidentifier():
            fields[key.strip()] = value.strip()
        else:
            fields[f"arg{i}"] = part
    return fields


def _describe(tensors: list[Tensor]) -> list[str]:
    return [f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in tensors]


@dataclasses.dataclass
class _Call:
    node: GraphNode
    start: int
    end: int = -1
    inputs: list[tuple[Tensor, Any]] = dataclasses.field(default_factory=list)
    outputs: list[tuple[Tensor, Any]] = dataclasses.field(default_factory=list)
    # Autograd's node counter when the call started and ended: the nodes made in between
    # are the call's (see `_connect`).
    seq_start: int = 0
    seq_end: int = 0
    children: list[_Call] = dataclasses.field(default_factory=list)


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
        """`{"nodes": [...], "edges": [...], "positions": {id: (x, y)}}` for the level of
        `parent` (default: the model's), with a layered layout (inputs on top)."""
        if parent is None:
            parent = self.root
        check_type(parent, str, "parent", "a call id such as '0#0' (see graph.nodes) or None")
        if parent not in self.nodes:
            raise ArgumentValueError(
                f"module_graph: no call {parent!r}; calls: {list(self.nodes)[:8]}"
            )
        nodes = self.children(parent)
        edges = self.edges.get(parent, [])
        return {"nodes": nodes, "edges": edges, "positions": layered_layout(nodes, edges)}

    def to_dict(self) -> dict[str, Any]:
        """Every node and every level's edges and layout, as plain data (what the report
        embeds)."""
        # One pass over the nodes rather than one per level: models have thousands of calls.
        members: dict[str | None, list[GraphNode]] = {}
        for node in self.nodes.values():
            members.setdefault(node.parent, []).append(node)
        levels = {}
        for parent in [self.root, *(n.id for n in self.nodes.values() if n.children)]:
            nodes, edges = members.get(parent, []), self.edges.get(parent, [])
            levels[parent] = {
                "nodes": [n.id for n in nodes],
                "edges": [dataclasses.asdict(e) for e in edges],
                "positions": layered_layout(nodes, edges),
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
        lines = ["digraph modules {", "  rankdir=TB; node [shape=box, fontsize=10];"]
        shapes = {"module": "box", "group": "box, style=dashed"}
        for n in level["nodes"]:
            label = node_label(n).replace('"', '\\"')
            lines.append(f'  "{n.id}" [label="{label}", shape={shapes.get(n.kind, "ellipse")}];')
        for e in level["edges"]:
            lines.append(f'  "{e.source}" -> "{e.target}" [label="{e.shape}", fontsize=8];')
        lines.append("}")
        return "\n".join(lines)

    def _repr_svg_(self) -> str:
        # Notebooks show the top level as an image, also when rendered without a kernel.
        return self.to_svg()

    def to_svg(self, parent: str | None = None) -> str:
        """The level of `parent` as a standalone SVG image (hover a box for its shapes,
        parameters and `extra_repr` fields)."""
        level = self.level(parent)
        positions = level["positions"]
        width = max((x for x, _ in positions.values()), default=0) + NODE_WIDTH + 130  # for bends
        height = max((y for _, y in positions.values()), default=0) + NODE_HEIGHT
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 20}" height="{height + 20}" '
            'font-family="sans-serif" font-size="11">',
            ARROW_MARKER,
        ]
        for e in level["edges"]:
            (x1, y1), (x2, y2) = positions[e.source], positions[e.target]
            out.append(
                edge_svg(
                    x1 + NODE_WIDTH / 2 + 10,
                    y1 + NODE_HEIGHT + 10,
                    x2 + NODE_WIDTH / 2 + 10,
                    y2 + 10,
                    NODE_HEIGHT,
                )
            )
        for n in level["nodes"]:
            x, y = positions[n.id]
            fill = NODE_COLOURS[n.kind]
            dash = ' stroke-dasharray="5 3"' if n.kind == "group" else ""
            out.append(
                f'<g><title>{html.escape(_tooltip(n))}</title><rect x="{x + 10}" y="{y + 10}" '
                f'width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="6" fill="{fill}" stroke="#557"{dash}/>'
                f'<text x="{x + 10 + NODE_WIDTH / 2}" y="{y + 10 + NODE_HEIGHT / 2 + 4}" text-anchor="middle">'
                f"{html.escape(node_label(n))}</text></g>"
            )
        out.append("</svg>")
        return "\n".join(out)


# A node's box in layout pixels, shared by the SVG and the matplotlib figure.
NODE_WIDTH, NODE_HEIGHT, _GAP_X, _GAP_Y = 150, 34, 30, 40
ARROW_MARKER = (
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
    'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>'
)
"""The arrowhead `edge_svg` draws with."""


def edge_svg(x1: float, y1: float, x2: float, y2: float, height: float) -> str:
    """An SVG arrow from (x1, y1) down to (x2, y2); one that skips layers (a residual)
    bends to the right so that it does not hide behind the boxes it passes."""
    if y2 - y1 > height + 60:
        bend = min(40 + (y2 - y1) / 8, 120)
        path = f"M{x1},{y1} C{x1 + bend},{y1 + 30} {x2 + bend},{y2 - 30} {x2},{y2}"
    else:
        path = f"M{x1},{y1} L{x2},{y2}"
    return f'<path d="{path}" fill="none" stroke="#888" marker-end="url(#arrow)"/>'


NODE_COLOURS = {"module": "#eef3ff", "group": "#fff4dc", "input": "#f3f3f3", "output": "#f3f3f3"}
"""Box fill of each kind of node (SVG, report and matplotlib draw alike)."""


def node_label(node: GraphNode) -> str:
    """The text drawn in a node's box (the SVG and the matplotlib figure alike)."""
    if node.label:
        return node.label
    if node.kind != "module":
        return node.kind
    short = node.name.rsplit(".", 1)[-1] or "<model>"
    return f"{short}{'' if not node.call else f' #{node.call}'} ({node.type})"


def _tooltip(node: GraphNode) -> str:
    lines = [node.name or "<model>", node.type]
    if node.kind == "group":
        lines.append(f"expand it: graph.level({node.id!r})")
    lines += [f"in: {s}" for s in node.inputs] + [f"out: {s}" for s in node.outputs]
    if node.params:
        lines.append(f"params: {node.params:,}")
    lines += [f"{k}={v}" for k, v in node.extra.items()]
    return "\n".join(lines)


def layered_layout(
    nodes: list[GraphNode], edges: list[GraphEdge]
) -> dict[str, tuple[float, float]]:
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


def _node(tensor: Tensor) -> Any:
    """The autograd node a use of `tensor` points back to: its `grad_fn`, or for a leaf
    that requires grad its gradient-accumulating node; None without autograd."""
    if tensor.grad_fn is not None or not tensor.requires_grad:
        return tensor.grad_fn
    return gradient_node(tensor)


def _sequence_now() -> int:
    """Autograd's node counter now: the sequence number of a node made for the purpose
    (nodes made later, in this thread, have larger ones)."""
    with torch.enable_grad():
        marker = torch.zeros((), requires_grad=True).view(())
    assert marker.grad_fn is not None
    number: int = marker.grad_fn._sequence_nr()
    return number


def _keys(tensors: list[tuple[Tensor, Any]]) -> Iterator[tuple[str, int]]:
    """How a tensor is recognised where it is used: by its autograd node, else (integer
    ids, masks, no_grad values) by its memory, so that a view of it (`ids.view(-1, n)`)
    is recognised too. Every tensor recorded stays alive, so no address is reused."""
    for tensor, grad_fn in tensors:
        if grad_fn is not None:
            yield ("node", id(grad_fn))
        elif tensor.numel() and tensor.layout == torch.strided:
            yield ("memory", tensor.untyped_storage().data_ptr())
        else:
            yield ("tensor", id(tensor))


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
            _connect(graph, call)
    if max_nodes is not None:
        _bound_levels(graph, max_nodes)
    for node in graph.nodes.values():
        node.label = node_label(node)
    return graph


def _bound_levels(graph: ModuleGraph, limit: int) -> None:
    """Group the calls of every level with more than `limit` of them (see `_group`), and
    say so in `graph.notes`."""
    levels: dict[str, list[GraphNode]] = {}
    for node in graph.nodes.values():
        if node.kind == "module" and node.parent is not None:
            levels.setdefault(node.parent, []).append(node)
    # Nodes to insert before a node (a group and its input placeholder go before its first
    # call), so that `children` lists each level in order; output placeholders go last.
    before: dict[str, list[GraphNode]] = {}
    last: list[GraphNode] = []
    for parent, calls in levels.items():
        if len(calls) <= limit:
            continue
        groups = _group(graph, parent, calls, limit, before, last)
        graph.notes.append(
            f"level {parent!r} has {len(calls)} calls, more than max_nodes={limit}: it shows "
            f"{len(groups)} groups of consecutive calls; open one with "
            f"graph.level({groups[0].id!r}), or pass max_nodes=None to module_graph"
        )
    if not before:
        return
    items: list[tuple[str, GraphNode]] = []
    for key, node in graph.nodes.items():
        items += [(n.id, n) for n in before.get(key, ())]
        items.append((key, node))
    items += [(n.id, n) for n in last]
    graph.nodes.clear()
    graph.nodes.update(items)


def _group(
    graph: ModuleGraph,
    parent: str,
    calls: list[GraphNode],
    limit: int,
    before: dict[str, list[GraphNode]],
    last: list[GraphNode],
) -> list[GraphNode]:
    """Replace `calls` (the nodes of `parent`'s level, in order) by as few groups of
    consecutive ones as keep each group's level within `limit` after grouping it again
    (`limit` groups of `limit` calls, or of `limit` groups, ...), of near-equal sizes;
    remap the level's edges to the groups and give each group a level of its own."""
    capacity = limit
    while capacity * limit < len(calls):
        capacity *= limit
    count = -(-len(calls) // capacity)
    size, extra = divmod(len(calls), count)
    owner: dict[str, str] = {}
    groups: list[tuple[GraphNode, list[GraphNode]]] = []
    start = 0
    for k in range(count):
        members = calls[start : start + size + (k < extra)]
        start += len(members)
        group = _group_node(f"{parent}/group{k}", parent, members)
        for member in members:
            member.parent = group.id
            owner[member.id] = group.id
        groups.append((group, members))
    edges = graph.edges.get(parent, [])
    for group, members in groups:
        source = GraphNode(f"{group.id}/input", group.name, 0, "", "input", group.id)
        source.outputs = group.inputs
        sink = GraphNode(f"{group.id}/output", group.name, 0, "", "output", group.id)
        sink.inputs = group.outputs
        before.setdefault(members[0].id, []).extend([group, source])
        last.append(sink)
        # The group's level: edges between its calls as they are, edges from or to the rest
        # of the parent's level through the group's placeholders.
        inside = {m.id for m in members}
        graph.edges[group.id] = _dedupe(
            GraphEdge(
                e.source if e.source in inside else source.id,
                e.target if e.target in inside else sink.id,
                e.shape,
            )
            for e in edges
            if e.source in inside or e.target in inside
        )
    graph.edges[parent] = _dedupe(
        GraphEdge(owner.get(e.source, e.source), owner.get(e.target, e.target), e.shape)
        for e in edges
    )
    for group, members in groups:
        if len(members) > limit:
            _group(graph, group.id, members, limit, before, last)
    return [group for group, _ in groups]


def _dedupe(edges: Iterable[GraphEdge]) -> list[GraphEdge]:
    """The first edge of each (source, target) pair, without self-loops (calls grouped
    together)."""
    found: dict[tuple[str, str], GraphEdge] = {}
    for e in edges:
        if e.source != e.target:
            found.setdefault((e.source, e.target), e)
    return list(found.values())


def _group_node(id: str, parent: str, members: list[GraphNode]) -> GraphNode:
    """A group of consecutive calls (or of groups), named by the range of calls it holds."""
    first, end = members[0], members[-1]
    if first.kind == "group":  # a group of groups: its range is from theirs
        first_name, end_name = first.name.split(" … ")[0], end.name.split(" … ")[-1]
        count = sum(int(m.extra["calls"]) for m in members)
        types = {t: None for m in members for t in m.extra["types"].split(", ")}
    else:
        first_name, end_name = _call_name(first), _call_name(end)
        count = len(members)
        types = {m.type: None for m in members}
    kinds = ", ".join(types)
    node = GraphNode(id, f"{first_name} … {end_name}", 0, "", "group", parent, children=True)
    node.type = f"{kinds} \u00d7{count}" if len(types) == 1 else f"{count} calls: {kinds}"
    node.inputs, node.outputs = first.inputs, end.outputs
    # Each module's parameters once, whichever number of its calls are grouped.
    node.params = sum({m.name: m.params for m in members if m.kind == "module"}.values())
    node.params += sum(m.params for m in members if m.kind == "group")
    node.extra = {"calls": str(count), "types": kinds}
    short = f"{_short(first_name)} … {_short(end_name)}"
    node.label = f"{short} ({node.type if len(types) == 1 else f'{count} calls'})"
    return node


def _call_name(node: GraphNode) -> str:
    return (node.name or "<model>") + (f" #{node.call}" if node.call else "")


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def record_calls(
    model: nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[_Call], Any]:
    """Run `model(*inputs, **kwargs)` once, eagerly, with the hooks of `CallHooks` (a
    compiled model runs as Python); return every module call (in the order they started,
    with their tensors and autograd nodes, named as `track()` names the modules) and the
    output.

    Raises:
        TypeError: `model` is not an `nn.Module`.
    """
    check_type(model, nn.Module, "model", "a torch.nn.Module")
    counts: dict[str, int] = {}
    stack: list[_Call] = []
    calls: list[_Call] = []
    clock = [0]

    def tensors_of(value: Any) -> list[tuple[Tensor, Any]]:
        return [(t, _node(t)) for t in iter_tensors(value)]

    def pre(name: str, module: nn.Module, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        call = counts.get(name, 0)
        counts[name] = call + 1
        node = GraphNode(f"{name or '<model>'}#{call}", name, call, type(module).__name__)
        node.parent = stack[-1].node.id if stack else None
        record = _Call(node, clock[0], inputs=tensors_of((args, kw)), seq_start=_sequence_now())
        clock[0] += 1
        node.inputs = _describe([t for t, _ in record.inputs])
        node.params = sum(p.numel() for p in dict.fromkeys(module.parameters()))
        node.extra = parse_extra_repr(module.extra_repr())
        if stack:
            stack[-1].children.append(record)
            stack[-1].node.children = True
        stack.append(record)
        calls.append(record)

    def post(
        name: str, module: nn.Module, args: tuple[Any, ...], kw: dict[str, Any], output: Any
    ) -> None:
        record = stack.pop()
        record.end = clock[0]
        clock[0] += 1
        record.outputs = tensors_of(output)
        record.seq_end = _sequence_now()
        record.node.outputs = _describe([t for t, _ in record.outputs])

    # Inputs that need no gradient are invisible to autograd: give the floating-point ones
    # a leaf (same values) so that every use of them can be traced.
    def traced(value: Tensor) -> Tensor:
        if value.is_floating_point() and not value.requires_grad:
            return value.detach().requires_grad_(True)
        return value

    inputs = rmap_tensor(inputs, traced)
    kwargs = rmap_tensor(kwargs, traced)
    with CallHooks(model, pre, post), eager_calls(), torch.enable_grad():
        output = model(*inputs, **kwargs)
    return calls, output


def _connect(graph: ModuleGraph, parent: _Call) -> None:
    """The placeholders and edges of `parent`'s level."""
    pid = parent.node.id
    source = GraphNode(f"{pid}/input", parent.node.name, parent.node.call, "", "input", pid)
    source.outputs = parent.node.inputs
    sink = GraphNode(f"{pid}/output", parent.node.name, parent.node.call, "", "output", pid)
    sink.inputs = parent.node.outputs
    # Keep the input placeholder first and the output last among the level's nodes.
    items = list(graph.nodes.items())
    at = next(i for i, (k, _) in enumerate(items) if k == pid) + 1
    items[at:at] = [(source.id, source)]
    items.append((sink.id, sink))
    graph.nodes.clear()
    graph.nodes.update(items)
    # Producers: who made each tensor / autograd node, and when it was done.
    producers: dict[tuple[str, int], list[tuple[int, str, str]]] = {}
    for key, (tensor, _) in zip(_keys(parent.inputs), parent.inputs, strict=True):
        producers.setdefault(key, []).append((parent.start, source.id, _shape(tensor)))
    for child in parent.children:
        for key, (tensor, _) in zip(_keys(child.outputs), child.outputs, strict=True):
            producers.setdefault(key, []).append((child.end, child.node.id, _shape(tensor)))
    edges: dict[tuple[str, str], GraphEdge] = {}
    consumers = [(c.node.id, c.start, c.inputs) for c in parent.children]
    consumers.append((sink.id, parent.end, parent.outputs))
    for target, start, tensors in consumers:
        for index, (key, (tensor, grad_fn)) in enumerate(zip(_keys(tensors), tensors, strict=True)):
            found = _sources(key, grad_fn, start, producers, parent.children)
            for src, shape in found:
                edges.setdefault((src, target), GraphEdge(src, target, shape))
            if not found and (tensor.is_floating_point() or tensor.is_complex()):
                graph.disconnected.append((target, index))
    graph.edges[pid] = list(edges.values())


def _shape(tensor: Tensor) -> str:
    return "x".join(str(s) for s in tensor.shape) or "scalar"


def _sources(
    key: tuple[str, int],
    grad_fn: Any,
    before: int,
    producers: dict[tuple[str, int], list[tuple[int, str, str]]],
    siblings: list[_Call],
) -> list[tuple[str, str]]:
    """The producers an input reaches: itself, or walking autograd back from its node
    until an output of a sibling call, or a node made during one (a tensor the sibling
    computed without returning it, e.g. a cache it filled, or the base of a view it
    returned and that was then changed in place)."""
    done = [c for c in siblings if c.end <= before]

    def made_by(fn: Any) -> tuple[str, str] | None:
        number = fn._sequence_nr()
        for call in done:
            if call.seq_start < number < call.seq_end:
                return call.node.id, _shape(call.outputs[0][0]) if call.outputs else ""
        return None

    def latest(k: tuple[str, int]) -> tuple[str, str] | None:
        done = [p for p in producers.get(k, ()) if p[0] <= before]
        return max(done)[1:] if done else None

    direct = latest(key)
    if direct is not None or grad_fn is None:
        return [] if direct is None else [direct]
    found: dict[str, str] = {}
    seen = {id(grad_fn)}
    frontier = [grad_fn]
    alive = [grad_fn]  # visited nodes stay alive, so that no other node reuses their id
    while frontier:
        node = frontier.pop()
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is None or id(nxt) in seen:
                continue
            seen.add(id(nxt))
            alive.append(nxt)
            hit = latest(("node", id(nxt))) or made_by(nxt)
            if hit is not None:
                found.setdefault(hit[0], hit[1])
            else:
                frontier.append(nxt)
    return list(found.items())
