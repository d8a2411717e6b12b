"""Issue #31: with `stats=`, parameters, their gradients and the optimizer's state are
recorded in batches (`StatsStore.put_many`). Checked against a per-tensor reference: a
second tracker on the same run keeping full copies of the same tensors, whose statistics
are computed one tensor at a time (`StatsStore.put`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import stats
from tensor_tracker.core.hooks import PENDING
from tensor_tracker.errors import MemoryBudgetError, NonFiniteError
from tensor_tracker.stats.batch import ROW_TOLERANCE

Optimizer = Callable[[Any], torch.optim.Optimizer]
OPTIMIZERS: dict[str, Optimizer] = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9),
}


class Mixed(nn.Module):
    """float32 and bfloat16 parameters, a tied weight (embedding and head) and a frozen
    layer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 16)
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16).to(torch.bfloat16)
        self.frozen = nn.Linear(16, 16)
        self.frozen.requires_grad_(False)
        self.head = nn.Linear(16, 11, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.a(self.embed(idx)).tanh()
        h = self.b(h.bfloat16()).float()
        return self.head(self.frozen(h))


def _key(s: Any) -> tuple[Any, ...]:
    return (s.step, s.name, s.kind, s.attr, s.grad)


def check_against_copies(batched: Any, copies: Any) -> int:
    """Every param/optimizer record of `copies` (full copies) has a row in `batched` whose
    statistics equal those of the copy computed one tensor at a time."""
    fn = stats.parse(True)
    reference = fn.store()
    rows = {_key(s): s.first_value for s in batched if s.kind in ("param", "optimizer")}
    checked = 0
    for s in copies:
        if s.kind not in ("param", "optimizer"):
            continue
        got = rows.pop(_key(s)).to_dict()
        want = reference.get(reference.put(s.first_value)).to_dict()
        for name, value in want.items():
            if name in ("std", "rms"):
                tol = ROW_TOLERANCE["rtol"] * max(abs(want["max"]), abs(want["min"]))
                assert got[name] == pytest.approx(value, rel=ROW_TOLERANCE["rtol"], abs=tol)
            else:
                assert got[name] == value or (math.isnan(got[name]) and math.isnan(value)), (
                    _key(s),
                    name,
                )
        checked += 1
    assert not rows  # nothing recorded twice or without its reference
    return checked


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_parameters_gradients_and_state_match_the_per_tensor_path(optimizer: str) -> None:
    torch.manual_seed(0)
    model = Mixed()
    opt = OPTIMIZERS[optimizer](model.parameters())
    idx = torch.randint(0, 11, (4, 6))
    capture = ("outputs", "params")
    with (
        tensor_tracker.track(model, stats=True, capture=capture, optimizer=opt) as batched,
        tensor_tracker.track(model, capture=("params",), optimizer=opt) as copies,
    ):
        for _ in range(3):
            model(idx).square().mean().backward()
            opt.step()
            opt.zero_grad()
            batched.step()
            copies.step()
    checked = check_against_copies(batched, copies)
    frame = batched.to_frame()
    params = frame[frame["kind"] == "param"]
    # Per step: 8 parameters, the tied one under both modules; 6 gradients (not the frozen
    # layer's); the optimizer's state of the 5 trained parameters.
    assert len(params[~params["grad"]]) == 3 * 8
    assert len(params[params["grad"]]) == 3 * 6
    assert not ((params["name"] == "frozen") & params["grad"]).any()
    state = frame[frame["kind"] == "optimizer"]
    per_param = 1 if optimizer == "sgd_momentum" else 2
    assert len(state) == 3 * 6 * per_param  # the tied weight's under embed and head
    assert checked == len(params) + len(state)
    # bfloat16 parameters are summarised like any other (reduced in float32).
    assert set(params.loc[params["name"] == "b", "numel"]) == {256.0, 16.0}


def test_parameters_are_recorded_as_the_forward_pass_used_them() -> None:
    """Recorded after backward, before the optimizer changes them in place."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    before = model.weight.detach().clone()
    with tensor_tracker.track(model, stats=["mean", "max"], capture="params", optimizer=opt) as t:
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    weight = next(s for s in t if s.attr == "weight" and not s.grad)
    mean = before.sum().item() / before.numel()  # what the statistics compute
    assert weight.value.to_dict() == {"mean": mean, "max": before.max().item()}
    assert not torch.equal(before, model.weight)


def test_parameter_gradients_equal_autograd_and_come_at_the_end_of_backward() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    grads = torch.autograd.grad(model(x).sum(), list(model.parameters()))
    names = [n for n, _ in model.named_parameters()]
    seen = {}
    with tensor_tracker.track(model, stats=["sum", "min", "max"], capture="params") as t:
        loss = model(x).sum()

        def after_backward() -> None:
            seen["pending"] = [r == PENDING for r in t.stashes.ref]

        loss.register_hook(
            lambda g: torch.autograd.Variable._execution_engine.queue_callback(after_backward)
        )
        loss.backward()
    recorded = {f"{s.name}.{s.attr}": s.first_value.to_dict() for s in t if s.grad}
    for name, grad in zip(names, grads, strict=True):
        assert recorded[name] == {
            "sum": grad.sum().item(),
            "min": grad.min().item(),
            "max": grad.max().item(),
        }
    # Recorded in order as the hooks saw them, computed only at the end of backward.
    assert seen["pending"] == [True] * 2 * len(names)
    assert PENDING not in t.stashes.ref
    assert len(t) == 2 * len(names)


def test_a_nonfinite_parameter_gradient_raises_at_the_end_of_backward() -> None:
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    with (
        tensor_tracker.track(
            model, stats=["sum"], capture="params", optimizer=opt, on_nonfinite="raise"
        ),
        pytest.raises(NonFiniteError),
    ):
        (model(torch.tensor([[1.0, math.inf]])) * 0).sum().backward()


def test_records_the_store_cannot_keep_are_kept_as_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = nn.Linear(3, 2)
    with tensor_tracker.track(model, stats=["max"], capture="params") as t:

        def refuse(self: Any, tensors: Any) -> list[int]:
            raise RuntimeError("full")

        monkeypatch.setattr(type(t.stashes.store), "put_many", refuse)
        model(torch.randn(4, 3)).sum().backward()
    got = {(s.attr, s.grad): s.first_value.to_dict()["max"] for s in t}
    assert got[("weight", False)] == model.weight.max().item()
    assert got[("bias", True)] == model.bias.grad.max().item()
    assert len(got) == 4


def test_a_batch_over_max_bytes_stops_tracking_and_keeps_every_record_readable() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    tracker = tensor_tracker.track(model, stats=["max"], capture="params", max_bytes=100)
    with tracker, pytest.raises(MemoryBudgetError):
        model(torch.randn(2, 3)).sum().backward()
    assert PENDING not in tracker.stashes.ref
    assert len(tracker) == 8
    assert all(s.first_value.to_dict()["max"] == s.first_value.to_dict()["max"] for s in tracker)
