"""The recording pass of `module_graph` and `autograd_graph`: one forward pass with the
temporary hooks of `core.calls.CallHooks`, keeping every module call's tensors and the
autograd nodes they pointed to at that moment. What the calls mean (edges, levels) is
worked out afterwards, in `_graph_edges`."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from .._core.calls import CallHooks, eager_calls
from .._core.structure import iter_tensors, rmap_tensor
from .._torch_compat import gradient_node
from .._validate import check_type
from ._graph_nodes import GraphNode

__all__ = ["Call", "parse_extra_repr", "record_calls"]


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
class Call:
    """One module call of the pass: its node, when it started and ended (a counter of hook
    events), its input and output tensors each with its autograd node, and its calls."""

    node: GraphNode
    start: int
    end: int = -1
    inputs: list[tuple[Tensor, Any]] = dataclasses.field(default_factory=list)
    outputs: list[tuple[Tensor, Any]] = dataclasses.field(default_factory=list)
    # Autograd's node counter when the call started and ended: the nodes made in between
    # are the call's (see `_graph_edges.connect`).
    seq_start: int = 0
    seq_end: int = 0
    children: list[Call] = dataclasses.field(default_factory=list)


def record_calls(
    model: nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[Call], Any]:
    """Run `model(*inputs, **kwargs)` once, eagerly, with the hooks of `CallHooks` (a
    compiled model runs as Python); return every module call (in the order they started,
    with their tensors and autograd nodes, named as `track()` names the modules) and the
    output.

    Raises:
        TypeError: `model` is not an `nn.Module`.
    """
    check_type(model, nn.Module, "model", "a torch.nn.Module")
    counts: dict[str, int] = {}
    stack: list[Call] = []
    calls: list[Call] = []
    clock = [0]

    def tensors_of(value: Any) -> list[tuple[Tensor, Any]]:
        return [(t, _node(t)) for t in iter_tensors(value)]

    def pre(name: str, module: nn.Module, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        call = counts.get(name, 0)
        counts[name] = call + 1
        node = GraphNode(f"{name or '<model>'}#{call}", name, call, type(module).__name__)
        node.parent = stack[-1].node.id if stack else None
        record = Call(node, clock[0], inputs=tensors_of((args, kw)), seq_start=_sequence_now())
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
