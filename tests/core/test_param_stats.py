"""Statistics of parameters, their gradients and the optimizer's state (issue #31) against a
per-tensor reference: `stats.compute` of copies taken when each is recorded, bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from tensor_tracker import stats, track


class _Net(nn.Module):
    """Parameters on two dtypes, a weight tied between two modules, a frozen module."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight  # tied
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.c = nn.Linear(4, 3).double()

    def forward(self, x: Tensor) -> Tensor:
        h = self.frozen(self.b(torch.tanh(self.a(x))))
        out: Tensor = self.c(h.double())
        return out


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
}


def _values(stash_value: Any) -> dict[str, float]:
    value = stash_value[0] if isinstance(stash_value, tuple) else stash_value
    result: dict[str, float] = value.to_dict()
    return result


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_parameters_gradients_and_state_equal_the_per_tensor_reference(
    name: str, device: torch.device
) -> None:
    model = _Net().to(device)
    opt = OPTIMIZERS[name](model.parameters())
    modules = {"a": model.a, "b": model.b, "frozen": model.frozen, "c": model.c}
    expected: dict[tuple[int, str, str, bool], dict[str, float]] = {}
    with track(model, stats=True, capture="params", optimizer=opt) as t:
        for step in range(3):
            opt.zero_grad()
            for module_name, module in modules.items():
                for attr, param in module.named_parameters(recurse=False):
                    key = (step, module_name, attr, False)
                    expected[key] = stats.compute(param.detach().clone(), True).to_dict()
            x = torch.randn(5, 4, device=device)
            model(x).square().mean().backward()
            for module_name, module in modules.items():
                for attr, param in module.named_parameters(recurse=False):
                    if param.grad is not None:
                        grad = stats.compute(param.grad.clone(), True).to_dict()
                        expected[step, module_name, attr, True] = grad
            opt.step()
            for module_name, module in modules.items():
                for attr, param in module.named_parameters(recurse=False):
                    for state_key, value in opt.state.get(param, {}).items():
                        if isinstance(value, Tensor) and value.shape == param.shape:
                            key = (step, module_name, f"{attr}.{state_key}", False)
                            expected[key] = stats.compute(value.clone(), True).to_dict()
            t.step()
    recorded = {(s.step, s.name, s.attr, s.grad): _values(s.value) for s in t}
    assert len(recorded) == len(t)  # one record per (step, module, tensor, gradient or not)
    assert recorded == expected
    # The frozen module's parameters have neither gradients nor optimizer state; the tied
    # weight is recorded under both modules; both dtypes are there.
    assert not [k for k in recorded if k[1] == "frozen" and (k[3] or "." in k[2])]
    assert (2, "b", "weight", True) in recorded and (2, "a", "weight", True) in recorded
    assert recorded[2, "a", "weight", True] == recorded[2, "b", "weight", True]
    assert model.c.weight.dtype == torch.float64 and model.a.weight.dtype == torch.float32
    state_keys = {k[2].split(".", 1)[1] for k in recorded if "." in k[2]}
    assert state_keys == (
        {"momentum_buffer"} if name == "sgd_momentum" else {"exp_avg", "exp_avg_sq"}
    )
