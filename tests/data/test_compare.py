"""`compare`: two recordings aligned record by record (full copies, statistics, loaded
recordings), renamed modules, records of one run only, and the first divergence."""

from __future__ import annotations

import math
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn

import tensor_tracker
from tensor_tracker import track
from tensor_tracker.errors import ArgumentTypeError, ArgumentValueError


def _net(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))


def _record(model: nn.Module, x: torch.Tensor, **kw: object) -> tensor_tracker.Tracker:
    with track(model, **kw) as t:  # type: ignore[arg-type]
        model(x).square().sum().backward()
    return t


def _train(lr: float, steps: int = 3, **kw: object) -> tensor_tracker.Tracker:
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(1)
    with track(model, **kw) as t:  # type: ignore[arg-type]
        for _ in range(steps):
            model(torch.randn(5, 4, generator=gen)).square().mean().backward()
            opt.step()
            opt.zero_grad()
            t.step()
    return t


X = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))


def test_identical_recordings_are_bitwise_equal() -> None:
    cmp = tensor_tracker.compare(_record(_net(), X), _record(_net(), X))
    frame = cmp.to_frame()
    assert list(frame.columns[:6]) == ["name", "kind", "attr", "grad", "call", "step"]
    assert len(frame) == 12 and frame["equal"].all() and (frame["status"] == "equal").all()
    assert (frame["max_ulp"] == 0).all() and (frame["cosine"] == 1.0).all()
    assert cmp.first_divergence() is None and cmp.first_divergence(grad=True) is None
    assert cmp.unmatched == []
    assert cmp.counts() == {"equal": 12, "within": 0, "beyond": 0, "unmatched": 0}


def test_error_columns_match_the_recorded_tensors() -> None:
    a, b = _record(_net(), X), _record(_net(), X * 1.01)
    frame = tensor_tracker.compare(a, b).to_frame()
    for i, (sa, sb) in enumerate(zip(a, b, strict=True)):
        va, vb = sa.first_value.double(), sb.first_value.double()
        assert frame["max_abs_error"][i] == pytest.approx(float((va - vb).abs().max()), rel=1e-12)
        assert frame["rel_rms_error"][i] == pytest.approx(
            float((va - vb).norm() / va.norm()), rel=1e-9
        )
        assert frame["cosine"][i] == pytest.approx(
            float(torch.nn.functional.cosine_similarity(va.flatten(), vb.flatten(), dim=0)),
            rel=1e-9,
        )
        assert frame["rms_b"][i] == pytest.approx(float(vb.square().mean().sqrt()), rel=1e-9)


def test_renamed_modules_align_through_names() -> None:
    x = X
    a = _record(_net(), x)
    renamed = nn.Sequential(
        OrderedDict(
            (new, module)
            for new, module in zip(("inp", "act1", "mid", "act2", "out"), _net(), strict=True)
        )
    )
    b = _record(renamed, x)
    plain = tensor_tracker.compare(a, b)
    assert len(plain) == 2  # the root, forward and gradient
    assert {(u.run, u.name) for u in plain.unmatched} >= {("a", "0"), ("b", "inp")}
    assert len(plain.unmatched) == 20  # never dropped silently
    mapping = {"0": "inp", "1": "act1", "2": "mid", "3": "act2", "4": "out"}
    for names in (mapping, lambda n: mapping.get(n, n)):
        cmp = tensor_tracker.compare(a, b, names=names)
        assert len(cmp) == 12 and cmp.unmatched == [] and cmp.to_frame()["equal"].all()
        assert cmp.to_frame()["name_b"].tolist()[:2] == ["inp", "act1"]


def test_records_of_one_run_only_are_listed() -> None:
    a = _record(_net(), X)
    bigger = nn.Sequential(*_net(), nn.Identity())
    b = _record(bigger, X)
    cmp = tensor_tracker.compare(a, b)
    runs = {(u.run, u.name, u.grad) for u in cmp.unmatched}
    assert runs == {("b", "5", False), ("b", "5", True)}
    assert "2 in one run only" in str(cmp)


