"""Tests of tensor_tracker.stats._native: the one-pass C kernel of the health statistics."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

import tensor_tracker
from tensor_tracker import stats as S
from tensor_tracker.stats import _kernels as kernels
from tensor_tracker.stats import _native as native

from ..helpers import mlp


def float64_reference(x: Tensor) -> list[float]:
    """`cpu_moments4_minmax`'s numbers, straight from their definitions in float64."""
    a = x.double().reshape(-1)
    d = a - a.mean()
    moments = [a.mean(), (d**2).mean().sqrt(), (d**3).mean(), (d**4).mean(), a.min(), a.max()]
    return [m.item() for m in moments]


def _far_first(n: int, dtype: torch.dtype) -> Tensor:
    # The kernel's first pass is about the first element, here 10 * n**0.25 spreads from
    # the mean: about it, the fourth power sums of a million values carry ~1e-9 errors
    # into the kurtosis (n times the rounding, as the element's own term dominates them).
    g = torch.Generator().manual_seed(3)
    x = 1e4 + 1e-2 * torch.randn(n, generator=g, dtype=dtype)
    x[0] = 1e4 + 10 * 1e-2 * n**0.25
    return x


CASES = {
    "one": lambda: torch.tensor([2.5]),
    "seven": lambda: torch.arange(7.0) ** 2,
    "block-1": lambda: torch.randn(4095, generator=torch.Generator().manual_seed(0)),
    "block+1": lambda: torch.randn(4097, generator=torch.Generator().manual_seed(1)) - 3,
    "large-mean-tiny-spread": lambda: 1e4 + 1e-2 * torch.randn(100_000),
    "pieces-float64": lambda: 1e4 + 3e-3 * torch.randn(3 * 65_536 + 5, dtype=torch.float64),
    "first-far-from-mean": lambda: _far_first(1 << 20, torch.float32),
    "first-far-from-mean-float64": lambda: _far_first(1 << 20, torch.float64),
    # Long enough for the block sums to matter (2,442 blocks of 4096): with the blocks added
    # in float32, each of these three puts the std off by 1e-7 to 4e-6 and the fourth
    # moment by 3e-6 to 2e-5 (1e-10 promised).
    "ten-million-large-mean-tiny-spread": lambda: (
        1e4 + 1e-2 * torch.randn(10_000_000, generator=torch.Generator().manual_seed(7))
    ),
    "ten-million-first-far-from-mean": lambda: _far_first(10_000_000, torch.float32),
    "ten-million-float64": lambda: (
        1e4
        + 1e-2
        * torch.randn(10_000_000, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    ),
    "offset-view": lambda: (torch.rand(10_001) * 4 + 7)[1:],
    "all-zero": lambda: torch.zeros(300),
}


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_the_one_pass_kernel_matches_float64_central_moments(make: Any) -> None:
    x = make()
    got = kernels.cpu_moments4_minmax(x)
    want = float64_reference(x)
    spread = want[1]
    assert got[0] == pytest.approx(want[0], rel=1e-14, abs=1e-14 * spread)  # mean
    assert got[1] == pytest.approx(spread, rel=1e-10)
    # The third moment of symmetric values is ~0: its digits left are those of the values
    # less their mean (float64 values ~1e4 apart by ~1e-3 keep ~1e-9 of each).
    assert got[2] == pytest.approx(want[2], rel=1e-10, abs=1e-8 * spread**3)
    assert got[3] == pytest.approx(want[3], rel=1e-10)
    assert got[4:] == want[4:]  # min and max, exactly
    if want[1]:
        assert got[3] / got[1] ** 4 == pytest.approx(want[3] / want[1] ** 4, rel=1e-10)
    assert kernels.cpu_moments4(x) == got[:4]


@pytest.mark.parametrize(
    "values",
    [[1.0, math.nan, 2.0], [1.0, math.inf, 2.0], [-math.inf, 0.0, math.inf], [3e38, -3e38]],
    ids=["nan", "inf", "both-infinities", "overflowing-powers"],
)
def test_non_finite_sums_come_out_as_the_eager_kernels_give_them(values: list[float]) -> None:
    x = torch.tensor(values)
    want = [*kernels._eager_moments4(x), *kernels._cpu_minmax(x)]
    assert kernels.cpu_moments4_minmax(x) == pytest.approx(want, nan_ok=True)


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "spec", [S.health, True, ["rms", "abs_max"]], ids=["health", "default", "rms-abs_max"]
)
def test_statistics_of_a_cpu_tensor_run_no_torch_kernel_over_its_values(spec: Any) -> None:
    # Issue 39 item 3: the eager kernels read each tensor about ten times (a float64 copy,
    # its sum, the deviations, their powers, three sums, aminmax): a quarter of a step; the
    # default ones three (sum, dot, aminmax). The C kernel reads the tensor as it is: not
    # even a detached or flat view is made.
    fn = S.parse(spec)
    x = torch.randn(3, 5000, requires_grad=True) * 2
    fn.raw(x)  # compiled on first use
    with _Ops() as ops:
        raw, numel = fn.raw(x)
    assert ops.names == []
    want = float64_reference(x.detach())
    if spec is not S.health:
        want = [want[0], want[1], want[4], want[5]]
    assert raw == pytest.approx(want, rel=1e-10)
    assert numel == 15_000


