"""`tensor_tracker.stash`: tensors named inside `forward` are recorded under the enclosing
tracked module, gradients checked against `torch.autograd.grad`; nothing happens when no
tracker is recording."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import tensor_tracker
from tensor_tracker import stash, track
from tensor_tracker._core import tracker as tracker_module
from tests.helpers import hook_count


class Scores(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        q = self.q(x)
        scores = stash("scores", q @ q.transpose(-1, -2))
        return scores.softmax(-1) @ x


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Scores()
        self.out = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.attn(x))


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Block(), nn.Linear(4, 1))


def test_a_named_tensor_and_its_gradient_match_autograd() -> None:
    model = _model()
    x = torch.randn(2, 3, 4)
    with track(model) as t:
        model(x).sum().backward()
    named = [s for s in t if s.kind == "named"]
    assert [(s.name, s.attr, s.grad, s.call) for s in named] == [
        ("0.attn", "scores", False, 0),
        ("0.attn", "scores", True, 0),
    ]
    # The same graph by hand: the scores and d loss / d scores.
    reference = _model()
    captured: list[Tensor] = []
    real = tracker_module.stash

    def keep(name: str, value: Tensor) -> Tensor:
        captured.append(value)
        return real(name, value)

    globals()["stash"] = keep
    try:
        loss = reference(x).sum()
    finally:
        globals()["stash"] = real
    (grad,) = torch.autograd.grad(loss, captured)
    assert torch.equal(named[0].value, captured[0].detach())
    assert torch.equal(named[1].value[0], grad)


def test_outputs_and_gradients_are_unchanged_and_nothing_is_left_active() -> None:
    model, plain = _model(), _model()
    x = torch.randn(2, 3, 4)
    with track(model, stats=True) as t:
        model(x).sum().backward()
    plain(x).sum().backward()
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None and torch.equal(a.grad, b.grad)
    # Its own tracker, not "no tracker anywhere": another test in this worker (pytest-xdist
    # runs files in any order) may have left one registered with a bare track(model).
    assert t not in tracker_module._ACTIVE and hook_count(model) == 0
    recorded = len(t)
    value = torch.ones(2)
    assert stash("free", value) is value  # returned as is, and t records nothing more
    assert len(t) == recorded


def test_the_enclosing_tracked_module_and_the_root() -> None:
    model = _model()
    with track(model, include=r"^0$", grad=False) as t:
        out = model(torch.randn(2, 3, 4))
        stash("loss", out.square().mean())  # outside every module: the root's record
    assert [(s.name, s.kind, s.attr) for s in t] == [
        ("0", "named", "scores"),  # 0.attn is not tracked: its tracked parent is
        ("0", "output", ""),
        ("", "named", "loss"),
    ]


def test_calls_steps_every_and_several_trackers() -> None:
    model = _model()
    block = model[0]
    with track(model, every=2, grad=False) as t, track(block, grad=False) as u:
        for _ in range(3):
            block(block(torch.randn(1, 3, 4)))
            t.step()
            u.step()
    named = [(s.step, s.call) for s in t if s.kind == "named"]
    assert named == [(0, 0), (0, 1), (2, 0), (2, 1)]  # step 1 not recorded (every=2)
    assert [(s.name, s.step, s.call) for s in u if s.kind == "named"] == [
        ("attn", step, call) for step in range(3) for call in range(2)
    ]


def test_stash_is_exported_and_named_in_the_frame() -> None:
    model = _model()
    with track(model, stats=True) as t:
        model(torch.randn(2, 3, 4)).sum().backward()
    frame = t.to_frame()
    assert set(frame.loc[frame["kind"] == "named", "attr"]) == {"scores"}
    assert tensor_tracker.stash is tracker_module.stash


def test_a_role_becomes_the_kind() -> None:
    model = _model()
    targets = torch.randn(2, 3, 1)
    with track(model, grad=False) as t:
        out = model(torch.randn(2, 3, 4))
        stash("targets", targets, role="target")
        stash("loss", (out - targets).square().mean(), role="loss")
    assert [(s.kind, s.attr) for s in t][-2:] == [("target", "targets"), ("loss", "loss")]
    with pytest.raises(ValueError, match="role"):
        stash("x", targets, role="weights")
