"""How a module graph's edges are worked out from the calls `_graph_record` recorded,
level by level, and how a level with too many calls is gathered into groups (see the
docstring of `probe.graph`). Plain data in, plain data out: no hooks, no model run."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ._graph_nodes import GraphEdge, GraphNode
from ._graph_record import Call

if TYPE_CHECKING:
    from .graph import ModuleGraph

__all__ = ["bound_levels", "connect"]


def connect(graph: ModuleGraph, parent: Call) -> None:
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
    siblings: list[Call],
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


def bound_levels(graph: ModuleGraph, limit: int) -> None:
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
