"""`module_graph`: nodes per module call, edges found through autograd at each level, on
residuals (in place too), modules called twice, keyword tensors, tuple outputs, no_grad and
detached values, an LSTM and a transformer encoder; DOT and SVG."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import module_graph
from tensor_tracker.data.graph import parse_extra_repr


class Residual(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.linear(x))
        h += x  # in place, in the block's own code
        return h


def _edges(graph: tensor_tracker.ModuleGraph, level: str | None = None) -> set[tuple[str, str]]:
    return {(e.source, e.target) for e in graph.level(level)["edges"]}


def test_residual_blocks_in_place_and_a_module_called_twice() -> None:
    torch.manual_seed(0)
    block = Residual(4)
    model = nn.Sequential(nn.Linear(3, 4), block, block, nn.Linear(4, 2))
    graph = module_graph(model, torch.randn(2, 3))
    top = [n.id for n in graph.level()["nodes"]]
    assert top == ["<model>#0/input", "0#0", "1#0", "1#1", "3#0", "<model>#0/output"]
    assert _edges(graph) == {
        ("<model>#0/input", "0#0"),
        ("0#0", "1#0"),
        ("1#0", "1#1"),
        ("1#1", "3#0"),
        ("3#0", "<model>#0/output"),
    }
    # Inside the second call of the block: the skip connection is an edge input -> output.
    assert _edges(graph, "1#1") == {
        ("1#1/input", "1.linear#1"),
        ("1.linear#1", "1.act#1"),
        ("1.act#1", "1#1/output"),
        ("1#1/input", "1#1/output"),
    }
    node = graph.nodes["0#0"]
    assert node.extra == {"in_features": "3", "out_features": "4", "bias": "True"}
    assert node.inputs == ["[2, 3] float32"] and node.outputs == ["[2, 4] float32"]
    assert node.params == 16 and graph.nodes["<model>#0"].children
    assert graph.disconnected == []


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.split = nn.LSTM(4, 4, batch_first=True)  # returns (output, (h, c))
        self.left = nn.Linear(4, 1)
        self.right = nn.Linear(4, 1)
        self.frozen = nn.Linear(4, 1)

    def forward(self, x: Tensor, *, scale: Tensor) -> Tensor:
        out, (h, _) = self.split(x)
        with torch.no_grad():
            cut = self.frozen(out)
        return self.left(out * scale) + self.right(h[-1])[:, None] + cut.detach()


def test_keyword_tensors_tuple_outputs_and_disconnected_inputs() -> None:
    torch.manual_seed(0)
    model = TwoHeads()
    graph = module_graph(model, torch.randn(2, 5, 4), scale=torch.full((1, 1, 4), 2.0))
    assert _edges(graph) == {
        ("<model>#0/input", "split#0"),
        ("split#0", "frozen#0"),  # computed under no_grad, from the LSTM's output
        ("split#0", "left#0"),
        ("<model>#0/input", "left#0"),  # the keyword tensor `scale`
        ("split#0", "right#0"),
        ("left#0", "<model>#0/output"),
        ("right#0", "<model>#0/output"),
    }
    # frozen's output reaches the model's output only through no_grad/detach: not an edge,
    # and the LSTM's outputs are listed one per tensor.
    assert len(graph.nodes["split#0"].outputs) == 3
    assert graph.disconnected == []


def test_a_no_grad_input_is_reported_as_disconnected() -> None:
    class Cut(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.b = nn.Linear(3, 3)

        def forward(self, x: Tensor) -> Tensor:
            with torch.no_grad():
                h = x * 2  # no module made it, and autograd does not see it
            return self.b(self.a(x) + h.clone())

    graph = module_graph(Cut(), torch.randn(2, 3))
    assert ("<model>#0/input", "a#0") in _edges(graph)
    assert graph.disconnected == []  # b's input still comes from a
    graph = module_graph(nn.Sequential(nn.Linear(3, 3)), torch.randn(2, 3).detach())
    assert _edges(graph) == {("<model>#0/input", "0#0"), ("0#0", "<model>#0/output")}


def test_a_transformer_encoder_with_a_keyword_mask() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[0, -1] = True
    graph = module_graph(encoder, torch.randn(2, 5, 16), src_key_padding_mask=mask)
    assert _edges(graph) == {
        ("<model>#0/input", "layers.0#0"),
        ("layers.0#0", "layers.1#0"),
        ("layers.1#0", "<model>#0/output"),
    }
    inner = _edges(graph, "layers.0#0")
    assert ("layers.0#0/input", "layers.0.norm1#0") in inner  # the residual
    assert ("layers.0.norm1#0", "layers.0.norm2#0") in inner  # the second residual
    # The float mask the encoder makes from the boolean one reaches no module output.
    assert graph.disconnected == [("layers.0#0", 1), ("layers.1#0", 1)]


def test_dot_svg_layout_and_json() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), Residual(4))
    graph = module_graph(model, torch.randn(2, 3))
    dot = graph.to_dot()
    assert dot.startswith("digraph") and '"0#0" -> "1#0"' in dot
    svg = graph.to_svg("1#0")
    assert svg.count("<rect") == 4 and "in_features=4" in svg
    positions = graph.level()["positions"]
    ys = [positions[n][1] for n in ("<model>#0/input", "0#0", "1#0", "<model>#0/output")]
    assert ys == sorted(ys) and len(set(ys)) == 4  # layered top to bottom
    data = graph.to_dict()
    assert set(data["levels"]) == {"<model>#0", "1#0"} and data["root"] == "<model>#0"
    assert graph.to_json().startswith("{")


def test_parse_extra_repr_and_odd_models() -> None:
    assert parse_extra_repr("") == {}
    assert parse_extra_repr("p=0.1, inplace=False") == {"p": "0.1", "inplace": "False"}
    graph = module_graph(nn.Sequential(), torch.ones(2))  # no submodule, no parameter
    assert graph.level()["nodes"] == [] and graph.nodes["<model>#0"].params == 0

    class NotATensor(nn.Module):
        def forward(self, x: Tensor) -> str:
            return "done"

    graph = module_graph(nn.Sequential(NotATensor()), torch.ones(2))
    assert graph.nodes["0#0"].outputs == []
    with pytest.raises(TypeError, match="model"):
        module_graph("model")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no call"):
        graph.level("nope#0")


def test_in_place_on_a_view_output_and_a_view_of_an_earlier_output() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(4)
            self.mlp = nn.Linear(4, 4)  # on 3-D input its output is a view

        def forward(self, x: Tensor) -> Tensor:
            h = self.mlp(self.norm(x))
            h += x  # in place on that view: autograd goes through the view's base
            return h

    class Fork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.flat = nn.Flatten(0, 1)  # a view of a's output
            self.b = nn.Linear(4, 4)

        def forward(self, x: Tensor) -> Tensor:
            h = self.a(x)
            return self.b(h) + self.flat(h).sum()

    graph = module_graph(nn.Sequential(Block(), Fork()), torch.randn(2, 3, 4))
    assert _edges(graph, "0#0") == {
        ("0#0/input", "0.norm#0"),
        ("0.norm#0", "0.mlp#0"),
        ("0.mlp#0", "0#0/output"),
        ("0#0/input", "0#0/output"),
    }
    assert _edges(graph, "1#0") == {
        ("1#0/input", "1.a#0"),
        ("1.a#0", "1.flat#0"),
        ("1.a#0", "1.b#0"),  # not 1.flat -> 1.b: the view of a's output is flat's own
        ("1.b#0", "1#0/output"),
        ("1.flat#0", "1#0/output"),
    }


def test_a_resnet_style_cnn() -> None:
    class BasicBlock(nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(channels)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)

        def forward(self, x: Tensor) -> Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            out += x
            return self.relu(out)

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 7, stride=2, padding=3),
        BasicBlock(8),
        BasicBlock(8),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    )
    graph = module_graph(model, torch.randn(2, 3, 32, 32))
    chain = ["<model>#0/input", "0#0", "1#0", "2#0", "3#0", "4#0", "5#0", "<model>#0/output"]
    assert _edges(graph) == set(itertools.pairwise(chain))
    # Inside a block: the skip connection, and the ReLU module called twice.
    assert _edges(graph, "1#0") == {
        ("1#0/input", "1.conv1#0"),
        ("1.conv1#0", "1.bn1#0"),
        ("1.bn1#0", "1.relu#0"),
        ("1.relu#0", "1.conv2#0"),
        ("1.conv2#0", "1.bn2#0"),
        ("1.bn2#0", "1.relu#1"),
        ("1#0/input", "1.relu#1"),
        ("1.relu#1", "1#0/output"),
    }
    assert graph.nodes["0#0"].extra["kernel_size"] == "(7, 7)"


def test_gpt2_with_its_cache_and_integer_ids() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100)
    model = transformers.GPT2LMHeadModel(config)
    graph = module_graph(model, torch.randint(0, 100, (2, 8)))
    # The integer ids reach wte through a view; the key/value cache each block fills
    # (made in its call, never returned by it) counts as that block's output.
    assert _edges(graph, "transformer#0") == {
        ("transformer#0/input", "transformer.wte#0"),
        ("transformer.wte#0", "transformer.drop#0"),
        ("transformer.wpe#0", "transformer.drop#0"),
        ("transformer.drop#0", "transformer.h.0#0"),
        ("transformer.h.0#0", "transformer.h.1#0"),
        ("transformer.h.1#0", "transformer.ln_f#0"),
        ("transformer.ln_f#0", "transformer#0/output"),
        ("transformer.h.0#0", "transformer#0/output"),
        ("transformer.h.1#0", "transformer#0/output"),
    }
