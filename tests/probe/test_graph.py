"""`module_graph`: nodes per module call, edges found through autograd at each level, on
residuals (in place too), modules called twice, keyword tensors, tuple outputs, no_grad and
detached values, an LSTM and a transformer encoder; DOT and SVG; levels with too many calls
drawn as groups."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import module_graph
from tensor_tracker._probe.graph import MAX_NODES, parse_extra_repr
from tests import graph_models
from tests.graph_models import Residual


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
    model, args, _ = graph_models.resnet()
    graph = module_graph(model, *args)
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


@pytest.mark.parametrize("name", list(graph_models.MODELS))
def test_every_level_of_the_issue_models_draws(name: str) -> None:
    model, args, kwargs = graph_models.MODELS[name]()
    graph = module_graph(model, *args, **kwargs)
    levels = graph.to_dict()["levels"]
    for parent, level in levels.items():
        svg = graph.to_svg(parent)
        assert svg.count("<rect") == len(level["nodes"]) == len(graph.children(parent))
        assert svg.count("marker-end") == len(level["edges"]) > 0
        dot = graph.to_dot(parent)
        assert dot.count(" -> ") == len(level["edges"])
        # Data flows from the level's input to its output.
        assert f"{parent}/output" in _reach(graph, parent), parent
    assert graph.notes == [] and "note" not in repr(graph)
    if name == "lstm":
        chain = ["<model>#0/input", "embed#0", "lstm#0", "head#0", "<model>#0/output"]
        assert _edges(graph) == set(itertools.pairwise(chain))
        assert len(graph.nodes["lstm#0"].outputs) == 3  # output, (h, c)
        assert graph.nodes["lstm#0"].extra["num_layers"] == "2"


def _reach(graph: tensor_tracker.ModuleGraph, level: str) -> set[str]:
    """The nodes reached from `level`'s input along its edges."""
    edges = _edges(graph, level)
    reached, todo = set(), [f"{level}/input"]
    while todo:
        node = todo.pop()
        reached.add(node)
        todo += [t for s, t in edges if s == node and t not in reached]
    return reached


def test_a_level_of_500_calls_is_drawn_as_groups() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(500)])
    graph = module_graph(model, torch.randn(2, 4))
    assert MAX_NODES == 100
    top = graph.level()["nodes"]
    groups = [f"<model>#0/group{k}" for k in range(5)]
    assert [n.id for n in top] == ["<model>#0/input", *groups, "<model>#0/output"]
    assert [n.kind for n in top[1:-1]] == ["group"] * 5
    assert top[2].label == "100 … 199 (Linear \u00d7100)" and top[2].name == "100 … 199"
    assert top[2].params == 100 * 20 and top[2].inputs == ["[2, 4] float32"]
    chain = ["<model>#0/input", *groups, "<model>#0/output"]
    assert _edges(graph) == set(itertools.pairwise(chain))
    # A group opens on its calls, wired as in the model, between its own placeholders.
    inner = [n.id for n in graph.level(groups[1])["nodes"]]
    calls = [f"{i}#0" for i in range(100, 200)]
    assert inner == [f"{groups[1]}/input", *calls, f"{groups[1]}/output"]
    assert _edges(graph, groups[1]) == set(
        itertools.pairwise([f"{groups[1]}/input", *calls, f"{groups[1]}/output"])
    )
    assert all(graph.nodes[c].parent == groups[1] for c in calls)
    # The user is told, and every level (the report's too) stays within the limit.
    assert len(graph.notes) == 1 and "graph.level('<model>#0/group0')" in graph.notes[0]
    assert "500 calls" in repr(graph)
    levels = graph.to_dict()["levels"]
    assert set(levels) == {"<model>#0", *groups}
    assert max(len(level["nodes"]) for level in levels.values()) == MAX_NODES + 2
    svg = graph.to_svg()
    assert svg.count("<rect") == 7 and 'stroke-dasharray="5 3"' in svg
    assert "graph.level(&#x27;&lt;model&gt;#0/group0&#x27;)" in svg  # the tooltip says how
    assert "style=dashed" in graph.to_dot()
    # Without grouping, the level is as it was.
    flat = module_graph(model, torch.randn(2, 4), max_nodes=None)
    assert len(flat.level()["nodes"]) == 502 and flat.notes == []


def test_groups_are_split_again_and_keep_fan_out_edges() -> None:
    class Wide(nn.Module):
        """Every layer reads the input and writes into one sum: edges fan out and in."""

        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(3, 3) for _ in range(60))

        def forward(self, x: Tensor) -> Tensor:
            total = x.clone()
            for layer in self.layers:
                total = total + layer(x)
            return total

    torch.manual_seed(0)
    graph = module_graph(Wide(), torch.randn(2, 3), max_nodes=5)
    # 60 calls, 5 per level at most: 3 groups of 20, each of 4 groups of 5 calls.
    top = graph.level()
    groups = [n.id for n in top["nodes"] if n.kind == "group"]
    assert len(groups) == 3 and graph.nodes[groups[0]].name == "layers.0 … layers.19"
    assert _edges(graph) == {
        *{("<model>#0/input", g) for g in groups},
        *{(g, "<model>#0/output") for g in groups},
        ("<model>#0/input", "<model>#0/output"),  # x.clone() in the model's own code
    }
    middle = [n.id for n in graph.level(groups[1])["nodes"] if n.kind == "group"]
    assert [graph.nodes[g].label for g in middle] == [
        "20 … 24 (Linear \u00d75)",
        "25 … 29 (Linear \u00d75)",
        "30 … 34 (Linear \u00d75)",
        "35 … 39 (Linear \u00d75)",
    ]
    assert _edges(graph, middle[0]) == {
        *{(f"{middle[0]}/input", f"layers.{i}#0") for i in range(20, 25)},
        *{(f"layers.{i}#0", f"{middle[0]}/output") for i in range(20, 25)},
    }
    assert len(graph.notes) == 1  # one note for the grouped level of the model
    levels = graph.to_dict()["levels"]
    assert max(len(level["nodes"]) for level in levels.values()) <= 5 + 2
    # Every call is in exactly one level, reached from that level's input.
    leaves = [id for level in levels.values() for id in level["nodes"] if "layers." in id]
    assert sorted(leaves) == sorted(f"layers.{i}#0" for i in range(60))
    for parent in levels:
        assert f"{parent}/output" in _reach(graph, parent)
    with pytest.raises(ValueError, match="max_nodes"):
        module_graph(Wide(), torch.randn(2, 3), max_nodes=1)
    with pytest.raises(TypeError, match="max_nodes must be an int or None"):
        module_graph(Wide(), torch.randn(2, 3), max_nodes=50.0)  # type: ignore[arg-type]