def test_shapes_that_differ_are_reported_not_compared() -> None:
    cmp = tensor_tracker.compare(_record(_net(), X), _record(_net(), torch.randn(2, 4)))
    frame = cmp.to_frame()
    assert (frame["shape_a"].str.startswith("3x")).all()
    assert (frame["shape_b"].str.startswith("2x")).all()
    assert frame["max_abs_error"].isna().all() and (frame["status"] == "beyond").all()
    first = cmp.first_divergence()
    assert first is not None and first.reason == "shape" and first.name == "0"


def test_different_dtypes_are_compared_in_the_coarser_dtype() -> None:
    model = _net()
    b16 = _net().bfloat16()
    cmp = tensor_tracker.compare(_record(model, X), _record(b16, X.bfloat16()))
    frame = cmp.to_frame()
    assert set(frame["dtype_b"]) == {"bfloat16"} and not frame["equal"].any()
    # The first Linear: its bf16 output against the fp32 one rounded to bf16, a few steps.
    assert 0 < frame["max_ulp"][0] < 64
    assert cmp.first_divergence(rtol=0.05, atol=1e-2) is None


def test_a_perturbed_weight_is_the_first_forward_divergence() -> None:
    perturbed = _net()
    with torch.no_grad():
        perturbed[2].weight.mul_(1 + 1e-3)
    cmp = tensor_tracker.compare(_record(_net(), X), _record(perturbed, X))
    first = cmp.first_divergence(rtol=0, atol=0)
    assert first is not None and (first.name, first.grad, first.step) == ("2", False, 0)
    frame = cmp.to_frame()
    assert frame["equal"][: first.row].all()  # everything computed before it is equal
    assert first.rel_rms_error == pytest.approx(frame["rel_rms_error"][first.row])
    assert 1e-4 < first.rel_rms_error < 1e-2
    # The loss is a function of the output, which differs: so does its gradient, the
    # first one backward computes (the model's own output's, recorded as the root "").
    grad_first = cmp.first_divergence(rtol=0, atol=0, grad=True)
    assert grad_first is not None and (grad_first.name, grad_first.grad) == ("", True)


def test_tolerance_decides_within_and_beyond() -> None:
    cmp = tensor_tracker.compare(_record(_net(), X), _record(_net(), X * (1 + 1e-6)))
    assert cmp.first_divergence(rtol=0, atol=0) is not None
    assert cmp.first_divergence(rtol=1e-3) is None
    loose = cmp.counts(rtol=1e-3)
    assert loose["beyond"] == 0 and loose["within"] + loose["equal"] == 12
    with pytest.raises(ArgumentValueError, match="rtol"):
        cmp.first_divergence(rtol=-1)


def _pair(
    a: list[float], b: list[float], dtype_b: torch.dtype = torch.float32
) -> tuple[list[tensor_tracker.Stash], list[tensor_tracker.Stash]]:
    def stashes(values: list[float], dtype: torch.dtype) -> list[tensor_tracker.Stash]:
        return [tensor_tracker.Stash("m", nn.Linear, False, torch.tensor(values, dtype=dtype))]

    return stashes(a, torch.float32), stashes(b, dtype_b)


def test_the_default_tolerance_is_16_eps_of_the_relative_rms_error() -> None:
    eps = torch.finfo(torch.float32).eps
    # Two eps of the tensor's scale, all at an element near 0: allclose's 1e-5 and 1e-8
    # call that element 2,000 times its tolerance; against the tensor it is rounding.
    near_zero = tensor_tracker.compare(*_pair([1.0, -1.0, 1e-12], [1.0, -1.0, 1e-12 + 2 * eps]))
    assert near_zero.rtol == 16 * eps and near_zero.atol == 0.0 and near_zero.eps == eps
    assert near_zero.status() == ["within"]
    assert near_zero.to_frame()["max_ulp"][0] > 1e6  # exact, and no alarm
    # 20 eps of the scale: beyond; so is 1e-3 relative everywhere.
    assert tensor_tracker.compare(*_pair([1.0], [1.0 + 20 * eps])).status() == ["beyond"]
    assert tensor_tracker.compare(*_pair([1.0, 2.0], [1.001, 2.002])).status() == ["beyond"]
    # The coarsest dtype sets the unit: bf16 against fp32 gets 16 bf16 eps.
    bf16 = tensor_tracker.compare(*_pair([1.0, 3.0], [1.0, 3.0 + 2**-6], torch.bfloat16))
    assert bf16.rtol == 16 * torch.finfo(torch.bfloat16).eps and bf16.status() == ["within"]
    # Given tolerances are the comparison's, and rtol=0, atol=0 is "values differ".
    given = tensor_tracker.compare(*_pair([1.0, 1.0], [1.0, 1.5]), rtol=0.5, atol=0.1)
    assert (given.rtol, given.atol) == (0.5, 0.1) and given.status() == ["within"]
    assert given.status(rtol=0.3, atol=0) == ["beyond"]
    assert given.first_divergence(rtol=0, atol=0) is not None


