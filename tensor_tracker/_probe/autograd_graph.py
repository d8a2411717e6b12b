"""`autograd_graph`: the operations autograd recorded in one forward pass, with parameters
named, saved tensors' shapes, and the module call that made each operation."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from .._core.naming import parameter_names
from .._core.structure import iter_tensors
from .._validate import check_callable
from ..errors import ArgumentValueError
from ._graph_format import ARROW_MARKER, route_svg
from ._graph_layout import Layout, layout
from ._graph_nodes import GraphEdge
from ._graph_record import record_calls

__all__ = ["BOX_HEIGHT", "MAX_DRAWN", "AutogradGraph", "OpNode", "autograd_graph"]

BOX_HEIGHT = 30
"""An operation's box, in layout pixels (as wide as a module graph's)."""

MAX_DRAWN = 600
"""The most nodes `to_svg` (and a notebook's display) draws unless told otherwise: beyond,
a layered picture of operations is too large to read or to render quickly."""


@dataclasses.dataclass
class OpNode:
    """One node of the autograd graph.

    Attributes:
        id: unique (`"op<k>"`, `"output"`).
        kind: `"op"` (an operation's backward node), `"param"` (a parameter's gradient
            accumulator), `"input"` (a model input's), or `"output"`.
        label: the operation (e.g. `"Addmm"`) or the parameter's qualified name.
        op: the autograd node's class name (e.g. `"AddmmBackward0"`).
        module: the innermost module call whose forward made it (`"<name>#<call>"`, as in
            `module_graph`), `None` for code outside every module.
        saved: shapes of the tensors the operation saved for backward (the activations
            kept in memory until backward).
        shape: the parameter's or input's shape.
    """

    id: str
    kind: str
    label: str
    op: str = ""
    module: str | None = None
    saved: list[str] = dataclasses.field(default_factory=list)
    shape: str = ""


def _saved_shapes(node: Any) -> list[str]:
    shapes = []
    for attr in dir(node):
        if attr.startswith("_saved_"):
            try:
                value = getattr(node, attr)
            except RuntimeError:  # freed, or not a tensor accessor
                continue
            if isinstance(value, Tensor):
                shapes.append(f"{attr[7:]}: {list(value.shape)}")
    return shapes


class AutogradGraph:
    """The autograd graph of one forward pass (see `autograd_graph`).

    Attributes:
        nodes: `OpNode`s by id; `edges`: `GraphEdge`s in the direction data flows.

    Example:
        >>> ops = tensor_tracker.autograd_graph(model, x)
        >>> sorted(n.label for n in ops.nodes.values() if n.kind == "op")
        ['Addmm', 'Addmm', 'Relu', 'T', 'T']
        >>> ops.to_dot().startswith("digraph")   # for Graphviz; `to_svg()` for a notebook
        True
    """

    def __init__(
        self,
        nodes: dict[str, OpNode],
        edges: list[GraphEdge],
        calls: dict[str, str | None] | None = None,
    ) -> None:
        self.nodes = nodes
        self.edges = edges
        # Each module call's enclosing call, so that `module=` takes its submodules' too.
        self._parents = calls or {}

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        params = sum(n.kind == "param" for n in self.nodes.values())
        text = f"AutogradGraph({len(self)} nodes, {params} parameters)"
        if len(self) > MAX_DRAWN:
            text += (
                "; too many to draw at once: to_svg(module='<call id>') draws one module "
                "call's operations, to_dot() writes them all"
            )
        return text

    def _within(self, owner: str | None, module: str) -> bool:
        while owner is not None:
            if owner == module:
                return True
            owner = self._parents.get(owner)
        return False

    def _select(self, module: str | None) -> tuple[list[OpNode], list[GraphEdge]]:
        if module is None:
            return list(self.nodes.values()), self.edges
        inside = [n for n in self.nodes.values() if self._within(n.module, module)]
        if not inside:
            modules = sorted({n.module for n in self.nodes.values() if n.module})[:8]
            raise ArgumentValueError(f"autograd_graph: no operation of {module!r}; e.g. {modules}")
        ids = {n.id for n in inside}
        return inside, [e for e in self.edges if e.source in ids and e.target in ids]

    def drawn(
        self, module: str | None = None, max_nodes: int = MAX_DRAWN
    ) -> tuple[list[OpNode], list[GraphEdge], dict[str, tuple[float, float]]]:
        """The nodes, edges and layered layout (`{id: (x, y)}`) that `to_svg` draws.

        Raises:
            ValueError: more than `max_nodes` to draw, or no operation of `module`.
        """
        nodes, edges, drawn = self.laid_out(module, max_nodes)
        return nodes, edges, drawn.positions

    def laid_out(
        self, module: str | None = None, max_nodes: int = MAX_DRAWN
    ) -> tuple[list[OpNode], list[GraphEdge], Layout]:
        """The nodes, edges and their `Layout` (boxes and edge routes) that `to_svg` and
        `tensor_tracker.plot.autograd_graph` draw.

        Raises:
            ValueError: more than `max_nodes` to draw, or no operation of `module`.
        """
        nodes, edges = self._select(module)
        if len(nodes) > max_nodes:
            raise ArgumentValueError(
                f"autograd_graph: {len(nodes)} operations are too many to draw usefully; "
                f"draw one module's with to_svg(module=...) or raise max_nodes="
            )
        return nodes, edges, layout(nodes, edges)

    def to_dot(self, module: str | None = None, cluster: bool = True) -> str:
        """Graphviz DOT text: operations as boxes, parameters as red ellipses, inputs blue;
        with `cluster`, each module call's operations in a box of their own. `module`
        keeps the operations of one call (and of the calls inside it) only."""
        nodes, edges = self._select(module)
        lines = ["digraph autograd {", "  node [fontsize=10];"]
        style = {
            "op": "shape=box",
            "param": "shape=ellipse, color=red",
            "input": "shape=ellipse, color=blue",
            "output": "shape=ellipse",
        }
        groups: dict[str | None, list[OpNode]] = {}
        for n in nodes:
            groups.setdefault(n.module if cluster else None, []).append(n)
        for k, (owner, members) in enumerate(groups.items()):
            indent = "  "
            if owner is not None:
                lines.append(f'  subgraph cluster_{k} {{ label="{owner}";')
                indent = "    "
            for n in members:
                label = n.label + (f"\\n{n.shape}" if n.shape else "")
                lines.append(f'{indent}"{n.id}" [label="{label}", {style[n.kind]}];')
            if owner is not None:
                lines.append("  }")
        lines += [f'  "{e.source}" -> "{e.target}";' for e in edges]
        lines.append("}")
        return "\n".join(lines)

    def to_svg(self, module: str | None = None, max_nodes: int = MAX_DRAWN) -> str:
        """A standalone SVG (layered, inputs and parameters on top; hover a box for its
        module and saved tensors). `module` draws the operations of one call, e.g.
        `"encoder.layer.0#0"`, and of the calls inside it.

        Raises:
            ValueError: more than `max_nodes` to draw (pick a `module`).
        """
        nodes, _, drawn = self.laid_out(module, max_nodes)
        colour = {"op": "#eef3ff", "param": "#fde2e2", "input": "#e2ecfd", "output": "#eee"}
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{drawn.width}" '
            f'height="{drawn.height}" font-family="sans-serif" font-size="10">',
            ARROW_MARKER,
            *(route_svg(route) for route in drawn.routes),
        ]
        for n in nodes:
            x, y, w, h = drawn.boxes[n.id]
            tip = "\n".join([n.op or n.kind, f"module: {n.module or '-'}", *n.saved])
            out.append(
                f'<g><title>{html.escape(tip)}</title><rect x="{x}" y="{y}" '
                f'width="{w}" height="{h}" rx="{12 if n.kind != "op" else 4}" '
                f'fill="{colour[n.kind]}" stroke="#667"/><text x="{x + w / 2}" '
                f'y="{y + h / 2 + 4}" text-anchor="middle">{html.escape(n.label[:24])}'
                "</text></g>"
            )
        out.append("</svg>")
        return "\n".join(out)

    def _repr_svg_(self) -> str | None:
        # A notebook shows the graph as an image up to MAX_DRAWN nodes; a larger one as
        # `repr`, which says how to draw a part: thousands of boxes would stall the browser.
        return self.to_svg() if len(self) <= MAX_DRAWN else None


def autograd_graph(
    model: nn.Module,
    *inputs: Any,
    loss_fn: Callable[[Any], Tensor] | None = None,
    **kwargs: Any,
) -> AutogradGraph:
    """Run `model(*inputs, **kwargs)` once and return the graph autograd recorded: one node
    per operation (its backward node), parameters labelled with their qualified names,
    model inputs, the shapes of saved tensors, and the innermost module call that made
    each operation (for clustering), from the output (or `loss_fn(output)`) back.

    Args:
        model: the model.
        *inputs, **kwargs: what to call it with (floating-point inputs are traced as
            leaves, as in `module_graph`).
        loss_fn: graph `loss_fn(output)` instead of the output's tensors.

    Returns:
        An `AutogradGraph`: `to_dot()` (clusters per module), `to_svg(module=...)`.

    Example:
        >>> ops = tensor_tracker.autograd_graph(model, x)
        >>> sorted({n.kind for n in ops.nodes.values()})
        ['input', 'op', 'output', 'param']
        >>> sorted(n.label for n in ops.nodes.values() if n.kind == "param")
        ['0.bias', '0.weight', '2.bias', '2.weight']
    """
    if loss_fn is not None:
        check_callable(loss_fn, "autograd_graph(loss_fn=...)", "output -> loss tensor")
    calls, output = record_calls(model, inputs, kwargs)
    roots = [loss_fn(output)] if loss_fn is not None else list(iter_tensors(output))
    params = parameter_names(model)
    leaves = {id(t) for c in calls[:1] for t, _ in c.inputs}
    nodes: dict[str, OpNode] = {}
    ids: dict[int, str] = {}
    # The nodes' Python objects, held so that their ids stay theirs (a wrapper that dies
    # frees its id for another).
    alive: list[Any] = []
    edges: list[GraphEdge] = []
    todo = []
    for root in roots:
        if isinstance(root, Tensor) and root.grad_fn is not None and id(root.grad_fn) not in ids:
            ids[id(root.grad_fn)] = f"op{len(ids)}"
            todo.append(root.grad_fn)
    while todo:
        fn = todo.pop()
        node_id = ids[id(fn)]
        alive.append(fn)
        variable = getattr(fn, "variable", None)
        if isinstance(variable, Tensor):
            kind = (
                "param" if id(variable) in params else "input" if id(variable) in leaves else "op"
            )
            label = params.get(id(variable), "input" if kind == "input" else "leaf")
            shape = str(list(variable.shape))
            nodes[node_id] = OpNode(node_id, kind, label, type(fn).__name__, shape=shape)
        else:
            name = type(fn).__name__
            label = name.removesuffix("0").removesuffix("Backward") or name
            nodes[node_id] = OpNode(node_id, "op", label, name, saved=_saved_shapes(fn))
        for nxt, _ in getattr(fn, "next_functions", ()):
            if nxt is None:
                continue
            if id(nxt) not in ids:
                ids[id(nxt)] = f"op{len(ids)}"
                todo.append(nxt)
            edges.append(GraphEdge(ids[id(nxt)], node_id))
    output_node = OpNode("output", "output", "output")
    for root in roots:
        if isinstance(root, Tensor) and root.grad_fn is not None:
            edges.append(GraphEdge(ids[id(root.grad_fn)], "output", str(list(root.shape))))
    nodes["output"] = output_node
    _attribute(calls, ids, nodes)
    # Execution order for the layout: ops discovered from the output, reversed.
    ordered = dict(reversed(list(nodes.items())))
    return AutogradGraph(ordered, edges, {c.node.id: c.node.parent for c in calls})


def _attribute(calls: list[Any], ids: dict[int, str], nodes: dict[str, OpNode]) -> None:
    """Each operation's innermost module call: walking back from a call's outputs to its
    inputs claims the operations in between, deepest calls first."""
    depth: dict[str, int] = {}
    for call in calls:
        parent = call.node.parent
        depth[call.node.id] = 0 if parent is None else depth[parent] + 1
    for call in sorted(calls, key=lambda c: -depth[c.node.id]):
        stop = {id(fn) for _, fn in call.inputs if fn is not None}
        todo = [fn for _, fn in call.outputs if fn is not None]
        seen: set[int] = set()
        while todo:
            fn = todo.pop()
            if id(fn) in seen or id(fn) in stop or id(fn) not in ids:
                continue
            seen.add(id(fn))
            node = nodes[ids[id(fn)]]
            if node.kind == "op" and node.module is None:
                node.module = call.node.id
            todo.extend(nxt for nxt, _ in getattr(fn, "next_functions", ()) if nxt is not None)
