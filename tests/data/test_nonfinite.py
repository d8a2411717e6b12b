"""`first_nonfinite`: the module where the first NaN or infinity appeared, for each way one
appears (forward op, input batch, custom backward, fp16 overflow), by statistics or copies."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn

from tensor_tracker import Stash, first_nonfinite, track


class Log(nn.Module):
    """log(x + offset): NaN for the (finite) inputs below -offset."""

    offset = 100.0

    def forward(self, x: Tensor) -> Tensor:
        return torch.log(x + self.offset)


class ZeroDivBackward(torch.autograd.Function):
    """Identity forward; the backward divides by zero (0/0: NaN)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad * 0 / torch.zeros_like(grad)


class BadBackward(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        out = ZeroDivBackward.apply(x)
        assert isinstance(out, Tensor)
        return out


def _model(middle: nn.Module) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), middle, nn.Linear(4, 2))


STATS = {"stats": True}
COPIES: dict[str, Any] = {}


@pytest.mark.parametrize("options", [STATS, COPIES], ids=["stats", "copies"])
def test_a_nan_made_in_a_forward(options: dict[str, Any]) -> None:
    model = _model(Log())
    with track(model, **options) as t:
        for step in range(3):
            model[1].offset = 100.0 if step < 2 else -100.0  # NaN from step 2 on
            model(torch.rand(2, 4)).sum().backward()
            t.step()
    found = first_nonfinite(t)
    assert found is not None
    assert (found.name, found.grad, found.step) == ("1", False, 2)
    assert found.seen_in == ("1", "output", "", False)
    assert "forward of '1'" in found.explanation
    assert t[found.row].name == "1" and t[found.row].step == 2
    assert set(found.evidence["name"]) == {"1"}


def test_a_nan_in_the_input_batch_is_blamed_on_the_input() -> None:
    model = _model(nn.Tanh())
    x = torch.rand(2, 4)
    x[0, 1] = float("nan")
    with track(model, stats=True, capture=("inputs", "outputs")) as t:
        model(x).sum().backward()
    found = first_nonfinite(t)
    assert found is not None
    assert (found.name, found.grad, found.seen_in) == ("", False, ("", "input", "input", False))
    assert "came in with the batch" in found.explanation


def test_a_nan_between_submodules_is_blamed_on_the_enclosing_module() -> None:
    class Parent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x: Tensor) -> Tensor:
            return self.b(torch.log(self.a(x) - 100))  # NaN from an op, not a module

    model = nn.Sequential(Parent())
    with track(model, stats=True, capture=("inputs", "outputs")) as t:
        model(torch.rand(2, 4)).sum().backward()
    found = first_nonfinite(t)
    assert found is not None
    assert found.seen_in == ("0.b", "input", "input", False) and found.name == "0"


@pytest.mark.parametrize("capture", [("outputs",), ("inputs", "outputs")])
def test_a_nan_made_in_a_custom_backward(capture: tuple[str, ...]) -> None:
    model = _model(BadBackward())
    x = torch.rand(2, 4)
    with track(model, stats=True, capture=capture) as t:
        model(x).sum().backward()
    # Check the premise with autograd itself: the gradient reaching "1" is finite, the one
    # leaving it is not.
    hidden = model[0](x)
    out_1 = model[1](hidden)
    g_out, g_in = torch.autograd.grad(model[2](out_1).sum(), [out_1, hidden])
    assert torch.isfinite(g_out).all() and not torch.isfinite(g_in).all()
    found = first_nonfinite(t)
    assert found is not None
    assert (found.name, found.grad, found.step) == ("1", True, 0)
    assert "backward of '1'" in found.explanation
    if "inputs" in capture:
        assert found.seen_in == ("1", "input", "x", True)
    else:
        assert found.seen_in == ("0", "output", "", True)


def test_an_fp16_overflow_under_autocast() -> None:
    model = _model(nn.Linear(4, 4))
    with torch.no_grad():
        model[1].weight.fill_(3e4)
    x = torch.full((2, 4), 30.0)
    with track(model, stats=True, capture=("inputs", "outputs")) as t:
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        out.float().sum().backward()
    assert t.to_frame().query("name == '0' and not grad")["max"].abs().max() < 6e4
    found = first_nonfinite(t)
    assert found is not None and (found.name, found.grad) == ("1", False)
    row = found.evidence.query("kind == 'output' and not grad").iloc[0]
    assert row["abs_max"] == float("inf") and row["numel"] == 4 * 2


def test_a_finite_run_finds_nothing_and_bad_arguments_are_named() -> None:
    model = _model(nn.Tanh())
    with track(model, stats=True) as t:
        model(torch.rand(2, 4)).sum().backward()
    assert first_nonfinite(t) is None
    assert first_nonfinite([Stash("a", nn.Tanh, False, torch.ones(2))]) is None
    with pytest.raises(TypeError, match="recording"):
        first_nonfinite(3)
    with track(model, stats=["rms"]) as rms_only:
        model(torch.rand(2, 4))
    with pytest.raises(KeyError, match="min and max"):
        first_nonfinite(rms_only)


def test_empty_tensors_and_missing_values_are_not_non_finite() -> None:
    class Odd(nn.Module):
        def forward(self, x: Tensor) -> tuple[Tensor, None]:
            return x[:0], None

    model = nn.Sequential(Odd())
    with track(model, stats=True) as t:
        model(torch.ones(2))
    assert len(t) == 2 and first_nonfinite(t) is None
