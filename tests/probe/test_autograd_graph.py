"""`autograd_graph`: operations, named parameters, saved tensors, and the module call that
made each operation, on in-place ops, views, BatchNorm and a custom autograd.Function; the
models issue #13 names; the bound on what is drawn."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn

from tensor_tracker import autograd_graph
from tensor_tracker._probe.autograd_graph import MAX_DRAWN
from tests import graph_models


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad * 2


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: Tensor) -> Tensor:
        h = self.bn(self.linear(x)).relu_()
        h += x  # in place
        view = h.view(-1)
        view.mul_(1.0)  # in place on a view
        out: Tensor = Double.apply(h)
        return out


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), Block(), nn.Linear(4, 1))


def test_parameters_operations_modules_and_saved_tensors() -> None:
    model = _model()
    graph = autograd_graph(model, torch.randn(5, 3), loss_fn=lambda out: out.square().mean())
    nodes = list(graph.nodes.values())
    params = {n.label: n.shape for n in nodes if n.kind == "param"}
    assert params == {
        name: str(list(p.shape)) for name, p in model.named_parameters()
    }  # every parameter once, by its qualified name
    assert [n.shape for n in nodes if n.kind == "input"] == ["[5, 3]"]
    ops = {n.op: n for n in nodes if n.kind == "op"}
    assert ops["NativeBatchNormBackward0"].module == "1.bn#0"
    assert "input: [5, 4]" in ops["NativeBatchNormBackward0"].saved
    assert ops["DoubleBackward"].module == "1#0"  # the custom Function, in Block's code
    assert ops["MeanBackward0"].module is None  # the loss, outside the model
    linear = [n for n in nodes if n.op == "AddmmBackward0" and n.module == "0#0"]
    assert len(linear) == 1 and "mat1: [5, 3]" in linear[0].saved
    # Edges point the way data flows: from each parameter into an operation.
    sources = {e.source for e in graph.edges}
    assert all(n.id in sources for n in nodes if n.kind == "param")
    assert {e.target for e in graph.edges if e.target == "output"} == {"output"}


def test_dot_clusters_and_svg_limits() -> None:
    graph = autograd_graph(_model(), torch.randn(5, 3))
    dot = graph.to_dot()
    assert 'label="1.bn#0"' in dot and "subgraph cluster_" in dot and "color=red" in dot
    assert "subgraph" not in graph.to_dot(cluster=False)
    svg = graph.to_svg(module="1.bn#0")
    assert svg.count("<rect") == 1 and "NativeBatchNormBackward0" in svg
    assert graph.to_svg().count("<rect") == len(graph)
    with pytest.raises(ValueError, match="too many"):
        graph.to_svg(max_nodes=3)
    with pytest.raises(ValueError, match="no operation"):
        graph.to_svg(module="nope")


def test_module_takes_the_calls_inside_it() -> None:
    graph = autograd_graph(_model(), torch.randn(5, 3))
    block = {n.op for n in graph._select("1#0")[0]}
    assert {"NativeBatchNormBackward0", "AddmmBackward0", "DoubleBackward"} <= block
    assert graph.to_svg(module="1#0").count("<rect") == len(graph._select("1#0")[0])
    assert "1.linear#0" in graph.to_dot(module="1#0")
    with pytest.raises(ValueError, match="no operation"):
        graph.to_svg(module="1")  # a call's id, not a prefix of names


@pytest.mark.parametrize("name", list(graph_models.MODELS))
def test_the_issue_models(name: str) -> None:
    model, args, kwargs = graph_models.MODELS[name]()
    graph = autograd_graph(model, *args, **kwargs)
    params = {n.label for n in graph.nodes.values() if n.kind == "param"}
    assert params == {p for p, _ in model.named_parameters()}
    first = next(n.module for n in graph.nodes.values() if n.module)
    assert first is not None and f'label="{first}"' in graph.to_dot()
    svg = graph.to_svg()
    assert svg.count("<rect") == len(graph) and svg.count("marker-end") == len(graph.edges)
    # Every operation of a module call is drawn with that call's.
    top = next(n.id for n in graph.nodes.values() if n.kind == "op" and n.module)
    owner = graph.nodes[top].module
    assert owner is not None and graph.to_svg(module=owner).count("<rect") >= 1
    assert repr(graph).startswith("AutogradGraph(") and graph._repr_svg_() is not None


def test_a_graph_too_large_to_draw_says_how_to_draw_a_part() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(MAX_DRAWN // 2)])
    graph = autograd_graph(model, torch.randn(1, 2))
    assert len(graph) > MAX_DRAWN
    # A notebook falls back to the text, which names the way to draw one module.
    assert graph._repr_svg_() is None and "to_svg(module=" in repr(graph)
    with pytest.raises(ValueError, match="too many"):
        graph.to_svg()
    assert graph.to_svg(module="7#0").count("<rect") == 2  # its Addmm and the T of its weight
