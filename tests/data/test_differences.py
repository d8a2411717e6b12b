"""The error arithmetic of `compare`, checked by hand on small tensors: every number below
was worked out on paper from the formats' bit layouts."""

from __future__ import annotations

import math

import pytest
import torch

from tensor_tracker._data.differences import (
    close,
    coarser_dtype,
    differences,
    ordered_bits,
    ulp_distance,
)

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def _ulp(a: list[float], b: list[float], da: torch.dtype, db: torch.dtype) -> list[int]:
    out: list[int] = ulp_distance(torch.tensor(a, dtype=da), torch.tensor(b, dtype=db)).tolist()
    return out


def test_ulp_distance_in_bfloat16() -> None:
    # bf16 keeps 7 mantissa bits: next to 1.0 is 1 + 2**-7; 1.5 is 64 steps above 1.0.
    assert _ulp([1.0, 1.0, 2.0], [1.0 + 2**-7, 1.5, 2.0 + 2**-6], BF16, BF16) == [1, 64, 1]
    # Across zero: the smallest subnormal (2**-133) on each side is two steps apart
    # (-s, +-0, +s); -0 and +0 are no step apart.
    assert _ulp([-(2**-133), -0.0], [2**-133, 0.0], BF16, BF16) == [2, 0]
    # The largest finite value and infinity are neighbours.
    big = torch.finfo(BF16).max
    assert _ulp([big], [math.inf], BF16, BF16) == [1]


def test_ulp_distance_in_float16() -> None:
    # fp16 keeps 10 mantissa bits; 65504 is its largest finite value, 2**-24 its smallest
    # subnormal; from 2048 on a step is 2.
    assert _ulp(
        [1.0, 65504.0, 0.0, 2048.0], [1.0 + 2**-10, math.inf, 2**-24, 2052.0], FP16, FP16
    ) == [
        1,
        1,
        1,
        2,
    ]
    # Below 1 the steps are finer: 0.5 + 2**-11 is one step above 0.5.
    assert _ulp([0.5], [1.0], FP16, FP16) == [1024]


def test_ulp_distance_counts_in_the_coarser_dtype_after_rounding() -> None:
    # fp32 1 + 3 * 2**-8 lies half way between the bf16 values 1 + 2**-7 (odd mantissa)
    # and 1 + 2**-6 (even): it rounds to the even one, 2 bf16 steps above 1.0.
    assert _ulp([1.0 + 3 * 2**-8], [1.0], FP32, BF16) == [2]
    # 1 + 2**-10 is exact in fp16 but rounds to 1.0 in bf16, the coarser one.
    assert coarser_dtype(FP16, BF16) == BF16
    assert _ulp([1.0 + 2**-10], [1.0], FP16, BF16) == [0]
    assert coarser_dtype(FP32, FP16) == FP16
    assert _ulp([1.0 + 2**-23], [1.0], FP32, FP32) == [1]


def test_ordered_bits_are_monotonic_over_every_bfloat16() -> None:
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(BF16)
    finite = every[every.isfinite()]
    values = finite.float().sort().values
    keys = ordered_bits(values.to(BF16))
    steps = keys.diff()
    # Sorted floats give sorted keys; -0 and +0 share key 0, every other step is 1.
    assert bool((steps >= 0).all())
    assert set(steps.unique().tolist()) == {0, 1}


def test_differences_by_hand() -> None:
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.5, 2.0])
    d = differences([a], [b])
    assert not d.equal
    assert d.max_abs_error == 1.0
    assert d.rel_rms_error == pytest.approx(math.sqrt(0.25 + 1.0) / math.sqrt(14.0), rel=1e-12)
    assert d.cosine == pytest.approx(12.0 / math.sqrt(14.0 * 11.25), rel=1e-12)
    # fp32: 2.5 is 2**21 steps of 2**-22 above 2.0; 3.0 is 2**22 steps of 2**-22 above 2.0.
    assert d.max_ulp == 2**22
    assert d.rms_a == pytest.approx(math.sqrt(14.0 / 3), rel=1e-12)
    assert d.numel == 3


def test_differences_of_zeros_and_signed_zeros() -> None:
    zeros = torch.zeros(3)
    same = differences([zeros], [zeros.clone()])
    assert same.equal and same.rel_rms_error == 0.0 and same.cosine == 1.0
    apart = differences([zeros], [torch.tensor([0.0, 1.0, 0.0])])
    assert apart.rel_rms_error == math.inf and apart.cosine == 0.0
    signed = differences([torch.tensor([0.0])], [torch.tensor([-0.0])])
    assert not signed.equal  # the bits differ
    assert signed.max_abs_error == 0.0 and signed.max_ulp == 0.0


def test_differences_of_nans_and_dtypes() -> None:
    nan = torch.tensor([math.nan, 1.0])
    assert differences([nan], [nan.clone()]).equal
    both = differences([nan], [torch.tensor([math.nan, 1.5])])
    assert both.max_abs_error == 0.5 and both.max_ulp == 2**22
    one = differences([nan], [torch.tensor([0.0, 1.0])])
    assert math.isnan(one.max_abs_error) and math.isnan(one.max_ulp)
    mixed = differences([torch.tensor([1.0])], [torch.tensor([1.0], dtype=BF16)])
    assert not mixed.equal  # dtypes differ
    assert mixed.max_abs_error == 0.0 and mixed.max_ulp == 0.0
    ints = differences([torch.tensor([1, 5])], [torch.tensor([1, 2])])
    assert ints.max_abs_error == 3.0 and math.isnan(ints.max_ulp)


def test_differences_over_several_tensors() -> None:
    a = [torch.tensor([3.0]), torch.tensor([4.0])]
    b = [torch.tensor([3.0]), torch.tensor([4.0 + 2**-21])]
    d = differences(a, b)
    assert d.max_ulp == 1 and d.rel_rms_error == pytest.approx(2**-21 / 5.0, rel=1e-12)


def test_differences_of_zero_dimensional_tensors() -> None:
    # A loss is a 0-d tensor: its bits are compared as those of any other float.
    loss = torch.tensor(2.0)
    assert differences([loss], [loss.clone()]).equal
    d = differences([loss], [torch.tensor(2.0 + 2**-22)])
    assert not d.equal and d.max_ulp == 1 and d.numel == 1


def test_close_is_isclose_on_every_element() -> None:
    a, b = [torch.tensor([1.0, 100.0])], [torch.tensor([1.01, 101.0])]
    assert close(a, b, rtol=0.011, atol=0.0)
    assert not close(a, b, rtol=0.009, atol=0.0)
    assert close(a, b, rtol=0.0, atol=1.0)
    assert not close([torch.zeros(2)], [torch.zeros(3)], rtol=1.0, atol=1.0)
