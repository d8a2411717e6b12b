"""Training runs: steps, every=N, inputs, parameters, optimizer state, train/eval (issue #5)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tensor_tracker import track


def model_and_data() -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    return model, torch.randn(8, 3), torch.randn(8, 1)


def test_step_counter_and_call_reset() -> None:
    model, x, _ = model_and_data()
    with track(model, grad=False, include="^0$") as t:
        model(x)
        model(x)
        t.step()
        model(x)
        t.step(100)
        model(x)
    assert [(s.step, s.call) for s in t] == [(0, 0), (0, 1), (1, 0), (100, 0)]
    assert t.to_frame().step.tolist() == [0, 0, 1, 100]


def test_every_n_records_exactly_those_steps_with_no_hooks_between() -> None:
    model, x, y = model_and_data()
    fired = []
    model[0].register_forward_hook(lambda *_: fired.append(1))  # the user's own hook stays
    with track(model, every=3) as t:
        for step in range(7):
            hooks_attached = len(model[2]._forward_hooks) > 0
            assert hooks_attached == (step % 3 == 0)
            F.mse_loss(model(x), y).backward()
            t.step()
    assert sorted({s.step for s in t}) == [0, 3, 6]
    assert len(fired) == 7
    per_step = len([s for s in t if s.step == 0])
    assert per_step == 8 and len(t) == 3 * per_step


def test_inputs_and_their_gradients() -> None:
    model, x, _ = model_and_data()
    x.requires_grad_(True)
    with track(model, capture="inputs", include="^0$") as t:
        model(x).sum().backward()
    (inp, grad) = list(t)
    assert (inp.kind, inp.attr, grad.kind, grad.grad) == ("input", "input", "input", True)
    assert torch.equal(inp.value, x.detach())
    assert torch.allclose(grad.value[0], x.grad)


def test_keyword_inputs_are_named() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    with track(layer, capture="inputs", include="^$", grad=False) as t:
        layer(torch.randn(2, 5, 8), src_key_padding_mask=mask)
    assert [s.attr for s in t] == ["src", "src_key_padding_mask"]
    assert torch.equal(t[1].value, mask)


@pytest.mark.parametrize("order", ["zero_first", "zero_after_step", "zero_before_backward"])
def test_parameter_gradients_whatever_zero_grad_order(order: str) -> None:
    model, x, y = model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []
    with track(model, capture="params", include="^0$") as t:
        for _ in range(3):
            if order == "zero_first":
                opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            if order == "zero_before_backward":
                opt.zero_grad()
            loss.backward()
            expected.append(model[0].weight.grad.clone())
            opt.step()
            if order == "zero_after_step":
                opt.zero_grad()
            t.step()
    grads = [s.value[0] for s in t if s.grad and s.attr == "weight"]
    assert len(grads) == 3
    assert all(torch.equal(g, e) for g, e in zip(grads, expected, strict=True))
    values = [s for s in t if not s.grad and s.attr == "weight"]
    assert [s.step for s in values] == [0, 1, 2] and values[0].kind == "param"


def test_parameters_are_recorded_once_per_step_even_when_called_twice() -> None:
    model, x, _ = model_and_data()
    with track(model, capture="params", include="^0$", grad=False) as t:
        model(x)
        model(x)
    assert [s.attr for s in t] == ["weight", "bias"]


def test_adam_moments_equal_optimizer_state() -> None:
    model, x, y = model_and_data()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with track(model, grad=False, include="^2$", optimizer=opt) as t:
        for _ in range(2):
            F.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            t.step()
    state = opt.state[model[2].weight]
    moments = {s.attr: s.value for s in t if s.kind == "optimizer" and s.step == 1}
    assert set(moments) == {
        "weight.exp_avg",
        "weight.exp_avg_sq",
        "bias.exp_avg",
        "bias.exp_avg_sq",
    }
    assert torch.equal(moments["weight.exp_avg"], state["exp_avg"])
    assert torch.equal(moments["weight.exp_avg_sq"], state["exp_avg_sq"])
    assert len(opt._optimizer_step_post_hooks) == 0


def test_training_flag_and_train_only() -> None:
    model, x, _ = model_and_data()
    with track(model, grad=False, include="^0$") as t:
        model(x)
        model.eval()
        model(x)
    assert [s.training for s in t] == [True, False]
    model.train()
    with track(model, grad=False, include="^0$", train_only=True) as t:
        model(x)
        model.eval()
        model(x)
    assert [s.training for s in t] == [True]


def test_first_non_finite_step_with_one_pandas_expression() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    x = torch.randn(2, 4)
    with torch.no_grad(), track(model, stats=True) as t:
        for step in range(6):
            if step == 3:
                model[1].weight.fill_(math.inf)  # the second layer blows up at step 3
            model(x)
            t.step()
    df = t.to_frame()
    stat_cols = ["mean", "std", "rms", "abs_max", "min", "max"]
    bad = df[~np.isfinite(df[stat_cols]).all(axis=1)]
    assert bad.step.min() == 3
    assert set(bad[bad.step == 3].name) == {"1", ""}


def test_long_run_does_not_accumulate_dead_gradient_handles() -> None:
    model, x, y = model_and_data()
    with track(model, stats=True) as t:
        for _ in range(400):
            F.mse_loss(model(x), y).backward()
            t.step()
            t.clear()
        assert len(t._eager.grad_handles) <= 2048


def test_optimizer_step_reads_the_state_only_of_modules_holding_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every module is registered, most of them (the Sequential, the activations) hold no
    # parameter of their own: at each optimizer step they cost no call and no list.
    from tensor_tracker._core import hooks

    calls: list[int] = []
    rule = hooks.optimizer_states

    def counted(params: Any, state: Any) -> Any:
        calls.append(len(params))
        return rule(params, state)

    monkeypatch.setattr(hooks, "optimizer_states", counted)
    model, x, y = model_and_data()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with track(model, grad=False, optimizer=opt) as t:
        F.mse_loss(model(x), y).backward()
        opt.step()
    holders = [m for m in model.modules() if list(m.parameters(recurse=False))]
    assert len(holders) < len(list(model.modules()))
    assert calls == [2] * len(holders)
    assert len([s for s in t if s.kind == "optimizer"]) == 4 * len(holders)