def test_training_runs_with_different_learning_rates_first_differ_at_step_1(
    tmp_path: Path,
) -> None:
    a, b = _train(0.1), _train(0.2)
    cmp = tensor_tracker.compare(a, b)
    forward, backward = (
        cmp.first_divergence(rtol=0, atol=0),
        cmp.first_divergence(rtol=0, atol=0, grad=True),
    )
    assert forward is not None and (forward.step, forward.name) == (1, "0")
    assert backward is not None and backward.step == 1
    assert cmp.to_frame().query("step == 0")["equal"].all()
    # The same from their statistics, and from recordings loaded from disk.
    stats = tensor_tracker.compare(_train(0.1, stats=True), _train(0.2, stats=True))
    found = stats.first_divergence(rtol=0, atol=0)
    assert found is not None and (found.step, found.name) == (1, "0") and found.stats
    assert "rms_rel_error" in stats.to_frame().columns
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    loaded = tensor_tracker.compare(
        tensor_tracker.load(tmp_path / "a"), tensor_tracker.load(tmp_path / "b")
    )
    again = loaded.first_divergence(rtol=0, atol=0)
    assert again is not None and (again.step, again.name) == (1, "0")


def test_copies_against_statistics() -> None:
    cmp = tensor_tracker.compare(_record(_net(), X), _record(_net(), X, stats=True))
    assert not cmp.copies
    frame = cmp.to_frame()
    assert {"rms_a", "rms_b", "rms_rel_error", "max_stat_rel_error"} <= set(frame.columns)
    assert (frame["max_stat_rel_error"] < 1e-5).all()
    assert cmp.first_divergence(rtol=1e-4, atol=1e-7) is None


def test_print_and_html_say_how_many_and_the_worst() -> None:
    perturbed = _net()
    with torch.no_grad():
        perturbed[4].bias.add_(0.5)
    cmp = tensor_tracker.compare(_record(_net(), X), _record(perturbed, X))
    text = str(cmp)
    assert "Comparison of 12 aligned records (full copies): 4 bitwise equal" in text
    assert "First forward divergence: '4' output at step 0" in text
    assert "Worst:" in text
    page = cmp._repr_html_()
    assert "<table>" in page and "4 bitwise equal" in page
    assert repr(cmp) == "Comparison(records=12, equal=4, within=0, beyond=8, unmatched=0)"


def test_bad_arguments_name_themselves() -> None:
    t = _record(_net(), X)
    with pytest.raises(ArgumentTypeError, match=r"compare\(names=...\)"):
        tensor_tracker.compare(t, t, names=["0"])  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="must return the module's name"):
        tensor_tracker.compare(t, t, names=lambda n: 3)  # type: ignore[arg-type,return-value]
    with pytest.raises(ArgumentTypeError, match="compare"):
        tensor_tracker.compare(t, 3)
    with pytest.raises(ArgumentTypeError, match="atol"):
        tensor_tracker.compare(t, t, atol="0")  # type: ignore[arg-type]


def test_nan_in_one_run_only_is_beyond_any_tolerance() -> None:
    poisoned = _net()
    with torch.no_grad():
        poisoned[2].bias[0] = math.nan
    cmp = tensor_tracker.compare(_record(_net(), X), _record(poisoned, X))
    first = cmp.first_divergence(rtol=1e9, atol=1e9)
    assert first is not None and first.name == "2" and math.isnan(first.max_abs_error)
