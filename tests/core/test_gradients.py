"""Recorded gradients against `torch.autograd.grad` on the same graph: views of shared
tensors, in-place changes, one stash per call, dtype-changing views, sparse gradients,
activation checkpointing, and values the tracker cannot handle (issue #9)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

import tensor_tracker
from tensor_tracker import Unrecorded, track


def grad_stashes(t: tensor_tracker.Tracker, name: str, kind: str = "output") -> list[Any]:
    return [s for s in t if s.name == name and s.grad and s.kind == kind]


class Split(nn.Module):
    def forward(self, h: Tensor) -> Tensor:
        return h[:, :2]


class SplitModel(nn.Module):
    """`split` returns a view of `h`, which is also used elsewhere."""

    def __init__(self, inplace: str = "") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)
        self.split = Split()
        self.inplace = inplace
        self.kept: dict[str, Tensor] = {}

    def forward(self, x: Tensor) -> Tensor:
        h = self.lin(x)
        s = self.split(h)
        self.kept["s"] = s
        other = (3 * h).sum()
        if self.inplace:
            used = (7 * s).sum()  # the view's own node is used ...
            if self.inplace == "base_after_use":
                h.mul_(5)  # ... then its base is modified in place
            else:
                h = h * 5
            return used + other + h.sum()
        return s.sum() + other


@pytest.mark.parametrize("inplace", ["", "base_after_use"])
def test_view_of_a_tensor_used_elsewhere_gets_its_own_gradient(inplace: str) -> None:
    model = SplitModel(inplace)
    x = torch.randn(3, 4)
    with track(model) as t:
        loss = model(x)
        loss.backward(retain_graph=True)
    if inplace:  # the same computation without the in-place op
        model.inplace = "out_of_place"
        loss = model(x)
    (expected,) = torch.autograd.grad(loss, model.kept["s"])
    (stash,) = grad_stashes(t, "split")
    assert torch.equal(stash.value[0], expected)
    if not inplace:
        assert torch.equal(expected, torch.ones(3, 2))  # not 4 = 1 + 3 through the base


class ViewThenInplace(nn.Module):
    """A module returns `lin(x)` for a 3-D x (a view of a matmul result), which is then
    modified in place, as a residual `h += x` does."""

    def __init__(self, other_use: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)
        self.other_use = other_use

    def forward(self, x: Tensor, inplace: bool = True) -> Tensor:
        h = self.lin(x)
        if inplace:
            h.mul_(x)
        else:
            h = h * x
        return (h * h).sum()


def test_view_modified_in_place_gets_the_gradient_before_the_change() -> None:
    model = ViewThenInplace(other_use=False)
    x = torch.randn(2, 3, 4)
    with track(model, include="lin") as t:
        model(x).backward()
    # The same function without in-place ops, differentiated at lin's output.
    h = model.lin(x)
    (expected,) = torch.autograd.grad(((h * x) * (h * x)).sum(), h)
    (stash,) = grad_stashes(t, "lin")
    assert torch.allclose(stash.value[0], expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("weights_used", [True, False])
def test_multihead_attention_per_head_weights(weights_used: bool) -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    q = torch.randn(2, 5, 8)
    with track(mha) as t:
        out, weights = mha(q, q, q, average_attn_weights=False)
        loss = out.pow(2).sum() + (weights.pow(2).sum() if weights_used else 0)
        loss.backward(retain_graph=True)
    expected = torch.autograd.grad(loss, [out, weights], allow_unused=True)
    (stash,) = grad_stashes(t, "")
    assert torch.equal(stash.value[0], expected[0])
    if weights_used:
        assert expected[1] is not None and torch.equal(stash.value[1], expected[1])
    else:
        assert expected[1] is None and stash.value[1] is None


class LossAndLogits(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        logits = self.lin(x)
        return {"loss": logits.pow(2).sum(), "logits": logits}


def test_one_gradient_stash_per_call_when_an_output_is_the_backward_root() -> None:
    model = LossAndLogits()
    with track(model) as t:
        out = model(torch.randn(5, 4))
        out["loss"].backward(retain_graph=True)
    expected = torch.autograd.grad(out["loss"], [out["loss"], out["logits"]])
    (root,) = grad_stashes(t, "")
    assert torch.equal(root.value[0], expected[0]) and torch.equal(root.value[1], expected[1])
    # Recorded from the output back towards the input: the root before its child.
    assert [s.name for s in t if s.grad] == ["", "lin"]


class Complexify(nn.Module):
    def forward(self, z: Tensor) -> Tensor:
        return torch.view_as_real(z * 2)


class ComplexModel(nn.Module):
    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.c = Complexify()
        self.inplace = inplace

    def forward(self, z: Tensor) -> Tensor:
        r = self.c(z)
        if self.inplace:
            r.mul_(3)
        return (r * r).sum()


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize(
    "options",
    [{}, {"stats": True}, {"capture": ("inputs", "outputs")}],
    ids=["copies", "stats", "inputs"],
)
def test_dtype_changing_view_does_not_break_backward(
    inplace: bool, options: dict[str, Any]
) -> None:
    torch.manual_seed(0)
    z = torch.randn(3, dtype=torch.complex64, requires_grad=True)
    model = ComplexModel(inplace)
    with track(model, **options) as t:
        loss = model(z)
        loss.backward()
    (grad_z,) = torch.autograd.grad(ComplexModel(inplace)(z), z)
    assert torch.equal(z.grad, grad_z)  # tracking changed nothing
    (stash,) = grad_stashes(t, "c")
    r = torch.view_as_real(z.detach() * 2)
    expected = 2 * 9 * r if inplace else 2 * r  # d/dr of sum((3r)^2) or sum(r^2)
    if "stats" in options:
        assert stash.value[0]["max"].item() == pytest.approx(expected.max().item(), rel=1e-6)
    else:
        assert torch.allclose(stash.value[0], expected)


@pytest.mark.parametrize("options", [{"stats": True}, {}, {"sample": 3}])
def test_sparse_gradients(options: dict[str, Any]) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 1))
    with track(model, capture=("outputs", "params"), **options) as t:
        model(torch.tensor([1, 2, 2])).sum().backward()
    grad = model[0].weight.grad
    assert grad is not None and grad.is_sparse
    (stash,) = grad_stashes(t, "0", kind="param")
    if "stats" in options:
        dense = grad.to_dense()
        recorded = stash.value[0].to_dict()
        assert recorded["numel"] == dense.numel()
        assert recorded["rms"] == pytest.approx(dense.pow(2).mean().sqrt().item(), rel=1e-6)
    elif "sample" in options:
        assert stash.value[0].shape == (3,)
    else:
        assert torch.equal(stash.value[0].to_dense(), grad.to_dense())


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.b(torch.tanh(self.a(x)))


class Checkpointed(nn.Module):
    def __init__(self, use_reentrant: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.block = Block()
        self.head = nn.Linear(4, 1)
        self.use_reentrant = use_reentrant

    def forward(self, x: Tensor) -> Tensor:
        h = checkpoint(self.block, x, use_reentrant=self.use_reentrant)
        assert isinstance(h, Tensor)
        return self.head(h)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointed_input_gradients(use_reentrant: bool) -> None:
    model = Checkpointed(use_reentrant)
    x = torch.randn(2, 4, requires_grad=True)
    with track(model, capture=("inputs", "outputs")) as t:
        model(x).sum().backward()
    keys = [(s.name, s.kind, s.attr) for s in t if s.grad]
    assert len(keys) == len(set(keys)), "a gradient recorded twice"
    assert set(keys) >= {("block.a", "input", "input"), ("block.b", "input", "input")}
    # Against autograd.grad on the same computation, without checkpointing.
    a = model.block.a(x)
    mid = torch.tanh(a)
    loss = model.head(model.block.b(mid)).sum()
    expected_x, expected_mid = torch.autograd.grad(loss, [x, mid])
    (gx,) = [s for s in t if s.grad and (s.name, s.kind) == ("block.a", "input")]
    (gmid,) = [s for s in t if s.grad and (s.name, s.kind) == ("block.b", "input")]
    assert torch.allclose(gx.value[0], expected_x) and torch.allclose(gmid.value[0], expected_mid)


def test_a_value_the_tracker_cannot_handle_is_a_placeholder_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = tensor_tracker.CopyValue._copy

    def picky(self: tensor_tracker.CopyValue, tensor: Tensor) -> Tensor:
        if tensor.shape[-1] == 3:
            raise RuntimeError("no such kernel")
        return original(self, tensor)

    monkeypatch.setattr(tensor_tracker.CopyValue, "_copy", picky)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    x = torch.randn(5, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with track(model) as t:
            model(x).sum().backward()
    messages = [str(w.message) for w in caught if "could not record" in str(w.message)]
    assert len(messages) == 1 and "no such kernel" in messages[0]  # one warning per reason
    first = [s for s in t if s.name == "0"]
    assert len(first) == 2 and all(isinstance(s.first_value, Unrecorded) for s in first)
    assert "no such kernel" in first[0].first_value.reason
    assert isinstance(t[1].value, Tensor)  # the other module is recorded as usual
    assert torch.isnan(torch.tensor(t.to_frame()["std"][0]))


def test_a_users_own_stash_value_raises_as_it_likes() -> None:
    model = nn.Linear(2, 2)

    def broken(tensor: Tensor) -> Tensor:
        raise ValueError("mine")

    with pytest.raises(ValueError, match="mine"), track(model, stash_value=broken):
        model(torch.randn(1, 2))


def every_output_gradient_matches_autograd(model: nn.Module, run: Any) -> int:
    """Track `model` while `run(model)` returns a loss; compare every recorded output
    gradient with `torch.autograd.grad` on the same graph. Returns how many were compared."""
    outputs: dict[tuple[str, int], list[Tensor]] = {}
    handles = []
    for name, module in model.named_modules():

        def keep(module: nn.Module, args: Any, output: Any, name: str = name) -> None:
            calls = sum(1 for key in outputs if key[0] == name)
            tensors = [t for t in tensor_tracker._core.structure.iter_tensors(output)]
            outputs[(name, calls)] = tensors

        handles.append(module.register_forward_hook(keep))
    try:
        with track(model) as t:
            loss = run(model)
            loss.backward(retain_graph=True)
    finally:
        for handle in handles:
            handle.remove()
    compared = 0
    for stash in t:
        if not stash.grad:
            continue
        tensors = outputs[(stash.name, stash.call)]
        wanted = [(i, x) for i, x in enumerate(tensors) if x.requires_grad]
        expected = torch.autograd.grad(
            loss, [x for _, x in wanted], retain_graph=True, allow_unused=True
        )
        for (i, _), grad in zip(wanted, expected, strict=True):
            recorded = stash.value[i]
            if grad is None:
                assert recorded is None, (stash.name, i)
            else:
                assert torch.equal(recorded, grad), (stash.name, i)
                compared += 1
    return compared


@pytest.mark.slow
def test_every_gradient_of_a_hugging_face_model_matches_autograd() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        num_labels=3,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    ids = torch.randint(0, 100, (2, 7))

    def run(m: nn.Module) -> Tensor:
        out = m(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.tensor([0, 2]))
        return out.loss  # type: ignore[no-any-return]

    assert every_output_gradient_matches_autograd(model, run) > 30


def test_every_gradient_of_multihead_attention_and_lstm_matches_autograd() -> None:
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
            self.lstm = nn.LSTM(8, 8, batch_first=True)

        def forward(self, x: Tensor) -> Tensor:
            out, weights = self.attn(x, x, x, average_attn_weights=False)
            seq, (h, _) = self.lstm(out)
            return seq.pow(2).sum() + h.sum() + weights[:, 0].pow(2).sum()

    x = torch.randn(2, 5, 8)
    assert every_output_gradient_matches_autograd(Net(), lambda m: m(x)) >= 5


class OffsetComplexify(nn.Module):
    def forward(self, z: Tensor) -> Tensor:
        return torch.view_as_real(z[2:])  # reinterprets the dtype at a nonzero offset


def test_dtype_changing_view_at_an_offset_modified_in_place() -> None:
    torch.manual_seed(0)
    z = torch.randn(5, dtype=torch.complex64, requires_grad=True)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = OffsetComplexify()

        def forward(self, z: Tensor) -> Tensor:
            r = self.c(z * 2)
            r.mul_(3)  # the view's own hook is bypassed: the base's gradient is sliced
            return (r * r).sum()

    model = Model()
    with track(model) as t:
        model(z).backward()
    (stash,) = grad_stashes(t, "c")
    r = torch.view_as_real((z.detach() * 2)[2:])
    assert torch.allclose(stash.value[0], 2 * 9 * r)  # d/dr of sum((3r)^2)
