"""`capture="updates"`: parameter updates at `optimizer.step()`, from Adam's state or copies
(issue 39, item 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_tracker as tt
from tensor_tracker import track
from tensor_tracker.errors import ArgumentValueError

Make = Callable[[nn.Module], torch.optim.Optimizer]


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _groups(model: nn.Module, lr: float) -> list[dict[str, Any]]:
    """Two parameter groups with different learning rates."""
    return [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": lr}]


OPTIMIZERS: dict[str, Make] = {
    "adam_l2": lambda m: torch.optim.Adam(_groups(m, 0.1), lr=1e-2, weight_decay=0.1),
    "adamw": lambda m: torch.optim.AdamW(_groups(m, 0.1), lr=1e-2, weight_decay=0.1),
    "adamw_amsgrad_maximize": lambda m: torch.optim.AdamW(
        _groups(m, 0.1), lr=1e-2, weight_decay=0.1, amsgrad=True, maximize=True
    ),
    "adam_foreach": lambda m: torch.optim.Adam(_groups(m, 0.1), lr=1e-2, foreach=True),
    "adamw_foreach": lambda m: torch.optim.AdamW(
        _groups(m, 0.1), lr=1e-2, weight_decay=0.1, foreach=True
    ),
    "adam_fused": lambda m: torch.optim.Adam(_groups(m, 0.1), lr=1e-2, fused=True),
    "sgd_momentum": lambda m: torch.optim.SGD(_groups(m, 0.5), lr=0.1, momentum=0.9),
}
COPIED = {"adam_fused", "sgd_momentum"}  # the others are rebuilt from the optimizer state


def _train(
    make: Make, steps: int = 3, compile: bool = False, **options: Any
) -> tuple[tt.Tracker | None, list[dict[str, tuple[torch.Tensor, torch.Tensor]]], nn.Module]:
    """`steps` steps; the (update, parameter before) of each parameter at each step, from
    copies made around `optimizer.step()`; tracked when `options` are given."""
    model = _model()
    run = torch.compile(model) if compile else model
    optimizer = make(model)
    torch.manual_seed(1)
    inputs = [torch.randn(5, 8) for _ in range(steps)]
    references = []
    tracker = track(run, optimizer=optimizer, **options) if options else None
    with tracker or _nothing():
        for x in inputs:
            run(x).square().mean().backward()
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            optimizer.step()
            optimizer.zero_grad()
            references.append(
                {n: (p.detach() - before[n], before[n]) for n, p in model.named_parameters()}
            )
            if tracker is not None:
                tracker.step()
    return tracker, references, model


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _rms(t: torch.Tensor) -> float:
    return float(t.double().square().mean().sqrt())


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_updates_equal_the_change_a_copy_shows(name: str) -> None:
    tracker, references, _ = _train(OPTIMIZERS[name], capture="updates")
    assert tracker is not None
    updates = [s for s in tracker if s.kind == "update"]
    ratios = {(s.step, s.name, s.attr): float(s.value) for s in tracker if s.kind == "update_ratio"}
    assert len(updates) == len(ratios) == 3 * 4
    for s in updates:
        update, before = references[s.step][f"{s.name}.{s.attr}"]
        assert s.value.shape == update.shape and not s.grad
        # Within the rounding of the parameter itself, which a copy's difference carries.
        tolerance = 0 if name in COPIED else 4 * torch.finfo(torch.float32).eps
        error = (s.value - update).abs().max() / before.abs().max()
        assert error <= tolerance, (s.name, s.attr, float(error))
        assert ratios[s.step, s.name, s.attr] == pytest.approx(
            _rms(update) / _rms(before), rel=1e-4
        )


def test_adam_takes_no_copy_and_other_optimizers_one_buffer_reused() -> None:
    adam, _, _ = _train(OPTIMIZERS["adamw"], capture="updates")
    assert adam is not None and not adam._updates._buffers  # type: ignore[union-attr]
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    buffers = []
    with track(model, optimizer=optimizer, capture="updates", stats=["rms"]) as t:
        for _ in range(3):
            model(torch.randn(5, 8)).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            buffers.append(dict(t._updates._buffers))  # type: ignore[union-attr]
            t.step()
    (key,) = buffers[0]
    assert key == (torch.device("cpu"), torch.float32)
    assert buffers[0][key].numel() == sum(p.numel() for p in model.parameters())
    assert all(b[key] is buffers[0][key] for b in buffers)


def test_updates_with_statistics_match_copies() -> None:
    tracker, references, _ = _train(
        OPTIMIZERS["adam_l2"], capture=("outputs", "updates"), stats=["rms", "abs_max"]
    )
    assert tracker is not None
    frame = tracker.to_frame()
    updates = frame[frame["kind"] == "update"]
    assert len(updates) == 12 and (frame["kind"] == "output").any()
    for row in updates.itertuples():
        update, _ = references[row.step][f"{row.name}.{row.attr}"]
        assert row.rms == pytest.approx(_rms(update), rel=1e-5)
        assert row.abs_max == pytest.approx(float(update.abs().max()), rel=1e-5)


@pytest.mark.parametrize("name", ["adamw", "sgd_momentum"])
def test_training_is_bitwise_identical_with_updates_recorded(name: str) -> None:
    _, plain, untracked = _train(OPTIMIZERS[name])
    _, tracked_refs, tracked = _train(OPTIMIZERS[name], capture="updates", stats=True)
    for (n, p), q in zip(untracked.named_parameters(), tracked.parameters(), strict=True):
        assert torch.equal(p, q), n
    assert all(
        torch.equal(a[n][0], b[n][0]) for a, b in zip(plain, tracked_refs, strict=True) for n in a
    )


def test_unrecorded_steps_hook_nothing() -> None:
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters())
    hooked = []
    with track(model, optimizer=optimizer, capture="updates", every=2) as t:
        for _ in range(4):
            model(torch.randn(5, 8)).square().mean().backward()
            hooked.append(len(optimizer._optimizer_step_pre_hooks))
            optimizer.step()
            optimizer.zero_grad()
            t.step()
    assert hooked == [1, 0, 1, 0]
    assert sorted({s.step for s in t if s.kind == "update"}) == [0, 2]
    assert not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks


def test_parameters_the_step_leaves_alone_are_not_recorded() -> None:
    model = _model()
    model[0].requires_grad_(False)  # no gradient: Adam skips it
    optimizer = torch.optim.Adam(model.parameters())
    with track(model, optimizer=optimizer, capture="updates") as t:
        model(torch.randn(5, 8)).square().mean().backward()
        optimizer.step()
    assert {(s.name, s.attr) for s in t if s.kind == "update"} == {("2", "weight"), ("2", "bias")}


def test_updates_need_an_optimizer() -> None:
    with pytest.raises(ArgumentValueError, match=r'capture="updates".*optimizer='):
        track(_model(), capture="updates")
    with pytest.raises(ArgumentValueError, match="capture="):
        track(_model(), capture="update")  # a bad value names the choices, as before


def test_streamed_and_loaded_updates(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    live, _, _ = _train(OPTIMIZERS["adamw"], capture="updates", stats=True)
    streamed, _, _ = _train(
        OPTIMIZERS["adamw"], capture="updates", stats=True, stream_to=tmp_path / "run"
    )
    assert streamed is not None and live is not None
    loaded = tt.load(tmp_path / "run").to_frame()
    frame = live.to_frame()
    assert set(loaded["kind"]) == {"update", "update_ratio", "optimizer"}
    columns = ["step", "name", "kind", "attr", "rms"]
    assert loaded[columns].equals(frame[columns])


def test_adam_moments_come_with_the_updates() -> None:
    tracker, _, _ = _train(OPTIMIZERS["adamw"], capture="updates", stats=["rms", "numel"])
    assert tracker is not None
    frame = tracker.to_frame()
    moments = frame[(frame["kind"] == "optimizer") & (frame["step"] == 2)]
    assert set(moments["attr"]) == {
        f"{p}.{m}" for p in ("weight", "bias") for m in ("exp_avg", "exp_avg_sq")
    }


@pytest.mark.slow  # torch.compile compiles for seconds
def test_compiled_model_records_updates() -> None:
    torch.compiler.reset()
    tracker, references, _ = _train(
        OPTIMIZERS["adamw"],
        compile=True,
        capture=("outputs", "updates"),
        stats=["rms"],
    )
    torch.compiler.reset()
    assert tracker is not None
    frame = tracker.to_frame()
    updates = frame[frame["kind"] == "update"]
    assert len(updates) == 12 and (frame["kind"] == "output").any()
    for row in updates.itertuples():
        update, _ = references[row.step][f"{row.name}.{row.attr}"]
        assert row.rms == pytest.approx(_rms(update), rel=1e-5)
