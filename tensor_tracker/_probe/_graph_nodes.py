"""What a module graph is made of: its nodes (module calls, a level's input and output,
groups of calls) and edges, as plain data, and the label each node's box shows."""

from __future__ import annotations

import dataclasses

__all__ = ["GraphEdge", "GraphNode", "node_label"]


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


def node_label(node: GraphNode) -> str:
    """The text drawn in a node's box (the SVG and the matplotlib figure alike).

    Example:
        >>> node_label(GraphNode("encoder.query#1", "encoder.query", 1, "Linear"))
        'query #1 (Linear)'
    """
    if node.label:
        return node.label
    if node.kind != "module":
        return node.kind
    short = node.name.rsplit(".", 1)[-1] or "<model>"
    return f"{short}{'' if not node.call else f' #{node.call}'} ({node.type})"