def test_without_a_compiler_the_health_statistics_warn_once_and_run_eagerly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setattr(native, "_TRIED", False)
    monkeypatch.setattr(native, "_KERNELS", None)
    x = 1e4 + 1e-2 * torch.randn(10_000, generator=torch.Generator().manual_seed(5))
    with pytest.warns(RuntimeWarning, match=r"could not compile .* C compiler"):
        got = kernels.cpu_moments4_minmax(x)
    assert got == [*kernels._eager_moments4(x), *kernels._cpu_minmax(x)]
    model = mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per process, not per tensor
        with tensor_tracker.track(model, stats=S.health) as tracker:
            model(torch.randn(5, 4)).square().sum().backward()
    frame = tracker.to_frame()
    assert len(frame) and frame["kurtosis"].notna().all()


def test_tensor_subclasses_take_the_eager_kernels() -> None:
    class Wrapped(torch.Tensor):
        pass

    x = (torch.randn(500, generator=torch.Generator().manual_seed(6)) + 3).as_subclass(Wrapped)
    assert native.shifted_sums(x) is None
    assert native.shifted_sums(x.as_subclass(torch.Tensor)) is not None
    assert kernels.cpu_moments4_minmax(x) == pytest.approx(float64_reference(x), rel=1e-10)


def _moments_in_python(x: Tensor) -> list[float]:
    """The central moments from `shifted_sums` with Python floats: what the C kernel's
    finishing must give bit for bit."""
    sums = native.shifted_sums(x)
    assert sums is not None
    n = x.numel()
    delta = sums[0] / n
    if delta * delta > kernels.FAR * (sums[1] / n - delta * delta):
        sums = native.shifted_sums(x, sums[6] + delta)
        assert sums is not None
        delta = sums[0] / n
    _, s2, s3, s4, lo, hi, c = sums
    m2 = max(s2 / n - delta * delta, 0.0)
    m3 = s3 / n - delta * (3 * s2 / n - 2 * delta * delta)
    m4 = s4 / n - delta * (4 * s3 / n - delta * (6 * s2 / n - 3 * delta * delta))
    return [c + delta, math.sqrt(m2), m3, m4, lo, hi]


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_the_moments_finished_in_c_are_those_of_python_floats_bit_for_bit(make: Any) -> None:
    # The finishing moved from Python into the kernel (a microsecond less per record):
    # no fused multiply-add or reordering may change a bit of what it gave.
    x = make()
    assert native.moments4_minmax(x, kernels.FAR) == _moments_in_python(x)
    assert native.moments4_minmax(x.double(), kernels.FAR) == _moments_in_python(x.double())
