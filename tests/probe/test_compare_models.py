"""`compare_models`: two models run from the same random state, everything put back
(parameters, buffers, gradients, random state), a memory budget, compiled and bf16 twins."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker.errors import ArgumentTypeError, MemoryBudgetError
from tests.helpers import hook_count


class _Twice(torch.autograd.Function):
    """The identity forward; backward multiplies the gradient by `factor`."""

    @staticmethod
    def forward(ctx: object, x: Tensor, factor: float) -> Tensor:
        ctx.factor = factor  # type: ignore[attr-defined]
        return x.view_as(x)

    @staticmethod
    def backward(ctx: object, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.factor, None  # type: ignore[attr-defined]


class _Block(nn.Module):
    def __init__(self, factor: float = 1.0) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.act = nn.Tanh()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        h = self.lin(x)
        return self.act(_Twice.apply(h, self.factor)) if self.factor != 1.0 else self.act(h)


def _net(dropout: float = 0.5) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(dropout), _Block(), _Block(), nn.Linear(8, 2))


X = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))


def _loss(out: Tensor) -> Tensor:
    return out.square().sum()


def test_identical_twins_with_dropout_are_bitwise_equal_everywhere() -> None:
    model = _net()
    cmp = tensor_tracker.compare_models(model, copy.deepcopy(model), X, loss_fn=_loss)
    frame = cmp.to_frame()
    assert len(frame) == 2 * 10 and cmp.unmatched == []
    assert frame["equal"].all()
    # Dropout was on and drew a mask: some of its outputs are zeroed.
    dropped = next(s for s in cmp.a if s.name == "1" and not s.grad).value
    assert 0 < int((dropped == 0).sum()) < dropped.numel()


def test_a_perturbed_weight_is_the_first_divergence_and_what_ran_before_is_equal() -> None:
    model = _net()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[3].lin.weight.mul_(1 + 1e-3)
    cmp = tensor_tracker.compare_models(model, other, X, loss_fn=_loss)
    first = cmp.first_divergence(rtol=0, atol=0)
    assert first is not None and (first.name, first.step, first.call) == ("3.lin", 0, 0)
    frame = cmp.to_frame()
    forward = frame[~frame["grad"]]
    before = forward.loc[: first.row - 1]
    assert list(before["name"]) == ["0", "1", "2.lin", "2.act", "2"] and before["equal"].all()


def test_a_backward_that_differs_inside_one_block() -> None:
    model = _net()
    other = copy.deepcopy(model)
    other[2].factor = 1 + 1e-3  # same forward, another backward inside block 2
    cmp = tensor_tracker.compare_models(model, other, X, loss_fn=_loss)
    assert cmp.first_divergence(rtol=0, atol=0) is None
    first = cmp.first_divergence(rtol=0, atol=0, grad=True)
    # Backward reaches block 2's output (equal), then its Tanh (equal), then the
    # gradient of its Linear's output, which went through the changed backward.
    assert first is not None and (first.name, first.grad) == ("2.lin", True)
    frame = cmp.to_frame()
    grads = frame[frame["grad"]]
    assert list(grads.loc[: first.row - 1, "name"]) == [
        "",
        "4",
        "3",
        "3.act",
        "3.lin",
        "2",
        "2.act",
    ]
    assert grads.loc[: first.row - 1, "equal"].all()


def test_everything_is_put_back() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), nn.Linear(8, 2))
    model(X).sum().backward()  # gradients already there: they must stay as they are
    other = copy.deepcopy(model)
    before = {n: t.clone() for n, t in [*model.state_dict().items()]}
    grads = {n: (p.grad, p.grad.clone()) for n, p in model.named_parameters()}  # type: ignore[union-attr]
    other_grads = [p.grad for p in other.parameters()]
    torch.manual_seed(7)
    rng = torch.get_rng_state()
    cmp = tensor_tracker.compare_models(model, other, X, loss_fn=_loss)
    assert cmp.to_frame()["equal"].all()
    assert torch.equal(torch.get_rng_state(), rng)
    for n, t in model.state_dict().items():
        assert torch.equal(t, before[n]), n  # BatchNorm's running statistics too
    for n, p in model.named_parameters():
        grad, value = grads[n]
        assert p.grad is grad and torch.equal(p.grad, value), n
    assert [p.grad for p in other.parameters()] == other_grads
    assert hook_count(model) == 0 and hook_count(other) == 0


def test_the_memory_budget_stops_it_cleanly() -> None:
    model = _net()
    other = copy.deepcopy(model)
    state = {n: t.clone() for n, t in model.state_dict().items()}
    rng = torch.get_rng_state()
    with pytest.raises(MemoryBudgetError, match=r"compare_models: .* max_bytes=1,000"):
        tensor_tracker.compare_models(model, other, X, loss_fn=_loss, max_bytes=1000)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(t, state[n]) for n, t in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert hook_count(model) == 0 and hook_count(other) == 0
    # Enough for the first model's copies but not for both: the second run is stopped.
    one = tensor_tracker.compare_models(model, other, X, loss_fn=_loss).a.nbytes
    with pytest.raises(MemoryBudgetError):
        tensor_tracker.compare_models(model, other, X, loss_fn=_loss, max_bytes=one + 10)


def test_a_bfloat16_copy_gets_its_inputs_cast() -> None:
    model = _net(dropout=0.0)
    cmp = tensor_tracker.compare_models(model, copy.deepcopy(model).bfloat16(), X, loss_fn=_loss)
    frame = cmp.to_frame()
    assert set(frame["dtype_a"]) == {"float32"} and set(frame["dtype_b"]) == {"bfloat16"}
    assert cmp.unmatched == [] and not frame["equal"].any()
    # A few bf16 steps apart at the first layer: the bf16 input and weights are rounded.
    assert frame["max_ulp"][0] <= 8
    assert cmp.first_divergence(rtol=0.1, atol=0.05) is None
    assert next(iter(model.parameters())).dtype == torch.float32


@pytest.mark.slow
def test_torch_compile_against_eager() -> None:
    # aot_eager: the compiled graphs and AOTAutograd in a second; TorchInductor's code
    # generation takes over ten (the slow test below compares it).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).eval()
    compiled = torch.compile(model, backend="aot_eager")
    cmp = tensor_tracker.compare_models(model, compiled, X, loss_fn=_loss)
    frame = cmp.to_frame()
    assert cmp.unmatched == [] and len(frame) == 8
    assert set(frame["name_b"]) == {"", "0", "1", "2"}  # the uncompiled names
    assert frame["max_ulp"].max() <= 4
    assert cmp.first_divergence(rtol=1e-5, atol=1e-6) is None
    assert hook_count(model) == 0


def test_a_model_returning_its_loss() -> None:
    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net(dropout=0.0)

        def forward(self, x: Tensor) -> Tensor:
            return self.net(x).square().mean()  # a 0-d output, as a model given labels=

    model = WithLoss()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.net[4].bias.add_(1.0)
    cmp = tensor_tracker.compare_models(model, other, X, loss_fn=lambda loss: loss)
    frame = cmp.to_frame()
    root = frame[(frame["name"] == "") & ~frame["grad"]]
    assert root["shape_a"].tolist() == ["scalar"] and not root["equal"].any()
    assert cmp.first_divergence().name == "net.4"


@pytest.mark.slow  # TorchInductor compiles for tens of seconds
def test_compile_differences_are_within_the_default_tolerance_a_planted_one_is_not() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 64),
        nn.LayerNorm(64),
        nn.GELU(),
        nn.Linear(64, 64),
        nn.Tanh(),
        nn.Linear(64, 4),
    ).eval()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    cmp = tensor_tracker.compare_models(model, torch.compile(model), x, loss_fn=_loss)
    frame = cmp.to_frame()
    # Inductor rounds differently (a few records differ at elements near 0 by thousands of
    # ULPs, beyond allclose's 1e-5 there) but the records are a few float32 eps apart.
    assert not frame["equal"].all() and frame["max_ulp"].max() > 1000
    assert cmp.rtol == 16 * torch.finfo(torch.float32).eps and cmp.atol == 0.0
    assert cmp.counts()["beyond"] == 0 and cmp.first_divergence() is None
    assert "max_ulp" not in str(cmp)
    # One module's output off by 1e-3 (relative): found, where it starts.
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[3].weight.mul_(1 + 1e-3)
        other[3].bias.mul_(1 + 1e-3)
    planted = tensor_tracker.compare_models(model, torch.compile(other), x, loss_fn=_loss)
    first = planted.first_divergence()
    assert first is not None and first.name == "3"
    assert planted.first_divergence(grad=True) is not None


def test_keyword_inputs_and_names() -> None:
    class Wrapped(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Tensor, *, scale: float = 1.0) -> Tensor:
            return self.inner(x) * scale

    model = _net(dropout=0.0)
    plain = Wrapped(model)
    wrapped = Wrapped(copy.deepcopy(model))
    cmp = tensor_tracker.compare_models(plain, wrapped, X, kwargs={"scale": 2.0})
    assert cmp.to_frame()["equal"].all() and len(cmp) == 11
    renamed = tensor_tracker.compare_models(
        model, wrapped, X, names=lambda n: f"inner.{n}" if n else "inner"
    )
    assert [(u.run, u.name) for u in renamed.unmatched] == [("b", "")]
    assert renamed.to_frame()["equal"].all()


def test_bad_arguments_are_refused_before_anything_runs() -> None:
    model = _net()
    calls: list[int] = []
    model.register_forward_hook(lambda *_: calls.append(1))
    with pytest.raises(ArgumentTypeError, match="model_b"):
        tensor_tracker.compare_models(model, "model", X)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="loss_fn"):
        tensor_tracker.compare_models(model, model, X, loss_fn=3)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="names"):
        tensor_tracker.compare_models(model, model, X, names=3)  # type: ignore[arg-type]
    assert calls == []
    with pytest.raises(ArgumentTypeError, match="scalar"):
        tensor_tracker.compare_models(model, model, X, loss_fn=lambda out: out)
    assert hook_count(model) == 1
